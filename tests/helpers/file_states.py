"""Folders made to hold exactly a given set of files, executables and links: the states the snapshot tests
(tree_diff, by_hand) compare git's work with ours on, and a Hypothesis strategy that draws them."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from hypothesis import strategies as st

State = dict[str, tuple[str, str]]
"""{path: (kind, content)}: kind "file", "exec" (mode 755) or "link" (content: its target)."""


def consistent(state: State) -> State:
    """`state` without the paths under another path that is a file: a path is a file or a folder, not both."""
    return {p: v for p, v in state.items() if not any(p.startswith(q + "/") for q in state if q != p)}


def states(names: Sequence[str], contents: Sequence[str] = ("1", "2", "3\r\n"), most: int = 8) -> st.SearchStrategy[State]:
    paths = st.lists(st.sampled_from(list(names)), min_size=1, max_size=3).map("/".join)
    entries = st.tuples(st.sampled_from(["file", "file", "exec", "link"]), st.sampled_from(list(contents)))
    return st.dictionaries(paths, entries, max_size=most).map(consistent)


def make_files(root: Path, state: State, keep: str = ".git") -> None:
    """Make `root` hold exactly `state` (everything else in it deleted, but `keep`)."""
    for entry in root.iterdir():
        if entry.name != keep:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for path, (kind, content) in state.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            target.symlink_to(content)
        else:
            target.write_text(content)
            target.chmod(0o755 if kind == "exec" else 0o644)

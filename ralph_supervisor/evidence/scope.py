"""The watcher's scope: which of the workspace's files count, as the rules learn more, and the walk over them.

The ignore rules (`ignore.py`) are a frozen value; here they live. Walking the workspace teaches them: a
`.gitignore` met is read, and a folder holding `pyvenv.cfg` is a virtual environment, ignored with
everything below it from then on (`on_venv` tells the workspace to forget what it knew there). The inotify
source, the polling source and the priming all walk through one `Scope`, so they agree on what counts.

Threads: any thread may walk and ask; the rules are replaced whole behind the scope's own lock (never
held while calling out), and read as a value.

    scope = Scope(root, on_venv=forget)
    scope.load(state_dir, extra=["logs/"])
    for path, entry in scope.files(""):   # every file that counts, top-down
        ...
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ralph_supervisor.evidence.ignore import VENV_MARKER, IgnoreRules, load_ignore_rules, read_text


def join(parent: str, name: str) -> str:
    """A workspace-relative path from its folder's ("" for the root) and its name."""
    return f"{parent}/{name}" if parent else name


def under(path: str, top: str) -> bool:
    """`path` is `top` or lies below it (workspace-relative)."""
    return path == top or path.startswith(top + "/")


class Scope:
    """The workspace folder, its live ignore rules, and the walk over what they keep."""

    def __init__(self, root: Path, on_venv: Callable[[str], None] = lambda directory: None) -> None:
        self.root = root
        self.on_venv = on_venv
        """Told (after the rules changed) that a folder is a virtual environment."""
        self._lock = threading.Lock()
        self._rules = IgnoreRules()

    def load(self, state_dir: Path, extra: Sequence[str]) -> None:
        """Read the root's rules (`.gitignore`, `.git/info/exclude`, the state folder, `extra`)."""
        rules = load_ignore_rules(self.root, state_dir=state_dir, extra=extra)
        with self._lock:
            self._rules = rules

    @property
    def rules(self) -> IgnoreRules:
        return self._rules

    def is_ignored(self, path: str, *, is_dir: bool) -> bool:
        return self._rules.is_ignored(path, is_dir=is_dir)

    def is_ignored_entry(self, directory: str, name: str, *, is_dir: bool) -> bool:
        """Like `is_ignored`, for an entry of a folder already known to count (cheaper)."""
        return self._rules.is_ignored_entry(directory, name, is_dir=is_dir)

    def reload_gitignore(self, directory: str) -> None:
        text = read_text(self.root / directory / ".gitignore")
        with self._lock:
            self._rules = self._rules.with_gitignore(directory, text)

    def mark_venv(self, directory: str) -> None:
        """`directory` is a virtual environment: ignored from now on, and forgotten."""
        with self._lock:
            self._rules = self._rules.with_prefix(directory)
        self.on_venv(directory)

    def walk(self, top: str, before_scan: Callable[[str], bool] | None = None) -> Iterator[tuple[str, list[os.DirEntry[str]]]]:
        """Folders under `top` (itself included) that count, with their entries, top-down.

        `before_scan(dir)` runs before a folder is listed (to place its watch first, so nothing created
        in between is missed); returning False skips the folder.
        """
        stack = [top]
        while stack:
            directory = stack.pop()
            absolute = self.root / directory if directory else self.root
            if directory and os.path.lexists(absolute / VENV_MARKER):
                self.mark_venv(directory)
                continue
            if before_scan is not None and not before_scan(directory):
                continue
            try:
                with os.scandir(absolute) as it:
                    entries = list(it)
            except OSError:
                continue
            if any(entry.name == ".gitignore" for entry in entries):
                self.reload_gitignore(directory)
            rules = self._rules
            yield directory, entries
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir and not rules.is_ignored_entry(directory, entry.name, is_dir=True):
                    stack.append(join(directory, entry.name))

    def files(self, top: str, before_scan: Callable[[str], bool] | None = None) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Every entry under `top` that counts and is not a folder, with its workspace-relative path."""
        for directory, entries in self.walk(top, before_scan):
            rules = self._rules
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                if not rules.is_ignored_entry(directory, entry.name, is_dir=False):
                    yield join(directory, entry.name), entry

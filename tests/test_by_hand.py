"""Snapshots stored by hand (by_hand.py, tree_edit.py) against the same snapshots taken by git: one workspace,
two stores, the same changes told to both; every snapshot must have the same tree and the same counts."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.ignore import ignore_rules
from ralph_supervisor.snapshots import by_hand
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.snapshots.tree_edit import TreeCache
from tests.helpers import file_states
from tests.helpers.file_states import State, make_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

RULES = ignore_rules(extra=["*.tmp"], prefixes=[".ralph-supervise"]).as_gitignore()

def write_state(ws: Path, state: State) -> set[str]:
    """Make `ws` hold exactly `state`; the file paths that were or are there (what the watcher would report)."""
    before = {os.path.relpath(os.path.join(d, n), ws) for d, _dirs, names in os.walk(ws) for n in names}
    before |= {os.path.relpath(os.path.join(d, n), ws) for d, dirs, _names in os.walk(ws) for n in dirs
               if os.path.islink(os.path.join(d, n))}
    make_files(ws, state)
    return before | set(state)


def same(a: object, b: object) -> None:
    keys = ("files", "bytes", "added", "modified", "deleted", "moved", "not_stored")
    assert {k: getattr(a, k) for k in keys} == {k: getattr(b, k) for k in keys}


states = file_states.states(["a", "b", "c d", "é", "x.py", ".gitattributes"], most=7)


@settings(max_examples=30)
@given(first=states, steps=st.lists(states, min_size=1, max_size=4))
@example(first={"a": ("file", "1"), "b/c": ("file", "1")},  # a file becomes a folder, a folder a file, a link
         steps=[{"a/x": ("file", "1"), "b": ("link", "a")}, {}, {".gitattributes": ("file", "* text=auto\n"),
                                                                "a": ("exec", "3\r\n")}])
def test_snapshots_by_hand_are_the_ones_git_takes(tmp_path_factory: pytest.TempPathFactory, first: State,
                                                  steps: list[State]) -> None:
    root = tmp_path_factory.mktemp("byhand")
    ws = root / "ws"
    ws.mkdir()
    hand = SnapshotStore(ws, root / "hand")
    git = SnapshotStore(ws, root / "git")
    git._taker.by_hand = False
    write_state(ws, first)
    now = time.time()
    for store in (hand, git):
        store.take(0, "iteration", None, now=now, exclude=RULES)
    for number, state in enumerate(steps, 1):
        changed = sorted(write_state(ws, state))
        a = hand.take(number, "iteration", changed, now=now, exclude=RULES)
        b = git.take(number, "iteration", changed, now=now, exclude=RULES)
        assert hand.git.run("rev-parse", f"{a.commit}^{{tree}}") == git.git.run("rev-parse", f"{b.commit}^{{tree}}")
        same(a, b)
    hand.git.run("fsck", "--connectivity-only", "--no-dangling")  # every object a snapshot names is there


def test_a_full_pass_after_snapshots_by_hand_brings_the_index_back(tmp_path: Path) -> None:
    """The store's index lags behind while snapshots are stored by hand; a full pass (or a garbage collection)
    brings it back to the newest snapshot, and the marker file that says it lags goes."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("1")
    store = SnapshotStore(ws, tmp_path / "state")
    now = time.time()
    store.take(1, "iteration", None, now=now, exclude=RULES)
    (ws / "a.txt").write_text("2")
    (ws / "b.txt").write_text("new")
    second = store.take(2, "iteration", ["a.txt", "b.txt"], now=now, exclude=RULES)
    marker = store.path / "ralph-index-behind"
    assert marker.exists()
    assert store.git.run("diff-index", "--cached", "--name-only", second.commit) != b""
    third = store.take(3, "iteration", None, now=now, exclude=RULES)
    assert not marker.exists()
    assert store.git.run("diff-index", "--cached", "--name-only", third.commit) == b""
    assert (third.files, third.added, third.modified) == (2, 0, 0)


def test_what_git_must_store_is_left_to_it(tmp_path: Path) -> None:
    """A folder on the way that is a link, a name git refuses, a file too big to read whole, or a store whose
    attributes are not ours: by_hand declines, and git takes the snapshot."""
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "linked").symlink_to("real")
    store = SnapshotStore(ws, tmp_path / "state")
    store.take(1, "iteration", None, now=time.time(), exclude=RULES)
    objects = store.path / "objects"
    assert by_hand.plain_paths(ws, objects, ["real/x", "new/deep/y"])
    assert not by_hand.plain_paths(ws, objects, ["linked/x"])
    for refused in (".git/config", "a/.GIT/x", "b/git~1", "c/.git. ", "d\\\\e", "f//g", ".gitmodules"):
        assert not by_hand.plain_paths(ws, objects, [refused]), refused
    assert by_hand.store_by_hand(ws, objects, "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
                                 {"big": (by_hand.MOST_BYTES + 1, 0, 0, 0)}, (), (), TreeCache()) is None
    (store.path / "info" / "attributes").write_text("*.txt text\n")
    assert not by_hand.plain_paths(ws, objects, ["real/x"])


def test_another_process_over_the_same_store_sees_that_the_index_lags(tmp_path: Path) -> None:
    """Two SnapshotStores over one store (a supervisor and a restore, say): one stores a snapshot by hand, the
    other then takes the next with git, from an index that must first catch up, or it would lose the change."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("1")
    one = SnapshotStore(ws, tmp_path / "state")
    other = SnapshotStore(ws, tmp_path / "state")
    other._taker.by_hand = False
    now = time.time()
    one.take(1, "iteration", None, now=now, exclude=RULES)
    (ws / "b.txt").write_text("by hand")
    one.take(2, "iteration", ["b.txt"], now=now, exclude=RULES)
    (ws / "c.txt").write_text("by git")
    third = other.take(3, "iteration", ["c.txt"], now=now, exclude=RULES)
    assert sorted(other.files_in(third)) == ["a.txt", "b.txt", "c.txt"]
    assert not (one.path / "ralph-index-behind").exists()

"""tree_diff.py against git's own diff-tree, on real repositories: the same changes, and None (ask git) where
the objects are not loose."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings

from ralph_supervisor.snapshots import tree_diff
from ralph_supervisor.snapshots.commit_object import write_commit
from ralph_supervisor.snapshots.tree_diff import EMPTY_TREE, diff_trees, parse_tree, tree_of_commit
from tests.helpers import file_states
from tests.helpers.file_states import State, make_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


def git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, check=True,
                          env=GIT_ENV).stdout


def new_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", ".")
    return repo


def write_state(repo: Path, state: State) -> str:
    """Make the work tree hold exactly `state` and store it as a tree; its id."""
    make_files(repo, state)
    git(repo, "add", "-A")
    return git(repo, "write-tree").decode().strip()


def gits_changes(repo: Path, old: str, new: str) -> set[tuple[bytes, ...]]:
    fields = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--raw", old, new).split(b"\0")
    found = set()
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].split()
        found.add((meta[0].lstrip(b":"), meta[1], meta[2], meta[3], meta[4][:1], fields[i + 1]))
    return found


states = file_states.states(["a", "b", "a b", "é", "x.py", "-n"], ["1", "2", "three\n"])


@settings(max_examples=40)
@given(before=states, after=states)
@example(before={"a": ("file", "1"), "b": ("file", "1"), "c": ("file", "1")},  # a file becomes a folder, a link,
         after={"a/b": ("file", "1"), "b": ("link", "1"), "c": ("exec", "1")})  # executable: D+A, T, M
def test_the_changes_are_the_ones_git_diff_tree_lists(tmp_path_factory: pytest.TempPathFactory,
                                                      before: State, after: State) -> None:
    repo = new_repo(tmp_path_factory.mktemp("diff"))
    old, new = write_state(repo, before), write_state(repo, after)
    changes = diff_trees(repo / ".git" / "objects", old, new)
    assert changes is not None
    assert {tuple(change) for change in changes} == gits_changes(repo, old, new)


def test_from_the_empty_tree_every_file_is_added_and_to_it_every_file_deleted(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    tree = write_state(repo, {"src/m.py": ("file", "x"), "run": ("exec", "y"), "l": ("link", "src")})
    objects = repo / ".git" / "objects"
    added, deleted = diff_trees(objects, EMPTY_TREE, tree), diff_trees(objects, tree, EMPTY_TREE)
    assert added is not None and deleted is not None
    assert sorted((c.status, c.path) for c in added) == [(b"A", b"l"), (b"A", b"run"), (b"A", b"src/m.py")]
    assert sorted((c.status, c.path) for c in deleted) == [(b"D", b"l"), (b"D", b"run"), (b"D", b"src/m.py")]
    assert {tuple(c) for c in added} == gits_changes(repo, EMPTY_TREE, tree)


def test_packed_trees_and_too_many_entries_are_left_to_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repo(tmp_path)
    objects = repo / ".git" / "objects"
    old = write_state(repo, {f"d/f{i}": ("file", str(i)) for i in range(5)})
    new = write_state(repo, {f"d/f{i}": ("file", str(i + 1)) for i in range(5)})
    assert diff_trees(objects, old, new) is not None
    monkeypatch.setattr(tree_diff, "MOST_ENTRIES", 8)  # two root entries and two folders of five
    assert diff_trees(objects, old, new) is None
    monkeypatch.undo()
    git(repo, "repack", "-adq")
    git(repo, "prune-packed")
    assert diff_trees(objects, old, new) is None
    assert diff_trees(objects, old, "ab" * 32) is None  # a SHA-256 store: git reads it


def test_a_damaged_or_foreign_object_is_left_to_git(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    objects = repo / ".git" / "objects"
    tree = write_state(repo, {"f": ("file", "1")})
    blob = git(repo, "rev-parse", f"{tree}:f").decode().strip()
    assert diff_trees(objects, EMPTY_TREE, blob) is None  # a blob is not a tree
    stored = objects / tree[:2] / tree[2:]
    stored.chmod(0o644)
    stored.write_bytes(b"not zlib")
    assert diff_trees(objects, EMPTY_TREE, tree) is None
    with pytest.raises(ValueError):
        parse_tree(b"100644 f\0" + b"\1" * 5)


def test_the_tree_of_a_commit_written_by_hand_is_read_back(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    objects = repo / ".git" / "objects"
    tree = write_state(repo, {"f": ("file", "1")})
    commit = write_commit(objects, tree, b'{"id": 1}', 1_700_000_000.0)
    assert commit is not None
    assert tree_of_commit(objects, commit) == tree == git(repo, "rev-parse", f"{commit}^{{tree}}").decode().strip()
    assert tree_of_commit(objects, tree) is None  # a tree is not a commit
    git(repo, "update-ref", "refs/heads/keep", commit)
    git(repo, "repack", "-adq")
    git(repo, "prune-packed")
    assert tree_of_commit(objects, commit) is None

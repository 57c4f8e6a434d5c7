"""Which replaced files went back to a committed version: the user's real repository, read with git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ralph_supervisor.snapshots.discarded import committed_states, content_state
from ralph_supervisor.evidence.file_state import file_state

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(root: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD").strip()


def test_the_versions_of_head_and_of_a_head_moved_back_in_a_workspace_below_the_repository_top(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    one = commit(repo, "one", {"app/a.py": "v1\n", "app/b.py": "b1\n", "top.txt": "top\n"})
    two = commit(repo, "two", {"app/a.py": "v2\n"})
    ws = repo / "app"  # the supervised workspace is a folder of the repository
    states = committed_states(ws, two, two, ["a.py", "b.py", "new.py", "odd name\twith tab.py"])
    assert states == [{"a.py": content_state(b"v2\n"), "b.py": content_state(b"b1\n")}]
    (ws / "a.py").write_text("v2\n")
    assert states[0]["a.py"] == file_state(ws / "a.py"), "the watcher's own state of the checked-out file"
    back = committed_states(ws, two, one, ["a.py"])  # `git reset --hard HEAD~1` during the call
    assert back == [{"a.py": content_state(b"v2\n")}, {"a.py": content_state(b"v1\n")}]
    forward = committed_states(ws, one, two, ["a.py"])  # a commit made during the call is not a move back
    assert forward == [{"a.py": content_state(b"v1\n")}]


def test_no_repository_no_commit_or_a_bad_one_judge_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert committed_states(plain, "0" * 40, "", ["a.py"]) == []
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert committed_states(repo, "", "", ["a.py"]) == [], "no commit yet"
    assert committed_states(repo, "f" * 40, "", ["a.py"]) == [], "a commit the repository lacks"

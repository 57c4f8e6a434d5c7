"""The sizes of a store's objects from one running `git cat-file`: real git, real processes. It answers like a
git of its own, stays one helper across questions, ends on `close`, and when it dies or hangs a git of its own
answers instead, in time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.snapshots import object_sizes
from ralph_supervisor.snapshots.git import Git, find_git
from ralph_supervisor.snapshots.object_sizes import MOST_AT_ONCE, ObjectSizes

pytestmark = pytest.mark.skipif(find_git() is None, reason="git is not installed")

MISSING = b"0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def store(tmp_path: Path) -> tuple[Git, dict[bytes, int]]:
    """A bare repository holding three blobs of known sizes."""
    git_dir, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    blobs = {}
    for size in (0, 12, 70_000):
        out = subprocess.run(["git", "--git-dir", str(git_dir), "hash-object", "-w", "--stdin"],
                             input=b"x" * size, capture_output=True, check=True).stdout.strip()
        blobs[out] = size
    return Git(find_git() or "git", git_dir, work), blobs


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_one_git_answers_every_question_like_a_git_of_its_own_and_ends_on_close(store) -> None:
    git, blobs = store
    sizes = ObjectSizes(git, keep_running=True)
    shas = [*blobs, MISSING]
    assert sizes.of(shas) == [*blobs.values(), 0]
    pid = sizes.pid
    assert pid is not None and pid in HELPERS  # never taken for the loop's
    assert sizes.of(list(reversed(shas))) == [0, *reversed(list(blobs.values()))]
    assert sizes.of([]) == []
    assert sizes.pid == pid  # the same git answered both
    sizes.close()
    assert sizes.pid is None and pid not in HELPERS
    assert not _alive(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # waited for: no zombie of it is left


def _answering(store: tuple[Git, dict[bytes, int]]) -> tuple[ObjectSizes, list[bytes], list[int], int]:
    """A running git that has answered once: the sizes, the questions, their answers and its pid."""
    git, blobs = store
    sizes = ObjectSizes(git, keep_running=True)
    shas, expected = list(blobs), list(blobs.values())
    assert sizes.of(shas) == expected
    pid = sizes.pid
    assert pid is not None
    return sizes, shas, expected, pid


def test_a_git_that_died_is_replaced_and_the_answer_still_comes(store) -> None:
    sizes, shas, expected, first = _answering(store)
    os.kill(first, signal.SIGKILL)
    assert sizes.of(shas) == expected  # a git of its own answered; the dead one was waited for
    assert first not in HELPERS
    assert sizes.of(shas) == expected
    assert sizes.pid not in (None, first)
    sizes.close()


def test_a_git_that_hangs_is_killed_after_the_wait_and_a_git_of_its_own_answers(
        store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_sizes, "ANSWER_WAIT_S", 0.5)
    sizes, shas, expected, hung = _answering(store)
    os.kill(hung, signal.SIGSTOP)
    try:
        began = time.monotonic()
        assert sizes.of(shas) == expected
        assert 0.5 <= time.monotonic() - began < 5.0
        assert sizes.pid is None and hung not in HELPERS and not _alive(hung)
    finally:
        if _alive(hung):
            os.kill(hung, signal.SIGKILL)
    sizes.close()


def test_many_questions_and_a_short_lived_store_leave_no_git_running(store) -> None:
    git, blobs = store
    shas = list(blobs) * (MOST_AT_ONCE // 3 + 1)
    expected = list(blobs.values()) * (MOST_AT_ONCE // 3 + 1)
    kept = ObjectSizes(git, keep_running=True)
    assert kept.of(shas) == expected and kept.pid is None  # too many for the pipes: a git of its own
    once = ObjectSizes(git)
    assert once.of(list(blobs)) == list(blobs.values()) and once.pid is None
    assert HELPERS.pids() == frozenset()

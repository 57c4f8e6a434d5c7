"""File states: what the watcher compares (content hashes, absence, links, other kinds of files)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ralph_supervisor.evidence.file_state import ABSENT, HASH_LIMIT, changed_at, file_state, state_size

def test_file_state_distinguishes_content_absence_links_and_never_opens_a_fifo(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("one")
    first = file_state(a)
    a.write_text("one")
    assert file_state(a) == first
    a.write_text("two")
    assert file_state(a) != first
    assert file_state(tmp_path / "missing") == ABSENT
    assert file_state(tmp_path) == ABSENT  # a directory is not a file
    link = tmp_path / "link"
    link.symlink_to("a")
    assert file_state(link) != file_state(a)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert file_state(fifo) not in (ABSENT, file_state(a))  # returns at once: no open() on a FIFO


def test_state_size_reads_the_size_of_hashed_and_big_files_only(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_bytes(b"x" * 1234)
    assert state_size(file_state(a)) == 1234
    assert state_size(b"B%d:%d" % (HASH_LIMIT + 1, 5)) == HASH_LIMIT + 1
    assert state_size(b"Bnot-a-number:5") is None
    assert state_size(ABSENT) is None
    assert state_size(None) is None
    link = tmp_path / "link"
    link.symlink_to("a")
    assert state_size(file_state(link)) is None


def test_a_change_is_dated_by_the_files_ctime_and_a_deletion_by_now(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("one")
    stamped = os.lstat(a).st_ctime_ns
    time.sleep(0.02)
    assert changed_at(a, file_state(a)) == stamped
    before = time.time_ns()
    assert before <= changed_at(a, ABSENT) <= time.time_ns()
    assert before <= changed_at(tmp_path / "missing", b"Hgone") <= time.time_ns()

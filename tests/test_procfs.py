"""`process/procfs.py`: the raw /proc reads, with nothing but `os`, that `ls` (through the registry), the reaper
and the tree walks share. Real processes: this one, a child that exits and waits unreaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ralph_supervisor.process import procfs
from ralph_supervisor.process.linux import read_stat, zombie_wait_status
from ralph_supervisor.process.reaper import _zombie_children
from tests.helpers.supervise import REPO


def test_the_registry_and_procfs_import_without_psutil() -> None:
    code = ("import sys; import ralph_supervisor.registry, ralph_supervisor.process.procfs; "
            "print(sorted(m for m in ('psutil', 'structlog') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_start_ticks_and_children_come_from_proc_and_a_gone_process_has_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert procfs.read_start_ticks(child.pid) == read_stat(child.pid).start_ticks  # type: ignore[union-attr]
        assert child.pid in (procfs.children_of(os.getpid()) or [])
    finally:
        child.kill()
        child.wait()
    assert procfs.read_start_ticks(child.pid) is None
    assert procfs.read_raw_stat(child.pid) is None
    assert len(procfs.boot_id()) == 36


def test_the_reaper_finds_an_exited_unreaped_child_through_procfs() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while child.pid not in _zombie_children(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.pid in _zombie_children(os.getpid())
    finally:
        child.wait()
    assert child.pid not in _zombie_children(os.getpid())


def test_an_unreaped_child_s_wait_status_is_read_from_its_stat() -> None:
    """linux.zombie_wait_status reads the raw stat through procfs (a name left behind there once broke the
    end of every call whose pidfd could not tell its status)."""
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        ticks = procfs.read_start_ticks(child.pid)
        assert ticks is not None
        deadline = time.monotonic() + 10
        while zombie_wait_status(child.pid, ticks) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zombie_wait_status(child.pid, ticks) == 3 << 8
    finally:
        child.wait()
    assert zombie_wait_status(child.pid, ticks) is None


def test_read_small_reads_a_file_whole_or_its_first_bytes_and_none_when_it_cannot(tmp_path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10_000)
    assert procfs.read_small(path) == b"x" * 10_000  # more than one read's worth
    assert procfs.read_small(path, limit=5_000) == b"x" * 5_000
    assert procfs.read_small(path, limit=4_096) == b"x" * 4_096
    path.write_bytes(b"ab")
    assert procfs.read_small(path, limit=10) == b"ab" and procfs.read_small(path) == b"ab"
    assert procfs.read_small(tmp_path / "missing") is None

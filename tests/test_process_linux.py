"""The Linux primitives, on real processes: prctl, /proc stat parsing, identity-checked signals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.trees import wait_for
from ralph_supervisor.process.linux import (
    BOOT_TIME,
    ProcStat,
    create_time_to_ticks,
    is_child_subreaper,
    parse_stat,
    read_stat,
    set_child_subreaper,
    signal_if_same,
    ticks_to_create_time,
)

RENAME_AND_SLEEP = (
    "import ctypes, sys, time\n"
    "ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


def test_subreaper_can_be_switched_on_and_off() -> None:
    try:
        assert set_child_subreaper(True) is True
        assert is_child_subreaper()
    finally:
        assert set_child_subreaper(False) is True
    assert not is_child_subreaper()


def test_stat_of_a_process_whose_name_holds_parentheses_and_spaces_is_parsed() -> None:
    name = "x) (y z) S 1"  # 12 bytes: fits comm (15), and would fool a naive split
    proc = subprocess.Popen([sys.executable, "-c", RENAME_AND_SLEEP, name], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        stat = read_stat(proc.pid)
        assert stat is not None
        assert stat.name == name
        assert stat.ppid == os.getpid()
        assert stat.state in ("S", "R")
        assert stat.alive
    finally:
        proc.kill()
        proc.wait()


def test_an_exec_under_the_same_name_changes_the_code_mapping(tmp_path: Path) -> None:
    """What lets the supervisor tell a pyenv-style shim from the python3 it execs: same pid, same name."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "worker").symlink_to(shutil.which("sleep") or "/bin/sleep")
    shim = tmp_path / "worker"
    shim.write_text(f"#!/bin/bash\nread go\nexec {real / 'worker'} 30\n")
    shim.chmod(0o755)
    proc = subprocess.Popen([str(shim)], stdin=subprocess.PIPE)
    try:
        wait_for(lambda: psutil.Process(proc.pid).cmdline()[1:2] == [str(shim)], what="bash running the shim")
        before = read_stat(proc.pid)
        assert before is not None
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        wait_for(lambda: psutil.Process(proc.pid).cmdline()[:1] == [str(real / "worker")], what="the exec")
        after = read_stat(proc.pid)
        assert after is not None and after.name == before.name == "worker"
        assert after.start_ticks == before.start_ticks
        assert before.code != (0, 0) and after.code != before.code
    finally:
        proc.kill()
        proc.wait()


def test_create_time_equals_psutils_and_converts_back_to_ticks_exactly() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        stat = read_stat(proc.pid)
        assert stat is not None
        # psutil adds /proc/stat's btime read afresh, which moves by a second with clock adjustments; ours is
        # read once (an identity must not move): compare on one boot time.
        theirs = psutil.Process(proc.pid).create_time() - psutil.boot_time() + BOOT_TIME
        assert abs(stat.create_time - theirs) < 0.011
        assert create_time_to_ticks(stat.create_time) == stat.start_ticks
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    wait_for(lambda: (s := read_stat(proc.pid)) is not None and s.state == "Z", 5, "zombie")
    stat = read_stat(proc.pid)
    assert stat is not None and not stat.alive
    proc.wait()
    assert read_stat(proc.pid) is None


def test_a_signal_to_a_pid_with_another_start_time_is_not_sent() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        stat = read_stat(proc.pid)
        assert stat is not None
        assert signal_if_same(proc.pid, stat.start_ticks + 1, signal.SIGKILL) is False
        assert signal_if_same(proc.pid, stat.start_ticks - 100, signal.SIGKILL) is False
        assert proc.poll() is None
        assert signal_if_same(proc.pid, stat.start_ticks, signal.SIGKILL) is True
        assert proc.wait(5) == -signal.SIGKILL
        assert signal_if_same(proc.pid, stat.start_ticks, signal.SIGKILL) is False  # gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_init_and_ourselves_are_never_signalled() -> None:
    me = read_stat(os.getpid())
    assert me is not None
    assert signal_if_same(os.getpid(), me.start_ticks, signal.SIGTERM) is False
    init = read_stat(1)
    if init is not None:
        assert signal_if_same(1, init.start_ticks, signal.SIGTERM) is False


names = st.text(
    alphabet=st.characters(blacklist_characters="\x00\n", blacklist_categories=("Cs",)), min_size=0, max_size=15
)


@given(name=names, ppid=st.integers(0, 2**22), ticks=st.integers(0, 2**40), cpu=st.integers(0, 2**30))
def test_stat_parsing_round_trips_any_name(name: str, ppid: int, ticks: int, cpu: int) -> None:
    fields = ["S", str(ppid), "7", "7", "0", "-1", "4194560", "0", "0", "0", "0"]
    fields += [str(cpu), "1", "2", "3", "20", "0", "1", "0", str(ticks), "100", "200"]
    line = f"4242 ({name}) " + " ".join(fields) + "\n"
    stat = parse_stat(line)
    assert stat == ProcStat(
        pid=4242, name=name, state="S", ppid=ppid, pgid=7, sid=7, cpu_ticks=cpu + 6, start_ticks=ticks
    )
    full = parse_stat(line.rstrip("\n") + " 18446744073709551615 94000000000000 94000000123456 140000000000000\n")
    assert full.code == (94000000000000, 94000000123456) and full.start_ticks == ticks
    assert create_time_to_ticks(ticks_to_create_time(ticks)) == ticks

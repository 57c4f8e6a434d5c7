"""Supervisor death: the member record on disk, and the sweep the next supervisor runs.

The end-to-end tests kill a real (fake) supervisor process with SIGKILL. pytest is the child
subreaper meanwhile (the `subreaper` fixture), so what the dead supervisor leaves re-parents to pytest
instead of init, and the fixture can reap it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers.trees import HELPERS, subreaper, wait_for  # noqa: F401 - subreaper is a fixture
from ralph_supervisor.process.linux import ProcStat, read_stat
from ralph_supervisor.process.orphans import (
    MARKER_VAR,
    MAX_RECORDED,
    RECORD_EVERY_S,
    MemberRecord,
    new_marker,
    sweep_orphans,
)
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.tree import Member, member_of
from collections.abc import Iterator
import contextlib
import uuid

from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.process.linux import boot_id

from tests.helpers.fuzzing import JSON_SCALARS
from tests.helpers.fuzzing import budget
from tests.helpers.fuzzing import fresh
from tests.helpers.fuzzing import json_values


def _gone(stat: ProcStat) -> bool:
    now = read_stat(stat.pid)
    return now is None or now.start_ticks != stat.start_ticks or not now.alive


def _read_until(proc: subprocess.Popen[bytes], done: Callable[[dict], bool], timeout: float = 15.0) -> dict:
    """The fake supervisor's first report for which done() holds (it reports every change)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        assert line, "the fake supervisor exited"
        report = json.loads(line)
        if done(report):
            return report
    raise AssertionError(f"no matching report from the fake supervisor within {timeout}s")


def _sleeper(env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], ProcStat]:
    proc = subprocess.Popen(["sleep", "1000"], env=env)
    stat = read_stat(proc.pid)
    assert stat is not None
    return proc, stat


def test_the_record_is_rewritten_only_when_a_member_is_new(tmp_path: Path) -> None:
    """A member gone costs no write (a sweep ends only what matches pid and start time, so its line is
    harmless); a new one is written at once, with the members of now."""
    path = tmp_path / "state" / "tree.json"
    record = MemberRecord(path, marker="RALPH_SUPERVISE_TREE=abc")
    members = [Member(pid=100 + n, create_time=1_700_000_000.0 + n, name="sleep", ppid=1) for n in range(4)]

    record.record(members[:3], 0.0)
    first = path.stat()
    record.record(list(members[:3]), 0.0)
    record.record(members[:2], 0.0)
    assert path.stat().st_ino == first.st_ino and path.stat().st_mtime_ns == first.st_mtime_ns
    assert [row["pid"] for row in json.loads(path.read_text())["members"]] == [100, 101, 102]
    record.record([members[0], members[1], members[3]], 0.0)

    document = json.loads(path.read_text())
    assert [row["pid"] for row in document["members"]] == [100, 101, 103]
    assert document["marker"] == "RALPH_SUPERVISE_TREE=abc"
    assert path.stat().st_ino != first.st_ino  # replaced by rename, never rewritten in place
    assert [p.name for p in path.parent.iterdir()] == ["tree.json"]  # no temp file left


def test_a_recorded_members_new_descendants_wait_for_the_next_write_and_others_do_not(tmp_path: Path) -> None:
    """A sweep ends the live descendants of recorded members, so the children a loop starts at every call are
    written only once one is still alive RECORD_EVERY_S after the last write; a new member whose parent is not
    recorded (the loop itself, an orphan handed to us) is written at once."""
    path = tmp_path / "tree.json"
    record = MemberRecord(path)
    me = os.getpid()

    def member(pid: int, ppid: int) -> Member:
        return Member(pid=pid, create_time=1_700_000_000.0 + pid, name=f"p{pid}", ppid=ppid)

    def pids() -> list[int]:
        return [row["pid"] for row in json.loads(path.read_text())["members"]]

    loop = member(200, me)
    record.record([loop], 10.0)
    assert pids() == [200]
    agent, grandchild = member(201, 200), member(202, 201)
    record.record([loop, agent, grandchild], 10.5)
    record.record([loop, agent, grandchild], 10.0 + RECORD_EVERY_S - 0.01)
    assert pids() == [200]
    orphan = member(300, me)
    record.record([loop, agent, grandchild, orphan], 11.0)
    assert pids() == [200, 201, 202, 300]
    later = member(203, 200)
    record.record([loop, later], 11.5)
    assert pids() == [200, 201, 202, 300]
    record.record([loop, later], 11.0 + RECORD_EVERY_S)
    assert pids() == [200, 203]


def test_the_record_is_bounded(tmp_path: Path) -> None:
    record = MemberRecord(tmp_path / "tree.json")
    record.record((Member(pid=n, create_time=1_700_000_000.0, name="x", ppid=1) for n in range(MAX_RECORDED + 500)), 0.0)
    assert len(json.loads((tmp_path / "tree.json").read_text())["members"]) == MAX_RECORDED


def test_clear_removes_the_record(tmp_path: Path) -> None:
    record = MemberRecord(tmp_path / "tree.json")
    record.record([Member(pid=5, create_time=1_700_000_000.0, name="x", ppid=1)], 0.0)
    record.clear()
    record.clear()
    assert not (tmp_path / "tree.json").exists()
    assert sweep_orphans(tmp_path / "tree.json") == 0


def test_a_corrupt_record_is_moved_aside_and_nothing_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    for garbage in (b"{not json", b'{"version": 1, "members": [{"pid": "x", "start_ticks": 1}]}', b"[]"):
        path.write_bytes(garbage)
        assert sweep_orphans(path, grace=0.1) == 0
        assert not path.exists()
    aside = sorted(p.name for p in tmp_path.iterdir())
    assert aside and all(name.startswith("tree.json.corrupt-") for name in aside)


def test_sweep_kills_recorded_members_but_not_a_pid_with_another_start_time(tmp_path: Path) -> None:
    ours, ours_stat = _sleeper()
    stranger, stranger_stat = _sleeper()
    try:
        path = tmp_path / "tree.json"
        impostor = Member(pid=stranger.pid, create_time=stranger_stat.create_time + 3.0, name="sleep", ppid=1)
        MemberRecord(path).record([member_of(ours_stat), impostor], 0.0)

        assert sweep_orphans(path, grace=0.5) == 1

        assert ours.wait(5) == -signal.SIGTERM
        assert stranger.poll() is None and not _gone(stranger_stat)
        assert not path.exists()
    finally:
        for proc in (ours, stranger):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_sweep_of_a_record_from_another_boot_kills_nothing(tmp_path: Path) -> None:
    proc, stat = _sleeper()
    try:
        path = tmp_path / "tree.json"
        MemberRecord(path).record([member_of(stat)], 0.0)
        document = json.loads(path.read_text())
        document["boot_id"] = "00000000-0000-0000-0000-000000000000"
        path.write_text(json.dumps(document))

        assert sweep_orphans(path, grace=0.1) == 0
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_sweep_finds_unrecorded_processes_by_the_marker_in_their_environment(tmp_path: Path) -> None:
    marker = new_marker()
    name, value = marker.split("=", 1)
    assert name == MARKER_VAR
    marked, marked_stat = _sleeper({**os.environ, name: value})
    unmarked, unmarked_stat = _sleeper({**os.environ, name: value + "-other"})
    try:
        path = tmp_path / "tree.json"
        MemberRecord(path, marker=marker).record([], 0.0)

        assert sweep_orphans(path, grace=0.5) == 1

        assert marked.wait(5) == -signal.SIGTERM
        assert unmarked.poll() is None
    finally:
        for proc in (marked, unmarked):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_sweep_never_kills_the_sweeper_or_its_ancestors(tmp_path: Path) -> None:
    """A sweeper whose own pid (and its parent, this pytest) is in the record survives its sweep."""
    path = tmp_path / "tree.json"
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from ralph_supervisor.process.linux import read_stat\n"
        "from ralph_supervisor.process.orphans import MemberRecord, sweep_orphans\n"
        "from ralph_supervisor.process.tree import member_of\n"
        "path = Path(sys.argv[1])\n"
        "MemberRecord(path).record([member_of(read_stat(os.getpid())), member_of(read_stat(os.getppid()))], 0.0)\n"
        "print(sweep_orphans(path, grace=0.2), flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"0\n"


def test_after_supervisor_death_the_child_dies_and_the_sweep_kills_the_recorded_rest(
    subreaper: Reaper, tmp_path: Path
) -> None:
    record = tmp_path / "tree.json"
    supervisor = subprocess.Popen(
        [sys.executable, str(HELPERS / "fake_supervisor.py"), str(record), new_marker(), "--",
         "bash", "-c", "setsid sleep 1000 & ( setsid sleep 1000 & ); while :; do sleep 1000; done"],
        stdout=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert supervisor.stdout is not None
    line = _read_until(supervisor, lambda report: len(report["members"]) >= 4)
    child = read_stat(line["child"])
    rest = [read_stat(pid) for pid, _ in line["members"] if pid != line["child"]]
    assert child is not None and all(s is not None for s in rest)
    wait_for(lambda: record.exists() and len(json.loads(record.read_text())["members"]) >= 4, 5, "the record")

    supervisor.send_signal(signal.SIGKILL)

    # PR_SET_PDEATHSIG: the direct child is killed by the kernel (re-parented to us, reaped as 128+9).
    wait_for(lambda: subreaper.reap() is not None and subreaper.exit_code(child.pid) is not None, 5, "child death")
    assert subreaper.exit_code(child.pid) == 137
    assert supervisor.wait(5) == -signal.SIGKILL  # in our session: left to its Popen by the Reaper
    survivors = [s for s in rest if s is not None and not _gone(s)]
    assert survivors, "the setsid'd grandchildren outlive the supervisor without a sweep"

    swept = sweep_orphans(record, grace=0.5)

    assert swept >= len(survivors)
    assert all(_gone(s) for s in rest if s is not None)
    supervisor.stdout.close()


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 4_194_304


@contextlib.contextmanager
def bystander(extra_env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A real process of ours that no sweep may touch; killed and reaped afterwards."""
    proc = subprocess.Popen(["sleep", "600"], env={**os.environ, **(extra_env or {})})
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _still_alive(proc: subprocess.Popen[bytes], start_ticks: int) -> bool:
    now = read_stat(proc.pid)
    return proc.poll() is None and now is not None and now.start_ticks == start_ticks and now.alive


def test_an_orphan_record_of_garbage_or_strangers_kills_nothing(here: Path) -> None:
    """Garbage, PIDs that cannot exist, and a live process of ours recorded with the wrong start time."""
    pid_max = _pid_max()
    with bystander() as proc:
        stat = read_stat(proc.pid)
        assert stat is not None
        me = read_stat(os.getpid())
        assert me is not None
        # Only PIDs that cannot exist, the bystander (wrong start time), ourselves and init (both
        # protected): a random small PID could name a stranger's live process.
        strangers = st.integers(pid_max, 2**31 - 1) | st.integers(-(2**31), -1) | st.just(proc.pid)
        wrong_ticks = st.integers(-5, 2**63).filter(lambda t: t != stat.start_ticks)
        well_formed = st.fixed_dictionaries({"pid": strangers, "start_ticks": wrong_ticks, "name": st.text(max_size=5)}) \
            | st.just({"pid": os.getpid(), "start_ticks": me.start_ticks, "name": "pytest"}) \
            | st.just({"pid": 1, "start_ticks": 0, "name": "init"})
        members = st.lists(
            well_formed
            | st.fixed_dictionaries({
                "pid": strangers | st.none() | st.booleans() | st.floats() | st.text(max_size=4),
                "start_ticks": (wrong_ticks | JSON_SCALARS).filter(lambda t: t != stat.start_ticks),
            })
            | st.just({"pid": proc.pid})  # no start_ticks: KeyError, set aside
            | JSON_SCALARS | st.lists(st.integers(pid_max, 2**31 - 1), max_size=2),
            max_size=6,
        )
        # A record as a supervisor of this boot writes it: every example reaches the scan of live processes.
        ours = st.fixed_dictionaries(
            {"version": st.just(1), "boot_id": st.just(boot_id()), "members": st.lists(well_formed, max_size=8),
             "marker": st.none() | st.builds(lambda t: f"{MARKER_VAR}={t}", st.text("0123456789abcdef", min_size=8))},
        ).map(lambda d: json.dumps(d).encode())
        record = st.fixed_dictionaries(
            {"version": st.just(1) | JSON_SCALARS, "boot_id": st.just(boot_id()) | JSON_SCALARS, "members": members},
            optional={
                # a fresh tree marker nobody carries, or no marker; any other NAME=value could name a
                # stranger's environment (see the xfail test below), so garbage markers hold no "="
                "marker": st.none() | st.builds(lambda t: f"{MARKER_VAR}={t}", st.text("0123456789abcdef", min_size=8,
                                                                                      max_size=16))
                | JSON_SCALARS.filter(lambda v: not (isinstance(v, str) and "=" in v)),
                "supervisor_pid": JSON_SCALARS,
            },
        ).map(lambda d: json.dumps(d).encode())
        documents = ours | record | st.binary(max_size=200) | json_values().map(lambda v: json.dumps(v).encode())

        @budget(60)
        @given(raw=documents)
        @example(raw=b"")
        @example(raw=b'{"version": 1, "members": "abc"}')
        @example(raw=b'{"version": 1, "members": [{"pid": true, "start_ticks": 1}]}')
        @example(raw=json.dumps({"version": 1, "boot_id": boot_id(),
                                 "members": [{"pid": proc.pid, "start_ticks": stat.start_ticks + 1}]}).encode())
        def sweep(raw: bytes) -> None:
            path = fresh(here, "tree.json")
            path.write_bytes(raw)
            found = sweep_orphans(path, grace=0.2)
            assert found == 0
            assert not path.exists()  # swept (removed) or moved aside, never left to be read again
            assert _still_alive(proc, stat.start_ticks)

        sweep()
        assert _still_alive(proc, stat.start_ticks)


def test_a_deeply_nested_orphan_record_is_set_aside(here: Path) -> None:
    path = fresh(here, "tree.json")
    path.write_bytes(b"[" * 100_000)
    assert sweep_orphans(path, grace=0.1) == 0
    assert not path.exists()


def test_a_record_whose_marker_is_not_the_tree_marker_kills_nothing(here: Path) -> None:
    token = uuid.uuid4().hex
    with bystander({"RALPH_FUZZ_BYSTANDER": token}) as proc:
        stat = read_stat(proc.pid)
        assert stat is not None
        path = fresh(here, "tree.json")
        path.write_text(json.dumps({"version": 1, "boot_id": boot_id(), "members": [],
                                    "marker": f"RALPH_FUZZ_BYSTANDER={token}"}))
        sweep_orphans(path, grace=0.2)
        assert _still_alive(proc, stat.start_ticks)

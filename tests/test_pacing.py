"""Per-call files written at most once per pace while calls come faster: nothing skipped, nothing late."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.breaker import Decision, Snapshot, State
from ralph_supervisor.files.pacing import PACE_S, PacedFile, when_written
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.records import Records

from tests.helpers import executable, state_dir_of
from tests.helpers.fuzzing import CHEAP
from tests.helpers.supervise import events, run

DAY = 1_000_000.0  # an epoch second of 1970-01-12: the day the spend below is counted on


def report(n: int) -> IterationReport:
    return IterationReport(number=n, started_at=n * 10.0, ended_at=n * 10.0 + 5.0, reply=f"did step {n}", tokens=7)


@CHEAP
@given(last=st.none() | st.floats(0, 1e6), now=st.floats(0, 1e6), every=st.floats(0.01, 10))
def test_a_change_is_written_at_once_or_within_one_pace_and_never_sooner_than_a_pace_after_the_last(
        last: float | None, now: float, every: float) -> None:
    at = when_written(last_written=last, now=now, every_s=every)
    assert now <= at <= now + every
    if last is not None and last <= now and at > now:
        assert at == last + every  # waits only while the last write is less than a pace old


def test_a_clock_that_went_back_holds_no_change() -> None:
    assert when_written(last_written=500.0, now=100.0, every_s=0.5) == 100.0


def test_changes_faster_than_the_pace_make_one_write_with_the_newest_content() -> None:
    written: list[int] = []
    content = [0]

    async def scenario() -> None:
        paced = PacedFile(lambda: written.append(content[0]), every_s=60.0)
        content[0] = 1
        paced.changed()  # nothing written before: at once
        for n in range(2, 6):
            content[0] = n
            paced.changed()
        assert written == [1] and paced.waiting
        paced.flush()  # a write at once takes the waiting change with it
        assert written == [1, 5] and not paced.waiting
        paced.flush()  # nothing waits: no write
        content[0] = 6
        paced.write_now()
        assert written == [1, 5, 6]
        await asyncio.sleep(0.05)
        assert written == [1, 5, 6]  # the timer of the change the flush took was cancelled

    asyncio.run(scenario())


def test_a_waiting_change_is_written_within_a_pace_without_another() -> None:
    written: list[int] = []
    content = [0]

    async def scenario() -> None:
        paced = PacedFile(lambda: written.append(content[0]), every_s=0.05)
        for n in (1, 2, 3):
            content[0] = n
            paced.changed()
        assert await until(lambda: not paced.waiting)
        assert written[0] == 1 and written[-1] == 3

    asyncio.run(scenario())


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether `condition` came true within `timeout` seconds of the running event loop."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def attempts_in(ledger: Path) -> list[int]:
    return [a["iteration"] for a in json.loads(ledger.read_text())["attempts"]]


def test_records_pace_the_per_call_files_count_the_spend_at_once_and_a_transition_writes_everything(
        tmp_path: Path) -> None:
    ledger, spend_file, state_file = (tmp_path / name for name in ("ledger.json", "daily-spend.json", "state.json"))

    async def scenario() -> None:
        records = Records(tmp_path, goal="supervised: ./loop.sh", pace_s=60.0)
        records.save(Snapshot(iteration=1))
        records.attempt(report(1))
        assert records.spend(7, 0.01, DAY).tokens == 7
        records.save(Snapshot(iteration=1, consecutive_no_progress=1), paced=True)
        assert attempts_in(ledger) == [1]  # the first of each: at once
        # The next call, within the pace: its files wait, its spend counts all the same.
        records.save(Snapshot(iteration=2, consecutive_no_progress=1))  # a call's start is written at once
        assert json.loads(state_file.read_text())["iteration"] == 2
        records.attempt(report(2))
        assert records.spend(7, 0.01, DAY).tokens == 14
        records.save(Snapshot(iteration=2, consecutive_no_progress=2), paced=True)
        assert attempts_in(ledger) == [1]
        assert json.loads(spend_file.read_text())["tokens"] == 7
        assert json.loads(state_file.read_text())["consecutive_no_progress"] == 1
        # An open: the transition's save writes the ledger and the spend before a report can read them.
        records.attempt(report(3))
        renamed = renamed_into(tmp_path)
        opened = Decision("open", State.OPEN, "no-progress", "stuck", 3, cooldown_s=1800.0, total_opens=1)
        records.transition(opened)
        records.save(Snapshot(state=State.OPEN, trigger="no-progress", iteration=3, total_opens=1, opened_at=30.0))
        assert renamed() == {"ledger.json": 1, "daily-spend.json": 1, "state.json": 1}  # the waiting one is this
        assert attempts_in(ledger) == [1, 2, 3]
        assert json.loads(spend_file.read_text())["tokens"] == 14
        assert json.loads(state_file.read_text())["state"] == "OPEN"
        records.attempt(report(4))
        records.close()  # the exit: what waits is written
        assert attempts_in(ledger) == [1, 2, 3, 4]

    asyncio.run(scenario())


def test_records_write_what_waits_within_a_pace_without_another_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        records = Records(tmp_path, goal="supervised: ./loop.sh", pace_s=0.05)
        for n in (1, 2, 3):
            records.save(Snapshot(iteration=n, consecutive_no_progress=n), paced=n > 1)
            records.attempt(report(n))
            records.spend(7, 0.0, DAY)
        assert await until(lambda: attempts_in(tmp_path / "ledger.json") == [1, 2, 3])
        assert await until(lambda: json.loads((tmp_path / "daily-spend.json").read_text())["tokens"] == 21)
        assert await until(lambda: json.loads((tmp_path / "state.json").read_text())["consecutive_no_progress"] == 3)
        records.close()

    asyncio.run(scenario())


def test_spend_that_cannot_be_written_is_counted_and_added_once_the_folder_can_be_written(tmp_path: Path) -> None:
    records = Records(tmp_path, goal="supervised: ./loop.sh")
    assert records.spend(5, 0.0, DAY).tokens == 5  # no event loop runs: written at once
    (tmp_path / "daily-spend.lock").unlink()
    (tmp_path / "daily-spend.lock").mkdir()  # the lock cannot be opened: every write fails (even as root)
    assert records.spend(6, 0.0, DAY).tokens == 11
    assert records.warnings.said("daily_spend_unwritable")
    assert json.loads((tmp_path / "daily-spend.json").read_text())["tokens"] == 5
    (tmp_path / "daily-spend.lock").rmdir()
    assert records.spend(1, 0.0, DAY).tokens == 12
    assert json.loads((tmp_path / "daily-spend.json").read_text())["tokens"] == 12, "the 6 not written is added"
    records.close()


# ----------------------------------------------------------------------------------- a real run

QUICK_AGENT = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""
IN_MOVED_TO = 0x80
IN_NONBLOCK = 0o4000


def renamed_into(folder: Path) -> Callable[[], Counter[str]]:
    """Watch `folder` for files renamed into it (an atomic write's last step); the returned function reads
    what the kernel queued since, by name."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(folder).encode(), IN_MOVED_TO) >= 0

    def read() -> Counter[str]:
        names: Counter[str] = Counter()
        try:
            while True:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    return names
                offset = 0
                while offset < len(data):
                    _wd, _mask, _cookie, size = struct.unpack_from("iIII", data, offset)
                    names[data[offset + 16:offset + 16 + size].rstrip(b"\0").decode()] += 1
                    offset += 16 + size
        finally:
            os.close(fd)

    return read


def test_a_loop_of_short_calls_has_each_in_the_files_which_are_rewritten_at_most_once_a_pace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".ralph").mkdir(parents=True)
    (ws / ".gitignore").write_text(".ralph/\n")
    bin_dir = tmp_path / "bin"
    executable(bin_dir, "claude", QUICK_AGENT)
    state_dir = state_dir_of(ws)
    state_dir.mkdir(parents=True)
    renamed = renamed_into(state_dir)
    calls = 40
    began = time.monotonic()
    result = run(ws, "--no-echo", "--log-format", "json", "--no-progress", "1000", "--paraphrase", "0",
                 "--output-decline", "0", "--", "bash", "-c", f"for i in $(seq 1 {calls}); do claude -p go; done",
                 env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=120)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    writes = renamed()
    assert [e["iteration"] for e in events(state_dir, "iteration_finished")] == list(range(1, calls + 1))
    assert attempts_in(state_dir / "ledger.json") == list(range(1, calls + 1))
    assert json.loads((state_dir / "daily-spend.json").read_text())["tokens"] == 2 * calls
    assert json.loads((state_dir / "state.json").read_text())["iteration"] == calls
    # At most one write a pace, and the writes that never wait: the first, the exit's.
    most = took / PACE_S + 3
    assert writes["ledger.json"] <= most and writes["daily-spend.json"] <= most, (writes, took)
    assert writes["state.json"] <= calls + most, (writes, took)  # each call's start, and its end's counters

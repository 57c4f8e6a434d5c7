"""The live view: real state folders on disk, a real control server, the real rendering."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import re
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rich.console import Console

from ralph_supervisor import watch
from ralph_supervisor.event_fields import Budgets
from ralph_supervisor.control import ControlServer
from hypothesis import example

from ralph_supervisor import status_json
from ralph_supervisor.breaker import Snapshot, State
from ralph_supervisor.files import state_json

from tests.helpers import REPO, wait_for
from tests.helpers.fuzzing import CHEAP
from tests.helpers.fuzzing import JSONL_LINES
from tests.helpers.fuzzing import STATE_FILE_BYTES
from tests.helpers.fuzzing import fresh
from tests.helpers.fuzzing import one_line

NOW = time.time()


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"


def write_jsonl(path: Path, records: list[Any], *, mode: str = "w") -> None:
    with open(path, mode) as fh:
        for record in records:
            fh.write((record if isinstance(record, str) else json.dumps(record)) + "\n")


def finished(i: int, **extra: Any) -> dict[str, Any]:
    record = {
        "event": "iteration_finished", "level": "info", "timestamp": iso(NOW - 600 + i * 20), "iteration": i,
        "files_changed": 10 + i, "commits": 1 if i % 5 == 0 else 0, "output_bytes": 2048 * i,
        "errors": 100 + i, "tokens": 1000 + i, "outcome": "success" if i % 2 else "failure",
    }
    record.update(extra)
    return record


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A state folder as a supervisor leaves it after 20 iterations and one open."""
    folder = tmp_path / ".ralph-supervise"
    folder.mkdir()
    (folder / ".gitignore").write_text("*\n")
    (folder / "state.json").write_text(json.dumps({
        "state": "OPEN", "reason": "3 iterations in a row without progress", "trigger": "no-progress",
        "iteration": 20, "consecutive_no_progress": 3, "consecutive_same_error": 2, "consecutive_failures": 1,
        # a minute before the test runs (NOW is fixed at import, and a loaded suite reaches here half an hour later)
        "opened_at": time.time() - 60, "total_opens": 1, "cooldown_s": 1800, "tokens_used": 987654,
    }))
    write_jsonl(folder / "history.jsonl", [
        {"ts": iso(NOW - 900), "iteration": 4, "from": "CLOSED", "to": "OPEN", "trigger": "same-error",
         "reason": "the same error in 5 iterations"},
        {"ts": iso(NOW - 800), "iteration": 5, "from": "OPEN", "to": "HALF_OPEN", "trigger": "none", "reason": "cooldown over"},
        {"ts": iso(NOW - 700), "iteration": 6, "from": "HALF_OPEN", "to": "CLOSED", "trigger": "none",
         "reason": "trial iteration made progress"},
        {"ts": iso(NOW - 60), "iteration": 20, "from": "CLOSED", "to": "OPEN", "trigger": "no-progress",
         "reason": "3 iterations in a row without progress"},
    ])
    events: list[Any] = [{"event": "supervisor_started", "timestamp": iso(NOW - 700), "pid": 4242}]
    for i in range(1, 21):
        events.append({"event": "iteration_started", "timestamp": iso(NOW - 610 + i * 20), "iteration": i})
        events.append({"event": "output_sampled", "bytes": 100})
        events.append(finished(i))
    events.append({"event": "breaker_transition", "from": "CLOSED", "to": "OPEN", "iteration": 20})
    write_jsonl(folder / "events.jsonl", events)
    return folder


@pytest.fixture(autouse=True)
def no_inherited_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames are laid out for a pipe (120 columns), whatever size the test runner's environment names."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


def frame(workspace: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert watch.main(workspace, state_dir, once=True) == 0
    return capsys.readouterr().out


def iteration_numbers(out: str) -> list[int]:
    """The iteration numbers of the timeline rows (rows carry the fixture's unique `files` 10+i)."""
    numbers = []
    for line in out.splitlines():
        cells = line.split()
        # the outcome is a mark and one or two words (`✔ progress`, `· no change`): files come 3 to 5 cells in
        if len(cells) >= 4 and cells[0].isdigit() and any(
                c.isdigit() and int(c) == int(cells[0]) + 10 for c in cells[3:6]):
            numbers.append(int(cells[0]))
    return numbers


def test_one_frame_shows_breaker_timeline_and_transitions_from_the_files(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = frame(tmp_path, state_dir, capsys)
    assert "OPEN" in out and "trigger no-progress" in out and "opens 1" in out
    assert "3 iterations in a row without progress" in out
    # 30 min cooldown, opened a minute before the test
    assert re.search(r"half-open in ([12]\d)m", out)
    assert "no-progress 3" in out and "same-error 2" in out and "failures 1" in out and "987,654" in out
    assert "not running" in out and "no supervisor running" in out
    assert iteration_numbers(out) == list(range(6, 21))  # the last 15, oldest first
    row20 = next(line for line in out.splitlines() if line.split()[:1] == ["20"])
    assert "✗ failed" in row20 and "120" in row20 and "1,020" in row20 and "40.0 KiB" in row20
    assert "CLOSED → OPEN" in out and "HALF_OPEN → CLOSED" in out and "same-error" in out
    assert out.index("trial iteration made progress") > out.index("3 iterations in a row without progress") > 0
    assert "!" not in out  # nothing unreadable


def test_a_missing_state_folder_is_shown_as_waiting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = frame(tmp_path, tmp_path / ".ralph-supervise", capsys)
    assert "CLOSED" in out and "does not exist yet" in out
    assert "no finished iteration yet" in out and "none yet" in out


def test_garbage_files_never_break_the_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "state.json").write_text('{"state": "HALF_OPEN", "iteration": ')  # cut mid-write
    (folder / "history.jsonl").write_bytes(b"\x00\xff\xfe garbage\n[1,2]\n\"text\"\n" + b"{" * 50000 + b"\n"
                                           + json.dumps({"from": ["x"], "to": {"y": 1}, "iteration": "seven",
                                                         "ts": 12}).encode() + b"\n")
    write_jsonl(folder / "events.jsonl", [
        "not json", "[]", "null",
        {"event": "iteration_finished", "iteration": "abc", "files_changed": None, "errors": ["E1", "E2"],
         "tokens": "12", "output_bytes": -5, "outcome": None, "timestamp": "yesterday"},
        {"event": "iteration_finished", "iteration": 3, "files_changed": 1e300, "errors": {"a": 1},
         "tokens": float("nan"), "outcome": 42},
        {"event": "iteration_finished"},
        {"event": ["iteration_finished"]},
    ])
    with open(folder / "events.jsonl", "ab") as fh:
        fh.write(b'{"event": "iteration_finished", "iteration": 99')  # being written: not a line yet
    out = frame(tmp_path, folder, capsys)
    assert "state.json is not valid JSON" in out
    assert "unreadable line(s) in events.jsonl" in out and "unreadable line(s) in history.jsonl" in out
    assert "yesterday" in out  # a time that is not a time is shown as it is
    assert " 99 " not in out


def test_a_state_file_that_is_a_folder_is_a_note_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "state"
    (folder / "state.json").mkdir(parents=True)
    (folder / "events.jsonl").mkdir()
    out = frame(tmp_path, folder, capsys)
    assert "cannot read state.json" in out and "cannot read events.jsonl" in out


def live_status(pid: int) -> dict[str, Any]:
    return {
        "state": "HALF_OPEN", "trigger": "no-progress", "reason": "trial after cooldown", "iteration": 21,
        "consecutive_no_progress": 0, "consecutive_same_error": 0, "consecutive_failures": 0, "total_opens": 1,
        "tokens_used": 5, "supervisor": {"pid": pid, "running": True},
        "child": {"pid": pid + 1, "running": True, "paused": True, "processes": 3},
        "current": {"iteration": 21, "started_at": iso(NOW - 65), "age_s": 65.4},
        "tree": [
            {"pid": pid + 1, "name": "bash", "status": "stopped", "cpu_percent": 0.0},
            {"pid": pid + 2, "name": "claude", "status": "running", "cpu_percent": 87.5},
            {"pid": pid + 3, "name": "node", "status": "sleeping", "cpu_percent": 3.25},
            {"pid": "junk", "name": None, "cpu_percent": "lots"},
            "not a process",
        ],
    }


def test_a_running_supervisor_is_asked_for_status_and_wins_over_the_file(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[dict[str, Any]] = []

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return live_status(os.getpid())

    async def scenario() -> str:
        server = ControlServer(state_dir / "control.sock", handler)
        await server.start()
        try:
            code = await asyncio.to_thread(watch.main, tmp_path, state_dir, once=True)
        finally:
            await server.close()
        assert code == 0
        return capsys.readouterr().out

    out = asyncio.run(scenario())
    assert asked == [{"cmd": "status"}]
    assert "HALF_OPEN" in out and "trial after cooldown" in out
    assert "running #21 for 1m05s" in out
    assert f"pid {os.getpid()}  running" in out and "PAUSED" in out and "3 processes" in out
    assert "tree: 4 processes, 91% CPU" in out
    lines = out.splitlines()
    claude = next(i for i, line in enumerate(lines) if " claude " in line)
    bash = next(i for i, line in enumerate(lines) if " bash " in line and "stopped" in line)
    assert claude < bash and "87.5" in lines[claude]  # busiest first
    assert any(line.split()[:2] == ["?", "?"] for line in lines)  # the junk entry: shown, not guessed
    assert iteration_numbers(out) == list(range(6, 21))  # the timeline still comes from events.jsonl


def test_each_refresh_costs_the_supervisor_exactly_one_status_request(tmp_path: Path, state_dir: Path) -> None:
    calls = 0

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return live_status(os.getpid())

    async def scenario() -> None:
        server = ControlServer(state_dir / "control.sock", handler)
        await server.start()
        try:
            watcher = watch.Watcher(tmp_path, state_dir)
            for _ in range(3):
                snap = await asyncio.to_thread(watcher.frame, time.time())
                assert snap.live and snap.breaker["state"] == "HALF_OPEN"
        finally:
            await server.close()

    asyncio.run(scenario())
    assert calls == 3


def test_cpu_rate_is_derived_from_cumulative_cpu_time_between_refreshes(tmp_path: Path, state_dir: Path) -> None:
    """A supervisor may report only `cpu_s` (cheap for it): the view turns two frames into a rate."""
    cpu = {"value": 10.0}

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        status = live_status(os.getpid())
        status["tree"] = [{"pid": 11, "name": "claude", "cpu_s": cpu["value"]}, {"pid": 12, "name": "bash", "cpu_s": 0.5}]
        return status

    async def scenario() -> tuple[watch.Frame, watch.Frame]:
        server = ControlServer(state_dir / "control.sock", handler)
        await server.start()
        try:
            watcher = watch.Watcher(tmp_path, state_dir)
            first = await asyncio.to_thread(watcher.frame, 1000.0)
            cpu["value"] = 11.5  # 1.5 s of CPU in 2 s of wall time
            second = await asyncio.to_thread(watcher.frame, 1002.0)
        finally:
            await server.close()
        return first, second

    first, second = asyncio.run(scenario())
    assert [(p.name, p.cpu_percent) for p in first.processes] == [("claude", None), ("bash", None)]
    assert [(p.name, p.cpu_percent) for p in second.processes] == [("claude", 75.0), ("bash", 0.0)]
    console = Console(width=120, file=io.StringIO())
    console.print(watch.render(second, 1002.0))
    out = console.file.getvalue()
    assert "tree: 2 processes, 75% CPU" in out and "75.0" in out and "11.5s" in out


def test_a_reused_pid_or_a_new_one_gets_no_made_up_rate() -> None:
    rows = (watch.ProcessRow(1, "a", "", None, 5.0), watch.ProcessRow(2, "b", "", None, 1.0),
            watch.ProcessRow(3, "c", "", 12.5, None))
    rated, sample = watch.with_cpu_rates(rows, {1: (9.0, 10.0), 4: (1.0, 10.0)}, 12.0)
    assert {r.pid: r.cpu_percent for r in rated} == {1: None, 2: None, 3: 12.5}  # 1 went backwards, 2 is new
    assert sample == {1: (5.0, 12.0), 2: (1.0, 12.0)}


def test_the_follower_reads_only_appended_lines_and_waits_for_unfinished_ones(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_jsonl(path, [finished(1), {"event": "noise"}])
    follower = watch.JsonlFollower(path, watch.is_iteration_finished, 10)
    assert [r["iteration"] for r in follower.poll()] == [1]
    with open(path, "a") as fh:
        fh.write(json.dumps(finished(2)) + "\n" + json.dumps(finished(3))[:25])
    assert [r["iteration"] for r in follower.poll()] == [1, 2]
    with open(path, "a") as fh:
        fh.write(json.dumps(finished(3))[25:] + "\n")
    assert [r["iteration"] for r in follower.poll()] == [1, 2, 3]
    assert follower.corrupt_lines == 0


def test_the_follower_survives_rotation_and_backfills_from_the_rotated_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_jsonl(path, [finished(i) for i in range(1, 6)])
    follower = watch.JsonlFollower(path, watch.is_iteration_finished, 4)
    assert [r["iteration"] for r in follower.poll()] == [2, 3, 4, 5]
    path.rename(tmp_path / "events.jsonl.1")
    write_jsonl(path, [finished(6)])
    assert [r["iteration"] for r in follower.poll()] == [3, 4, 5, 6]
    path.unlink()
    assert follower.poll() == []
    write_jsonl(path, [finished(7)])
    # A file gone and made again is read afresh (whatever inode it got): 6 went with the removed file, the
    # rotated file still holds 1-5, so the newest four are its last three and the new file's 7.
    assert [r["iteration"] for r in follower.poll()] == [3, 4, 5, 7]
    assert [r["iteration"] for r in follower.poll()] == [3, 4, 5, 7]  # and nothing is read twice


def test_a_huge_events_file_is_read_from_its_end_only(tmp_path: Path) -> None:
    """A 4 GiB file (sparse: a hole, then real lines): reading it whole would never fit this test."""
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(4 * 1024**3)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n")  # the hole is one long line of zeros
        for i in range(1, 31):
            fh.write(json.dumps(finished(i)).encode() + b"\n")
    if os.stat(path).st_blocks * 512 > 1024**3:
        pytest.skip("this filesystem does not keep sparse files")
    follower = watch.JsonlFollower(path, watch.is_iteration_finished, 60)
    assert [r["iteration"] for r in follower.poll()] == list(range(1, 31))
    assert follower.corrupt_lines == 0  # the cut first line (zeros from the hole) is dropped, not parsed
    with open(path, "ab") as fh:
        fh.write(json.dumps(finished(31)).encode() + b"\n")
    assert follower.poll()[-1]["iteration"] == 31


class LiveView:
    """`watch.main` in a child process on a pty of 120x60, as on a terminal; the test reads its master."""

    def __init__(self, workspace: Path, state_dir: Path, interval: float) -> None:
        code = (  # Ctrl-C as a terminal's shell leaves it, even where the tests run with SIGINT ignored (`cmd &`)
            "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "import sys; from pathlib import Path; from ralph_supervisor import watch; "
            f"sys.exit(watch.main(Path({str(workspace)!r}), Path({str(state_dir)!r}), interval={interval}))"
        )
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("COLUMNS", None)  # the pty's size, not a size inherited from whatever runs the tests
        env.pop("LINES", None)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave, env=env,
                                     close_fds=True)
        os.close(slave)
        self.output = bytearray()

    def read_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    self.output.extend(os.read(self.master, 65536))
                except OSError:
                    return

    def read_until(self, data: bytes, timeout: float = 20.0) -> None:
        """Until `data` was shown (a start on a loaded machine takes seconds: python, rich, the first frame)."""
        deadline = time.monotonic() + timeout
        while data not in self.output and time.monotonic() < deadline:
            self.read_for(0.1)

    def ended(self, timeout: float) -> int:
        """The view's exit code, waited for up to `timeout` seconds; an AssertionError saying what the view was
        doing (its signals and each thread's state, from /proc) when it did not end."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the view did not end in {timeout} s: {self.state()}") from None

    def state(self) -> str:
        pid = self.proc.pid
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            facts = [line for line in status.splitlines() if line.split(":")[0] in
                     ("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")]
            for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
                facts.append(f"task {task.name} {(task / 'comm').read_text().strip()} "
                             f"{(task / 'wchan').read_text().strip()} "
                             f"blk={next(l for l in (task / 'status').read_text().splitlines() if l.startswith('SigBlk'))}")
        except OSError as exc:
            return f"no /proc for it ({exc})"
        return "; ".join(facts) + f"; output tail {bytes(self.output[-300:])!r}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.mark.slow
def test_the_live_loop_refreshes_on_a_terminal_until_interrupted_and_exits_0(tmp_path: Path, state_dir: Path) -> None:
    view = LiveView(tmp_path, state_dir, interval=0.1)
    try:
        view.read_until(b"breaker")
        assert b"breaker" in view.output
        write_jsonl(state_dir / "events.jsonl", [finished(21, files_changed=4321)], mode="a")
        view.read_until(b"4321")
        view.proc.send_signal(signal.SIGINT)
        code_ = view.ended(10)
        view.read_for(0.2)
    finally:
        view.close()
    assert code_ == 0, view.output.decode(errors="replace")[-2000:]
    assert b"4321" in view.output  # the appended iteration showed up in a later frame


@pytest.mark.slow
def test_ctrl_c_ends_the_live_view_while_its_terminal_takes_nothing(tmp_path: Path, state_dir: Path) -> None:
    """Ctrl-S on the view's terminal, then Ctrl-C: the view still ends, at once and with 0. (Its frames
    once went out in blocking writes: stuck in one, the interrupted view tried to put the screen back
    with another and never exited; that was also the flaky failure of the test above.)"""
    view = LiveView(tmp_path, state_dir, interval=0.05)
    try:
        view.read_until(b"breaker")
        assert b"breaker" in view.output
        os.write(view.master, b"\x13")  # Ctrl-S: the terminal takes nothing more
        time.sleep(1.0)  # 20 frames due, the pty's buffer full: the view waits on the terminal
        view.proc.send_signal(signal.SIGINT)
        code_ = view.ended(10)
    finally:
        view.close()
    assert code_ == 0


# --- pure parts ------------------------------------------------------------------------------------


def test_timeline_keeps_the_latest_record_of_a_repeated_iteration() -> None:
    rows = watch.timeline(watch.finished_iterations([finished(1, outcome="noop"), finished(2),
                                                     finished(1, outcome="success")]))
    assert [(r.iteration, r.outcome) for r in rows] == [(2, "failure"), (1, "success")]


def test_breaker_view_prefers_the_live_status_and_the_file_fills_in(tmp_path: Path) -> None:
    """Without a supervisor the view is the reply `status` gives from state.json (its one builder)."""
    state_json.save(tmp_path, Snapshot(state=State.OPEN, trigger="no-progress", iteration=4, consecutive_failures=2,
                                       opened_at=NOW, cooldown_s=60))
    state, note = watch.file_status(tmp_path)
    assert note is None and state is not None and state["schema"] == status_json.SCHEMA
    assert watch.breaker_view(state, None)["consecutive_failures"] == 2
    view = watch.breaker_view(state, {"state": "CLOSED", "iteration": 5})
    assert (view["state"], view["iteration"], view["consecutive_failures"]) == ("CLOSED", 5, 2)
    assert watch.breaker_view(None, None) == {}


def test_times_and_durations_read_as_people_expect() -> None:
    assert watch.parse_time("2026-11-30T22:24:00.123Z") == pytest.approx(1796077440.123)
    assert watch.parse_time("2026-11-30T22:24:00") == pytest.approx(1796077440.0)
    assert watch.parse_time(1796077440) == 1796077440.0
    assert watch.parse_time("soon") is None and watch.parse_time(None) is None and watch.parse_time([1]) is None
    assert [watch.duration(s) for s in (0, 59.9, 65, 3600 * 2 + 180, 86400 * 3 + 7200)] == [
        "0s", "59s", "1m05s", "2h03m", "3d02h"]
    assert watch.duration(None) == "?"
    assert watch.human_bytes(512) == "512 B" and watch.human_bytes(2048) == "2.0 KiB"


def test_current_iteration_age_comes_from_started_at_when_age_is_missing() -> None:
    current = watch.current_iteration({"current": {"iteration": 3, "started_at": iso(NOW - 90)}}, NOW)
    assert current is not None and current.iteration == 3 and current.age_s == pytest.approx(90, abs=1)
    assert watch.current_iteration({"current": "x"}, NOW) is None
    assert watch.current_iteration(None, NOW) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)
records = st.dictionaries(
    st.sampled_from(["event", "iteration", "files_changed", "commits", "output_bytes", "errors", "tokens",
                     "outcome", "timestamp", "ts", "from", "to", "trigger", "reason", "state", "opened_at",
                     "cooldown_s", "current", "tree", "child", "supervisor", "counters"]),
    json_values,
) | st.fixed_dictionaries({"event": st.just("iteration_finished")}, optional={
    "iteration": json_values, "errors": json_values, "tokens": json_values, "outcome": json_values})


@settings(max_examples=40, deadline=None)
@given(st.lists(records, max_size=6), records, records)
@example([], {}, {"iteration": "INFINITY"})  # a number too large for an int once crashed the header
def test_any_records_render_without_raising(events: list[dict[str, Any]], state: dict[str, Any],
                                            status: dict[str, Any]) -> None:
    snap = watch.Frame(
        workspace="/w", state_dir="/w/.ralph-supervise", breaker=watch.breaker_view(state, status), live=True,
        current=watch.current_iteration(status, NOW), iterations=watch.timeline(watch.finished_iterations(events)),
        transitions=watch.transitions(events), processes=watch.processes(status),
    )
    console = Console(width=100, file=io.StringIO())
    console.print(watch.render(snap, NOW))
    assert "breaker" in console.file.getvalue()


# --- scripts/tmux-session.sh -------------------------------------------------------------------------

TMUX_SCRIPT = REPO / "scripts" / "tmux-session.sh"
STUB = """#!/bin/sh
# Stands in for ralph-supervise: records each call's arguments, then behaves like the real commands.
out="$STUB_OUT/$1.args"
for a in "$@"; do printf '%s\\0' "$a"; done > "$out.tmp" && mv "$out.tmp" "$out"
case "$1" in
  run) printf '%s' "${STUB_VAR-unset}" > "$STUB_OUT/env.tmp" && mv "$STUB_OUT/env.tmp" "$STUB_OUT/env"
       while [ "$1" != "--" ]; do shift; done; shift; exec "$@" ;;
  watch) exec sleep 60 ;;
  status) echo "ralph: CLOSED it0" ;;
esac
"""


def test_tmux_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(TMUX_SCRIPT)]).returncode == 0
    assert os.access(TMUX_SCRIPT, os.X_OK)


@pytest.fixture
def tmux_env(tmp_path: Path):
    """A private tmux server (own TMUX_TMPDIR and -L name) and a stub ralph-supervise; killed after."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    tmpdir = Path(tempfile.mkdtemp(prefix="rt-"))  # short: the tmux socket path must fit sun_path
    out = tmp_path / "out"
    out.mkdir()
    stub = tmp_path / "ralph-supervise-stub"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(TMUX_TMPDIR=str(tmpdir), TMPDIR=str(tmpdir), RALPH_SUPERVISE_BIN=str(stub), STUB_OUT=str(out))
    name = f"rt{os.getpid()}"
    try:
        yield env, name, out, stub
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], env=env, capture_output=True)
        shutil.rmtree(tmpdir, ignore_errors=True)


def tmux(env: dict[str, str], name: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-L", name, *args], env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    return done.stdout


def contents_of(path: Path, timeout: float = 10.0) -> bytes:
    """The file's bytes, once it exists."""
    wait_for(path.exists, timeout, f"{path.name} to appear")
    return path.read_bytes()

def test_tmux_session_runs_the_supervisor_and_the_live_view_with_a_status_bar(tmp_path: Path, tmux_env: Any) -> None:
    env, name, out, stub = tmux_env
    workspace = tmp_path / "my project"
    workspace.mkdir()
    # A tmux server that was started earlier from another environment: the panes must still get ours.
    tmux({k: v for k, v in env.items() if k != "STUB_VAR"}, name, "new-session", "-d", "-s", "other", "sleep 60")
    env = {**env, "STUB_VAR": "it's a value;"}
    loop = ["sh", "-c", "sleep 60", "arg0", "it's", "$HOME", "two words", "end;"]
    done = subprocess.run([str(TMUX_SCRIPT), "-L", name, "-w", str(workspace), "-s", "loop.1", "--", *loop],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"tmux -L {name} attach -t loop-1" in done.stdout  # '.' is not allowed in a session name

    run_args = contents_of(out / "run.args").split(b"\0")[:-1]
    assert [a.decode() for a in run_args] == ["run", "-w", str(workspace), "--", *loop]
    watch_args = contents_of(out / "watch.args").split(b"\0")[:-1]
    assert [a.decode() for a in watch_args] == ["watch", "-w", str(workspace)]
    assert contents_of(out / "env").decode() == "it's a value;"
    # The environment travels by private file, never by command line (`ps` shows command lines).
    started = tmux(env, name, "list-panes", "-t", "loop-1", "-F", "#{pane_start_command}")
    assert "a value" not in started and "STUB_VAR" not in started
    assert not list(Path(env["TMPDIR"]).glob("ralph-tmux-env.*"))  # each pane removed its file

    panes = tmux(env, name, "list-panes", "-t", "loop-1", "-F", "#{pane_current_path}|#{pane_dead}").splitlines()
    assert panes == [f"{workspace}|0", f"{workspace}|0"]  # the loop and the live view, both alive
    assert tmux(env, name, "show-options", "-v", "-t", "loop-1", "status-interval").strip() == "5"
    assert tmux(env, name, "show-options", "-w", "-v", "-t", "loop-1:", "remain-on-exit").strip() == "on"
    status_right = tmux(env, name, "show-options", "-v", "-t", "loop-1", "status-right").strip()
    assert status_right.startswith("#(") and status_right.endswith(")")
    shown = subprocess.run(["sh", "-c", status_right[2:-1]], env=env, capture_output=True, text=True, timeout=10)
    assert shown.stdout.strip() == "ralph: CLOSED it0"
    status_args = [a.decode() for a in contents_of(out / "status.args").split(b"\0")[:-1]]
    assert status_args == ["status", "--tmux", "-w", str(workspace)]

    again = subprocess.run([str(TMUX_SCRIPT), "-L", name, "-w", str(workspace), "-s", "loop.1", "--", "true"],
                           env=env, capture_output=True, text=True, timeout=30)
    assert again.returncode == 1 and "already exists" in again.stderr

    subprocess.run(["tmux", "-L", name, "kill-server"], env=env, capture_output=True, timeout=10)
    deadline = time.monotonic() + 5
    while _test_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _test_processes(), "kill-server left processes behind"


def _test_processes() -> list[psutil.Process]:
    """Live processes started by this test (they carry its RALPH_TEST_ID, see conftest)."""
    needle = f"RALPH_TEST_ID={os.environ['RALPH_TEST_ID']}".encode()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0") and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no command given"),
        (["-w", "/nonexistent/folder", "--", "true"], "is not a folder"),
        (["--bogus", "--", "true"], "unknown option '--bogus'"),
        (["-w"], "-w needs a folder"),
    ],
)
def test_tmux_script_usage_errors_are_one_line_and_exit_1(tmux_env: Any, args: list[str], message: str) -> None:
    env, name, _out, _stub = tmux_env
    done = subprocess.run([str(TMUX_SCRIPT), "-L", name, *args], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert message in done.stderr and done.stderr.count("\n") == 1


@CHEAP
@given(lines=JSONL_LINES)
@example(lines=[b"[" * 50_000, b"{}"])
@example(lines=[b"\xff", b"   ", b"null"])
def test_watch_reads_any_jsonl_and_counts_what_it_cannot(lines: list[bytes]) -> None:
    records, bad = watch.parse_json_lines(lines)
    assert all(isinstance(r, dict) for r in records)
    assert len(records) + bad == sum(1 for line in lines if line.strip())


@CHEAP
@given(raw=STATE_FILE_BYTES)
@example(raw=b"[" * 50_000)
def test_watch_reads_any_state_json_or_says_why_not(here: Path, raw: bytes) -> None:
    path = fresh(here, state_json.NAME)
    path.write_bytes(raw)
    value, note = watch.file_status(path.parent)
    assert (value is None) != (note is None)
    assert value is None or isinstance(value, dict)
    assert note is None or one_line(note)


def test_the_header_shows_the_last_iterations_in_small_and_the_spend() -> None:
    recent = watch.finished_iterations(
        {"event": "iteration_finished", "iteration": i, "files_changed": f, "commits": 0, "errors": e,
         "failed": e > 0, "cost_usd": 0.25} for i, (f, e) in enumerate([(3, 0), (0, 0), (0, 2), (6, 0)], 1))
    changes, errors, count = watch.sparklines(recent)
    assert (count, len(changes), len(errors)) == (4, 4, 4)
    assert changes[1] == "▁" and changes[3] == "█" and errors[2] == "█" and errors[0] == "▁"
    view = {"state": "CLOSED", "tokens_used": 7200}
    assert watch.spend_line(view, recent, Budgets(token_budget=100000, cost_budget=5.0)) == (
        "tokens 7,200 of 100,000 (7 %) · dollars $1.00 of $5.00 (20 %)")
    assert watch.spend_line(view, [], Budgets()) == "tokens 7,200"
    snap = watch.Frame(workspace="/w", state_dir="/w/.ralph-supervise", breaker=view, live=False, current=None,
                          iterations=(), transitions=(), processes=(), recent=tuple(recent),
                          budgets=Budgets(token_budget=100000))
    console = Console(width=120, record=True)
    console.print(watch.render(snap, 1000.0))
    text = console.export_text()
    assert f"recent      changes {changes}  errors {errors}  (last 4)" in text
    assert "spend       tokens 7,200 of 100,000 (7 %) · dollars $1.00" in text


def test_a_usage_limit_wait_is_on_the_breaker_line() -> None:
    until = "2026-12-01T15:28:00Z"
    snap = watch.Frame(workspace="/w", state_dir="/w/.ralph-supervise",
                       breaker={"state": "CLOSED", "limit_until": until}, live=True, current=None,
                       iterations=(), transitions=(), processes=(), recent=())
    console = Console(width=140, record=True)
    console.print(watch.render(snap, 1000.0))
    text = console.export_text()
    assert f"CLOSED  opens 0  LIMIT until {watch.clock(until)}: the tree waits for a usage limit" in text


def test_only_an_open_a_cooldown_ends_counts_down_to_half_open() -> None:
    """A manual or destructive open (and a final one) waits for a human: no "half-open in" clock."""
    opened = {"state": "OPEN", "opened_at": "2026-12-01T08:00:00.000Z", "cooldown_s": 600, "final": False}
    at = watch.parse_time(opened["opened_at"]) + 60
    assert watch.cooldown_left({**opened, "trigger": "no-progress"}, at) == 540
    for trigger in ("manual", "destructive"):
        assert watch.cooldown_left({**opened, "trigger": trigger}, at) is None
    assert watch.cooldown_left({**opened, "trigger": "no-progress", "final": True}, at) is None

"""The call watcher's parts on their own: the gate's holds, refusals and pending marks (real processes, a real
shim folder), the stream marks the watcher's thread, the exits thread and the loop share."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.evidence.call_exits import CallMarks, RunningCall
from ralph_supervisor.evidence.call_gate import CallGate
from ralph_supervisor.evidence.call_identity import Identities, read_cmdline
from ralph_supervisor.evidence.iterations import IterationTracker, OutputResult
from ralph_supervisor.evidence.shims import install_shims
from ralph_supervisor.process.linux import ProcStat, read_stat
from tests.helpers import executable


def stat_of(proc: subprocess.Popen[bytes], runs: str) -> ProcStat:
    """The process once it runs `runs` (its command line says so: exec'd into it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stat = read_stat(proc.pid)
        if stat is not None and any(os.path.basename(arg) == runs for arg in read_cmdline(proc.pid)[:2]):
            return stat
        time.sleep(0.01)
    raise AssertionError(f"{proc.pid} never ran {runs}")


@pytest.fixture
def agent_call(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    agent = executable(tmp_path / "bin", "claude", f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    proc = subprocess.Popen([str(agent), "-p", "go"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_refuses_shims_and_newcomers_but_lets_the_calls_running_at_the_hold_end(
        tmp_path: Path, agent_call: subprocess.Popen[bytes]) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    tracker = IterationTracker(["claude"], None)
    gate = CallGate(tracker, Identities(["claude"]), shims)
    agent = stat_of(agent_call, "claude")
    other = subprocess.Popen(["sleep", "30"])
    try:
        assert gate.refuse_process(agent) and not gate.refuse_process(stat_of(other, "sleep")), "only agent calls"
        gate.hold("freeze", [agent])
        assert shims.hold_flag.exists() and not shims.refuse_flag.exists()
        assert not gate.refuse_process(agent), "running at the hold: its own to finish"
        assert gate.cut_short(agent), "frozen under it: never a trial"
        gate.hold("stop", [])
        assert shims.refuse_flag.exists() and gate.holding == "stop"
        assert gate.allowed == {(agent.pid, agent.create_time)}, "a second hold keeps the first one's members"
        gate.release()
        assert not shims.refuse_flag.exists() and not shims.hold_flag.exists() and gate.allowed == frozenset()
        assert gate.released_at >= time.time() - 5
        assert gate.refuse_process(agent), "let go: no longer one of the hold's own"
    finally:
        other.kill()
        other.wait()


def test_a_call_begun_during_a_hold_is_killed_and_counts_as_refused(tmp_path: Path,
                                                                   agent_call: subprocess.Popen[bytes]) -> None:
    gate = CallGate(IterationTracker(["claude"], None), Identities(["claude"]), install_shims(tmp_path / "s", ["claude"]))
    agent = stat_of(agent_call, "claude")
    gate.refuse_begun(agent, "claude")
    assert agent_call.poll() is None and gate.refused == 0, "no hold: it runs"
    gate.hold("stop", [])
    assert gate.cut_short(agent)
    gate.refuse_begun(agent, "claude")
    assert agent_call.wait(timeout=10) == -9 and gate.refused == 1
    gate.refused_by_shim("claude", 4242)
    assert gate.refused == 2
    gate.hold("stop", [])
    assert gate.refused == 2, "counted since the first hold"


def test_a_pending_mark_goes_when_its_call_is_judged_or_when_no_call_awaits_it(tmp_path: Path) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    gate = CallGate(IterationTracker(["claude"], None), Identities(["claude"]), shims)
    for mark in (101, 102, 103):
        (shims.pending / str(mark)).touch()
    gate.awaiting(7, 101)
    gate.awaiting(8, None)  # a sampled call: no mark
    gate.no_verdict(102)  # `--version`: nothing to wait for
    assert sorted(p.name for p in shims.pending.iterdir()) == ["101", "103"]
    gate.sweep(time.time() + 60)
    assert sorted(p.name for p in shims.pending.iterdir()) == ["101"], "103 was lost; 101 is awaited"
    gate.judged(8)
    gate.judged(7)
    assert list(shims.pending.iterdir()) == []


def test_a_call_over_before_its_notice_was_read_owns_what_lies_after_the_last_calls_end() -> None:
    now = {"stdout": 0}
    marks = CallMarks(lambda: dict(now))
    first = RunningCall("a", None, None, "")
    now["stdout"] = 10
    marks.announced(first, {"stdout": 10})
    now["stdout"] = 50
    marks.exited(first)
    assert (first.start_marks, first.floor_marks, first.end_marks) == ({"stdout": 10}, {"stdout": 0}, {"stdout": 50})
    quick = RunningCall("b", None, None, "")
    at_notice = {"stdout": 80}  # the watcher's marks, taken first: the agent had not printed yet
    now["stdout"] = 204  # then it printed its reply and exited, and was reaped before we looked
    marks.gone(quick)
    marks.announced(quick, at_notice)
    assert (quick.floor_marks, quick.start_marks, quick.end_marks) == ({"stdout": 50}, {"stdout": 204}, {"stdout": 204}), \
        "its end is read once it is known to be over: what lies past the last call's end is its own"
    assert marks.exit_of(quick)[0] is True
    seen_exit = RunningCall("b2", None, None, "")
    now["stdout"] = 230
    marks.exited(seen_exit)  # the exits thread saw it end before its notice was read
    now["stdout"] = 240
    marks.announced(seen_exit, {"stdout": 210})
    assert (seen_exit.floor_marks, seen_exit.end_marks) == ({"stdout": 204}, {"stdout": 230})
    later = RunningCall("c", None, None, "")
    marks.announced(later, {"stdout": 250})
    assert later.floor_marks == {"stdout": 230}, "its floor: where the call before it ended"
    tracker = IterationTracker(["claude"], None)
    call = tracker.start(0.0, 1.0, os.getpid(), None, "claude", ("-p",), start_marks=later.start_marks)
    marks.attach(later, call)
    now["stdout"] = 120
    marks.exited(later)
    assert call.end_marks == {"stdout": 120} and call.ended_wall is not None, "routing sees the end at once"


def _chunk(offset: int, nbytes: int, read_at: float) -> OutputResult:
    return OutputResult("stdout", nbytes, 0, read_at, "x" * (nbytes - 1), (), offset=offset)


def test_the_first_call_over_before_its_notice_owns_its_words_however_late_they_are_read() -> None:
    """A loaded machine: the first call printed and exited before its notice was read, and the pipe was read
    long after its exit. Its words lie past the stream's start and were read after its announcement: its own.
    The loop's words before it, read before the announcement, stay the loop's."""
    now = {"stdout": 30}
    marks = CallMarks(lambda: dict(now))
    tracker = IterationTracker(["claude"], None)
    loops_words = _chunk(0, 30, read_at=100.0)
    tracker.add_output(loops_words, 100.0)
    first = RunningCall("a", None, None, "")
    now["stdout"] = 152  # it printed its reply and exited, and was reaped before anyone looked
    marks.gone(first)
    marks.announced(first, {"stdout": 30})
    call = tracker.start(0.0, 100.5, None, None, "claude", ("-p",), announced_at=100.5,
                         start_marks=first.start_marks, floor_marks=first.floor_marks)
    marks.attach(first, call)
    tracker.finish(first.exited_at)
    reply = _chunk(30, 122, read_at=(first.exited_at or 0) + 2.0)  # read two seconds after its exit
    tracker.add_output(reply, reply.read_at)
    assert call.output_bytes == 122, "the reply is the call's, by its place in the stream"
    assert call.floor_marks == {"stdout": 0} and call.start_marks == call.end_marks == {"stdout": 152}


def test_the_parts_never_reach_back_up_into_the_watcher_or_the_supervisor() -> None:
    """The tree actions hold the gate, the watcher uses the gate: no cycle through the supervisor."""
    import ast

    import ralph_supervisor

    root = Path(ralph_supervisor.__file__).parent
    parts = ["tree_actions.py", *(f"evidence/{n}.py" for n in ("call_gate", "call_identity", "call_sampler",
                                                               "call_exits", "call_reports", "notices", "shims"))]
    for part in parts:
        tree = ast.parse((root / part).read_text())
        at_run_time = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        names = {node.module for node in at_run_time if isinstance(node, ast.ImportFrom)}
        assert not names & {"ralph_supervisor.supervisor", "ralph_supervisor.evidence.calls"}, part

"""Per-call evidence without a supervisor: workspace segments (one per call, one per gap) on real files, and
output routed by when it was read against each call's announced start and end."""

from __future__ import annotations

import threading
from pathlib import Path

from ralph_supervisor.evidence.iterations import SETTLE_SECONDS, IterationTracker, OutputResult
from ralph_supervisor.evidence.workspace import Workspace, WorkspaceDelta


def started(root: Path, **kwargs: object) -> Workspace:
    ws = Workspace(root, state_dir=root / ".ralph-supervise", poll_interval=0.05, **kwargs)  # type: ignore[arg-type]
    ws.start()
    return ws


def test_a_call_that_starts_before_the_last_one_ended_was_processed_still_gets_its_own_files(tmp_path: Path) -> None:
    gaps: list[WorkspaceDelta] = []
    ws = started(tmp_path)
    ws.on_gap = gaps.append
    try:
        ws.begin_iteration("a")
        (tmp_path / "a.txt").write_text("a")
        ws.begin_iteration("b")  # b starts; a's end is not processed yet
        (tmp_path / "b.txt").write_text("b")
        (tmp_path / "a.txt").write_text("a, changed by b")
        assert ws.end_iteration("a").paths == ("a.txt",), "a ends where b began: b's writes are b's"
        ws.mark_call_end("b")
        (tmp_path / "between.txt").write_text("the loop's own")
        late = ws.end_iteration("b")
        assert late.paths == ("a.txt", "b.txt")
        ws.begin_iteration("c")
        assert [g.paths for g in gaps] == [("between.txt",)], "the loop's change is logged as a gap, no call's"
        assert ws.end_iteration("c").files_changed == 0
        assert ws.end_iteration("never opened").files_changed == 0
    finally:
        ws.stop()


def test_a_notice_opens_its_call_in_the_event_queue_before_the_agents_first_write(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    seen = threading.Event()
    ws = started(tmp_path, ignore=["calls/"])

    def on_notice(name: str) -> str | None:
        seen.set()
        return name

    try:
        assert ws.watch_calls(calls, on_notice)
        (calls / "123").write_text("notice")  # the shim's notice, then at once the agent's first write
        (tmp_path / "first.txt").write_text("first millisecond")
        assert ws.end_iteration("123").paths == ("first.txt",)
        assert seen.is_set()
    finally:
        ws.stop()


def result(read_at: float, text: str) -> OutputResult:
    return OutputResult("stdout", len(text) + 1, 0, read_at, text, ())


def test_output_goes_to_the_call_running_when_it_was_read_whatever_the_tracker_knew_then() -> None:
    tracker = IterationTracker(["claude"], None)
    first = tracker.start(0.0, 10.0, 101, None, "claude", (), announced_at=10.0)
    tracker.add_output(result(10.5, "one"), 10.5)
    tracker.finish(11.0)
    tracker.add_output(result(11.05, "one, late"), 11.05)  # a tee's last line after the exit
    tracker.add_output(result(12.2, "two, early"), 12.2)  # read before the supervisor saw call two
    second = tracker.start(0.0, 12.0, 102, None, "claude", (), announced_at=12.0)
    tracker.claim_late_output(first)
    assert first.output_text() == "one\none, late"
    assert second.output_text() == "two, early"
    tracker.add_output(result(11.0 + SETTLE_SECONDS + 0.5, "the loop's own"), 20.0)
    tracker.add_output(result(12.5, "two"), 20.0)
    assert second.output_text() == "two, early\ntwo"
    assert "the loop's own" not in first.output_text()



def at(offset: int, read_at: float, text: str) -> OutputResult:
    return OutputResult("stdout", len(text) + 1, 0, read_at, text, (), offset=offset)


def test_a_quick_agents_words_before_its_notice_was_read_are_still_its_own() -> None:
    """On a busy machine the notice is read after a quick agent printed: the start mark lies past its words.
    What lies after the last call's end and was read after the announcement is the call's; what was read
    before the announcement is the loop's."""
    tracker = IterationTracker(["claude"], None)
    first = tracker.start(0.0, 10.0, 101, None, "claude", (), announced_at=10.0, start_marks={"stdout": 0})
    tracker.add_output(at(0, 10.2, "one"), 10.2)
    tracker.finish(10.5)
    first.end_marks = {"stdout": 4}
    tracker.add_output(at(4, 11.0, "the loop's, before the call"), 11.0)
    tracker.add_output(at(32, 12.1, "two, printed at once"), 12.1)  # read before its notice was
    second = tracker.start(0.0, 12.0, 102, None, "claude", (), announced_at=12.0,
                           start_marks={"stdout": 53}, floor_marks={"stdout": 4})
    tracker.add_output(at(53, 12.3, "two, later"), 12.3)
    assert second.output_text() == "two, printed at once\ntwo, later"
    assert first.output_text() == "one"
    assert second.owns(at(2, 12.4, "before the floor")) is False
    assert second.owns(at(10, 11.9, "read before the announcement")) is False
    assert second.owns(at(10, 12.4, "after the floor, read after it")) is True

def test_the_wait_for_a_call_counts_from_the_loops_start_or_the_last_thaw_never_across_a_freeze() -> None:
    import time

    from ralph_supervisor.evidence.calls import CallHooks, CallWatcher

    hooks = CallHooks(started=lambda call, now: None, build=lambda *a, **k: None, report=None,  # type: ignore[arg-type]
                      settle_output=None, marks=dict)  # type: ignore[arg-type]
    calls = CallWatcher(IterationTracker(["claude"], None), None, None, ["claude"], hooks)  # type: ignore[arg-type]
    calls.child_started(100.0)
    assert calls.waiting_since() == 100.0
    calls.gate.hold("freeze", [])  # an hour-long limit wait, say
    calls.gate.release()
    assert calls.waiting_since() >= time.time() - 5, "a thawed loop gets the full --stall to reach its agent"
    calls.tracker.start(0.0, 200.0)
    assert calls.waiting_since() is None, "while a call runs, the stall is the call's silence"


def test_the_first_quick_calls_words_before_its_notice_was_read_are_its_own() -> None:
    """The first call has no call before it: its floor is the stream's start, so a reply printed before a
    busy machine read its notice is still its own (its dollars counted), and the loop's banner read before
    the announcement is not."""
    from ralph_supervisor.evidence.call_exits import floor_marks

    floor = floor_marks(None, {"stdout": 40})
    assert floor == {"stdout": 0}
    assert floor_marks({"stdout": 7}, {"stdout": 40}) == {"stdout": 7}
    tracker = IterationTracker(["claude"], None)
    tracker.add_output(at(0, 9.5, "the loop's banner"), 9.5)
    tracker.add_output(at(18, 10.1, '{"type":"result","total_cost_usd":0.01}'), 10.1)  # before the notice was read
    first = tracker.start(0.0, 10.0, 101, None, "claude", (), announced_at=10.0,
                          start_marks={"stdout": 40}, floor_marks=floor)
    assert first.output_text() == '{"type":"result","total_cost_usd":0.01}'


def test_each_chunk_is_told_once_with_the_call_it_went_to_even_when_its_call_was_known_later() -> None:
    """The outage reader hears the agent's own words with their call's number: a retry report read before its
    call's notice was processed counts for that call (not for the call before), once; the loop's own words,
    once they are too old to be any call's, for the last call."""
    told: list[tuple[str, int]] = []
    tracker = IterationTracker(["claude"], None)
    tracker.owned = lambda r, number: told.append((r.text or "", number))
    tracker.add_output(at(0, 9.5, "the loop's banner"), 9.5)
    tracker.add_output(at(18, 10.1, "api_retry 1/10"), 10.1)  # before the notice was read
    assert told == []  # nobody knows yet whose these are
    first = tracker.start(0.0, 10.0, 101, None, "claude", (), announced_at=10.0,
                          start_marks={"stdout": 18}, floor_marks={"stdout": 0})
    assert told == [("api_retry 1/10", 1)]
    tracker.add_output(at(40, 10.5, "api_retry 2/10"), 10.5)
    tracker.finish(11.0)
    first.end_marks = {"stdout": 60}
    tracker.add_output(at(60, 30.0, "the loop's own, later"), 30.0)  # drops the banner: too old to be claimed
    assert told == [("api_retry 1/10", 1), ("api_retry 2/10", 1), ("the loop's banner", 1)]

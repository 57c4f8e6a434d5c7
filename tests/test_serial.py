"""The serial worker the snapshot keeper and the report writer share: one job at a time, in order, a waiting job of
a merging kind replaced by a newer one, a fault in a job logged and survived, and a close that is bounded."""

from __future__ import annotations

import threading
import time

from structlog.testing import capture_logs

from ralph_supervisor.serial import Job, SerialWorker


def gate() -> tuple[threading.Event, threading.Event, Job]:
    """A job that says it began and then waits to be let go: (began, let_go, job)."""
    began, let_go = threading.Event(), threading.Event()

    def run() -> None:
        began.set()
        assert let_go.wait(10)

    return began, let_go, Job("gate", run)


def test_jobs_run_one_at_a_time_in_the_order_given_on_one_thread_of_its_own() -> None:
    worker = SerialWorker("test-serial")
    seen: list[tuple[int, str]] = []
    running = threading.Semaphore(1)

    def job(n: int) -> Job:
        def run() -> None:
            assert running.acquire(blocking=False), "two jobs at once"
            seen.append((n, threading.current_thread().name))
            time.sleep(0.001)
            running.release()
        return Job("work", run, about=n)

    for n in range(50):
        assert worker.submit(job(n)) is None, "a kind that does not merge is never replaced"
    assert worker.idle(10)
    assert [n for n, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-serial"}
    assert worker.close(5)


def test_a_waiting_job_of_a_merging_kind_is_replaced_by_the_newer_one_and_others_are_not() -> None:
    worker = SerialWorker("test-serial", merge={"snapshot"})
    ran: list[object] = []
    began, let_go, blocker = gate()
    worker.submit(blocker)
    assert began.wait(10)
    assert worker.running == "gate"
    assert worker.submit(Job("snapshot", lambda: ran.append(1), about=1)) is None
    replaced = worker.submit(Job("snapshot", lambda: ran.append(2), about=2))
    assert replaced is not None and replaced.about == 1, "the one not yet begun gives way"
    worker.submit(Job("mark", lambda: ran.append("mark")))
    assert worker.submit(Job("snapshot", lambda: ran.append(3), about=3)) is None, "not last in the queue: kept"
    assert worker.waiting() == ("snapshot", "mark", "snapshot")
    let_go.set()
    assert worker.idle(10)
    assert ran == [2, "mark", 3]
    assert worker.running is None and worker.waiting() == ()
    worker.close(5)


def test_fold_makes_the_job_that_waits_from_the_one_it_replaces_and_the_newer_one() -> None:
    """The verify's way: the newer job carries what the replaced one would have done (the iterations it covers)."""
    ran: list[object] = []

    def job(covers: tuple[int, ...]) -> Job:
        return Job("verify", lambda: ran.append(covers), about=covers)

    worker = SerialWorker("test-serial", merge={"verify"},
                          fold=lambda waiting, newer: job(tuple(sorted({*waiting.about, *newer.about}))))
    began, let_go, blocker = gate()
    assert not worker.busy
    worker.submit(blocker)
    assert began.wait(10) and worker.busy
    worker.submit(job((1,)))
    assert worker.submit(job((2, 3))).about == (1,)  # type: ignore[union-attr]
    assert worker.submit(job((4,))).about == (1, 2, 3), "the folded job is the one that waits"  # type: ignore[union-attr]
    let_go.set()
    assert worker.idle(10) and not worker.busy
    assert ran == [(1, 2, 3, 4)]
    worker.close(5)


def test_a_job_that_raises_is_handed_to_on_error_and_the_next_one_runs() -> None:
    failures: list[tuple[str, str]] = []
    worker = SerialWorker("test-serial", on_error=lambda job, exc: failures.append((job.kind, repr(exc))))
    after: list[int] = []
    worker.submit(Job("bad", lambda: 1 / 0))
    worker.submit(Job("good", lambda: after.append(1)))
    assert worker.idle(10)
    assert failures == [("bad", "ZeroDivisionError('division by zero')")] and after == [1]
    # By default it is logged; a fault in telling of it is logged too, and the worker goes on.
    with capture_logs() as logs:
        plain = SerialWorker("test-serial")
        plain.submit(Job("bad", lambda: 1 / 0))
        broken = SerialWorker("test-serial", on_error=lambda job, exc: 1 / 0)
        broken.submit(Job("bad", lambda: [][0]))
        broken.submit(Job("good", lambda: after.append(2)))
        assert plain.idle(10) and broken.idle(10)
    assert [e["kind"] for e in logs if e["event"] == "serial_job_failed"] == ["bad", "bad"]
    assert after == [1, 2]
    assert plain.close(5) and broken.close(5) and worker.close(5)


def test_close_runs_or_drops_the_waiting_jobs_and_waits_no_longer_than_its_timeout() -> None:
    ran: list[str] = []
    draining = SerialWorker("test-serial")
    began, let_go, blocker = gate()
    draining.submit(blocker)
    assert began.wait(10)
    draining.submit(Job("last", lambda: ran.append("last")))
    let_go.set()
    assert draining.close(10, drain=True) and ran == ["last"], "drained: the waiting job ran before the end"
    assert draining.submit(Job("late", lambda: ran.append("late"))) is None
    assert draining.idle(0) and ran == ["last"], "nothing is taken once closing"

    dropping = SerialWorker("test-serial")
    began, let_go, blocker = gate()
    dropping.submit(blocker)
    assert began.wait(10)
    dropping.submit(Job("dropped", lambda: ran.append("dropped")))
    t0 = time.monotonic()
    assert dropping.close(0.2, drain=False) is False, "the running job outlives a short close"
    assert time.monotonic() - t0 < 5
    let_go.set()
    assert dropping.close(10) is True
    assert ran == ["last"], "the dropped job never ran"
    assert SerialWorker("never-started").close(0), "a worker given nothing has no thread to wait for"

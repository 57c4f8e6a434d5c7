"""One thread that runs jobs one at a time, in order, and folds a job that waits behind one of its kind into one.

The snapshot keeper, the report writer and the verify hand slow work (a snapshot, a render of `report.html`, a run
of the project's tests) to a thread of their own, so the event loop never waits for it; and all only care about
the newest state: a snapshot reads the files as they are when it begins, a render the state folder, a verify the
newest snapshot. So a job of a merging kind that is still waiting when another of its kind comes is replaced by
the newer one, which may take in what the replaced one carried (`fold`: the verify's newer job covers the
iterations of the one it replaced, and says it skipped it). Each user has its own worker (a render never waits
behind a snapshot); this is the one piece of code they share.

Threads: the worker's queue, the job it runs and whether it is closing are behind the worker's one lock, never
held while a job runs (`fold`, pure and quick, makes the newer job under it, so no other job comes between). A
job's exception is handed to `on_error` (by default logged) and the next job runs.

    worker = SerialWorker("ralph-report", merge={"render"})
    worker.submit(Job("render", write_report))
    worker.idle(10.0)                 # tests and benchmarks: every job done
    worker.close(10.0, drain=False)   # the waiting jobs dropped, the running one given 10 s
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Job:
    """One piece of work: `run` is called on the worker's thread. `about` says what it is for (an iteration,
    say), so a user told of a merge can name the job that was replaced."""

    kind: str
    run: Callable[[], None]
    about: Any = None


def _log_error(job: Job, exc: BaseException) -> None:
    log.error("serial_job_failed", kind=job.kind, error=repr(exc)[:300])


def _newer(_waiting: Job, newer: Job) -> Job:
    return newer


class SerialWorker:
    """Runs submitted jobs one at a time, in the order given, on one daemon thread named `name` (started at the
    first job). A job of a kind in `merge` replaces one of the same kind that waits last in the queue: what waits
    then is `fold(replaced, job)` (by default `job` itself)."""

    def __init__(self, name: str, *, merge: Collection[str] = (),
                 on_error: Callable[[Job, BaseException], None] = _log_error,
                 fold: Callable[[Job, Job], Job] = _newer) -> None:
        self.name = name
        self.merge = frozenset(merge)
        self.on_error = on_error
        self.fold = fold
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> Job | None:
        """Queue `job` (nothing happens once the worker is closing). Returns the waiting job it replaced, if any."""
        with self._changed:
            if self._closing:
                return None
            replaced = None
            if job.kind in self.merge and self._waiting and self._waiting[-1].kind == job.kind:
                replaced = self._waiting.pop()  # not yet begun: the newer one sees what it would have seen
                job = self.fold(replaced, job)
            self._waiting.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._changed.notify_all()
            return replaced

    @property
    def running(self) -> str | None:
        """The kind of the job running now, or None."""
        with self._lock:
            return None if self._running is None else self._running.kind

    @property
    def busy(self) -> bool:
        """A job waits or runs."""
        with self._lock:
            return bool(self._waiting) or self._running is not None

    def waiting(self) -> tuple[str, ...]:
        """The kinds of the jobs not yet begun, oldest first."""
        with self._lock:
            return tuple(job.kind for job in self._waiting)

    def idle(self, timeout: float) -> bool:
        """Wait until no job waits or runs; False when `timeout` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting and self._running is None, timeout)

    def close(self, timeout: float, *, drain: bool = True) -> bool:
        """Accept no more jobs; run those waiting first (`drain`) or drop them. Waits up to `timeout` seconds for
        the thread to end: True when it did (or never started), False when a job still runs."""
        with self._changed:
            self._closing = True
            if not drain:
                self._waiting.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closing:
                    self._changed.wait()
                if not self._waiting:
                    return
                job = self._running = self._waiting.popleft()
            try:
                job.run()
            except Exception as exc:  # noqa: BLE001 - a fault in one job never stops the ones after it
                try:
                    self.on_error(job, exc)
                except Exception as again:  # noqa: BLE001 - nor a fault in telling of it
                    _log_error(job, again)
            finally:
                with self._changed:
                    self._running = None
                    self._changed.notify_all()


__all__ = ["Job", "SerialWorker"]

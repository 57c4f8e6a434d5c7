"""The polling source on its own: real files, its real thread. A scan asked for returns once every change
made before it is reported, whichever thread asks and however many ask at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.evidence.polling_source import PollingSource
from ralph_supervisor.evidence.scope import Scope


class Reports:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []
        self.threads: set[str] = set()

    def found(self, path: str, created: bool) -> None:
        with self.lock:
            self.seen.append(("created" if created else "written", path))
            self.threads.add(threading.current_thread().name)

    def gone(self, path: str) -> None:
        with self.lock:
            self.seen.append(("gone", path))
            self.threads.add(threading.current_thread().name)

    def take(self) -> list[tuple[str, str]]:
        with self.lock:
            seen, self.seen = self.seen, []
            return seen


def polling(root: Path, reports: Reports, interval: float = 3600) -> PollingSource:
    scope = Scope(root)
    scope.load(root / ".ralph-supervise", ())
    return PollingSource(scope, found=reports.found, gone=reports.gone, interval=interval)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "old.txt").write_text("old")
    return tmp_path / "ws"


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def source(root: Path, reports: Reports) -> Iterator[PollingSource]:
    scanner = polling(root, reports)
    scanner.start()
    yield scanner
    scanner.stop()


def test_the_baseline_reports_nothing_and_a_scan_reports_what_changed_since_on_the_poll_thread(
    source: PollingSource, root: Path, reports: Reports
) -> None:
    assert reports.take() == []
    (root / "src" / "new.py").write_text("new")
    (root / "old.txt").write_text("old, longer")
    (root / "node_modules" / "x").mkdir(parents=True)
    (root / "node_modules" / "x" / "i.js").write_text("ignored")
    source.scan()
    assert sorted(reports.take()) == [("created", "src/new.py"), ("written", "old.txt")]
    (root / "old.txt").unlink()
    source.scan()
    assert reports.take() == [("gone", "old.txt")]
    assert reports.threads == {"workspace-poll"}


def test_after_a_fall_back_files_in_folders_inotify_did_not_watch_count_as_created(root: Path, reports: Reports) -> None:
    (root / "unwatched").mkdir()
    (root / "unwatched" / "made.txt").write_text("appeared after its folder's watch failed")
    scanner = polling(root, reports)
    scanner.start(watched={"", "src"})
    try:
        assert reports.take() == [("created", "unwatched/made.txt")]
    finally:
        scanner.stop()


def test_scans_asked_from_many_threads_at_once_each_see_their_own_change(
    source: PollingSource, root: Path, reports: Reports
) -> None:
    errors: list[str] = []

    def caller(n: int) -> None:
        for i in range(10):
            name = f"src/t{n}_{i}.txt"
            (root / name).write_text(name)
            source.scan()
            with reports.lock:
                if ("created", name) not in reports.seen:
                    errors.append(f"{name} not reported when its scan returned")

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len([kind for kind, _ in reports.take() if kind == "created"]) == 40  # each reported exactly once


def test_a_scan_before_the_start_or_after_the_stop_returns_at_once_and_the_thread_ends(root: Path, reports: Reports) -> None:
    scanner = polling(root, reports, interval=0.01)
    (root / "early.txt").write_text("before the baseline")
    scanner.scan()  # a boundary during a fall back, before the baseline: nothing to compare with yet
    assert reports.take() == []
    scanner.start()
    scanner.stop()
    scanner.stop()
    scanner.scan()
    assert [t.name for t in threading.enumerate() if t.name == "workspace-poll"] == []
    assert reports.take() == []


def test_a_source_stopped_before_it_starts_starts_no_thread(root: Path, reports: Reports) -> None:
    scanner = polling(root, reports)
    scanner.stop()  # a stop that raced a fall back
    scanner.start()
    assert [t.name for t in threading.enumerate() if t.name == "workspace-poll"] == []

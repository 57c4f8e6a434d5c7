"""The inotify source on its own: real inotify, real files. Its events come in queue order, a barrier is
reached after every event queued before it, a closed source says so instead of waiting, and a kernel
queue overflow leaves it watching."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.evidence.inotify_source import InotifyHooks, InotifySource
from ralph_supervisor.evidence.scope import Scope
from ralph_supervisor.evidence.workspace import Workspace
from tests.helpers import wait_for


class Heard:
    """What the source told, in order, from the dispatcher thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said: list[tuple[str, object]] = []
        self.failures: list[BaseException] = []

    def hooks(self) -> InotifyHooks:
        def note(kind: str):
            def told(*args: object) -> None:
                with self.lock:
                    self.said.append((kind, args[0] if args else None))
            return told

        return InotifyHooks(found=lambda path, created: note("created" if created else "written")(path),
                            modified=note("modified"), gone=note("gone"), folder_gone=note("folder gone"),
                            notice=note("notice"), events_lost=note("lost"), failed=self.failures.append)

    def kinds(self, path: str) -> list[str]:
        with self.lock:
            return [kind for kind, said in self.said if said == path]


@pytest.fixture
def source(tmp_path: Path) -> Iterator[tuple[InotifySource, Path, Heard]]:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "node_modules" / "pkg").mkdir(parents=True)
    heard = Heard()
    scope = Scope(root)
    scope.load(tmp_path / "state", ())
    watched = InotifySource(scope, heard.hooks())
    watched.start()
    try:
        yield watched, root, heard
    finally:
        watched.close()


def test_events_come_through_the_hooks_for_folders_that_count_only(source) -> None:
    watched, root, heard = source
    assert watched.watched == 2  # the root and src; never node_modules
    (root / "src" / "a.py").write_text("x")
    (root / "node_modules" / "pkg" / "index.js").write_text("x")
    (root / "src" / "a.py").unlink()
    (root / "src" / "sub").mkdir()
    (root / "src" / "sub" / "deep.txt").write_text("y")
    assert watched.sync()
    assert heard.kinds("src/a.py")[0] == "created" and heard.kinds("src/a.py")[-1] == "gone"
    assert heard.kinds("node_modules/pkg/index.js") == []
    assert "created" in heard.kinds("src/sub/deep.txt") or "written" in heard.kinds("src/sub/deep.txt")
    assert watched.watched == 3


def test_a_barrier_runs_its_then_after_every_event_queued_before_it_and_before_any_later_one(source) -> None:
    watched, root, heard = source
    order: list[str] = []
    (root / "before.txt").write_text("b")
    assert watched.barrier(lambda: order.append(f"barrier after {len(heard.said)} events")) is not None
    (root / "after.txt").write_text("a")
    assert watched.sync()
    before = len([k for k, p in heard.said if p == "before.txt"])
    assert order == [f"barrier after {before} events"]
    assert heard.kinds("after.txt")


def test_barriers_rename_one_file_and_make_it_anew_when_it_is_gone(source) -> None:
    """A barrier renames the folder's one file (no inode made or freed); when a cleaner removed it, the next
    barrier makes it again and is still reached in order."""
    watched, root, heard = source
    reached: list[int] = []
    assert watched.sync(lambda: reached.append(1))
    folder = watched._barrier_dir
    assert folder is not None
    (first,) = folder.iterdir()
    inode = first.stat().st_ino
    assert watched.sync(lambda: reached.append(2)) and watched.sync(lambda: reached.append(3))
    (now,) = folder.iterdir()
    assert (now.name, now.stat().st_ino) == ("b3", inode)
    now.unlink()
    assert watched.sync(lambda: reached.append(4)) and watched.sync(lambda: reached.append(5))
    assert [p.name for p in folder.iterdir()] == ["b5"]
    assert reached == [1, 2, 3, 4, 5]


def test_a_closed_source_says_so_and_runs_nothing(source) -> None:
    watched, root, heard = source
    ran: list[str] = []
    assert watched.close() == frozenset({"", "src"})
    assert watched.close() is None  # the second close: nothing was running
    assert watched.barrier(lambda: ran.append("barrier")) is None
    assert watched.sync(lambda: ran.append("sync")) is False
    assert watched.watch_calls(root / "src") is False and not watched.watching_calls
    assert (watched.watched, ran) == (0, [])


def test_a_notice_is_handled_before_the_agents_first_write(source) -> None:
    watched, root, heard = source
    calls = root.parent / "calls"
    calls.mkdir()
    assert watched.watch_calls(calls) and watched.watching_calls
    (calls / "4242").write_text("pid 4242")
    (root / "src" / "first.txt").write_text("the agent's first write")
    assert watched.sync()
    with heard.lock:
        kinds = [kind for kind, _ in heard.said]
    assert kinds.index("notice") < next(i for i, (k, p) in enumerate(heard.said) if p == "src/first.txt")


def test_after_the_kernels_queue_overflowed_the_iteration_says_so_and_the_watcher_keeps_watching(tmp_path: Path) -> None:
    """watchdog calls `on_queue_overflow` then `on_events_lost` on every callback object: a missing one
    killed its dispatcher thread, and with it every later event, without a word."""
    root = tmp_path / "ws"
    root.mkdir()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 1_000_000:
        pytest.skip(f"max_queued_events is {limit}: too many writes to overflow it")
    ws = Workspace(root, state_dir=tmp_path / "state")
    ws.start()
    files = [os.open(root / name, os.O_WRONLY | os.O_CREAT, 0o644) for name in ("a.log", "b.log")]
    try:
        ws.begin_iteration("flood")
        reader = ws._source._fd  # type: ignore[union-attr]  # watchdog's InotifyFD
        with reader._lock:  # type: ignore[attr-defined]  # its reader waits for this before each read: the queue fills
            for n in range(2 * limit):  # one modify event each (alternating files: the kernel merges repeats); the
                os.write(files[n % 2], b"x")  # reader may take one buffer (a few thousand) before it waits
            (root / "later").mkdir()  # its create event is lost: the re-walk after the overflow watches it
        assert wait_for(lambda: ws.watched_directories == 2)  # the overflow was handled: `later` is watched
        assert ws.end_iteration("flood").events_lost
        ws.begin_iteration("after")
        (root / "later" / "next.txt").write_text("seen")
        assert ws.end_iteration("after").paths == ("later/next.txt",)
        assert ws.mode == "inotify"
    finally:
        for fd in files:
            os.close(fd)
        ws.stop()

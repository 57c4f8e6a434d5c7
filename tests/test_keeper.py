"""The snapshot keeper in-process: when snapshots are taken, the destructive verdict on an iteration's net
effect (real git commands under the real workspace watcher), and every fault (git missing, a full disk, a
store that cannot be written, a broken store) costing one warning, never supervision."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from ralph_supervisor.evidence.file_state import ABSENT
from ralph_supervisor.evidence.workspace import Change, Workspace, WorkspaceDelta
from ralph_supervisor.snapshots.keeper import SnapshotKeeper
from ralph_supervisor.metrics import Metrics
from ralph_supervisor.settings import load_settings
from ralph_supervisor.snapshots.restore import select, write_files
from ralph_supervisor.snapshots.store import SnapshotStore
from tests.helpers import held, state_dir_of


def keeper_for(ws: Path, state_dir: Path | None = None, **flags: object) -> SnapshotKeeper:
    settings = load_settings(workspace=str(ws), state_dir=str(state_dir) if state_dir else None, flags=flags,
                             env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]})
    return SnapshotKeeper(settings)


def warnings(logs: list[dict], event: str) -> list[dict]:
    return [e for e in logs if e["event"] == event and e["log_level"] == "warning"]


def keeper_after_one_iteration(ws: Path, **flags: object) -> SnapshotKeeper:
    """Ten files (a.txt and f0..f8.py), a keeper that opens on more than 30 % (or `flags`), iteration 1 snapshotted."""
    for i in range(9):
        (ws / f"f{i}.py").write_text(f"{i}\n")
    keeper = keeper_for(ws, **(flags or {"destructive_files": 5}))
    keeper.start(0)
    keeper.iteration_ended(1)
    assert keeper.idle(30)
    return keeper


def nine_deleted() -> WorkspaceDelta:
    """What the watcher's segment says of a call that deleted f0..f8.py."""
    start = {f"f{i}.py": held(b"%d\n" % i) for i in range(9)}
    return WorkspaceDelta(9, (), 0, start=start, end={path: ABSENT for path in start})


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository of 20 committed files and an ignored .env."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".env\n")
    for i in range(19):
        (root / "src" / f"t{i}.py").write_text(f"committed {i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "start")
    (root / ".env").write_text("TOKEN=x\n")
    return root


FIRST_CALL = "for i in 0 1 2 3 4 5 6 7; do echo \"the agent's work on $i\" >> src/t$i.py; echo \"new work $i\" > src/u$i.py; done"
"""The agent's work in iteration 1, uncommitted: t0..t7 edited, u0..u7 new (untracked)."""


@pytest.fixture
def supervised(project: Path) -> Iterator[tuple[SnapshotKeeper, Callable[[int, str], str | None]]]:
    """A keeper (more than 6 files destroyed trips) and the real watcher over `project`, iteration 1 (the
    agent's work) ended; `call(n, shell)` runs one agent call as the supervisor sees it and answers the
    keeper's verdict."""
    keeper = keeper_for(project, destructive_files=6, destructive_share=0)
    # Each change goes to the keeper as the supervisor routes it: what a snapshot looks at. Without it the
    # snapshot of iteration 1 held the agent's work only when the start snapshot's full look came after it.
    watcher = Workspace(project, state_dir=state_dir_of(project), poll_interval=0.05, on_change=keeper.saw)
    watcher.start()
    assert watcher.wait_primed(30)
    keeper.start(0)

    def call(number: int, shell: str) -> str | None:
        keeper.iteration_started(number)
        watcher.begin_iteration(str(number))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@a", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@a",
                   GIT_CONFIG_GLOBAL=os.devnull)
        subprocess.run(["sh", "-ec", shell], cwd=project, check=True, env=env, capture_output=True)
        gone = keeper.repository_gone()  # the supervisor asks at every tick
        assert gone is None, "a repository gone during a call is judged at its end"
        delta = watcher.end_iteration(str(number))
        keeper.iteration_ended(number, net=delta)
        reason = keeper.verdict(number)
        assert keeper.idle(30)
        return reason

    assert call(1, FIRST_CALL) is None
    try:
        yield keeper, call
    finally:
        keeper.close(99)
        watcher.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    return root


def test_snapshots_at_start_and_at_each_iteration_end_with_metrics(ws: Path) -> None:
    keeper = keeper_for(ws)
    metrics = Metrics(str(ws))
    keeper._metrics = lambda: metrics
    keeper.start(0)
    assert keeper.idle(30)
    (ws / "b.txt").write_text("b\n")
    keeper.iteration_started(1)
    keeper.saw(Change("b.txt", 0.0, ABSENT, held(b"b\n")))
    keeper.iteration_ended(1)
    assert keeper.idle(30)
    (ws / "c.txt").write_text("c\n")
    keeper.saw(Change("c.txt", 0.0, ABSENT, held(b"c\n")))
    keeper.close(iteration=1)  # what changed since the last one is kept too
    kinds = [(i.iteration, i.kind, i.files) for i in SnapshotStore(ws, state_dir_of(ws)).list()]
    assert kinds == [(0, "start", 1), (1, "iteration", 2), (1, "exit", 3)]
    status = keeper.status()
    assert status["state"] == "on" and status["count"] == 3 and status["latest"]["kind"] == "exit"
    exposed = {s.name: s.value for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
               for s in f.samples}
    assert exposed["ralph_supervise_snapshots"] == 3
    assert exposed["ralph_supervise_snapshot_bytes"] > 0
    metrics.close()


def test_a_destructive_iteration_is_judged_when_it_ends_naming_the_snapshot_it_began_from(ws: Path) -> None:
    keeper = keeper_after_one_iteration(ws, destructive_files=0, destructive_share=30)
    keeper.iteration_started(2)
    for i in range(9):
        keeper.saw(Change(f"f{i}.py", 0.0, held(b"%d\n" % i), ABSENT))
    keeper.iteration_ended(2, net=nine_deleted())  # its end snapshot may be taken before the verdict is asked
    assert keeper.idle(30)
    reason = keeper.verdict(2)
    assert reason is not None
    assert reason.startswith("iteration 2 deleted or emptied 9 files of the 10 it started with (more than 30%)")
    assert f"the snapshot of iteration 1 holds them: `ralph-supervise restore 1 -w {ws}`" in reason
    assert "among them f0.py, f1.py, f2.py, f3.py, f4.py, …" in reason
    assert keeper.verdict(2) is None, "one verdict per iteration"
    keeper.opened("destructive")
    lines = "\n".join(keeper.restore_lines("destructive"))
    assert f"ralph-supervise restore 1 -w {ws}" in lines and "before the files were destroyed" in lines
    keeper.close(2)
    marks = [(i.iteration, i.before_trip) for i in SnapshotStore(ws, state_dir_of(ws)).list()]
    assert (1, "destructive") in marks
    # Between iterations nothing is judged, and with both thresholds at 0 nothing at all.
    keeper2 = keeper_for(ws, destructive_files=0, destructive_share=0)
    keeper2.iteration_started(1)
    keeper2.iteration_ended(1, net=nine_deleted())
    assert keeper2.verdict(1) is None and keeper2.verdict(7) is None
    keeper2.close(1)


def test_a_snapshot_the_budget_dropped_is_never_named(ws: Path) -> None:
    keeper = keeper_after_one_iteration(ws)
    keeper.iteration_started(2)
    store = SnapshotStore(ws, state_dir_of(ws))
    first = store.list()[-1]
    assert store.holds(first)
    os.unlink(store.path / "refs" / "snapshots" / f"{first.id:08d}")  # what `keep_within` does to the oldest
    assert not store.holds(first)
    keeper.iteration_ended(2, net=nine_deleted())
    reason = keeper.verdict(2)
    assert reason is not None and "restore 1" not in reason
    keeper.close(2)


@pytest.mark.parametrize("shell", [
    "git stash -u -q; sleep 0.3; git stash pop -q",                 # stash the work, run the tests, pop
    "git stash -q --all; git stash pop -q",                         # ... ignored files too
    "mv src /tmp/.away-$$; sleep 0.3; mv /tmp/.away-$$ src",        # the work moved away and back
    "for i in 8 9 10 11 12 13 14 15; do echo attempt >> src/t$i.py; done; git checkout -- src/t1[0-5].py src/t8.py "
    "src/t9.py",                                                    # its own attempt reverted
    "mkdir -p gen; for i in 1 2 3 4 5 6 7 8 9; do echo $i > gen/$i; done; rm -rf gen",  # its scratch files
    "git add -A; git commit -qm 'the work'",                        # committed: nothing lost
    "git mv src lib",                                               # renamed, content kept
])
def test_what_is_back_by_the_end_of_the_call_is_not_destruction(supervised, shell: str) -> None:
    keeper, call = supervised
    assert call(2, shell) is None


@pytest.mark.parametrize("shell, deleted, discarded", [
    ("git stash -u -q", 8, 8),
    ("git stash --all -q", 8, 8),
    ("git checkout -- .", 0, 8),
    ("git restore .", 0, 8),
    ("git reset -q --hard", 0, 8),
    ("git reset -q --hard && git clean -fdq", 8, 8),
    ("git add -A && git commit -qm work && git reset -q --hard HEAD~1", 8, 8),  # committed, then dropped
    ("git stash -u -q; sleep 0.3; git stash pop -q; git stash -u -q", 8, 8),     # back in between, not at the end
])
def test_what_the_call_leaves_discarded_or_deleted_trips_naming_the_snapshot(supervised, project: Path, shell: str,
                                                                            deleted: int, discarded: int) -> None:
    keeper, call = supervised
    reason = call(2, shell)
    assert reason is not None, shell
    if deleted:
        assert f"reverted {deleted + discarded} files" in reason and f"{discarded} back at a committed version" in reason
    else:
        assert f"reverted {discarded} files" in reason and "uncommitted changes gone" in reason
    assert f"the snapshot of iteration 1 holds them: `ralph-supervise restore 1 -w {project}`" in reason
    store = SnapshotStore(project, state_dir_of(project))
    out = project.parent / "restored"
    held_before = store.find(1)
    assert held_before is not None
    write_files(store, held_before, out, select(store, held_before, ["src/t3.py", "src/u3.py"]))
    assert (out / "src" / "t3.py").read_text() == "committed 3\nthe agent's work on 3\n"
    assert (out / "src" / "u3.py").read_text() == "new work 3\n"


def test_a_repository_deleted_in_a_call_trips_at_its_end_unless_it_came_back(supervised, project: Path) -> None:
    keeper, call = supervised
    assert call(2, "mv .git /tmp/.git-away-$$; sleep 0.3; mv /tmp/.git-away-$$ .git") is None
    reason = call(3, "rm -rf .git")
    assert reason is not None and "iteration 3 deleted the repository" in reason
    assert f"the files are in the snapshot of iteration 2: `ralph-supervise restore 2 -w {project}`" in reason
    assert call(4, "true") is None and keeper.repository_gone() is None, "said once"


def test_without_git_snapshots_are_off_with_one_warning(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with capture_logs() as logs:
        keeper = keeper_for(ws, destructive_files=1)
        keeper.start(0)
        keeper.iteration_started(1)
        start = {"a.txt": held(b"a\n"), "b.txt": held(b"b\n")}
        keeper.iteration_ended(1, net=WorkspaceDelta(2, (), 0, start=start, end={p: ABSENT for p in start}))
        reason = keeper.verdict(1)
        keeper.close(1)
    assert [e["reason"] for e in warnings(logs, "snapshots_off")] == ["git is not installed (snapshots need it)"]
    assert keeper.status()["state"] == "off"
    assert reason is not None and "no snapshot holds them (git is not installed" in reason, "the trip still works"
    assert not (state_dir_of(ws) / "snapshots").exists()


def test_a_budget_of_zero_means_no_snapshots_and_no_warning(ws: Path) -> None:
    with capture_logs() as logs:
        keeper = keeper_for(ws, snapshot_budget=0)
        keeper.start(0)
        keeper.iteration_ended(1)
        keeper.close(1)
    assert [e["log_level"] for e in logs if e["event"] == "snapshots_off"] == ["info"]
    assert keeper.status()["problem"] == "--snapshot-budget is 0"
    assert not (state_dir_of(ws) / "snapshots").exists()


def test_a_full_disk_pauses_snapshots_with_one_warning_until_there_is_room(ws: Path, tiny_disk: Path) -> None:
    (ws / "big.bin").write_bytes(os.urandom(1_500_000))  # more than the 1 MiB disk holds
    with capture_logs() as logs:
        keeper = keeper_for(ws, tiny_disk)
        keeper.start(0)
        for n in (1, 2):
            keeper.iteration_ended(n)
            assert keeper.idle(30)
        assert keeper.status()["state"] == "paused" and "No space left" in keeper.status()["problem"]
        os.unlink(ws / "big.bin")
        keeper.saw(Change("big.bin", 0.0, None, ABSENT))
        keeper.iteration_ended(3)
        assert keeper.idle(30)
        keeper.close(3)
    assert len(warnings(logs, "snapshots_paused")) == 1
    assert [e["event"] for e in logs if e["event"] == "snapshots_resumed"] == ["snapshots_resumed"]
    assert keeper.status()["state"] == "on"
    assert SnapshotStore(ws, tiny_disk).list()[-1].iteration == 3


def test_a_store_that_cannot_be_written_turns_snapshots_off(ws: Path, tiny_disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True, capture_output=True)
    with capture_logs() as logs:
        keeper = keeper_for(ws, tiny_disk)
        keeper.start(0)
        keeper.iteration_ended(1)
        keeper.close(1)
    off = warnings(logs, "snapshots_off")
    assert len(off) == 1 and "Read-only file system" in off[0]["reason"], logs
    assert keeper.status()["state"] == "off"


def test_a_broken_store_is_moved_aside_with_one_warning_and_snapshots_go_on(ws: Path) -> None:
    state = state_dir_of(ws)
    store = SnapshotStore(ws, state)
    store.take(0, "start", None, now=0.0)
    for path in (state / "snapshots" / "objects").rglob("*"):
        if path.is_file():
            path.chmod(0o644)
            path.write_bytes(b"not an object")
    with capture_logs() as logs:
        keeper = keeper_for(ws)
        keeper.start(0)
        assert keeper.idle(30)
        keeper.iteration_ended(1)
        keeper.close(1)
    corrupt = warnings(logs, "snapshot_store_corrupt")
    assert len(corrupt) == 1 and "snapshots.corrupt-" in corrupt[0]["moved_to"]
    assert [i.iteration for i in SnapshotStore(ws, state).list()] == [0, 1]
    assert keeper.status()["state"] == "on"


def test_a_short_calls_late_report_is_judged_on_its_own_net_effect(ws: Path) -> None:
    """With exact call boundaries the next call may begin before the previous one's report is in: each is
    judged on its own segment, against the snapshot it began from."""
    keeper = keeper_after_one_iteration(ws)
    keeper.iteration_started(2)
    keeper.iteration_started(3)  # call 3 began ...
    keeper.iteration_ended(2, net=WorkspaceDelta(0, (), 0))    # ... before call 2's report
    assert keeper.verdict(2) is None
    keeper.iteration_ended(3, net=nine_deleted())
    reason = keeper.verdict(3)
    assert reason is not None and reason.startswith("iteration 3 deleted or emptied 9 files")
    assert "the snapshot of iteration 1 holds them" in reason
    keeper.close(3)


def test_a_fault_in_the_verdict_is_one_warning_and_no_lost_report(ws: Path) -> None:
    keeper = keeper_after_one_iteration(ws)
    with capture_logs() as logs:
        for n in (2, 3):
            keeper.iteration_started(n)
            keeper.iteration_ended(n, net=WorkspaceDelta(1, (), 0, start={"a.txt": 5}, end={"a.txt": ABSENT}))  # type: ignore[dict-item]
            assert keeper.verdict(n) is None
    unjudged = warnings(logs, "destructive_unjudged")
    assert len(unjudged) == 1 and unjudged[0]["iteration"] == 2 and "TypeError" in unjudged[0]["error"]
    keeper.close(3)

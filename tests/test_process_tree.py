"""ProcessTree on real trees shaped like a Ralph loop's: zero survivors, pause/resume, PID identity.

Every test here runs with pytest as the child subreaper (the `subreaper` fixture, see helpers/trees.py),
so the tree is "every live descendant of this pytest process".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.trees import (  # noqa: F401 - subreaper and loop_cgroup are fixtures
    BUSY_LOOP,
    hard_tree,
    loop_cgroup,
    subreaper,
    wait_for,
    wait_for_members,
    wide_tree,
)
from ralph_supervisor.process.cgroup import LoopCgroup
from ralph_supervisor.process.frozen import held
from ralph_supervisor.process.linux import read_stat
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.spawn import spawn
from ralph_supervisor.process.tree import Member, ProcessTree, walk

GRACE = 0.5


_open_pipes: list = []


def _start(reaper: Reaper, argv: list[str], cwd: Path, enter: Callable[[], None] | None = None) -> int:
    """spawn() as the supervisor will; keep the pipes open (a closed pipe would SIGPIPE the loop's echo)."""
    proc = spawn(argv, cwd, enter=enter)
    reaper.adopt(proc)
    _open_pipes.extend([proc.stdout, proc.stderr])
    return proc.pid


class Way:
    """How a test's tree is paused: by the signals, or by the freeze of a cgroup of its own (where one can be
    made: as root here), as the supervisor does it."""

    def __init__(self, reaper: Reaper, cgroup: LoopCgroup | None) -> None:
        self.reaper, self.cgroup = reaper, cgroup

    def tree(self) -> ProcessTree:
        return ProcessTree(os.getpid(), self.reaper, freezer=self.cgroup)

    def start(self, argv: list[str], cwd: Path) -> int:
        return _start(self.reaper, argv, cwd, enter=self.cgroup.enter if self.cgroup is not None else None)

    def held_as_it_should(self, tree: ProcessTree, members: list[Member]) -> bool:
        """Every member held (process/frozen.py), and by the way asked for: frozen (state S) or stopped (T)."""
        stats = [s for s in (read_stat(m.pid) for m in members) if s is not None]
        by_signal = {s.state == "T" for s in stats}
        return tree.held(stats) and all(held(s.pid) for s in stats) and by_signal == {self.cgroup is None}


@pytest.fixture(params=["signals", "cgroup"])
def way(request: pytest.FixtureRequest, subreaper: Reaper) -> Way:
    return Way(subreaper, request.getfixturevalue("loop_cgroup") if request.param == "cgroup" else None)


@pytest.fixture(autouse=True)
def _close_pipes_after_the_test():
    yield
    while _open_pipes:
        pipe = _open_pipes.pop()
        if pipe is not None:
            pipe.close()


def _alive(member: Member) -> bool:
    stat = read_stat(member.pid)
    return stat is not None and stat.create_time == member.create_time and stat.alive


def _state(member: Member) -> str:
    stat = read_stat(member.pid)
    return "gone" if stat is None else stat.state


def _cpu_ticks(members: list[Member]) -> dict[int, int]:
    ticks = {}
    for member in members:
        stat = read_stat(member.pid)
        if stat is not None:
            ticks[member.pid] = stat.cpu_ticks
    return ticks


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_stop_leaves_nothing_of_a_term_ignoring_loop_its_setsid_sleeps_a_daemon_and_a_listener(
    subreaper: Reaper, tmp_path: Path
) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    _start(subreaper, hard_tree(tmp_path), tmp_path)
    wait_for(lambda: (tmp_path / "port").exists() and (tmp_path / "daemon.pid").exists(), 10, "daemon and listener")
    # At least two turns of the loop, each leaving an orphaned `setsid sleep 1000`.
    wait_for(lambda: sum(m.name == "sleep" and m.ppid == os.getpid() for m in tree.scan()) >= 2, 10, "leftovers")
    port = int((tmp_path / "port").read_text())
    daemon = int((tmp_path / "daemon.pid").read_text())
    before = tree.scan()
    assert daemon in {m.pid for m in before}
    assert not _port_is_free(port)

    result = tree.stop(GRACE)

    assert result.survivors == ()
    assert tree.scan() == []
    assert not any(_alive(m) for m in before)
    assert result.signalled >= len(before)
    # The loop ignores TERM, so only the KILL after the grace ended it.
    assert GRACE * 1000 <= result.duration_ms < (GRACE + 1) * 1000
    wait_for(lambda: _port_is_free(port), 5, f"port {port} to be free")


def test_stop_of_a_200_process_tree_that_ignores_term_kills_all_after_the_grace(
    subreaper: Reaper, tmp_path: Path
) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    _start(subreaper, wide_tree(200, term_ignoring=True), tmp_path)
    wait_for_members(tree, 200)
    before = tree.scan()

    result = tree.stop(GRACE)

    assert result.survivors == ()
    assert tree.scan() == []
    assert not any(_alive(m) for m in before)
    assert GRACE * 1000 <= result.duration_ms < (GRACE + 1) * 1000


def test_stop_of_a_cooperative_200_process_tree_is_quick_and_complete(subreaper: Reaper, tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    _start(subreaper, wide_tree(200, term_ignoring=False), tmp_path)
    wait_for_members(tree, 200)
    before = tree.scan()

    result = tree.stop(10.0)

    assert result.survivors == ()
    assert not any(_alive(m) for m in before)
    assert result.duration_ms < 1000  # TERM was enough: nowhere near the 10 s grace


def test_kill_now_from_another_thread_cuts_a_running_stop_short(subreaper: Reaper, tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    _start(subreaper, wide_tree(30, term_ignoring=True), tmp_path)
    wait_for_members(tree, 30)
    outcome = {}
    stopper = threading.Thread(target=lambda: outcome.setdefault("stop", tree.stop(60.0)))
    stopper.start()
    time.sleep(0.2)  # let stop() send TERM and start waiting out its grace

    killed = tree.kill_now()

    stopper.join(10)
    assert not stopper.is_alive()
    assert killed.survivors == ()
    assert outcome["stop"].survivors == ()
    assert outcome["stop"].duration_ms < 10_000
    assert tree.scan() == []


def test_stop_works_from_a_worker_thread_like_asyncio_to_thread(subreaper: Reaper, tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    _start(subreaper, hard_tree(tmp_path), tmp_path)
    wait_for(lambda: (tmp_path / "port").exists() and (tmp_path / "daemon.pid").exists(), 10, "daemon and listener")

    result = asyncio.run(asyncio.to_thread(tree.stop, GRACE))

    assert result.survivors == ()
    assert tree.scan() == []


def test_pause_stops_every_process_and_none_uses_cpu_then_resume_runs_them_again(way: Way, tmp_path: Path) -> None:
    tree = way.tree()
    busy_pid = tmp_path / "busy.pid"
    script = (f"bash -c 'echo $$ > {busy_pid}; {BUSY_LOOP}' & ( setsid sleep 1000 & ) ; "
              "setsid sleep 1000 & sleep 1000 & wait")
    way.start(["bash", "-c", script], tmp_path)
    wait_for(lambda: busy_pid.exists() and busy_pid.read_text().strip() != "", 10, "the busy loop")
    wait_for_members(tree, 5)
    busy = next(m for m in tree.scan() if m.pid == int(busy_pid.read_text()))
    wait_for(lambda: (stat := read_stat(busy.pid)) is not None and stat.cpu_ticks > 2, 10,
             "the busy loop to burn some CPU")

    count = tree.pause()

    members = tree.scan()
    assert count == len(members) >= 5
    assert tree.paused
    assert way.held_as_it_should(tree, members)
    frozen = _cpu_ticks(members)
    time.sleep(0.3)
    assert _cpu_ticks(members) == frozen

    resumed = tree.resume()

    assert resumed == len(members)
    assert not tree.paused
    assert "T" not in {_state(m) for m in members} and not any(held(m.pid) for m in members)
    busy_before = frozen[busy.pid]
    wait_for(lambda: _cpu_ticks([busy])[busy.pid] > busy_before, 5, "the busy loop to run again")
    assert tree.stop(GRACE).survivors == ()


def test_pause_catches_processes_forked_while_it_runs(way: Way, tmp_path: Path) -> None:
    """A fork storm: parents keep spawning children; after pause() nothing runs and nothing new appears."""
    tree = way.tree()
    storm = "for i in 1 2 3; do ( while :; do sleep 1000 & sleep 0.01; done ) & done; wait"
    way.start(["bash", "-c", storm], tmp_path)
    wait_for_members(tree, 30)

    tree.pause()

    members = tree.scan()
    assert way.held_as_it_should(tree, members), {m.pid: _state(m) for m in members}
    time.sleep(0.1)
    assert {m.key for m in tree.scan()} == {m.key for m in members}
    assert tree.stop(GRACE).survivors == ()


def test_stop_of_a_paused_tree_still_delivers_term(way: Way, tmp_path: Path) -> None:
    tree = way.tree()
    way.start(wide_tree(20, term_ignoring=False), tmp_path)
    wait_for_members(tree, 20)
    tree.pause()

    result = tree.stop(5.0)

    assert result.survivors == ()
    assert result.duration_ms < 5000  # they were woken up and obeyed TERM, no KILL needed
    assert not tree.paused
    assert way.cgroup is None or not way.cgroup.frozen()  # a restart in it is not born frozen


def test_a_member_whose_create_time_no_longer_matches_is_never_signalled(
    subreaper: Reaper, tmp_path: Path
) -> None:
    tree = ProcessTree(os.getpid(), subreaper)
    pid = _start(subreaper, ["sleep", "1000"], tmp_path)
    wait_for_members(tree, 1)
    real = next(m for m in tree.scan() if m.pid == pid)
    impostor = Member(pid=pid, create_time=real.create_time - 5.0, name="sleep", ppid=real.ppid)

    assert tree.send(impostor, signal.SIGKILL) is False
    time.sleep(0.05)
    assert _alive(real)
    assert tree.send(real, signal.SIGKILL) is True
    wait_for(lambda: not _alive(real), 5, "the real member to die")


def test_excluded_processes_and_their_children_are_left_alone(subreaper: Reaper, tmp_path: Path) -> None:
    helper = _start(subreaper, ["bash", "-c", "sleep 1000 & wait"], tmp_path)
    tree = ProcessTree(os.getpid(), subreaper, exclude=lambda pid: pid == helper)
    _start(subreaper, ["sleep", "1000"], tmp_path)
    wait_for(lambda: len(ProcessTree(os.getpid(), subreaper).scan()) >= 3, 10, "helper and member")
    assert [m.name for m in tree.scan()] == ["sleep"]

    assert tree.stop(GRACE).survivors == ()

    everything = ProcessTree(os.getpid(), subreaper).scan()
    assert {m.pid for m in everything} >= {helper}
    assert len(everything) == 2  # the helper bash and its sleep


def test_stop_and_pause_of_an_empty_tree_do_nothing(way: Way) -> None:
    tree = way.tree()
    assert tree.stop(5.0).survivors == () and tree.stop(5.0).duration_ms < 1000
    assert tree.pause() == 0 and tree.resume() == 0


@pytest.mark.parametrize("excluded", [False, True])
def test_walk_orders_parents_before_children_and_prunes_excluded_subtrees(excluded: bool) -> None:
    from ralph_supervisor.process.linux import ProcStat

    def stat(pid: int, ppid: int, state: str = "S") -> ProcStat:
        return ProcStat(pid=pid, name="p", state=state, ppid=ppid, pgid=pid, sid=pid, cpu_ticks=0, start_ticks=pid)

    table = [stat(5, 3), stat(3, 1), stat(2, 1), stat(4, 2), stat(6, 2, "Z"), stat(9, 8)]
    found = walk(table, [1], exclude=(lambda pid: pid == 2) if excluded else None)
    assert [s.pid for s in found] == ([3, 5] if excluded else [3, 2, 5, 4])


@st.composite
def process_tables(draw: st.DrawFn) -> list[tuple[int, int, bool]]:
    """(pid, ppid, alive) rows of a random forest under the roots 1 and 0, in a random order."""
    count = draw(st.integers(0, 40))
    rows = []
    for pid in range(2, count + 2):
        ppid = draw(st.sampled_from([0, 1, *range(2, pid)]))
        rows.append((pid, ppid, draw(st.booleans()) or draw(st.booleans())))
    return draw(st.permutations(rows))


@given(process_tables())
def test_walk_finds_exactly_the_live_descendants_parents_first(rows: list[tuple[int, int, bool]]) -> None:
    from ralph_supervisor.process.linux import ProcStat

    table = [ProcStat(pid=pid, name="p", state="S" if alive else "Z", ppid=ppid, pgid=pid, sid=pid,
                      cpu_ticks=0, start_ticks=pid) for pid, ppid, alive in rows]
    parent = {pid: ppid for pid, ppid, _ in rows}
    alive = {pid: ok for pid, _, ok in rows}

    def expected(pid: int) -> bool:
        while pid not in (0, 1):
            if not alive[pid]:
                return False
            pid = parent[pid]
        return pid == 1

    found = [s.pid for s in walk(table, [1])]
    assert sorted(found) == sorted(pid for pid, _, _ in rows if expected(pid))
    position = {pid: i for i, pid in enumerate(found)}
    assert all(parent[pid] == 1 or position[parent[pid]] < position[pid] for pid in found)


def test_stop_terms_the_loops_group_first_and_kills_refused_newcomers_at_once(subreaper: Reaper, tmp_path: Path) -> None:
    """The loop's trap runs while the work in a group of its own (GNU timeout's) still runs; a newcomer the
    trap starts that `refuse` names (an agent call) is killed at once; the rest gets TERM at half the grace."""
    log = tmp_path / "order"
    # times from bash's own clock: a `date` forked in a trap is a newcomer the stop may TERM at once
    script = (f"trap 'echo loop $EPOCHREALTIME >> {log}; sleep 31 &' TERM; "
              f"setsid bash -c 'trap \"echo work \\$EPOCHREALTIME >> {log}; exit 0\" TERM; while :; do sleep 0.05; done' & "
              "while :; do sleep 0.05; done")
    leader = _start(subreaper, ["bash", "-c", script], tmp_path)
    tree = ProcessTree(os.getpid(), subreaper)
    wait_for_members(tree, 4)

    def refuse(stat: object) -> bool:
        try:
            return open(f"/proc/{stat.pid}/cmdline", "rb").read() == b"sleep\x0031\x00"  # type: ignore[attr-defined]
        except OSError:
            return False

    result = tree.stop(2.0, leader=leader, refuse=refuse)
    assert result.survivors == ()
    assert result.refused == 1
    lines = dict(line.split() for line in log.read_text().splitlines())
    assert float(lines["work"]) - float(lines["loop"]) >= 0.9, "the rest is TERMed at half the grace, not with the loop"


def test_a_helper_started_while_the_tree_is_paused_and_resumed_is_never_frozen(way: Way, tmp_path: Path) -> None:
    """Helpers (git for snapshots, hooks) start while pauses scan the tree; none may be taken for the loop's
    (nor be in its cgroup: they are forked by us, in ours)."""
    import subprocess

    from ralph_supervisor.process.helpers import HELPERS

    tree = way.tree()
    way.start(["bash", "-c", "while :; do sleep 0.01; done"], tmp_path)
    wait_for_members(tree, 1)
    stuck: list[int] = []
    done = threading.Event()

    def helpers() -> None:
        while not done.is_set():
            proc = HELPERS.popen(["sleep", "0.002"], stdin=subprocess.DEVNULL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stuck.append(proc.pid)
                proc.kill()
                proc.wait()
            finally:
                HELPERS.done(proc.pid)

    thread = threading.Thread(target=helpers)
    thread.start()
    try:
        for _ in range(300):  # without the lock of helpers.py about one cycle in 150 froze a helper
            tree.pause()
            tree.resume()
    finally:
        done.set()
        thread.join(timeout=30)
    assert stuck == [], f"{len(stuck)} helper(s) frozen with the tree"
    assert tree.stop(GRACE).survivors == ()


def test_a_calls_family_is_its_wrappers_its_descendants_and_the_readers_of_its_pipe() -> None:
    from ralph_supervisor.process.linux import ProcStat
    from ralph_supervisor.process.tree import call_family

    def stat(pid: int, ppid: int, name: str) -> ProcStat:
        return ProcStat(pid, name, "S", ppid, 10, 10, 0, pid * 10)

    tree = [stat(10, 1, "bash"),            # the loop (leader)
            stat(11, 10, "sleep"),          # its monitor sleep: the loop's own
            stat(12, 10, "bash"),           # a subshell running the pipeline
            stat(13, 12, "timeout"),        # a wrapper
            stat(14, 13, "claude"),         # the call
            stat(15, 14, "git"),            # the call's tool
            stat(16, 12, "tee"),            # reads the call's output
            stat(17, 10, "cat")]            # reads something else
    pipes = {14: ({"pipe:[1]"}, None), 16: (set(), "pipe:[1]"), 17: (set(), "pipe:[9]")}
    family = call_family(tree, [(14, 140)], leader=10, read_pipes=lambda pid: pipes.get(pid, (set(), None)))
    assert {pid for pid, _ in family} == {12, 13, 14, 15, 16}
    assert call_family(tree, [(14, 999)], leader=10, read_pipes=lambda pid: (set(), None)) == set(), "a recycled pid"


def test_a_sample_leaves_out_a_helper_and_what_it_started_without_reading_them() -> None:
    """A helper kept running (the snapshots' `git cat-file`) is never a member, nor are its children."""
    import subprocess

    from ralph_supervisor.process.helpers import HELPERS
    from ralph_supervisor.process.linux import descendant_stats

    helper = HELPERS.popen(["sh", "-c", "sleep 30 & wait"])
    member = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        def ours() -> list[int]:
            found = descendant_stats(os.getpid(), HELPERS.__contains__) or []
            return [s.pid for s in found if s.pid in (helper.pid, member.pid) or s.ppid in (helper.pid, member.pid)]

        wait_for(lambda: len(ours()) == 2, timeout=10, what="the member and its sleep")
        kept = ours()
        assert member.pid in kept and helper.pid not in kept
        assert all(read_stat(pid).ppid != helper.pid for pid in kept)  # type: ignore[union-attr]
        unfiltered = [s.pid for s in descendant_stats(os.getpid()) or [] if s.ppid == helper.pid]
        assert len(unfiltered) == 1  # the helper's sleep is there to leave out
    finally:
        for proc in (helper, member):
            subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
            proc.kill()
            proc.wait()
        HELPERS.done(helper.pid)


def test_own_children_are_the_main_threads_with_the_orphans_handed_to_us_not_another_threads(subreaper) -> None:
    """The loop is started from the main thread and orphans go to a subreaper's first live thread, the main
    one: a child another thread started (a helper) is not among them, though the full reading lists it."""
    import subprocess

    from ralph_supervisor.process.procfs import children_of, own_children

    from_main = subprocess.Popen(["sleep", "30"])
    orphaner = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE)
    assert orphaner.stdout is not None
    orphan = int(orphaner.stdout.readline())
    orphaner.wait()
    started: list[subprocess.Popen[bytes]] = []
    checked = threading.Event()

    def start_and_stay() -> None:  # a thread that ends hands its children to the main one
        started.append(subprocess.Popen(["sleep", "30"]))
        checked.wait(30)

    worker = threading.Thread(target=start_and_stay)
    worker.start()
    try:
        wait_for(lambda: bool(started), timeout=10, what="the other thread's child")
        (from_thread,) = started
        wait_for(lambda: orphan in (own_children() or []), timeout=10, what="the orphan handed to us")
        mine = own_children() or []
        assert from_main.pid in mine and orphan in mine and from_thread.pid not in mine
        assert from_thread.pid in (children_of(os.getpid()) or [])
    finally:
        checked.set()
        worker.join()
        for pid in (from_main.pid, orphan, *(p.pid for p in started)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for proc in (from_main, *started):
            proc.wait()

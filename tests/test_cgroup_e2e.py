"""The loop in a cgroup of its own (as root, where cgroup v2 can be written: here /sys/fs/cgroup/unified beside
v1 hierarchies): its figures in `status --json`, a stop that ends with `cgroup.kill` (a process in the cgroup
that is no descendant of ours dies too), the folder removed at exit, and one a crashed supervisor left swept at
the next start. Skipped, saying why, where no cgroup can be made."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import state_dir_of
from tests.helpers.supervise import events, start, supervise_argv, wait_for
from ralph_supervisor.process.cgroup import PREFIX, RECORD, LoopCgroup, own_unified_path, unified_mount

pytestmark = pytest.mark.slow


def cgroup_or_skip(tmp_path: Path) -> None:
    folder = tmp_path / "probe"
    folder.mkdir()
    made, why = LoopCgroup.create(folder)
    if made is None:
        pytest.skip(f"no cgroup can be made here: {why}")
    made.remove(folder)


def cli(workspace: Path, *args: str) -> str:
    return subprocess.run(supervise_argv(*args, "-w", str(workspace)), capture_output=True, text=True,
                          timeout=30).stdout


def test_the_loop_runs_in_its_own_cgroup_and_a_stop_ends_with_cgroup_kill(tmp_path: Path) -> None:
    cgroup_or_skip(tmp_path)
    workspace = tmp_path / "work"
    workspace.mkdir()
    loop = ["bash", "-c", "sleep 300 & while :; do :; done"]  # a busy loop and a child
    proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                 "--", *loop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    stranger = None
    try:
        (made,) = wait_for(lambda: events(state_dir, "cgroup_made"), timeout=30, what="the cgroup")
        path = Path(made["path"])
        assert path.name.startswith(PREFIX) and json.loads((state_dir / RECORD).read_text())["path"] == str(path)
        wait_for(lambda: len((path / "cgroup.procs").read_text().split()) >= 2, timeout=30, what="the loop in it")
        time.sleep(1.0)
        figures = json.loads(cli(workspace, "status", "--json"))["cgroup"]
        assert figures["path"] == str(path) and figures["tasks"] >= 2 and figures["cpu_s"] > 0.3
        # A process in the cgroup that the tree walk cannot find (it is no descendant of ours): only the
        # cgroup holds it, and the stop's cgroup.kill ends it.
        stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
        (path / "cgroup.procs").write_text(str(stranger.pid))
        cli(workspace, "stop")
        assert proc.wait(timeout=60) == 0
        assert stranger.wait(timeout=10) == -9
        (killed,) = events(state_dir, "cgroup_killed")
        assert killed["processes"] == 1 and killed["reason"] == "stop_request"
        assert not path.exists() and not (state_dir / RECORD).exists()  # removed at exit
    finally:
        for p in (proc, stranger):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_a_cgroup_a_crashed_supervisor_left_is_swept_at_the_next_start(tmp_path: Path) -> None:
    cgroup_or_skip(tmp_path)
    workspace = tmp_path / "work"
    workspace.mkdir()
    state_dir = state_dir_of(workspace)
    state_dir.mkdir(parents=True, exist_ok=True)
    mount = unified_mount(Path("/proc/self/mountinfo").read_text())
    own = own_unified_path(Path("/proc/self/cgroup").read_text())
    assert mount is not None and own is not None
    left = mount / own.lstrip("/") / f"{PREFIX}crashed-{os.getpid()}"
    left.mkdir()
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (left / "cgroup.procs").write_text(str(orphan.pid))
        (state_dir / RECORD).write_text(json.dumps({"path": str(left), "pid": 1}) + "\n")
        done = subprocess.run(supervise_argv("--no-echo", "--log-format", "json", "--notify-desktop", "false",
                                             "-w", str(workspace), "--", "true"),
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        assert orphan.wait(timeout=10) == -9
        (swept,) = events(state_dir, "cgroup_swept")
        assert swept["path"] == str(left) and not left.exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        if left.exists():
            left.rmdir()


def fake_claude(tmp_path: Path, body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    agent = bin_dir / "claude"
    agent.write_text("#!/bin/sh\n" + body)
    agent.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_memory_max_64m_and_a_call_that_allocates_200mb_is_an_oom_event_and_a_failed_call(tmp_path: Path) -> None:
    cgroup_or_skip(tmp_path)
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = fake_claude(tmp_path, "python3 -c 'b = bytearray(200 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096])'\n"
                                "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\"}'\n")
    done = subprocess.run(supervise_argv("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                                         "-w", str(workspace), "--memory-max", "64M", "--",
                                         "bash", "-c", "claude -p go --output-format json"),
                          capture_output=True, timeout=90, env={**os.environ, **env})
    state_dir = state_dir_of(workspace)
    (oom,) = events(state_dir, "cgroup_oom")
    assert oom["iteration"] == 1 and oom["kills"] >= 1 and oom["memory_max"] == 64_000_000
    (finished,) = events(state_dir, "iteration_finished")
    assert finished["failed"] is True and "killed by the OOM killer" in finished["first_error"]
    assert done.returncode == 0  # the loop itself ended by itself after its one call
    report = cli(workspace, "report")
    assert "CGROUP the loop used" in report and "the OOM killer struck" in report
    (figures,) = events(state_dir, "cgroup_figures")
    assert figures["memory_peak_bytes"] is not None and figures["memory_peak_bytes"] <= 64_000_000 + (1 << 20)


def test_tasks_max_and_cpu_max_bound_the_loops_cgroup(tmp_path: Path) -> None:
    cgroup_or_skip(tmp_path)
    workspace = tmp_path / "work"
    workspace.mkdir()
    loop = ["bash", "-c", "for i in $(seq 40); do sleep 30 & done 2>/dev/null; "
                          "timeout 3 bash -c 'while :; do :; done'; sleep 300"]
    proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                 "--tasks-max", "20", "--cpu-max", "25", "--", *loop,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        wait_for(lambda: events(state_dir, "cgroup_made"), timeout=30, what="the cgroup")
        record = json.loads((state_dir / RECORD).read_text())
        folders = {Path(p).parent.parts[3] if len(Path(p).parts) > 3 else "": Path(p) for p in record["v1"]}
        cpu = next(Path(p) for p in record["v1"] if "/cpu/" in p or "/cpu," in p)
        pids = next(Path(p) for p in record["v1"] if "/pids/" in p)
        assert (pids / "pids.max").read_text().strip() == "20"
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "25000" and folders
        time.sleep(4.0)  # the busy loop ran 3 s under a quarter of a CPU
        figures = json.loads(cli(workspace, "status", "--json"))["cgroup"]
        assert figures["tasks"] <= 20  # the fork storm stopped at the bound
        assert figures["cpu_s"] < 1.5, figures  # 3 s of a busy loop, bounded to 25 %: about 0.75 s
        assert figures["memory_bytes"] is not None  # from the v1 memory hierarchy on a hybrid system
        cli(workspace, "stop")
        assert proc.wait(timeout=60) == 0
        assert not any(Path(p).exists() for p in [record["path"], *record["v1"]])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_pause_during_a_fork_storm_leaves_nothing_running(tmp_path: Path) -> None:
    """The pause is the cgroup's freeze: atomic (a process forked meanwhile is born frozen), so nothing runs on,
    every process is held (in the frozen cgroup, state S, not T), and their number stays put."""
    cgroup_or_skip(tmp_path)
    from ralph_supervisor.process.frozen import held
    from ralph_supervisor.process.linux import read_stat

    workspace = tmp_path / "work"
    workspace.mkdir()
    # forks on while it is paused, but stays under the bound for the test's few seconds (a loop whose fork
    # fails at the bound exits, and its tree is then stopped under the pause)
    loop = ["bash", "-c", "while :; do sleep 100 & sh -c 'sleep 100 & sleep 100' & sleep 0.01; done 2>/dev/null"]
    proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                 "--tasks-max", "4000", "--", *loop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        (made,) = wait_for(lambda: events(state_dir, "cgroup_made"), timeout=30, what="the cgroup")
        path = Path(made["path"])
        wait_for(lambda: len((path / "cgroup.procs").read_text().split()) >= 100, timeout=30, what="the storm")
        assert "paused" in cli(workspace, "pause")
        assert "frozen 1" in (path / "cgroup.events").read_text()  # every process in it held, when pause returns
        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        assert pids and all(held(pid) for pid in pids)
        states = {pid: (read_stat(pid).state if read_stat(pid) else "gone") for pid in pids}
        assert "T" not in states.values(), states  # frozen, not signal-stopped
        cpu = (path / "cpu.stat").read_text().split()[1]
        time.sleep(1.0)
        assert sorted(int(p) for p in (path / "cgroup.procs").read_text().split()) == sorted(pids)  # no newcomer
        assert (path / "cpu.stat").read_text().split()[1] == cpu  # not a microsecond of CPU since
        (paused,) = events(state_dir, "tree_paused")
        assert paused["processes"] >= len(pids) and paused["duration_ms"] < 1000
        assert json.loads(cli(workspace, "status", "--json"))["child"]["paused"] is True
        cli(workspace, "stop")
        assert proc.wait(timeout=60) == 0
        assert all(e["survivors"] == 0 for e in events(state_dir, "tree_stopped"))
    finally:
        stop_through_the_supervisor(workspace, proc)  # a failed assertion above: the storm stops first


def test_where_cgroup_v2_gives_the_controllers_the_bounds_go_through_them(tmp_path: Path) -> None:
    cgroup_or_skip(tmp_path)
    from ralph_supervisor.process.cgroup import _enabled

    mount = unified_mount(Path("/proc/self/mountinfo").read_text())
    own = own_unified_path(Path("/proc/self/cgroup").read_text())
    assert mount is not None and own is not None
    enabled = _enabled(mount / own.lstrip("/"))
    if not {"memory", "pids"} <= enabled:
        pytest.skip(f"cgroup v2 here enables {sorted(enabled) or 'no'} controllers for our cgroup's children "
                    "(a hybrid system): the v1 path is what bounds the loop here, tested above")
    workspace = tmp_path / "work"
    workspace.mkdir()
    proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                 "--memory-max", "64M", "--tasks-max", "50", "--", "sleep", "300",
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        (made,) = wait_for(lambda: events(state_dir, "cgroup_made"), timeout=30, what="the cgroup")
        path = Path(made["path"])
        assert (path / "memory.max").read_text().strip() == "64000000"
        assert (path / "pids.max").read_text().strip() == "50"
        assert json.loads((state_dir / RECORD).read_text())["v1"] == []
        cli(workspace, "stop")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_verify_runs_under_the_trees_bounds_in_a_cgroup_of_its_own(tmp_path: Path) -> None:
    """The agent's tests are the agent's code: `--memory-max` bounds the verify too (a sibling cgroup of the
    loop's, never frozen with the tree), and it is gone when the run ends."""
    cgroup_or_skip(tmp_path)
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a project\n")
    mark = tmp_path / "allocated"
    verify = (f"python3 -c 'b = bytearray(200 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); "
              f"open(\"{mark}\", \"w\").write(\"200 MB\")'")
    done = subprocess.run(supervise_argv("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                                         "-w", str(workspace), "--memory-max", "64M", "--verify", verify, "--",
                                         "sleep", "1"),
                          capture_output=True, timeout=120)
    state_dir = state_dir_of(workspace)
    made = [e for e in events(state_dir, "cgroup_made") if e.get("role") == "verify"]
    assert len(made) == 1 and PREFIX in made[0]["path"] and "-verify-" in made[0]["path"], made
    (finished,) = events(state_dir, "verify_finished")
    assert finished["exit"] != 0, finished
    assert not mark.exists(), "the verify allocated past --memory-max"
    subprocess.run(["sh", "-c", verify], timeout=60, check=True)  # outside the bounds the same command can
    assert mark.exists()
    assert not Path(made[0]["path"]).exists() and not (state_dir / "cgroup-verify.json").exists()
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_cgroup_off_makes_none_said_once_and_a_bound_then_is_one_line(tmp_path: Path) -> None:
    """A user who wants no cgroup says so (flag, config key `cgroup`, RALPH_SUPERVISE_CGROUP): the signals pause
    and stop the tree, said once at start; a bound then cannot be kept, and `run` says so before it starts."""
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / ".ralph-supervise.toml").write_text('cgroup = "off"\n')
    base = ("--no-echo", "--log-format", "json", "--notify-desktop", "false", "-w", str(workspace))
    done = subprocess.run(supervise_argv(*base, "--", "true"), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    state_dir = state_dir_of(workspace)
    (said,) = events(state_dir, "cgroup_unavailable")
    assert said["reason"].startswith("--cgroup off") and events(state_dir, "cgroup_made") == []
    assert not (state_dir / RECORD).exists()
    for how in ({"RALPH_SUPERVISE_CGROUP": "off"}, {}):
        args = ("--memory-max", "64M") if how else ("--cgroup", "off", "--tasks-max", "50")
        (workspace / ".ralph-supervise.toml").unlink(missing_ok=True)
        bounded = subprocess.run(supervise_argv(*base, *args, "--", "true"), capture_output=True, text=True,
                                 timeout=60, env={**os.environ, **how})
        assert bounded.returncode == 1
        lines = [line for line in bounded.stderr.splitlines() if not line.startswith("{")]
        assert len(lines) == 1 and "--cgroup off" in lines[0] and "need one" in lines[0], bounded.stderr
    bad = subprocess.run(supervise_argv(*base, "--cgroup", "maybe", "--", "true"), capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and "--cgroup" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_cgroup_folder_that_turns_read_only_or_disappears_mid_run_is_one_line_and_the_loop_stays_supervised(
        tmp_path: Path) -> None:
    """Read-only while the tree is frozen: the resume moves the loop out into the supervisor's cgroup (which
    thaws it), one `cgroup_lost`, and from then on the signals pause and stop it. Gone (someone emptied and
    removed it): noticed at the next tick, one line, the signals again. Never a tree left frozen."""
    cgroup_or_skip(tmp_path)
    from ralph_supervisor.process.frozen import held

    for how in ("read-only", "gone"):
        workspace = tmp_path / how
        workspace.mkdir()
        proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                     "--", "bash", "-c", "sleep 300 & while :; do sleep 0.1; done",
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state_dir = state_dir_of(workspace)
        path: Path | None = None
        try:
            (made,) = wait_for(lambda: events(state_dir, "cgroup_made"), timeout=30, what="the cgroup")
            path = Path(made["path"])
            wait_for(lambda: len((path / "cgroup.procs").read_text().split()) >= 2, timeout=30, what="the loop in it")
            loop = json.loads(cli(workspace, "status", "--json"))["child"]["pid"]
            if how == "read-only":
                assert "paused" in cli(workspace, "pause") and held(loop)
                subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
                assert "resumed" in cli(workspace, "resume")
                assert not held(loop) and (path / "cgroup.procs").read_text().split() == []  # moved out, thawed
            else:
                empty_and_remove(path)
                wait_for(lambda: events(state_dir, "cgroup_lost"), timeout=30, what="the next tick to notice")
            (lost,) = events(state_dir, "cgroup_lost")
            assert lost["path"] == str(path) and ("Read-only" in lost["error"] if how == "read-only" else
                                                  "is gone" in lost["error"])
            assert "paused" in cli(workspace, "pause")  # by signals now: state T
            status = json.loads(cli(workspace, "status", "--json"))
            assert status["child"]["paused"] is True and held(loop)
            assert "resumed" in cli(workspace, "resume") and not held(loop)
            cli(workspace, "stop")
            assert proc.wait(timeout=60) == 0
            assert all(e["survivors"] == 0 for e in events(state_dir, "tree_stopped"))
            assert len(events(state_dir, "cgroup_lost")) == 1
        finally:
            if path is not None and how == "read-only":
                subprocess.run(["umount", str(path)], check=False)
            stop_through_the_supervisor(workspace, proc)
            if path is not None and path.exists():
                path.rmdir()  # a read-only folder would not go at exit (`cgroup_left`)


def stop_through_the_supervisor(workspace: Path, proc: subprocess.Popen[bytes]) -> None:
    """A supervisor still running after a failed assertion: `stop` (its tree goes with it), then KILL at 60 s."""
    if proc.poll() is None:
        cli(workspace, "stop")
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def empty_and_remove(path: Path) -> None:
    """What someone removing the loop's cgroup by hand does: move its processes out to the parent, then rmdir.
    The loop's short `sleep`s may exit between the listing and the move (ESRCH: gone anyway), and one forked
    just before its parent moved is born inside: the listing is read again until the folder can go."""
    deadline = time.monotonic() + 10
    while True:
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                (path.parent / "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.05)

"""The state folder lives outside the workspace, one per workspace, found from the workspace by every command."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ralph_supervisor import registry, state_folder
from ralph_supervisor.files.lock import InstanceLock
from ralph_supervisor.run_folder import RunFolder, RunFolderError, runtime_base
from ralph_supervisor.settings import load_settings
from tests.helpers import REPO, state_dir_of, wait_for
from tests.helpers.supervise import events, start, supervise_argv

FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false")


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(supervise_argv(*args), capture_output=True, text=True, timeout=120, env=full, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def settings_for(workspace: Path, state_dir: Path | None = None):
    return load_settings(workspace=str(workspace), state_dir=str(state_dir) if state_dir else None,
                         env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]})


# ------------------------------------------------------------------------------------ where it is (pure)


def test_the_default_folder_is_named_after_the_workspace_and_a_hash_of_its_real_path(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": "/home/me/.local/state"}
    got = state_folder.default_state_dir(Path("/home/me/src/my app!"), env)
    digest = hashlib.sha256(b"/home/me/src/my app!").hexdigest()[:12]
    assert got == Path(f"/home/me/.local/state/ralph-supervise/workspaces/my-app-{digest}")
    assert state_folder.default_state_dir(Path("/"), env).name.startswith("root-")
    # a relative XDG_STATE_HOME is ignored, as the XDG spec says
    assert state_folder.state_home({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/state/ralph-supervise")
    assert state_folder.state_home({"HOME": "/h"}) == Path("/h/.local/state/ralph-supervise")


def test_two_workspaces_of_one_name_never_share_a_folder_and_a_symlink_shares_its_targets(tmp_path: Path) -> None:
    (tmp_path / "a" / "app").mkdir(parents=True)
    (tmp_path / "b" / "app").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "app")
    first = settings_for(tmp_path / "a" / "app").state_dir
    second = settings_for(tmp_path / "b" / "app").state_dir
    assert first != second and first.name.startswith("app-") and second.name.startswith("app-")
    assert settings_for(tmp_path / "link").state_dir == first == state_dir_of(tmp_path / "a" / "app")
    assert not str(first).startswith(str(tmp_path / "a"))


def test_the_workspaces_level_keeps_state_folders_apart_from_the_registry(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), "HOME": str(tmp_path)}
    folder = state_folder.default_state_dir(tmp_path / "w", env)
    assert folder.parent.parent == registry.registry_dir({"XDG_STATE_HOME": str(tmp_path)})
    folder.mkdir(parents=True)
    listing = registry.read_registry(folder.parent.parent)
    assert listing.entries == () and listing.garbage == ()  # `workspaces/` is not taken for an entry


# ------------------------------------------------------------------------------------ finding it


def test_every_command_finds_a_registered_folder_elsewhere_before_the_default(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert state_folder.find_state_dir(ws) == state_dir_of(ws)  # nothing yet: the default
    (ws / ".ralph-supervise").mkdir()
    assert state_folder.find_state_dir(ws) == ws / ".ralph-supervise"  # an old folder, until run moves it
    state_dir_of(ws).mkdir(parents=True)
    assert state_folder.find_state_dir(ws) == state_dir_of(ws)
    elsewhere = tmp_path / "volume" / "state"
    elsewhere.mkdir(parents=True)
    entry = registry.register(workspace=ws, state_dir=elsewhere, name="ws", command=("loop",))
    try:
        assert state_folder.find_state_dir(ws) == elsewhere
        assert state_folder.find_state_dir(tmp_path / "ws" / ".." / "ws") == elsewhere
    finally:
        entry.remove()
    assert state_folder.find_state_dir(ws) == state_dir_of(ws)


def test_a_killed_supervisors_folder_elsewhere_is_found_when_the_default_is_not_there(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "volume"
    elsewhere.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    entry = registry.register(workspace=ws, state_dir=elsewhere, name="ws", command=("loop",))
    data = json.loads(entry.path.read_text())
    entry.path.write_text(json.dumps({**data, "pid": dead.pid}))  # killed: its entry stayed behind
    assert state_folder.find_state_dir(ws) == elsewhere
    state_dir_of(ws).mkdir(parents=True)
    assert state_folder.find_state_dir(ws) == state_dir_of(ws), "the default folder wins over a dead one's"


# ------------------------------------------------------------------------------------ setting it up


def test_an_old_in_workspace_folder_is_moved_out_with_its_contents(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    old = ws / ".ralph-supervise"
    (old / "snapshots").mkdir(parents=True)
    (old / "state.json").write_text('{"state": "OPEN"}\n')
    (old / "snapshots" / "HEAD").write_text("ref\n")
    lines = state_folder.set_up(settings_for(ws))
    assert not old.exists()
    assert (state_dir_of(ws) / "state.json").read_text() == '{"state": "OPEN"}\n'
    assert (state_dir_of(ws) / "snapshots" / "HEAD").read_text() == "ref\n"
    assert lines == [f"moved the state folder out of the workspace: {old} is now {state_dir_of(ws)}"]
    assert json.loads((state_dir_of(ws) / "workspace.json").read_text())["workspace"] == str(ws.resolve())


def test_an_old_folder_beside_newer_state_is_kept_aside_and_an_explicit_state_dir_is_never_moved(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".ralph-supervise").mkdir(parents=True)
    (ws / ".ralph-supervise" / "state.json").write_text("old\n")
    explicit = tmp_path / "mine"
    assert state_folder.set_up(settings_for(ws, explicit)) == []
    assert (ws / ".ralph-supervise" / "state.json").read_text() == "old\n"
    state_dir_of(ws).mkdir(parents=True)
    (state_dir_of(ws) / "state.json").write_text("new\n")
    [line] = state_folder.set_up(settings_for(ws))
    [aside] = [p for p in state_dir_of(ws).iterdir() if p.name.startswith("from-workspace-")]
    assert (aside / "state.json").read_text() == "old\n" and (state_dir_of(ws) / "state.json").read_text() == "new\n"
    assert aside.name in line and not (ws / ".ralph-supervise").exists()


def test_an_old_folder_a_supervisor_still_holds_is_not_moved(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    old = ws / ".ralph-supervise"
    old.mkdir(parents=True)
    lock = InstanceLock(old / "supervisor.lock")
    lock.acquire()
    try:
        with pytest.raises(state_folder.StateFolderError, match="still runs with its state in"):
            state_folder.set_up(settings_for(ws))
    finally:
        lock.release()
    assert old.is_dir()


def test_a_file_in_the_way_of_the_state_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(state_folder.StateFolderError) as caught:
        state_folder.check_writable(tmp_path / "blocker" / "state")
    assert "--state-dir" in str(caught.value) and str(tmp_path / "blocker" / "state") in str(caught.value)


def test_a_namesake_whose_workspace_is_gone_is_named_for_takeover(tmp_path: Path) -> None:
    first = tmp_path / "one" / "app"
    first.mkdir(parents=True)
    assert state_folder.set_up(settings_for(first)) == []
    second = tmp_path / "two" / "app"
    second.mkdir(parents=True)
    [line] = state_folder.set_up(settings_for(second))
    assert line == f"another workspace named app ({first}) has its own state folder; this one's is {state_dir_of(second)}"
    assert state_folder.set_up(settings_for(second)) == []  # said once, when the folder is made
    shutil.rmtree(tmp_path / "one")  # the first workspace moved away
    moved = tmp_path / "three" / "app"
    moved.mkdir(parents=True)
    [line] = state_folder.set_up(settings_for(moved))
    assert f"--state-dir {state_dir_of(first)}" in line and str(first) in line and "gone" in line


def git_repo(root: Path, first: str = "start") -> str:
    """A repository with one commit at `root`; its root commit."""
    root.mkdir(parents=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": os.devnull}
    (root / "README.md").write_text(f"# {first}\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", first]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_moved_and_renamed_repository_is_known_by_its_root_commit_and_only_then(tmp_path: Path) -> None:
    root = git_repo(tmp_path / "one" / "app")
    assert state_folder.set_up(settings_for(tmp_path / "one" / "app")) == []
    origin = state_folder.read_origin(state_dir_of(tmp_path / "one" / "app"))
    assert origin is not None and origin.roots == (root,)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "one" / "app"), str(clone)], check=True, capture_output=True)
    assert state_folder.set_up(settings_for(clone)) == [], "a clone whose workspace is there is not a move"
    other = tmp_path / "gone" / "app"
    git_repo(other, first="another project")
    state_folder.set_up(settings_for(other))
    shutil.rmtree(tmp_path / "gone")

    os.rename(tmp_path / "one" / "app", tmp_path / "renamed")  # moved and renamed: no namesake to go by
    [line] = state_folder.set_up(settings_for(tmp_path / "renamed"))
    old = state_dir_of(tmp_path / "one" / "app")
    assert line == (f"a state folder of this repository (root commit {root[:12]}) whose workspace is gone "
                    f"({tmp_path / 'one' / 'app'}: moved?) is {old}: pass --state-dir {old} to carry on with it")
    assert state_dir_of(tmp_path / "renamed") != old, "a fresh folder: nothing is taken over unasked"

    elsewhere = tmp_path / "three" / "app"  # a new project of the same name: the gone namesake is another repository
    git_repo(elsewhere, first="a third one")
    lines = state_folder.set_up(settings_for(elsewhere))
    assert not any("carry on" in line for line in lines), lines


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_roots_that_take_too_long_are_not_looked_for_at_every_start_and_a_first_commit_is_picked_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = tmp_path / "slow"
    git_repo(slow)
    monkeypatch.setattr(state_folder, "ROOTS_TIMEOUT_S", 0.0)  # a history too long to walk in time
    state_folder.set_up(settings_for(slow))
    origin = state_folder.read_origin(state_dir_of(slow))
    assert origin is not None and origin.roots == () and origin.roots_timed_out
    monkeypatch.setattr(state_folder, "ROOTS_TIMEOUT_S", 5.0)
    state_folder.set_up(settings_for(slow))
    assert state_folder.read_origin(state_dir_of(slow)) == origin, "not tried again"

    fresh = tmp_path / "fresh"  # `git init`, no commit yet: the roots come with the first one
    fresh.mkdir()
    subprocess.run(["git", "-C", str(fresh), "init", "-q"], check=True)
    state_folder.set_up(settings_for(fresh))
    assert state_folder.read_origin(state_dir_of(fresh)).roots == ()  # type: ignore[union-attr]
    shutil.rmtree(fresh)
    root = git_repo(fresh)
    state_folder.set_up(settings_for(fresh))
    assert state_folder.read_origin(state_dir_of(fresh)).roots == (root,)  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------ the run's private folder


def test_the_run_folder_is_private_and_a_dead_runs_folder_is_removed(tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir()
    base = runtime_base(env)
    dead = base / "run-999999999-5"
    dead.mkdir(parents=True)
    (dead / ".lock").write_text("")  # nobody holds it: its supervisor was killed
    young = base / "run-999999998-5"
    young.mkdir()  # no lock yet: a run being made this instant is left alone
    foreign = base / "something-else"
    foreign.mkdir()
    folder = RunFolder.create(env)
    assert folder.path.parent == base and oct(folder.path.stat().st_mode & 0o777) == "0o700"
    assert not dead.exists() and foreign.exists() and young.exists()
    folder.remove()
    assert not folder.path.exists()
    assert runtime_base({"XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp_path)}) == tmp_path / f"ralph-supervise-{os.getuid()}"


def test_a_live_runs_folder_is_kept_whatever_its_name_says(tmp_path: Path) -> None:
    """A supervisor in another PID namespace names its folder with a PID this one cannot see: its lock,
    held while it lives, is what keeps the folder (a shared /tmp lost a running loop's shims this way)."""
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir()
    other = RunFolder.create(env)
    hidden = other.path.with_name("run-999999997-5")
    other.path.rename(hidden)  # the lock stays held: its owner lives, under a PID we cannot see
    mine = RunFolder.create(env)
    try:
        assert hidden.exists()
    finally:
        mine.remove()
        other.remove()
        shutil.rmtree(hidden, ignore_errors=True)


def test_a_run_folder_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / f"ralph-supervise-{os.getuid()}").symlink_to(tmp_path / "target")
    with pytest.raises(RunFolderError):
        RunFolder.create({"XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp_path)})


# ------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_a_run_keeps_nothing_in_the_workspace_and_commands_find_its_state_from_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\necho step >> work.txt\n"
                                    "echo '{\"type\":\"result\",\"is_error\":false,\"result\":\"did it\"}'\n")
    (bin_dir / "claude").chmod(0o755)
    (ws / ".gitignore").write_text(".env\n")
    (ws / ".env").write_text("TOKEN=1\n")
    env = {"XDG_RUNTIME_DIR": str(runtime), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = 'for i in 1 2; do claude -p go --output-format json; echo "$PATH" | cut -d: -f1 >> "$OUT"; done'
    done = cli("run", *FAST, "--", "sh", "-c", script, cwd=ws, env={**env, "OUT": str(tmp_path / "paths")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(os.listdir(ws)) == [".env", ".gitignore", "work.txt"], "nothing of ours in the workspace"
    state = state_dir_of(ws)
    assert [e["iteration"] for e in events(state, "iteration_finished")] == [1, 2]
    shim_dirs = set((tmp_path / "paths").read_text().split())
    assert len(shim_dirs) == 1
    [shims] = shim_dirs
    assert shims.startswith(str(runtime / "ralph-supervise" / "runs" / "run-")) and not shims.startswith(str(state))
    assert os.listdir(runtime / "ralph-supervise" / "runs") == [], "the run's folder is removed at exit"
    # status, report, snapshots and restore, run from the workspace with no flag, find the state
    status = json.loads(cli("status", "--json", cwd=ws).stdout)
    assert status["iteration"] == 2 and status["state_dir"] == str(state)
    report = cli("report", cwd=ws)
    assert report.returncode == 0 and str(ws) in report.stdout, report.stderr
    assert '"iteration": 2' in cli("snapshots", "--json", cwd=ws).stdout
    (ws / "work.txt").unlink()
    restored = cli("restore", "2", "work.txt", cwd=ws)
    assert restored.returncode == 0, restored.stderr
    assert (ws / "work.txt").read_text() == "step\nstep\n"


@pytest.mark.slow
def test_a_folder_given_with_state_dir_is_found_through_the_registry_while_it_runs_and_after(
        tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    volume = tmp_path / "volume"
    proc = start(ws, *FAST, "--state-dir", str(volume), "--", "sleep", "30")
    try:
        wait_for(lambda: events(volume, "supervisor_started"), what="supervisor_started")
        status = json.loads(cli("status", "--json", "-w", str(ws)).stdout)
        assert status["state_dir"] == str(volume) and status["supervisor"]["running"]
        stopped = cli("stop", cwd=ws)
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not state_dir_of(ws).exists()
    ended = json.loads(cli("status", "--json", "-w", str(ws)).stdout)  # its ended entry still names the folder
    assert ended["state_dir"] == str(volume) and not ended["supervisor"]["running"]


@pytest.mark.slow
def test_a_run_moves_an_old_in_workspace_folder_out_and_says_where(tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    old = ws / ".ralph-supervise"
    old.mkdir(parents=True)
    (old / "history.jsonl").write_text(json.dumps({"ts": "2026-12-01T00:00:00.000Z", "iteration": 3, "from": "CLOSED",
                                                   "to": "OPEN", "trigger": "no-progress", "reason": "old"}) + "\n")
    done = cli("run", *FAST, "--", "true", cwd=ws)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not old.exists() and (state_dir_of(ws) / "history.jsonl").read_text().startswith('{"ts": "2026-12-01')
    said = [e["note"] for e in events(state_dir_of(ws), "state_folder")]
    assert said == [f"moved the state folder out of the workspace: {old} is now {state_dir_of(ws)}"]
    assert sum(1 for line in done.stderr.splitlines() if "moved the state folder" in line) == 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_workspace_moved_on_disk_is_offered_its_old_folder_and_can_take_it_over(tmp_path: Path) -> None:
    ws = tmp_path / "src" / "proj"
    root = git_repo(ws)
    done = cli("run", *FAST, "--", "true", cwd=ws)
    assert done.returncode == 0, done.stderr[-2000:]
    old = state_dir_of(ws)
    assert events(old, "supervisor_started")
    moved = tmp_path / "work" / "proj-renamed"
    moved.parent.mkdir()
    os.rename(ws, moved)  # `mv ~/src/proj ~/work/proj-renamed`
    listed = json.loads(cli("ls", "--orphans", "--json").stdout)
    assert [o["state_dir"] for o in listed] == [str(old)]

    again = cli("run", *FAST, "--", "true", cwd=moved)
    assert again.returncode == 0, again.stderr[-2000:]
    said = [line for line in again.stderr.splitlines() if "carry on with it" in line]
    assert len(said) == 1 and f"root commit {root[:12]}" in said[0] and f"--state-dir {old}" in said[0], again.stderr
    assert state_dir_of(moved) != old and events(state_dir_of(moved), "supervisor_started")

    taken = cli("run", *FAST, "--state-dir", str(old), "--", "true", cwd=moved)
    assert taken.returncode == 0, taken.stderr[-2000:]
    origin = state_folder.read_origin(old)
    assert origin is not None and origin.workspace == str(moved) and origin.roots == (root,)
    assert len(events(old, "supervisor_started")) == 2, "the old history goes on in its folder"
    assert json.loads(cli("ls", "--orphans", "--json").stdout) == []


@pytest.mark.slow
def test_a_read_only_state_folder_is_one_line_and_exit_1(tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare: cannot make a folder root cannot write")
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  'mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" && exec "$@"', "ro"]
        probe = subprocess.run([*prefix, "true"], env={**os.environ, "RO": str(ro)}, capture_output=True, timeout=30)
        if probe.returncode != 0:
            pytest.skip(f"cannot mount read-only here: {probe.stderr.decode().strip()}")
    else:
        prefix = []
        ro.chmod(0o500)
    full = {**os.environ, "PYTHONPATH": str(REPO), "RO": str(ro), "XDG_STATE_HOME": str(ro)}
    done = subprocess.run([*prefix, *supervise_argv("run", *FAST, "-w", str(ws), "--", "true")], env=full,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot write there" in done.stderr and "--state-dir" in done.stderr, \
        done.stderr
    assert sorted(os.listdir(ws)) == []


# ------------------------------------------------------------------------------------ a file of ours deleted


def test_a_deleted_log_is_recreated_with_what_was_written_since_the_last_look(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph_supervisor import rotating

    monkeypatch.setattr(rotating, "CHECK_EVERY_S", 3600.0)  # the writer looks only when told to here
    rotating.take_losses()
    log = rotating.RotatingFile(tmp_path / "child.log", 1 << 20, 4 << 20)
    log.write(b"before\n")
    log._checked_at = float("-inf")
    log.write(b"looked\n")  # the look finds the file in place: its size is remembered
    (tmp_path / "child.log").unlink()
    log.write(b"after 1\n")  # into the deleted file: not looked yet
    log._checked_at = float("-inf")
    log.write(b"after 2\n")  # the look: recreated, "after 1" copied over, then this
    assert (tmp_path / "child.log").read_bytes() == b"looked\nafter 1\nafter 2\n"  # from the last look on
    assert rotating.take_losses() == [tmp_path / "child.log"] and rotating.take_losses() == []
    (tmp_path / "other").write_bytes(b"someone else's\n")
    os.replace(tmp_path / "other", tmp_path / "child.log")  # replaced, not deleted
    log.write(b"after 3\n")
    log.close()  # the last look, at close: nothing stays in a replaced file
    assert (tmp_path / "child.log").read_bytes() == b"someone else's\nafter 2\nafter 3\n"  # since the last look
    assert rotating.take_losses() == [tmp_path / "child.log"]


@pytest.mark.slow
def test_the_state_folder_deleted_mid_run_comes_back_and_nothing_written_after_is_lost(tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    state = state_dir_of(ws)
    script = "i=0; while [ $i -lt 120 ]; do i=$((i+1)); echo \"line $i\"; sleep 0.05; done"
    proc = start(ws, *FAST, "--", "sh", "-c", script)
    try:
        wait_for(lambda: (state / "child.log").exists() and b"line 10\n" in (state / "child.log").read_bytes(),
                 what="the loop's output")
        seen = [int(line.split()[1]) for line in (state / "child.log").read_text().split("\n") if line]
        os.rename(state, tmp_path / "gone")  # `rm -rf`, without racing the supervisor's writes
        shutil.rmtree(tmp_path / "gone")
        wait_for(lambda: (state / "state.json").exists() and events(state, "state_file_lost"), timeout=10,
                 what="the state folder recreated and the loss reported")
        # the folder's files come back one after another within a tick: the socket may follow state.json
        wait_for(lambda: json.loads(cli("status", "--json", cwd=ws).stdout or "{}").get("supervisor", {}).get("running"),
                 timeout=10, what="the control socket answering again")
        second = cli("run", *FAST, "--", "true", cwd=ws)
        assert second.returncode == 1 and "already running" in second.stderr, "the lock was taken again"
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    numbers = [int(line.split()[1]) for line in (state / "child.log").read_text().split("\n") if line]
    assert numbers == list(range(numbers[0], 121)) and numbers[0] <= seen[-1] + 1, (seen[-1], numbers[:3])
    lost = [e["file"] for e in events(state, "state_file_lost")]
    assert lost.count(str(state)) == 1 and "control.sock" in lost
    assert len(lost) == len(set(lost)), f"each loss is reported once: {lost}"
    assert events(state, "supervisor_stopped") and json.loads((state / "state.json").read_text())["state"] == "CLOSED"


# ------------------------------------------------------------------------------------ forget, ls --orphans


def test_forget_asks_first_and_removes_only_a_state_folder_no_supervisor_holds(tmp_path: Path) -> None:
    import io

    from ralph_supervisor.forget import forget

    ws = tmp_path / "ws"
    ws.mkdir()
    state = state_dir_of(ws)
    out, err = io.StringIO(), io.StringIO()
    assert forget(ws, state, yes=True, stdout=out, stderr=err) == 1 and "no state folder" in err.getvalue()
    state_folder.set_up(settings_for(ws))
    (state / "state.json").write_text("{}\n")
    piped = cli("forget", cwd=ws)  # stdin is not a terminal: it will not guess
    assert piped.returncode == 1 and "--yes" in piped.stderr and state.is_dir()
    lock = InstanceLock(state / "supervisor.lock")
    lock.acquire()
    try:
        refused = cli("forget", "--yes", cwd=ws)
        assert refused.returncode == 1 and "stop it first" in refused.stderr and state.is_dir()
    finally:
        lock.release()

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    ended = registry.register(workspace=ws, state_dir=state, name="ws", command=("loop",)).mark_ended(0)
    assert ended is not None  # a run that ended: listed until ls --prune, or until its folder is forgotten
    assert forget(ws, state, yes=False, stdin=Terminal("n\n"), stdout=out, stderr=err) == 1 and state.is_dir()
    assert ended.path.exists()
    assert forget(ws, state, yes=False, stdin=Terminal("y\n"), stdout=out, stderr=err) == 0
    assert not state.exists() and "[y/N]" in out.getvalue() and f"removed {state}" in out.getvalue()
    assert not ended.path.exists(), "ls would list a loop whose state is gone"
    mine = tmp_path / "not-ours"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n")
    kept = cli("forget", "--yes", "--state-dir", str(mine), cwd=ws)
    assert kept.returncode == 1 and "none of the supervisor's files" in kept.stderr and (mine / "thesis.tex").exists()
    assert cli("forget", "--yes", "--state-dir", str(ws / ".."), "-w", str(ws)).returncode == 1


def test_ls_orphans_lists_the_state_folders_whose_workspace_is_gone(tmp_path: Path) -> None:
    alive, gone = tmp_path / "alive", tmp_path / "gone"
    for ws in (alive, gone):
        ws.mkdir()
        state_folder.set_up(settings_for(ws))
    shutil.rmtree(gone)
    listed = json.loads(cli("ls", "--orphans", "--json").stdout)
    assert [(o["state_dir"], o["workspace"]) for o in listed] == [(str(state_dir_of(gone)), str(gone))]
    shown = cli("ls", "--orphans")
    assert shown.returncode == 0 and str(state_dir_of(gone)) in shown.stdout and "forget --state-dir" in shown.stdout
    assert str(state_dir_of(alive)) not in shown.stdout
    assert cli("ls", "--orphans", "--prune").returncode == 1

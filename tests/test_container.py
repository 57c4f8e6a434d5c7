"""A loop in a container: the Dockerfile and devcontainer in deploy/, and the supervisor as PID 1.

No Docker engine runs here, so the image is never built. What a container would do to the supervisor
is done for real instead: `unshare --pid --fork --mount-proc` makes it PID 1 of a new PID namespace
with its own /proc (what `docker run` gives an entrypoint), and the command it runs is the
Dockerfile's own ENTRYPOINT, with its container paths mapped to temporary folders.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest

from ralph_supervisor import registry
from ralph_supervisor.container import proc_mount_problem
from tests.helpers.supervise import EXAMPLES, REPO, events, wait_for

DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
DEVCONTAINER = DEPLOY / "devcontainer" / "devcontainer.json"
INSTRUCTIONS = {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
                "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}
"""Every instruction of the Dockerfile reference (docs.docker.com/reference/dockerfile)."""


def instructions() -> list[dockerfile.Command]:
    """The Dockerfile as BuildKit's own parser reads it (the `dockerfile` package wraps moby/buildkit's)."""
    return list(dockerfile.parse_file(str(DOCKERFILE)))


def only(cmd: str) -> dockerfile.Command:
    found = [c for c in instructions() if c.cmd == cmd]
    assert len(found) == 1, f"{cmd} expected once, found {found}"
    return found[0]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for command in instructions():
        if command.cmd == "ENV":
            values = list(command.value)
            env.update(zip(values[::2], values[1::2]))
    return env


# -- the files ----------------------------------------------------------------------------------


def test_the_dockerfile_parses_and_runs_the_supervisor_as_its_first_process():
    commands = instructions()
    assert commands[0].cmd == "FROM" and all(c.cmd in INSTRUCTIONS for c in commands), [c.cmd for c in commands]
    entrypoint, cmd, volume = only("ENTRYPOINT"), only("CMD"), only("VOLUME")
    # Exec form (JSON): ralph-supervise is PID 1 itself, no `sh -c` in between to swallow SIGTERM.
    assert entrypoint.json and cmd.json and volume.json
    argv = list(entrypoint.value)
    assert argv[:2] == ["ralph-supervise", "run"] and argv[-1] == "--"
    state_dir = argv[argv.index("--state-dir") + 1]
    assert list(volume.value) == [state_dir]  # the state folder is the volume
    assert argv[argv.index("-w") + 1] == only("WORKDIR").value[0]
    assert not any(c.cmd == "STOPSIGNAL" and c.value[0] != "SIGTERM" for c in commands)
    assert only("USER").value[0] != "root"
    grace = float(image_env()["RALPH_SUPERVISE_GRACE"])
    assert grace + 5 <= 30 and "--stop-timeout 30" in DOCKERFILE.read_text()
    # The build context is the repository: what the image copies exists, and what it skips is listed.
    copy = only("COPY")
    assert copy.value[0] == "." and (REPO / "pyproject.toml").exists()
    ignored = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_devcontainer_keeps_the_entrypoint_and_puts_the_state_on_a_volume():
    config = json.loads(DEVCONTAINER.read_text())  # plain JSON (a devcontainer.json may be JSONC)
    assert config["image"] == "ralph-loop" and "docker build -f deploy/docker/Dockerfile -t ralph-loop ." in (
        DOCKERFILE.read_text())  # the image the Dockerfile's header builds
    assert config["overrideCommand"] is False  # the image's ENTRYPOINT runs, not `sleep infinity`
    assert config["init"] is False  # no tini in front of the supervisor
    argv = list(only("ENTRYPOINT").value)
    state_dir, workspace = argv[argv.index("--state-dir") + 1], argv[argv.index("-w") + 1]
    assert config["workspaceFolder"] == workspace and f"target={workspace}," in config["workspaceMount"]
    mounts = [m for m in config["mounts"] if f"target={state_dir}," in m]
    assert len(mounts) == 1 and "type=volume" in mounts[0]
    assert "--stop-timeout=30" in config["runArgs"]


# -- PID 1 ------------------------------------------------------------------------------------


def test_a_proc_of_another_pid_namespace_is_refused_in_one_line():
    assert proc_mount_problem() is None  # here, /proc is ours
    assert proc_mount_problem(pid=1, proc_self="1") is None
    problem = proc_mount_problem(pid=1, proc_self="29852")
    assert problem is not None and "--mount-proc" in problem and "\n" not in problem


@pytest.fixture(scope="module")
def pid_namespace() -> list[str]:
    """`unshare --pid --fork --mount-proc --kill-child`, or a skip with the reason it cannot run here."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    base = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        base[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run([*base, "sh", "-c", "echo $$"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0 or probe.stdout.strip() != "1":
        pytest.skip(f"cannot make a PID namespace here: {(probe.stderr or probe.stdout).strip()}")
    return base


def entrypoint(state: Path, workspace: Path, *command: str) -> list[str]:
    """The image's ENTRYPOINT (and CMD unless `command` is given), container paths mapped to these folders."""
    argv = list(only("ENTRYPOINT").value) + (list(command) or list(only("CMD").value))
    argv = [str(state) if a == "/state" else str(workspace) if a == "/workspace" else a for a in argv]
    assert argv[0] == "ralph-supervise"
    return [sys.executable, "-m", "ralph_supervisor", *argv[1:]]


def container_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **image_env(), **extra}


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found += [int(p) for p in fh.read().split()]
    return found


def state_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return "gone"
    return raw[raw.rindex(b")") + 2:].split()[0].decode()


TREE = """#!/bin/bash
# Orphans: each subshell starts a sleeper and exits at once, so the sleeper re-parents to PID 1.
for i in 1 2 3 4 5; do ( sleep 0.2 & ); done
( sleep 300 & echo $! > orphan.pid )
( trap '' TERM; exec sleep 300 ) &                                   # needs the KILL after the grace
( trap 'echo graceful > got-term; exit 0' TERM; while :; do sleep 0.05; done ) &
sleep 0.5
awk '{print $4}' /proc/$(cat orphan.pid)/stat > orphan.ppid           # the orphan's parent, as seen inside
echo ready > ready
wait
"""


@pytest.mark.slow
def test_as_pid_1_the_entrypoint_runs_the_loop_reaps_orphans_and_stops_the_tree_on_sigterm(
    pid_namespace: list[str], tmp_path: Path
):
    state, workspace = tmp_path / "state-volume", tmp_path / "workspace"
    workspace.mkdir()

    # 1. The image's command as it stands: ./ralph_loop.sh in the workspace, the state on the volume.
    shutil.copy(EXAMPLES / "ralph_loop.sh", workspace / "ralph_loop.sh")
    shutil.copytree(EXAMPLES / "bin", workspace / "bin")
    loop = subprocess.run([*pid_namespace, *entrypoint(state, workspace)], cwd=workspace, timeout=120,
                          env=container_env(RALPH_LOOP_MAX="2", RALPH_LOOP_PAUSE="0.1", FAKE_CLAUDE_DELAY="0.2",
                                            FAKE_CLAUDE_SCENARIO="progress"),
                          stdin=subprocess.DEVNULL, capture_output=True)
    assert loop.returncode == 0, loop.stderr.decode()[-2000:]
    assert not (workspace / ".ralph-supervise").exists() and (state / "state.json").exists()
    assert json.loads((state / "state.json").read_text())["iteration"] == 2
    started = events(state, "supervisor_started")
    assert started[-1]["pid"] == 1  # PID 1 of its namespace, as in a container
    assert [e["code"] for e in events(state, "child_exited")] == [0]

    # 2. The child's own code comes through, a signal's as 128+N.
    for script, expected in (("exit 7", 7), ("kill -KILL $$", 137)):
        done = subprocess.run([*pid_namespace, *entrypoint(state, workspace, "sh", "-c", script)], cwd=workspace,
                              env=container_env(), timeout=60, stdin=subprocess.DEVNULL, capture_output=True)
        assert done.returncode == expected, done.stderr.decode()[-2000:]

    # 3. A tree that orphans processes and ignores SIGTERM, stopped by a SIGTERM to PID 1 (`docker stop`).
    (workspace / "tree.sh").write_text(TREE)
    (workspace / "tree.sh").chmod(0o755)
    outer = subprocess.Popen([*pid_namespace, *entrypoint(state, workspace, "./tree.sh")], cwd=workspace,
                             env=container_env(RALPH_SUPERVISE_GRACE="1"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (workspace / "ready").exists() or outer.poll() is not None, timeout=60, what="tree ready")
        assert outer.poll() is None, outer.communicate()[1].decode()[-2000:]
        supervisor = wait_for(lambda: children(outer.pid), what="the supervisor under unshare")[0]
        assert (workspace / "orphan.ppid").read_text().strip() == "1"  # orphans land on PID 1: the supervisor
        # The five short sleepers have exited by now: every zombie they left was reaped.
        wait_for(lambda: all(state_of(pid) != "Z" for pid in children(supervisor)), timeout=10,
                 what="no zombie children of PID 1")
        assert len(children(supervisor)) >= 2  # tree.sh and the long orphan, still running
        os.kill(supervisor, signal.SIGTERM)
        assert outer.wait(timeout=60) == 143
    finally:
        if outer.poll() is None:
            outer.kill()
        outer.communicate(timeout=10)
    assert (workspace / "got-term").read_text().strip() == "graceful"  # TERM first ...
    stopped = [e for e in events(state, "tree_stopped") if e.get("reason") == "signal"]
    assert len(stopped) == 1 and stopped[0]["survivors"] == 0
    assert stopped[0]["duration_ms"] >= 900  # ... KILL only after the grace, for the one that ignored it


@pytest.mark.slow
def test_a_pid_namespace_without_its_own_proc_is_refused_before_anything_runs(tmp_path: Path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    # In a user namespace of its own even a broken check could signal nothing outside it.
    base = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]
    probe = subprocess.run([*base, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a user and PID namespace here: {probe.stderr.strip()}")
    marker = tmp_path / "ran"
    result = subprocess.run([*base, *entrypoint(tmp_path / "state", tmp_path, "touch", str(marker))], cwd=tmp_path,
                            env=container_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "/proc belongs to another PID namespace" in result.stderr
    assert not marker.exists() and not (tmp_path / "state").exists()


def _start_and_signal_at_once(argv: list[str], cwd: Path, registry: Path, env: dict[str, str]) -> int:
    """Start the supervisor, SIGTERM it the moment its registry entry appears (start-up is not over), and
    return its exit code."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (registry.is_dir() and any(registry.iterdir())) or proc.poll() is not None,
                 timeout=60, interval=0.002, what="the registry entry")
        target = proc.pid if argv[0] != "unshare" else wait_for(lambda: children(proc.pid), what="PID 1")[0]
        os.kill(target, signal.SIGTERM)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("as_pid_1", [False, True], ids=["process", "pid-1"])
def test_a_sigterm_during_start_up_ends_the_run_with_143_and_its_entry_marked_ended(
    as_pid_1: bool, tmp_path: Path, private_registry: Path, request: pytest.FixtureRequest
):
    """Before the event loop's handlers exist a SIGTERM would kill the supervisor without unregistering, or,
    as PID 1, be dropped and leave the loop running: it is caught and honoured once the loop starts."""
    prefix = request.getfixturevalue("pid_namespace") if as_pid_1 else []
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    workspace.mkdir()
    argv = [*prefix, *entrypoint(state, workspace, "sleep", "600")]
    assert _start_and_signal_at_once(argv, workspace, private_registry, container_env()) == 143
    listed = registry.read_registry(private_registry).entries  # not left as if it still ran
    assert [(e.ended, e.exit_code) for e in listed] == [(True, 143)]
    assert [e["code"] for e in events(state, "supervisor_stopped")] == [143]

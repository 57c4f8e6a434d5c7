"""Helpers for the fault-injection and whole-tree tests that run the real supervisor as a subprocess.

A test gives the supervisor (and so everything it spawns) a unique `FAULT_TREE=<token>` in its
environment. Environments are inherited through setsid, double forks and re-parenting alike, so
reading `/proc/PID/environ` finds every process of that run wherever it ended up: the proof that
nothing survived does not depend on the supervisor's own idea of its tree.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psutil

from ralph_supervisor.process.frozen import held
from tests.conftest import processes_with_env

from tests.helpers.supervise import supervise_argv

MARK_VAR = "FAULT_TREE"


def new_mark() -> str:
    return uuid.uuid4().hex


def marked(mark: str, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries `FAULT_TREE=mark`."""
    return processes_with_env(MARK_VAR, mark, exclude)


def is_helper(proc: psutil.Process) -> bool:
    """One of the supervisor's own helpers (report.html rendered by `python -m ralph_supervisor.report`, git for
    the snapshots and the report): outside the loop's tree by design, so a pause never freezes it
    (ralph_supervisor/process/helpers.py)."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    # A helper caught between its fork and its exec still carries the supervisor's own command line.
    return ("ralph_supervisor.report" in argv or (bool(argv) and os.path.basename(argv[0]) == "git")
            or argv[1:3] == ["-m", "ralph_supervisor"])


def loop_tree(procs: list[psutil.Process]) -> list[psutil.Process]:
    """`procs` without the supervisor's helpers: what a pause freezes."""
    return [proc for proc in procs if not is_helper(proc)]


def running(mark: str, argv: list[str], exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Marked processes whose command line is exactly `argv`; one that exits while we look is skipped."""
    found = []
    for proc in marked(mark, exclude):
        try:
            if proc.cmdline() == argv:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def identities(procs: list[psutil.Process]) -> set[tuple[int, float]]:
    """(pid, start time): a process's identity, safe against PID reuse."""
    keys = set()
    for proc in procs:
        try:
            keys.add((proc.pid, proc.create_time()))
        except psutil.Error:
            pass
    return keys


def still_alive(keys: set[tuple[int, float]]) -> list[tuple[int, float]]:
    alive = []
    for pid, created in keys:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, created))
        except psutil.Error:
            pass
    return alive


def states(procs: list[psutil.Process]) -> dict[int, str]:
    """pid -> status letter word (psutil's), for the processes that still exist."""
    found = {}
    for proc in procs:
        try:
            found[proc.pid] = proc.status()
        except psutil.Error:
            pass
    return found


def paused(procs: list[psutil.Process]) -> dict[int, bool]:
    """pid -> held still, as the supervisor itself judges it (`process/frozen.py`: stopped by a signal, state T,
    or in a frozen cgroup, where the state is S), for the processes that still exist. "Running" is False here."""
    found = {}
    for proc in procs:
        try:
            state = proc.status()
        except psutil.Error:
            continue
        if state != psutil.STATUS_ZOMBIE:
            found[proc.pid] = held(proc.pid)
    return found


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def kill_marked(mark: str) -> int:
    """Last-resort cleanup after a failed assertion: SIGKILL whatever carries the mark."""
    count = 0
    for proc in marked(mark):
        try:
            proc.kill()
            count += 1
        except psutil.Error:
            pass
    return count


def port_bindable(port: int) -> bool:
    """True when nothing holds 127.0.0.1:port any more (bind without SO_REUSEADDR)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
        return True
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return False
        raise
    finally:
        sock.close()


def cli(workspace: Path, *args: str, timeout: float = 30, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """`ralph-supervise ARGS -w workspace`, run to completion."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(supervise_argv(*args, "-w", str(workspace)), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=full_env)


def status(workspace: Path) -> dict[str, Any]:
    result = cli(workspace, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def read_state(state_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among `text`'s lines (the supervisor's stderr in --log-format json)."""
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def peak_rss(pid: int) -> int:
    """VmHWM: the highest resident set size the process has had so far, in bytes."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def wait_gone(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for the supervisor to exit; kill it (and fail) if it hangs."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the supervisor did not exit within {timeout}s") from None

"""Helpers for tests that run the real supervisor as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import EXAMPLES, REPO, wait_for  # noqa: F401 - also what the tests import from here
LOOP = EXAMPLES / "ralph_loop.sh"


def supervise_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ralph_supervisor", *args]


def start(workspace: Path, *args: str, env: dict[str, str] | None = None,
          stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """Start `ralph-supervise ARGS` in `workspace` (the caller must wait or kill it)."""
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env["PYTHONPATH"] = str(REPO)
    if env:
        full_env.update(env)
    return subprocess.Popen(supervise_argv(*args), cwd=workspace, env=full_env, stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr)


def run(workspace: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[bytes]:
    proc = start(workspace, *args, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        raise AssertionError(f"supervisor did not finish in {timeout}s: {err.decode()[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def events(state_dir: Path, name: str | None = None) -> list[dict[str, Any]]:
    path = state_dir / "events.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if name is None or event.get("event") == name:
            found.append(event)
    return found


def history(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def loop_env(scenario: str, **extra: str) -> dict[str, str]:
    """The fake agent's scenario, short pauses, and examples/bin on PATH (the supervisor's shims go before it)."""
    env = {"FAKE_CLAUDE_SCENARIO": scenario, "RALPH_LOOP_PAUSE": "0.2", "FAKE_CLAUDE_DELAY": "0.5",
           "PATH": f"{EXAMPLES / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.update(extra)
    return env

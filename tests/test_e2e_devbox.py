"""Living on dev boxes, end to end: sd_notify, Prometheus metrics and the live view with the real supervisor."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from pathlib import Path

from tests.helpers.supervise import LOOP, events, loop_env, run, start, supervise_argv, wait_for
from tests.helpers import state_dir_of

FAST = ("--no-echo", "--log-format", "json", "--grace", "1")


def test_sd_notify_ready_status_watchdog_and_stopping(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"}
    proc = start(tmp_path, *FAST, "--", "sh", "-c", "sleep 1.5; env | grep -c NOTIFY_SOCKET || true", env=env)
    messages: list[str] = []
    while proc.poll() is None or len(messages) < 64:
        try:
            messages.append(sock.recv(4096).decode())
        except socket.timeout:
            if proc.poll() is not None:
                break
    proc.communicate(timeout=20)
    sock.close()
    assert proc.returncode == 0
    ready = [m for m in messages if "READY=1" in m]
    assert ready and "STATUS=" in ready[0]
    assert any(m.startswith("WATCHDOG=1") for m in messages)
    assert any("STOPPING=1" in m for m in messages)
    child_log = (state_dir_of(tmp_path) / "child.log").read_text()
    assert child_log.strip() == "0", "the loop must not inherit NOTIFY_SOCKET"


def test_metrics_are_scraped_over_loopback(tmp_path: Path) -> None:
    env = loop_env("progress", RALPH_LOOP_MAX="50")
    proc = start(tmp_path, *FAST, "--metrics-port", "0", "--", str(LOOP), env=env)
    state_dir = state_dir_of(tmp_path)
    try:
        port = wait_for(lambda: events(state_dir, "metrics_listening"), what="metrics_listening")[0]["port"]
        wait_for(lambda: len(events(state_dir, "iteration_finished")) >= 2, what="two iterations")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        values = {line.split("{")[0]: line for line in body.splitlines() if line.startswith("ralph_supervise")}
        assert "ralph_supervise_iterations_total" in values
        iterations = float(values["ralph_supervise_iterations_total"].rsplit(" ", 1)[1])
        assert iterations >= 2
        assert float(values["ralph_supervise_files_changed_total"].rsplit(" ", 1)[1]) >= 2
        assert float(values["ralph_supervise_child_running"].rsplit(" ", 1)[1]) == 1
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_metrics_textfile_is_written(tmp_path: Path) -> None:
    prom = tmp_path / "out" / "ralph.prom"
    prom.parent.mkdir()
    result = run(tmp_path, *FAST, "--metrics-textfile", str(prom), "--", "sh", "-c", "echo hi")
    assert result.returncode == 0
    assert "ralph_supervise_breaker_state" in prom.read_text()


def test_watch_once_shows_a_running_supervisor(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--", str(LOOP), env=loop_env("progress", RALPH_LOOP_MAX="50"))
    state_dir = state_dir_of(tmp_path)
    try:
        wait_for(lambda: len(events(state_dir, "iteration_finished")) >= 1, what="an iteration")
        shown = subprocess.run(supervise_argv("watch", "--once", "-w", str(tmp_path)), capture_output=True,
                               text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert "CLOSED" in shown.stdout
    finally:
        proc.terminate()
        proc.communicate(timeout=20)

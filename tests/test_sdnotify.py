"""The sd_notify protocol, checked against a real datagram socket standing in for systemd."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from ralph_supervisor.sdnotify import (
    SystemdNotifier,
    NOTIFY_ENV_VARS,
    encode_message,
    environment_for_child,
    parse_notify_socket,
    status_text,
    watchdog_interval_from_env,
)


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "notify.sock")
    sock.bind(address)
    sock.settimeout(2.0)
    yield sock, address
    sock.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"ralph-test-{uuid.uuid4().hex}"
    sock.bind("\0" + name)
    sock.settimeout(2.0)
    yield sock, "@" + name
    sock.close()


def receive(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


def test_ready_with_status_sends_both_keys_in_one_datagram(path_socket):
    sock, address = path_socket
    notifier = SystemdNotifier({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    notifier.ready("breaker CLOSED, iteration 0")
    assert receive(sock) == "READY=1\nSTATUS=breaker CLOSED, iteration 0\n"
    notifier.close()


def test_every_message_has_its_exact_wire_form_on_an_abstract_socket(abstract_socket):
    sock, address = abstract_socket
    notifier = SystemdNotifier({"NOTIFY_SOCKET": address})
    notifier.ready()
    assert receive(sock) == "READY=1\n"
    notifier.status("breaker OPEN(no-progress), iteration 9, paused")
    assert receive(sock) == "STATUS=breaker OPEN(no-progress), iteration 9, paused\n"
    notifier.watchdog()
    assert receive(sock) == "WATCHDOG=1\n"
    notifier.extend_timeout(15.5)
    assert receive(sock) == "EXTEND_TIMEOUT_USEC=15500000\n"
    notifier.stopping()
    assert receive(sock) == "STOPPING=1\n"
    notifier.close()


def test_a_newline_in_status_cannot_inject_another_key(path_socket):
    sock, address = path_socket
    notifier = SystemdNotifier({"NOTIFY_SOCKET": address})
    notifier.status("evil\nREADY=1")
    assert receive(sock) == "STATUS=evil READY=1\n"
    notifier.close()


def test_without_notify_socket_every_call_is_a_silent_no_op():
    notifier = SystemdNotifier({})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    notifier.ready("x")
    notifier.status("x")
    notifier.watchdog()
    notifier.extend_timeout(3)
    notifier.stopping()
    assert notifier.maybe_watchdog(100.0) is False


def test_a_vanished_socket_never_raises_and_is_logged_once(tmp_path: Path):
    notifier = SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier.enabled
    with capture_logs() as logs:
        for _ in range(3):
            notifier.status("still alive")
            notifier.watchdog()
    notifier.close()
    failures = [entry for entry in logs if entry["event"] == "sd_notify_failed"]
    assert len(failures) == 1
    assert "gone.sock" in failures[0]["notify_socket"]


def test_watchdog_interval_is_half_of_watchdog_usec_for_our_pid(path_socket):
    _, address = path_socket
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier(env).watchdog_interval == 30.0
    env_no_pid = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "4000000"}
    assert SystemdNotifier(env_no_pid).watchdog_interval == 2.0


def test_watchdog_meant_for_another_pid_is_ignored(path_socket):
    _, address = path_socket
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert SystemdNotifier(env).watchdog_interval is None


@pytest.mark.parametrize("raw", ["", "0", "-5", "abc", "1.5"])
def test_malformed_watchdog_usec_means_no_watchdog(raw):
    assert watchdog_interval_from_env({"WATCHDOG_USEC": raw}, 1) is None


def test_maybe_watchdog_pings_once_per_interval(path_socket):
    sock, address = path_socket
    notifier = SystemdNotifier({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "2000000"})
    assert notifier.watchdog_interval == 1.0
    sent = [notifier.maybe_watchdog(t) for t in (100.0, 100.5, 100.99, 101.0, 101.2, 102.5)]
    assert sent == [True, False, False, True, False, True]
    assert [receive(sock) for _ in range(3)] == ["WATCHDOG=1\n"] * 3
    notifier.close()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/run/user/1000/systemd/notify", "/run/user/1000/systemd/notify"),
        ("@abstract", "\0abstract"),
        ("@", None),
        ("", None),
        (None, None),
        ("relative/path", None),
        ("vsock:2:1234", None),
    ],
)
def test_notify_socket_address_forms(raw, expected):
    assert parse_notify_socket(raw) == expected


def test_unsupported_notify_socket_disables_notifier():
    assert not SystemdNotifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_status_text_names_state_trigger_and_iteration():
    assert status_text("CLOSED", 7) == "breaker CLOSED, iteration 7"
    assert status_text("OPEN", 9, "no-progress", paused=True) == "breaker OPEN(no-progress), iteration 9, paused"
    assert status_text("HALF_OPEN", 3, "none") == "breaker HALF_OPEN, iteration 3"


@given(st.lists(st.tuples(st.sampled_from(["READY", "STATUS", "WATCHDOG"]), st.text()), min_size=1, max_size=5))
def test_encoded_message_has_exactly_one_line_per_field(fields):
    lines = encode_message(fields).decode("utf-8").split("\n")
    assert lines[-1] == ""
    assert len(lines) - 1 == len(fields)
    assert [line.split("=", 1)[0] for line in lines[:-1]] == [key for key, _ in fields]


CHILD = (
    "import sys; from ralph_supervisor.sdnotify import SystemdNotifier; n = SystemdNotifier(); "
    "n.ready('child up'); sys.exit(0 if n.maybe_watchdog(0.0) else 7)"
)


def test_a_real_process_sends_ready_and_pings_when_the_watchdog_is_for_its_own_pid(path_socket):
    sock, address = path_socket
    env = {**os.environ, "NOTIFY_SOCKET": address, "WATCHDOG_USEC": "30000000"}
    env.pop("WATCHDOG_PID", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, timeout=30)
    assert done.returncode == 0
    assert receive(sock) == "READY=1\nSTATUS=child up\n"
    assert receive(sock) == "WATCHDOG=1\n"


def test_a_process_that_inherited_someone_elses_watchdog_does_not_ping(path_socket):
    sock, address = path_socket
    env = {**os.environ, "NOTIFY_SOCKET": address, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, timeout=30)
    assert done.returncode == 7  # maybe_watchdog refused: the watchdog belongs to our (the parent's) pid
    assert receive(sock) == "READY=1\nSTATUS=child up\n"
    sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        sock.recv(4096)


def test_the_supervised_command_does_not_inherit_the_notify_variables():
    env = {"PATH": "/usr/bin", "NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "1", "HOME": "/h"}
    child = environment_for_child(env)
    assert child == {"PATH": "/usr/bin", "HOME": "/h"}
    assert not set(NOTIFY_ENV_VARS) & set(child)

"""The systemd notify protocol (sd_notify), spoken directly over a datagram socket.

Why our own: `Type=notify` only needs one `sendto` of `KEY=VALUE` lines to `$NOTIFY_SOCKET`, and a
dependency on libsystemd or python-systemd would make the supervisor fail to start on boxes without
it. Outside systemd (no `NOTIFY_SOCKET`) every call is a no-op, and a failing send never disturbs
supervision: it is logged once and swallowed.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)

__all__ = [
    "NOTIFY_ENV_VARS",
    "SystemdNotifier",
    "encode_message",
    "environment_for_child",
    "parse_notify_socket",
    "status_text",
    "watchdog_interval_from_env",
]


NOTIFY_ENV_VARS: tuple[str, ...] = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def environment_for_child(env: Mapping[str, str]) -> dict[str, str]:
    """The supervised command's environment: the notify variables are ours, not the loop's.

    Like sd_notify's `unset_environment`: a loop that happens to speak sd_notify (or a nested
    supervisor) must not report readiness or pings on our behalf.
    """
    return {key: value for key, value in env.items() if key not in NOTIFY_ENV_VARS}


def parse_notify_socket(value: str | None) -> str | None:
    """The address to send to: an absolute path, or an abstract name (`@name` becomes `\\0name`).

    Anything else (unset, empty, relative, vsock) is unsupported and means "not under systemd".
    """
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:] if len(value) > 1 else None
    if value.startswith("/"):
        return value
    return None


def watchdog_interval_from_env(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between `WATCHDOG=1` pings: half of `WATCHDOG_USEC`, as sd_watchdog_enabled advises.

    None when the watchdog is off, the value is malformed, or `WATCHDOG_PID` names another process
    (the variables were inherited by a child and are not meant for it).
    """
    raw = env.get("WATCHDOG_USEC", "")
    try:
        usec = int(raw)
    except ValueError:
        return None
    if usec <= 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner:
        try:
            if int(owner) != pid:
                return None
        except ValueError:
            return None
    return usec / 2_000_000


def encode_message(fields: list[tuple[str, str]]) -> bytes:
    """`KEY=VALUE` lines; newlines inside a value would start a bogus key, so they become spaces."""
    lines = []
    for key, value in fields:
        clean = value.replace("\r", " ").replace("\n", " ")
        lines.append(f"{key}={clean}")
    return ("\n".join(lines) + "\n").encode("utf-8", errors="replace")


def status_text(state: str, iteration: int, trigger: str = "none", *, paused: bool = False) -> str:
    """The one-line `STATUS=` shown by `systemctl status`: breaker state and iteration."""
    head = state if trigger in ("", "none") or state == "CLOSED" else f"{state}({trigger})"
    text = f"breaker {head}, iteration {iteration}"
    return text + ", paused" if paused else text


class SystemdNotifier:
    """Sends readiness, status, watchdog pings and timeout extensions to the service manager."""

    def __init__(self, env: Mapping[str, str] = os.environ) -> None:
        self._address = parse_notify_socket(env.get("NOTIFY_SOCKET"))
        self.enabled: bool = self._address is not None
        self.watchdog_interval: float | None = (
            watchdog_interval_from_env(env, os.getpid()) if self.enabled else None
        )
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._failure_logged = False
        self._last_watchdog: float | None = None
        raw = env.get("NOTIFY_SOCKET")
        if raw and not self.enabled:
            log.warning("sd_notify_unsupported_socket", notify_socket=raw)

    # -- the protocol messages -------------------------------------------------------------

    def ready(self, status: str = "") -> None:
        """READY=1 once the child runs and the watchers are armed (ends `systemctl start`)."""
        fields = [("READY", "1")]
        if status:
            fields.append(("STATUS", status))
        self._send(fields)

    def status(self, text: str) -> None:
        self._send([("STATUS", text)])

    def watchdog(self) -> None:
        self._send([("WATCHDOG", "1")])

    def maybe_watchdog(self, now: float) -> bool:
        """Ping when `watchdog_interval` has passed since the last ping (`now`: a monotonic clock).

        Call it from the event loop's timer: a loop that hangs stops pinging, and systemd restarts us.
        """
        if self.watchdog_interval is None:
            return False
        if self._last_watchdog is not None and now - self._last_watchdog < self.watchdog_interval:
            return False
        self._last_watchdog = now
        self.watchdog()
        return True

    def extend_timeout(self, seconds: float) -> None:
        """Ask for `seconds` more during a long graceful stop (or start) before systemd kills us."""
        usec = max(0, int(seconds * 1_000_000))
        self._send([("EXTEND_TIMEOUT_USEC", str(usec))])

    def stopping(self) -> None:
        self._send([("STOPPING", "1")])

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    # -- the edge --------------------------------------------------------------------------

    def _send(self, fields: list[tuple[str, str]]) -> None:
        if self._address is None:
            return
        data = encode_message(fields)
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._sock.setblocking(False)
                # Never block the event loop: a full socket queue loses one message, not the loop.
                self._sock.sendto(data, self._address)
            except OSError as exc:
                if not self._failure_logged:
                    self._failure_logged = True
                    log.warning(
                        "sd_notify_failed",
                        notify_socket=self._address.replace("\0", "@"),
                        error=str(exc),
                    )

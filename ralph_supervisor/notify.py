"""Telling humans: desktop and webhook notices on breaker transitions.

Why a worker thread and a bounded queue: a notifier talks to the network and to other programs, which
can be slow, down or hung. Supervision must never wait for them, so `send` only enqueues; a full queue
drops the oldest notice (counted and logged) rather than growing or blocking. Notices are made per
transition (open, half-open, close, final stop, child exit), never per iteration, by the pure
`notice_for_transition` / `notice_for_child_exit` below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

log = structlog.get_logger(__name__)

__all__ = [
    "Notice",
    "NoticeKind",
    "Notifier",
    "backoff_delays",
    "desktop_session_present",
    "format_text",
    "notice_for_child_exit",
    "notice_for_limit_wait",
    "notice_for_transition",
    "validate_webhook_url",
    "webhook_body",
]

NoticeKind = Literal["open", "close", "final", "child_exited", "half_open", "limit_wait"]

_TAIL_BYTES = 4096


@dataclass(frozen=True)
class Notice:
    """One message for humans about one transition."""

    kind: NoticeKind
    title: str
    body: str
    workspace: str
    state: str
    trigger: str
    iteration: int


# -- the pure part: what to say, and when -----------------------------------------------------


def _project_name(workspace: str) -> str:
    return Path(workspace).name or workspace


def notice_for_transition(
    *,
    from_state: str,
    to_state: str,
    trigger: str,
    reason: str,
    iteration: int,
    workspace: str,
    final: bool = False,
) -> Notice | None:
    """The notice a breaker transition deserves, or None (no change of state, nothing to say)."""
    if from_state == to_state:
        return None
    name = _project_name(workspace)
    where = f"iteration {iteration}"
    if to_state == "OPEN" and final:
        return Notice("final", f"ralph {name}: loop stopped for good ({trigger})",
                      f"{reason} ({where}). A human must decide what comes next.",
                      workspace, to_state, trigger, iteration)
    if to_state == "OPEN":
        return Notice("open", f"ralph {name}: breaker OPEN ({trigger})", f"{reason} ({where})",
                      workspace, to_state, trigger, iteration)
    if to_state == "HALF_OPEN":
        return Notice("half_open", f"ralph {name}: breaker HALF_OPEN, trial next",
                      f"Cooldown over, the next iteration is the trial ({where})",
                      workspace, to_state, trigger, iteration)
    if to_state == "CLOSED":
        return Notice("close", f"ralph {name}: breaker CLOSED",
                      f"{reason} ({where})" if reason else f"Back to normal ({where})",
                      workspace, to_state, trigger, iteration)
    return None


def notice_for_limit_wait(*, until: str, reason: str, workspace: str, iteration: int) -> Notice:
    """A usage limit: the tree is frozen until the limit resets (one notice per wait, not per call)."""
    name = _project_name(workspace)
    return Notice("limit_wait", f"ralph {name}: usage limit, waiting until {until}",
                  f"{reason}. The tree is frozen until then; `ralph-supervise resume` ends the wait now "
                  f"(iteration {iteration}).", workspace, "CLOSED", "none", iteration)


def notice_for_child_exit(
    *, code: int, workspace: str, state: str, trigger: str, iteration: int
) -> Notice:
    """The loop ended by itself (its own exit code, 128+N for a signal)."""
    name = _project_name(workspace)
    how = "finished" if code == 0 else f"exited with code {code}"
    return Notice("child_exited", f"ralph {name}: loop {how}",
                  f"The supervised command {how} after iteration {iteration}; breaker {state}.",
                  workspace, state, trigger, iteration)


def format_text(notice: Notice) -> str:
    """Slack-flavoured text: bold title, the body, then the facts on one line."""
    facts = f"workspace `{notice.workspace}` · breaker {notice.state}"
    if notice.trigger and notice.trigger != "none":
        facts += f" · trigger {notice.trigger}"
    facts += f" · iteration {notice.iteration}"
    return f"*{notice.title}*\n{notice.body}\n{facts}"


def webhook_body(notice: Notice) -> bytes:
    """A Slack incoming-webhook payload (also accepted by Mattermost, Rocket.Chat, Discord's /slack)."""
    return json.dumps({"text": format_text(notice)}).encode("utf-8")


def validate_webhook_url(url: str) -> str | None:
    """None when usable, else a one-line reason (the URL itself is a secret: it is not repeated)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https"):
        return "--notify-webhook: must be an http:// or https:// URL"
    if not parsed.hostname:
        return "--notify-webhook: the URL has no host"
    return None


def backoff_delays(retries: int, base: float = 0.5, cap: float = 4.0) -> list[float]:
    """Pauses before each retry: doubling from `base`, capped, `retries` of them."""
    return [min(cap, base * (2**i)) for i in range(max(0, retries))]


def desktop_session_present(env: Mapping[str, str]) -> bool:
    """notify-send needs a graphical session bus; on a headless box or under a bare service it has none."""
    return any(env.get(key) for key in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"))


def _host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or "?"


# -- the notifier: a worker thread behind a bounded queue -------------------------------------


class Notifier:
    """Delivers notices to the desktop and a webhook without ever blocking or failing the caller."""

    def __init__(
        self,
        *,
        webhook_url: str | None,
        desktop: bool = True,
        timeout: float = 5.0,
        retries: int = 2,
        queue_size: int = 32,
        backoff_base: float = 0.5,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if webhook_url is not None:
            problem = validate_webhook_url(webhook_url)
            if problem:
                raise ValueError(problem)
        self._env = dict(os.environ if env is None else env)
        self._webhook_url = webhook_url
        self._notify_send = self._find_notify_send() if desktop else None
        self._timeout = timeout
        self._delays = backoff_delays(retries, base=backoff_base)
        self._queue: deque[Notice] = deque()
        self._queue_size = max(1, queue_size)
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._deadline = float("inf")
        self._last: Notice | None = None
        self.dropped = 0
        self.delivered = 0
        self.failed = 0
        self._worker = threading.Thread(target=self._run, name="ralph-notifier", daemon=True)
        self._worker.start()

    def _find_notify_send(self) -> str | None:
        path = shutil.which("notify-send", path=self._env.get("PATH"))
        if path is None or not desktop_session_present(self._env):
            return None
        return path

    @property
    def desktop_enabled(self) -> bool:
        return self._notify_send is not None

    def send(self, notice: Notice) -> None:
        """Enqueue and return at once; when the queue is full the oldest notice is dropped.

        A notice equal to the previous one (same transition, same iteration) is not sent again.
        """
        if self._notify_send is None and self._webhook_url is None:
            return
        with self._cond:
            if self._closing.is_set():
                log.warning("notify_dropped", kind=notice.kind, reason="notifier closed")
                return
            if notice == self._last:  # the same transition reported twice is still one message
                return
            self._last = notice
            if len(self._queue) >= self._queue_size:
                oldest = self._queue.popleft()
                self.dropped += 1
                log.warning("notify_dropped", kind=oldest.kind, reason="queue full", dropped=self.dropped)
            self._queue.append(notice)
            self._cond.notify()

    def close(self, timeout: float = 2.0) -> None:
        """Deliver what can be delivered within `timeout`, then stop the worker; never waits longer."""
        with self._cond:
            if not self._closing.is_set():
                self._deadline = time.monotonic() + max(0.0, timeout)
                self._closing.set()
            self._cond.notify_all()
        self._worker.join(max(0.0, timeout))
        with self._cond:
            left = len(self._queue)
            self._queue.clear()
        if left:
            self.dropped += left
            log.warning("notify_dropped", reason="closing", count=left, dropped=self.dropped)

    # -- the worker ---------------------------------------------------------------------------

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing.is_set():
                    self._cond.wait()
                if not self._queue or self._remaining() <= 0:
                    return
                notice = self._queue.popleft()
            try:
                self._deliver(notice)
            except Exception as exc:  # a notifier bug must not kill the worker silently
                self.failed += 1
                log.error("notify_failed", channel="internal", kind=notice.kind, error=repr(exc))

    def _deliver(self, notice: Notice) -> None:
        if self._notify_send is not None:
            self._deliver_desktop(notice)
        if self._webhook_url is not None:
            self._deliver_webhook(notice, self._webhook_url)

    def _deliver_desktop(self, notice: Notice) -> None:
        assert self._notify_send is not None
        urgency = "critical" if notice.kind in ("open", "final") else "normal"
        argv = [self._notify_send, "--app-name=ralph-supervise", f"--urgency={urgency}",
                notice.title, notice.body]
        try:
            subprocess.run(argv, env=self._env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=min(self._timeout, max(0.1, self._remaining())),
                           check=True, process_group=0)
            self.delivered += 1
        except subprocess.TimeoutExpired:
            self.failed += 1
            log.warning("notify_failed", channel="desktop", kind=notice.kind, error="notify-send timed out")
        except subprocess.CalledProcessError as exc:
            self.failed += 1
            err = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            log.warning("notify_failed", channel="desktop", kind=notice.kind,
                        error=f"notify-send exited {exc.returncode}: {err[-1] if err else ''}".strip())
        except OSError as exc:
            self.failed += 1
            log.warning("notify_failed", channel="desktop", kind=notice.kind, error=str(exc))

    def _deliver_webhook(self, notice: Notice, url: str) -> None:
        body = webhook_body(notice)
        attempts = 0
        error = ""
        for delay in [0.0, *self._delays]:
            if delay:
                wait = min(delay, self._remaining())
                if wait <= 0:
                    break
                if self._closing.wait(wait) and self._remaining() <= 0:
                    break
            budget = min(self._timeout, self._remaining())
            if budget <= 0:
                break
            attempts += 1
            request = urllib.request.Request(
                url, data=body, method="POST",
                headers={"Content-Type": "application/json", "User-Agent": "ralph-supervise"},
            )
            try:
                with urllib.request.urlopen(request, timeout=budget) as response:
                    response.read(65536)
                self.delivered += 1
                return
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the request itself is wrong; repeating it cannot help
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                error = str(reason) or type(reason).__name__
        self.failed += 1
        log.warning("notify_failed", channel="webhook", kind=notice.kind, host=_host_of(url),
                    attempts=attempts, error=error or "no time left")

"""Telling humans: notices through apprise, notify-send and the webhook.

Notices go out on an open, a final stop, a usage-limit wait starting and the child's exit (the webhook
and the desktop also hear of half-opens and closes), each event once, with the verdict line, the reason
and the path of `report.html`. apprise (a well-kept library speaking Slack, Discord, Telegram, ntfy,
email, Pushover, Matrix, plain JSON and more) does the talking: every `--notify URL` is one apprise
endpoint, and `--notify-webhook` is one too (an http(s) URL becomes apprise's `json://` with the Slack
body `{"text": ...}` it always had).

Why a worker thread per endpoint and a bounded queue: endpoints can be slow, down or hung, and
supervision must never wait for them, nor one endpoint for another. `send` only enqueues; a full queue
drops the oldest notice (counted, logged); each endpoint has a timeout, a few retries and a rate limit,
and says it failed at most once an hour. URLs are secrets: logs name an endpoint by its scheme and host
(apprise's private form of the URL), never by the URL.

    notifier = Notifier.from_settings(settings)
    notifier.send(notice_for_child_exit(code=0, workspace="/w/p", state="CLOSED", trigger="none", iteration=12))
    notifier.close()
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import structlog

from ralph_supervisor.outcomes import breaker_label
from ralph_supervisor import masking

log = structlog.get_logger(__name__)

__all__ = [
    "Notice",
    "NoticeKind",
    "Notifier",
    "backoff_delays",
    "desktop_session_present",
    "format_text",
    "message_for",
    "notice_for_child_exit",
    "notice_for_limit_wait",
    "notice_for_outage",
    "notice_for_transition",
    "parse_notify_urls",
    "validate_notify_url",
    "webhook_as_apprise",
]

NoticeKind = Literal["open", "close", "final", "child_exited", "half_open", "limit_wait", "outage"]
APPRISE_KINDS = frozenset({"open", "final", "limit_wait", "child_exited", "outage"})
"""What `--notify` endpoints hear about: the moments a human may want to act on."""

RATE_WINDOW_S = 3600.0
RATE_MAX = 12
"""At most this many notices per endpoint per hour; a final stop and the child's exit always pass."""
WARN_EVERY_S = 3600.0
SEEN_KEYS = 256



@dataclass(frozen=True)
class Notice:
    """One message for humans about one event. `key` is the event's identity: one key, one message."""

    kind: NoticeKind
    title: str
    body: str
    workspace: str
    state: str
    trigger: str
    iteration: int
    reason: str = ""
    verdict: str = ""
    """The report's verdict line for this moment (`report.verdict.verdict_line`)."""
    key: str = ""
    page: str = ""
    """The loop's page while `ralph-supervise serve` runs (its address only, never a token), else empty."""


# -- the pure part: what to say, and when -----------------------------------------------------


def _project_name(workspace: str) -> str:
    return Path(workspace).name or workspace


def _verdict(status: str, by: str, trigger: str, iteration: int, code: int | None = None,
             until: float | None = None) -> str:
    from ralph_supervisor.report.verdict import verdict_line

    return verdict_line(status, by, trigger=trigger, iteration=iteration, code=code, until=until)


def notice_for_transition(
    *,
    from_state: str,
    to_state: str,
    trigger: str,
    reason: str,
    iteration: int,
    workspace: str,
    final: bool = False,
    total_opens: int = 0,
) -> Notice | None:
    """The notice a breaker transition deserves, or None (no change of state, nothing to say)."""
    if from_state == to_state:
        return None
    name = _project_name(workspace)
    where = f"iteration {iteration}"
    key = f"{to_state}:{trigger}:{iteration}:{total_opens}:{final}"
    if to_state == "OPEN" and final:
        return Notice("final", f"ralph {name}: loop stopped for good ({trigger})",
                      f"{reason} ({where}). A human must decide what comes next.",
                      workspace, to_state, trigger, iteration, reason,
                      _verdict("stopped", "breaker", trigger, iteration), key)
    if to_state == "OPEN":
        return Notice("open", f"ralph {name}: breaker {breaker_label('OPEN', trigger)}", f"{reason} ({where})",
                      workspace, to_state, trigger, iteration, reason,
                      _verdict("paused", "hand" if trigger == "manual" else "breaker", trigger, iteration), key)
    if to_state == "HALF_OPEN":
        return Notice("half_open", f"ralph {name}: breaker HALF_OPEN, trial next",
                      f"Cooldown over, the next iteration is the trial ({where})",
                      workspace, to_state, trigger, iteration, reason, _verdict("trial", "breaker", trigger, iteration),
                      key)
    if to_state == "CLOSED":
        return Notice("close", f"ralph {name}: breaker CLOSED",
                      f"{reason} ({where})" if reason else f"Back to normal ({where})",
                      workspace, to_state, trigger, iteration, reason, _verdict("running", "", trigger, iteration), key)
    return None


def notice_for_child_exit(
    *, code: int, workspace: str, state: str, trigger: str, iteration: int
) -> Notice:
    """The loop ended by itself (its own exit code, 128+N for a signal)."""
    name = _project_name(workspace)
    how = "finished" if code == 0 else f"exited with code {code}"
    return Notice("child_exited", f"ralph {name}: loop {how}",
                  f"The supervised command {how} after iteration {iteration}; breaker {state}.",
                  workspace, state, trigger, iteration, "",
                  _verdict("finished", "itself", trigger, iteration, code=code), "child_exited")


WAIT_TITLES = {"limit": "usage limit", "ceiling": "usage ceiling", "outage": "API outage, backing off"}
"""What a freeze is for, by its kind (`limit_wait.Wait.kind`), in a notice's title."""


def notice_for_limit_wait(*, until: str | float | None, reason: str, workspace: str, iteration: int,
                          kind: str = "limit") -> Notice:
    """A usage limit (or the usage ceiling, or an outage's back-off: `kind`): the tree is frozen until the
    limit resets (one notice per wait, not per call). `until` is ISO-8601 UTC (or epoch seconds; None when
    the reset time is unknown)."""
    from ralph_supervisor.values import parse_time

    name = _project_name(workspace)
    moment = parse_time(until)
    verdict = _verdict("waiting", "limit", "none", iteration, until=moment)
    shown = f" until {until}" if isinstance(until, str) else ""
    return Notice("limit_wait", f"ralph {name}: {WAIT_TITLES.get(kind, 'usage limit')}, waiting{shown}",
                  f"{reason}. The tree is frozen until then; `ralph-supervise resume` ends the wait now "
                  f"(iteration {iteration}).", workspace, "CLOSED", "none", iteration, reason, verdict,
                  f"limit_wait:{iteration}:{until}")


def notice_for_outage(*, started: bool, since: float, message: str, workspace: str, iteration: int,
                      now: float | None = None) -> Notice:
    """The agent's API is out of reach (one notice when the outage starts) or reached again (one when it ends).
    The breaker stays CLOSED: nothing is counted, the loop waits."""
    from ralph_supervisor.store import iso_utc

    name = _project_name(workspace)
    at = iso_utc(since)
    if started:
        return Notice("outage", f"ralph {name}: API outage since {at}",
                      f"The agent cannot reach its API ({message}). Nothing is counted against the loop; the "
                      f"tree is frozen for a back-off if it lasts longer than --outage-max (iteration {iteration}).",
                      workspace, "CLOSED", "none", iteration, message, _verdict("running", "", "none", iteration),
                      f"outage:{at}:start")
    lasted = "" if now is None else f" after {max(0.0, now - since) / 60:.0f} min"
    return Notice("outage", f"ralph {name}: API outage over{lasted}",
                  f"The agent reaches its API again (out of reach since {at}; iteration {iteration}).",
                  workspace, "CLOSED", "none", iteration, message, _verdict("running", "", "none", iteration),
                  f"outage:{at}:end")


def format_text(notice: Notice, report: str = "") -> str:
    """Slack-flavoured text: bold title, the body, the facts on one line, then the report's path."""
    facts = f"workspace `{notice.workspace}` · breaker {notice.state}"
    if notice.trigger and notice.trigger != "none":
        facts += f" · trigger {notice.trigger}"
    facts += f" · iteration {notice.iteration}"
    return (f"*{notice.title}*\n{notice.body}\n{facts}" + (f"\nreport: {report}" if report else "")
            + (f"\npage: {notice.page}" if notice.page else ""))


def message_for(notice: Notice, report: str = "") -> str:
    """The body every `--notify` endpoint gets: the verdict line, the reason, where the report is."""
    lines = [notice.verdict or notice.body]
    if notice.reason and notice.reason not in lines[0]:
        lines.append(f"Why: {notice.reason}")
    lines.append(f"Workspace: {notice.workspace}")
    if report:
        lines.append(f"Report: {report}")
    if notice.page:
        lines.append(f"Page: {notice.page}")
    return "\n".join(lines)


def backoff_delays(retries: int, base: float = 0.5, cap: float = 4.0) -> list[float]:
    """Pauses before each retry: doubling from `base`, capped, `retries` of them."""
    return [min(cap, base * (2**i)) for i in range(max(0, retries))]


def desktop_session_present(env: Mapping[str, str]) -> bool:
    """notify-send needs a graphical session bus; on a headless box or under a bare service it has none."""
    return any(env.get(key) for key in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"))


# -- apprise: URLs ----------------------------------------------------------------------------


class _AppriseLog(logging.Handler):
    """Keeps apprise's own log lines (per thread) for our one-line warnings, and off stderr."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        lines = getattr(self.local, "lines", None)
        if lines is not None and len(lines) < 50:
            lines.append((record.levelno, record.getMessage()))


_APPRISE_LOG = _AppriseLog()
_apprise_ready = threading.Lock()


def _apprise() -> Any:
    """apprise, imported on first use, its logger routed to us (it never prints on our stderr)."""
    import apprise

    with _apprise_ready:
        logger = logging.getLogger("apprise")
        if _APPRISE_LOG not in logger.handlers:
            logger.addHandler(_APPRISE_LOG)
            logger.propagate = False
            logger.setLevel(logging.DEBUG)
    return apprise


def parse_notify_urls(raw: object) -> tuple[str, ...]:
    """URLs from a flag, a TOML string or list, or RALPH_SUPERVISE_NOTIFY (space or comma separated,
    split the way apprise's own CLI splits them, so `mailto://...?to=a,b` stays one URL)."""
    items = raw if isinstance(raw, list) else [raw]
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"expected a URL or a list of URLs, got {raw!r}")
    from apprise.utils.parse import parse_urls

    urls = tuple(url for item in items for url in parse_urls(item))
    for url in urls:
        problem = validate_notify_url(url)
        if problem:
            raise ValueError(problem)
    return urls


def _scheme(url: str) -> str:
    head = url.split("://", 1)[0] if "://" in url else ""
    return head if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,20}", head) else "?"


def validate_notify_url(url: str) -> str | None:
    """None when apprise can send to `url`, else a one-line reason that does not repeat the URL (a secret)."""
    apprise = _apprise()
    if apprise.Apprise.instantiate(url) is None:
        return (f"apprise cannot send to this URL (scheme {_scheme(url)}://); "
                "see https://appriseit.com/services/ for the URL of each service")
    return None


def webhook_as_apprise(url: str) -> str:
    """`--notify-webhook`: an http(s) URL gets the Slack incoming-webhook body `{"text": ...}` through
    apprise's JSON plugin (keys mapped with `:key=new`, dropped with `:key=`); any other value is already
    an apprise URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url
    mapping = ":version=&:title=&:attachments=&:type=&:message=text"
    query = f"{parts.query}&{mapping}" if parts.query else mapping
    scheme = "jsons" if parts.scheme == "https" else "json"
    return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path or "/", query, ""))


def _secrets_in(url: str) -> list[str]:
    """Pieces of a URL that may be secret (user, password, path segments, query values), longest first."""
    parts = urllib.parse.urlsplit(url)
    pieces = [parts.username or "", parts.password or ""]
    pieces += [urllib.parse.unquote(p) for p in parts.path.split("/")]
    pieces += [v for _, v in urllib.parse.parse_qsl(parts.query)]
    pieces += [parts.netloc.rpartition("@")[0]]
    if not re.fullmatch(r"[\w.-]+(:\d+)?", parts.netloc.rpartition("@")[2] or ""):
        pieces.append(parts.netloc)  # a "host" that is really a token (slack://T1/B1/C1)
    return sorted({p for p in pieces if len(p) >= 4}, key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` without the URL's secret pieces, nor the request path that requests' errors quote."""
    text = re.sub(r"(with url: )\S+", r"\1***", text)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


# -- the channels -----------------------------------------------------------------------------


class _Channel:
    """One place notices go. `deliver` returns (ok, error, attempts); it may block for what `remaining()` allows."""

    label = "?"
    kinds: frozenset[str] | None = None

    def deliver(self, notice: Notice, remaining: Callable[[], float],
                closing: threading.Event) -> tuple[bool, str, int]:
        raise NotImplementedError


class _AppriseChannel(_Channel):
    """One apprise endpoint. `label` is its private form cut to scheme and host: safe to log."""

    def __init__(self, url: str, *, kinds: frozenset[str] | None, timeout: float, retries: int,
                 backoff_base: float, report: str, slack_body: bool) -> None:
        apprise = _apprise()
        plugin = apprise.Apprise.instantiate(url)
        if plugin is None:
            raise ValueError(validate_notify_url(url) or "apprise cannot send to this URL")
        self.plugin = plugin
        self.notify_type = apprise.NotifyType
        private = str(plugin.url(privacy=True))
        scheme, _, rest = private.partition("://")
        self.label = f"{scheme}://{rest.split('/', 1)[0].split('?', 1)[0]}"
        self.kinds = kinds
        self.timeout = timeout
        self.delays = backoff_delays(retries, base=backoff_base)
        self.report = report
        self.slack_body = slack_body
        self.secrets = _secrets_in(url)

    def _type(self, notice: Notice) -> Any:
        t = self.notify_type
        if notice.kind in ("open", "final"):
            return t.FAILURE
        if notice.kind == "limit_wait" or (notice.kind == "child_exited" and "code 0" not in notice.verdict):
            return t.WARNING
        return t.SUCCESS if notice.kind in ("close", "child_exited") else t.INFO

    def deliver(self, notice: Notice, remaining: Callable[[], float],
                closing: threading.Event) -> tuple[bool, str, int]:
        if self.slack_body:
            title, body = "", format_text(notice, self.report)
        else:
            title, body = notice.title, message_for(notice, self.report)
        error, attempts = "", 0
        for delay in [0.0, *self.delays]:
            if delay:
                wait = min(delay, remaining())
                if wait <= 0:
                    break
                closing.wait(wait)  # closing cuts the pause short; the deadline decides what is left
            budget = min(self.timeout, remaining())
            if budget <= 0:
                break
            self.plugin.socket_connect_timeout = self.plugin.socket_read_timeout = max(0.05, budget)
            attempts += 1
            _APPRISE_LOG.local.lines = []
            try:
                ok = bool(self.plugin.notify(body=body, title=title, notify_type=self._type(notice)))
            except Exception as exc:  # noqa: BLE001 - a plugin bug is one failed delivery
                ok, _APPRISE_LOG.local.lines = False, [(logging.ERROR, f"{type(exc).__name__}: {exc}")]
            lines = _APPRISE_LOG.local.lines
            _APPRISE_LOG.local.lines = None
            if ok:
                return True, "", attempts
            error = scrub(_apprise_error(lines), self.secrets)
            status = re.search(r"error=(\d{3})", error)
            if status and 400 <= int(status.group(1)) < 500 and int(status.group(1)) not in (408, 429):
                break  # the request itself is wrong; repeating it cannot help
        return False, error or "no time left", attempts


def _apprise_error(lines: list[tuple[int, str]]) -> str:
    """apprise's warning, with the socket error it logged at debug level (timeouts, refused connections)."""
    warning = next((text for level, text in reversed(lines) if level >= logging.WARNING), "")
    socket_error = next((text for level, text in lines if text.startswith("Socket Exception")), "")
    return " ".join(part for part in (warning, socket_error) if part)[:300] or "delivery failed"


class _DesktopChannel(_Channel):
    label = "desktop"

    def __init__(self, path: str, env: Mapping[str, str], timeout: float) -> None:
        self.path, self.env, self.timeout = path, env, timeout

    def deliver(self, notice: Notice, remaining: Callable[[], float],
                closing: threading.Event) -> tuple[bool, str, int]:
        urgency = "critical" if notice.kind in ("open", "final") else "normal"
        argv = [self.path, "--app-name=ralph-supervise", f"--urgency={urgency}", notice.title, notice.body]
        try:
            subprocess.run(argv, env=dict(self.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=min(self.timeout, max(0.1, remaining())),
                           check=True, process_group=0)
            return True, "", 1
        except subprocess.TimeoutExpired:
            return False, "notify-send timed out", 1
        except subprocess.CalledProcessError as exc:
            err = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            return False, f"notify-send exited {exc.returncode}: {err[-1] if err else ''}".strip(), 1
        except OSError as exc:
            return False, str(exc), 1


class _Outbox:
    """One channel's bounded queue and worker thread, its rate limit and its hourly warning."""

    def __init__(self, channel: _Channel, queue_size: int, clock: Callable[[], float]) -> None:
        self.channel = channel
        self.queue: deque[Notice] = deque()
        self.queue_size = max(1, queue_size)
        self.clock = clock
        self.cond = threading.Condition()
        self.closing = threading.Event()
        self.deadline = float("inf")
        self.sent_at: deque[float] = deque()
        self.warned_at: dict[str, float] = {}
        self.dropped = self.delivered = self.failed = self.limited = 0
        self.thread = threading.Thread(target=self._run, name=f"ralph-notify {channel.label}", daemon=True)
        self.thread.start()

    def put(self, notice: Notice) -> None:
        with self.cond:
            if self.closing.is_set():
                log.warning("notify_dropped", kind=notice.kind, endpoint=self.channel.label, reason="notifier closed")
                return
            now = self.clock()
            while self.sent_at and now - self.sent_at[0] >= RATE_WINDOW_S:
                self.sent_at.popleft()
            if notice.kind not in ("final", "child_exited") and len(self.sent_at) >= RATE_MAX:
                self.limited += 1
                self._warn("notify_rate_limited", now, kind=notice.kind, limited=self.limited,
                           limit=f"{RATE_MAX} per hour")
                return
            self.sent_at.append(now)
            if len(self.queue) >= self.queue_size:
                oldest = self.queue.popleft()
                self.dropped += 1
                log.warning("notify_dropped", kind=oldest.kind, endpoint=self.channel.label, reason="queue full",
                            dropped=self.dropped)
            self.queue.append(notice)
            self.cond.notify()

    def _warn(self, event: str, now: float, **fields: Any) -> None:
        """At most one warning of each kind per endpoint and hour (a dead endpoint is news once)."""
        last = self.warned_at.get(event)
        if last is None or now - last >= WARN_EVERY_S:
            self.warned_at[event] = now
            log.warning(event, endpoint=self.channel.label, **fields)

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.closing.is_set():
                    self.cond.wait()
                if not self.queue or time.monotonic() >= self.deadline:
                    return
                notice = self.queue.popleft()
            try:
                ok, error, attempts = self.channel.deliver(notice, self._remaining, self.closing)
            except Exception as exc:  # noqa: BLE001 - a notifier bug must not kill the worker silently
                ok, error, attempts = False, repr(exc), 1
            if ok:
                self.delivered += 1
            else:
                self.failed += 1
                self._warn("notify_failed", self.clock(), kind=notice.kind, attempts=attempts, error=error,
                           channel="desktop" if isinstance(self.channel, _DesktopChannel) else "apprise")

    def close(self, deadline: float) -> None:
        with self.cond:
            if not self.closing.is_set():
                self.deadline = deadline
                self.closing.set()
            self.cond.notify_all()

    def abandon(self) -> int:
        with self.cond:
            left = len(self.queue)
            self.queue.clear()
        self.dropped += left
        return left


# -- the notifier -----------------------------------------------------------------------------


class Notifier:
    """Delivers notices to every channel without ever blocking or failing the caller."""

    def __init__(
        self,
        *,
        webhook_url: str | None = None,
        urls: Sequence[str] = (),
        desktop: bool = True,
        timeout: float = 5.0,
        retries: int = 2,
        queue_size: int = 32,
        backoff_base: float = 0.5,
        report: str = "",
        on_open: str = "pause",
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        page: Callable[[], str | None] | None = None,
    ) -> None:
        self._env = dict(os.environ if env is None else env)
        self.page = page
        self.report = report
        self.on_open = on_open
        channels: list[_Channel] = []
        notify_send = self._find_notify_send() if desktop else None
        if notify_send is not None:
            channels.append(_DesktopChannel(notify_send, self._env, timeout))
        endpoints = [(url, frozenset(APPRISE_KINDS), False) for url in urls]
        if webhook_url:
            endpoints.append((webhook_as_apprise(webhook_url), None,  # type: ignore[arg-type]
                              urllib.parse.urlsplit(webhook_url).scheme in ("http", "https")))
        for url, kinds, slack in endpoints:
            channels.append(_AppriseChannel(url, kinds=kinds, timeout=timeout, retries=retries,
                                            backoff_base=backoff_base, report=report, slack_body=slack))
        self._outboxes = [_Outbox(channel, queue_size, clock) for channel in channels]
        self._seen: deque[str] = deque(maxlen=SEEN_KEYS)
        self._lock = threading.Lock()
        self._closed = False
        self.endpoints = tuple(c.label for c in channels if not isinstance(c, _DesktopChannel))

    @classmethod
    def from_settings(cls, settings: Any) -> Notifier:
        """The supervisor's notifier: `--notify` URLs, `--notify-webhook`, notify-send, report.html's path."""
        from ralph_supervisor.registry import entry_file_name
        from ralph_supervisor.files import report_html
        from ralph_supervisor.serve.announce import page_for

        loop_id = entry_file_name(settings.workspace, settings.state_dir).removesuffix(".json")
        notifier = cls(webhook_url=settings.notify_webhook, urls=settings.notify, desktop=settings.notify_desktop,
                       report=str(report_html.path(settings.state_dir)), on_open=settings.on_open,
                       page=lambda: page_for(loop_id))
        if notifier.endpoints:
            log.info("notify_endpoints", endpoints=list(notifier.endpoints))
        return notifier

    def _find_notify_send(self) -> str | None:
        path = shutil.which("notify-send", path=self._env.get("PATH"))
        if path is None or not desktop_session_present(self._env):
            return None
        return path

    @property
    def desktop_enabled(self) -> bool:
        return any(isinstance(o.channel, _DesktopChannel) for o in self._outboxes)

    @property
    def delivered(self) -> int:
        return sum(o.delivered for o in self._outboxes)

    @property
    def failed(self) -> int:
        return sum(o.failed for o in self._outboxes)

    @property
    def dropped(self) -> int:
        return sum(o.dropped for o in self._outboxes)

    @property
    def rate_limited(self) -> int:
        return sum(o.limited for o in self._outboxes)

    def send(self, notice: Notice) -> None:
        """Enqueue for every channel that wants this kind, and return at once. An event already sent
        (the same `key`, or the same notice) is not sent again."""
        if not self._outboxes:
            return
        if notice.kind == "open" and notice.trigger != "manual" and self.on_open in ("kill", "stop"):
            # What an open does depends on --on-open: the tree is stopped, to restart or for good.
            status, by = ("paused", "restart") if self.on_open == "kill" else ("stopped", "breaker")
            notice = replace(notice, verdict=_verdict(status, by, notice.trigger, notice.iteration))
        key = notice.key or repr(notice)
        if self.page is not None and not notice.page:
            notice = replace(notice, page=self.page() or "")
        notice = replace(notice, title=masking.mask(notice.title), body=masking.mask(notice.body),
                         reason=masking.mask(notice.reason), verdict=masking.mask(notice.verdict))
        with self._lock:
            if self._closed:
                log.warning("notify_dropped", kind=notice.kind, reason="notifier closed")
                return
            if key in self._seen:
                return
            self._seen.append(key)
        for outbox in self._outboxes:
            if outbox.channel.kinds is None or notice.kind in outbox.channel.kinds:
                outbox.put(notice)

    def close(self, timeout: float = 2.0) -> None:
        """Deliver what can be delivered within `timeout`, then stop the workers; never waits longer."""
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + max(0.0, timeout)
        for outbox in self._outboxes:
            outbox.close(deadline)
        for outbox in self._outboxes:
            outbox.thread.join(max(0.0, deadline - time.monotonic()))
        left = sum(outbox.abandon() for outbox in self._outboxes)
        if left:
            log.warning("notify_dropped", reason="closing", count=left, dropped=self.dropped)

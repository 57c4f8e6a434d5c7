"""Notifications (real HTTP server on loopback, a real notify-send stand-in)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from ralph_supervisor.notify import (
    Notice,
    Notifier,
    backoff_delays,
    format_text,
    notice_for_child_exit,
    notice_for_transition,
    validate_webhook_url,
    webhook_body,
)


def make_notice(title: str = "ralph demo: breaker OPEN (no-progress)", kind: str = "open") -> Notice:
    return Notice(kind=kind, title=title, body="3 iterations without progress (iteration 9)",  # type: ignore[arg-type]
                  workspace="/srv/demo", state="OPEN", trigger="no-progress", iteration=9)


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# -- a real webhook receiver -------------------------------------------------------------------


@dataclass
class Receiver:
    url: str
    posts: list[dict] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give, in order; then 200
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    hold: bool = False


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            rec = box["r"]
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            rec.posts.append({"path": self.path, "type": self.headers.get("Content-Type"),
                              "body": json.loads(body)})
            rec.entered.set()
            if rec.hold:
                rec.release.wait(10)
            status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hooks/T000")
    box["r"] = rec
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield rec
    rec.release.set()
    server.shutdown()
    server.server_close()


def test_each_notice_becomes_exactly_one_slack_json_post(receiver: Receiver):
    notifier = Notifier(webhook_url=receiver.url, desktop=False)
    notices = [make_notice(f"title {i}") for i in range(3)]
    for notice in notices:
        notifier.send(notice)
    notifier.close(timeout=5.0)
    assert [p["body"] for p in receiver.posts] == [{"text": format_text(n)} for n in notices]
    assert {p["type"] for p in receiver.posts} == {"application/json"}
    assert {p["path"] for p in receiver.posts} == {"/hooks/T000"}
    assert notifier.delivered == 3 and notifier.failed == 0


def test_the_same_transition_reported_twice_is_sent_once(receiver: Receiver):
    notifier = Notifier(webhook_url=receiver.url, desktop=False)
    opened = make_notice("opened")
    notifier.send(opened)
    notifier.send(opened)
    notifier.send(make_notice("half open", kind="half_open"))
    notifier.send(opened)  # a later open with the same facts is a new transition: sent again
    notifier.close(timeout=5.0)
    titles = [p["body"]["text"].splitlines()[0] for p in receiver.posts]
    assert titles == ["*opened*", "*half open*", "*opened*"]


def test_a_server_error_is_retried_a_bounded_number_of_times_then_logged(receiver: Receiver):
    receiver.statuses = [500] * 10
    with capture_logs() as logs:
        notifier = Notifier(webhook_url=receiver.url, desktop=False, retries=2, backoff_base=0.01)
        notifier.send(make_notice())
        assert wait_until(lambda: notifier.failed == 1)
        notifier.close()
    assert len(receiver.posts) == 3  # the first try and 2 retries, no more
    failures = [e for e in logs if e["event"] == "notify_failed"]
    assert len(failures) == 1
    assert failures[0]["channel"] == "webhook"
    assert failures[0]["attempts"] == 3
    assert failures[0]["error"] == "HTTP 500"
    assert "T000" not in json.dumps(failures[0])  # the webhook URL is a secret; only the host is logged


def test_a_transient_error_then_success_delivers_once(receiver: Receiver):
    receiver.statuses = [503]
    notifier = Notifier(webhook_url=receiver.url, desktop=False, retries=2, backoff_base=0.01)
    notifier.send(make_notice())
    notifier.close(timeout=5.0)
    assert len(receiver.posts) == 2
    assert notifier.delivered == 1 and notifier.failed == 0


def test_a_client_error_is_not_retried(receiver: Receiver):
    receiver.statuses = [404]
    notifier = Notifier(webhook_url=receiver.url, desktop=False, retries=3, backoff_base=0.01)
    notifier.send(make_notice())
    assert wait_until(lambda: notifier.failed == 1)
    notifier.close()
    assert len(receiver.posts) == 1


def test_a_server_that_never_answers_is_cut_off_by_the_timeout():
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog, nobody ever answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    try:
        with capture_logs() as logs:
            notifier = Notifier(webhook_url=url, desktop=False, timeout=0.3, retries=1, backoff_base=0.01)
            notifier.send(make_notice())
            assert wait_until(lambda: notifier.failed == 1, timeout=10.0)
            notifier.close()
        failure = next(e for e in logs if e["event"] == "notify_failed")
        assert failure["attempts"] == 2
        assert "timed out" in failure["error"]
    finally:
        silent.close()


def test_send_never_waits_for_a_hung_webhook_and_the_queue_drops_the_oldest(receiver: Receiver):
    receiver.hold = True  # the first POST hangs until we release it
    notifier = Notifier(webhook_url=receiver.url, desktop=False, queue_size=2, timeout=10.0)
    notifier.send(make_notice("first"))
    assert receiver.entered.wait(10)
    # The worker is stuck inside the first POST. If send() waited for it, we would never get past here
    # to release the server (the test would hang and pytest-timeout would fail it).
    for title in ("second", "third", "fourth", "fifth"):
        notifier.send(make_notice(title))
    assert notifier.dropped == 2
    receiver.hold = False
    receiver.release.set()
    notifier.close(timeout=5.0)
    titles = [p["body"]["text"].splitlines()[0] for p in receiver.posts]
    assert titles == ["*first*", "*fourth*", "*fifth*"]


def test_close_returns_within_its_timeout_even_when_the_webhook_hangs(receiver: Receiver):
    receiver.hold = True
    notifier = Notifier(webhook_url=receiver.url, desktop=False, timeout=10.0)
    notifier.send(make_notice("stuck"))
    notifier.send(make_notice("queued"))
    assert receiver.entered.wait(10)
    with capture_logs() as logs:
        notifier.close(timeout=0.2)  # returns although the POST is still in flight
    assert any(e["event"] == "notify_dropped" and e["count"] == 1 for e in logs)
    receiver.release.set()


# -- desktop notifications through a notify-send stand-in ----------------------------------------


def fake_notify_send(bin_dir: Path, record: Path, exit_code: int = 0) -> None:
    bin_dir.mkdir()
    script = bin_dir / "notify-send"
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> "{record}"\n'
                      f"echo fake failure >&2\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_desktop_notice_runs_notify_send_with_title_and_body(tmp_path: Path):
    record = tmp_path / "calls.txt"
    fake_notify_send(tmp_path / "bin", record)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", DISPLAY=":99")
    notifier = Notifier(webhook_url=None, desktop=True, env=env)
    assert notifier.desktop_enabled
    notice = make_notice()
    notifier.send(notice)
    notifier.close(timeout=5.0)
    assert record.read_text().splitlines() == [
        "--app-name=ralph-supervise", "--urgency=critical", notice.title, notice.body]


def test_desktop_is_skipped_silently_without_a_graphical_session(tmp_path: Path):
    record = tmp_path / "calls.txt"
    fake_notify_send(tmp_path / "bin", record)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")}
    env["PATH"] = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    notifier = Notifier(webhook_url=None, desktop=True, env=env)
    assert not notifier.desktop_enabled
    notifier.send(make_notice())
    notifier.close()
    assert not record.exists()


def test_a_failing_notify_send_is_logged_and_the_webhook_still_gets_the_notice(
    tmp_path: Path, receiver: Receiver
):
    record = tmp_path / "calls.txt"
    fake_notify_send(tmp_path / "bin", record, exit_code=1)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", DBUS_SESSION_BUS_ADDRESS="unix:x")
    with capture_logs() as logs:
        notifier = Notifier(webhook_url=receiver.url, desktop=True, env=env)
        notifier.send(make_notice())
        notifier.close(timeout=5.0)
    failure = next(e for e in logs if e["event"] == "notify_failed")
    assert failure["channel"] == "desktop"
    assert "fake failure" in failure["error"]
    assert len(receiver.posts) == 1


def test_a_bad_webhook_url_is_refused_with_a_one_line_reason():
    with pytest.raises(ValueError, match="--notify-webhook"):
        Notifier(webhook_url="ftp://example.invalid/x", desktop=False)
    assert validate_webhook_url("https://hooks.example.com/services/T/B/X") is None
    assert validate_webhook_url("http:///nohost") is not None


# -- what to say, and when (pure) ------------------------------------------------------------


def test_transitions_map_to_one_notice_kind_each():
    def kind(frm: str, to: str, final: bool = False) -> str | None:
        notice = notice_for_transition(from_state=frm, to_state=to, trigger="same-error", reason="r",
                                       iteration=4, workspace="/home/u/proj", final=final)
        return notice.kind if notice else None

    assert kind("CLOSED", "OPEN") == "open"
    assert kind("HALF_OPEN", "OPEN") == "open"
    assert kind("CLOSED", "OPEN", final=True) == "final"
    assert kind("OPEN", "HALF_OPEN") == "half_open"
    assert kind("HALF_OPEN", "CLOSED") == "close"
    assert kind("OPEN", "CLOSED") == "close"
    assert kind("CLOSED", "CLOSED") is None
    assert kind("OPEN", "OPEN") is None


def test_open_notice_names_project_trigger_and_reason():
    notice = notice_for_transition(from_state="CLOSED", to_state="OPEN", trigger="no-progress",
                                   reason="3 iterations without progress", iteration=9,
                                   workspace="/home/u/proj")
    assert notice is not None
    assert notice.title == "ralph proj: breaker OPEN (no-progress)"
    assert notice.body == "3 iterations without progress (iteration 9)"
    text = format_text(notice)
    assert text.startswith("*ralph proj: breaker OPEN (no-progress)*\n")
    assert "workspace `/home/u/proj` · breaker OPEN · trigger no-progress · iteration 9" in text
    assert json.loads(webhook_body(notice)) == {"text": text}


def test_child_exit_notice_says_how_the_loop_ended():
    done = notice_for_child_exit(code=0, workspace="/w/p", state="CLOSED", trigger="none", iteration=12)
    assert (done.kind, done.title) == ("child_exited", "ralph p: loop finished")
    crashed = notice_for_child_exit(code=137, workspace="/w/p", state="CLOSED", trigger="none", iteration=3)
    assert crashed.title == "ralph p: loop exited with code 137"
    assert "trigger" not in format_text(crashed)


@given(st.integers(min_value=0, max_value=20), st.floats(min_value=0.001, max_value=10))
def test_backoff_is_bounded_and_never_shrinks(retries, base):
    delays = backoff_delays(retries, base=base, cap=4.0)
    assert len(delays) == retries
    assert all(0 < d <= 4.0 for d in delays)
    assert delays == sorted(delays)

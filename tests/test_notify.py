"""Notifications: real HTTP servers on loopback (apprise's json:// and a Slack-style URL), a real notify-send stand-in."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from ralph_supervisor import notify
from ralph_supervisor.notify import (
    Notice,
    Notifier,
    backoff_delays,
    format_text,
    notice_for_child_exit,
    message_for,
    notice_for_limit_wait,
    notice_for_transition,
    parse_notify_urls,
    validate_notify_url,
    webhook_as_apprise,
)
from tests.helpers import wait_for


def make_notice(title: str = "ralph demo: breaker OPEN no-progress", kind: str = "open") -> Notice:
    return Notice(kind=kind, title=title, body="3 iterations without progress (iteration 9)",  # type: ignore[arg-type]
                  workspace="/srv/demo", state="OPEN", trigger="no-progress", iteration=9)




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
    notifier = Notifier(webhook_url=receiver.url, desktop=False, report="/srv/demo/.ralph-supervise/report.html")
    notices = [make_notice(f"title {i}") for i in range(3)]
    for notice in notices:
        notifier.send(notice)
    notifier.close(timeout=5.0)
    # The body a Slack-style incoming webhook always got, now sent by apprise's JSON plugin.
    assert [p["body"] for p in receiver.posts] == [
        {"text": format_text(n, "/srv/demo/.ralph-supervise/report.html")} for n in notices]
    assert {p["type"] for p in receiver.posts} == {"application/json"}
    assert {p["path"] for p in receiver.posts} == {"/hooks/T000"}
    assert notifier.delivered == 3 and notifier.failed == 0


def test_json_and_slack_style_apprise_urls_get_the_verdict_reason_and_report(receiver: Receiver):
    port = receiver.url.split(":")[2].split("/")[0]
    notifier = Notifier(urls=[f"json://127.0.0.1:{port}/apprise/TOKEN1234", f"mmost://127.0.0.1:{port}/SECRET5678"],
                        desktop=False, report="/srv/demo/.ralph-supervise/report.html")
    opened = notice_for_transition(from_state="CLOSED", to_state="OPEN", trigger="no-progress",
                                   reason="no progress in 3 iterations", iteration=9, workspace="/srv/demo",
                                   total_opens=1)
    assert opened is not None
    notifier.send(opened)
    notifier.send(notice_for_transition(from_state="OPEN", to_state="HALF_OPEN", trigger="no-progress", reason="",
                                        iteration=9, workspace="/srv/demo"))  # not a --notify event
    notifier.close(timeout=10.0)
    by_path = {p["path"]: p["body"] for p in receiver.posts}
    assert sorted(by_path) == ["/apprise/TOKEN1234", "/hooks/SECRET5678"]
    sent = by_path["/apprise/TOKEN1234"]
    assert sent["title"] == "ralph demo: breaker OPEN no-progress" and sent["type"] == "failure"
    assert sent["message"].splitlines() == [
        "Paused by the breaker (no-progress) at iteration 9: it tries again after the cooldown.",
        "Why: no progress in 3 iterations", "Workspace: /srv/demo",
        "Report: /srv/demo/.ralph-supervise/report.html"]
    assert sent["message"] in by_path["/hooks/SECRET5678"]["text"]  # Mattermost's Slack-style {"text": ...}


def test_the_verdict_of_an_open_follows_what_on_open_does_to_the_tree(receiver: Receiver):
    port = receiver.url.split(":")[2].split("/")[0]
    for on_open, expected in (("kill", "Stopped by the breaker (same-error) at iteration 4: the loop starts again "
                                       "after the cooldown."),
                              ("stop", "Stopped for good by the breaker (same-error) at iteration 4.")):
        receiver.posts.clear()
        notifier = Notifier(urls=[f"json://127.0.0.1:{port}/{on_open}"], desktop=False, on_open=on_open)
        notifier.send(notice_for_transition(from_state="CLOSED", to_state="OPEN", trigger="same-error", reason="r",
                                            iteration=4, workspace="/srv/demo"))
        notifier.close(timeout=10.0)
        assert [p["body"]["message"].splitlines()[0] for p in receiver.posts] == [expected]


def test_the_same_event_reported_twice_is_sent_once(receiver: Receiver):
    notifier = Notifier(webhook_url=receiver.url, desktop=False)
    opened = make_notice("opened")
    notifier.send(opened)
    notifier.send(opened)
    notifier.send(make_notice("half open", kind="half_open"))
    notifier.send(opened)  # still the same event: each event is sent once
    exited = notice_for_child_exit(code=0, workspace="/srv/demo", state="CLOSED", trigger="none", iteration=3)
    notifier.send(exited)
    notifier.send(notice_for_child_exit(code=0, workspace="/srv/demo", state="CLOSED", trigger="none", iteration=4))
    notifier.close(timeout=10.0)
    titles = [p["body"]["text"].splitlines()[0] for p in receiver.posts]
    assert titles == ["*opened*", "*half open*", "*ralph demo: loop finished*"]


def test_a_server_error_is_retried_a_bounded_number_of_times_then_warned_once_an_hour(receiver: Receiver):
    receiver.statuses = [500] * 10
    clock = [1000.0]
    with capture_logs() as logs:
        notifier = Notifier(webhook_url=receiver.url, desktop=False, retries=2, backoff_base=0.01,
                            clock=lambda: clock[0])
        notifier.send(make_notice("first"))
        assert wait_for(lambda: notifier.failed == 1)
        notifier.send(make_notice("second"))
        assert wait_for(lambda: notifier.failed == 2)
        clock[0] += 3601  # an hour later the endpoint's trouble is news again
        notifier.send(make_notice("third"))
        assert wait_for(lambda: notifier.failed == 3)
        notifier.close()
    assert len(receiver.posts) == 9  # three notices, each the first try and 2 retries, no more
    failures = [e for e in logs if e["event"] == "notify_failed"]
    assert len(failures) == 2
    assert failures[0]["endpoint"] == f"json://127.0.0.1:{receiver.url.split(':')[2].split('/')[0]}"
    assert failures[0]["attempts"] == 3 and "error=500" in failures[0]["error"]
    assert "T000" not in json.dumps(logs)  # the webhook URL is a secret: only scheme and host are logged


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
    assert wait_for(lambda: notifier.failed == 1)
    notifier.close()
    assert len(receiver.posts) == 1


def test_notices_beyond_the_hourly_rate_are_dropped_with_one_warning(receiver: Receiver, monkeypatch):
    monkeypatch.setattr(notify, "RATE_MAX", 3)
    with capture_logs() as logs:
        notifier = Notifier(webhook_url=receiver.url, desktop=False)
        for i in range(6):
            notifier.send(make_notice(f"open {i}"))
        notifier.send(notice_for_child_exit(code=1, workspace="/srv/demo", state="OPEN", trigger="x", iteration=9))
        notifier.close(timeout=10.0)
    titles = [p["body"]["text"].splitlines()[0] for p in receiver.posts]
    assert titles == ["*open 0*", "*open 1*", "*open 2*", "*ralph demo: loop exited with code 1*"]
    assert notifier.rate_limited == 3
    assert len([e for e in logs if e["event"] == "notify_rate_limited"]) == 1


def test_a_server_that_never_answers_is_cut_off_by_the_timeout():
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog, nobody ever answers
    url = f"json://127.0.0.1:{silent.getsockname()[1]}/hang"
    try:
        with capture_logs() as logs:
            notifier = Notifier(urls=[url], desktop=False, timeout=0.3, retries=1, backoff_base=0.01)
            notifier.send(make_notice())
            assert wait_for(lambda: notifier.failed == 1, timeout=10.0)
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


def test_a_hung_endpoint_does_not_delay_another(receiver: Receiver):
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        notifier = Notifier(urls=[f"json://127.0.0.1:{silent.getsockname()[1]}/hang"], webhook_url=receiver.url,
                            desktop=False, timeout=30.0)
        notifier.send(make_notice("to both"))
        assert wait_for(lambda: len(receiver.posts) == 1, timeout=10.0)  # long before the hung one times out
        notifier.close(timeout=0.2)
    finally:
        silent.close()


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


def test_a_url_apprise_cannot_use_is_a_one_line_error_that_keeps_the_secret():
    assert validate_notify_url("json://127.0.0.1:9/x") is None
    problem = validate_notify_url("slak://T000/B000/SECRETXYZ")
    assert problem is not None and "\n" not in problem and "slak://" in problem and "SECRETXYZ" not in problem
    assert parse_notify_urls("json://a/b, ntfy://topic mailto://u:p@example.com?to=a@b.c,d@e.f") == (
        "json://a/b", "ntfy://topic", "mailto://u:p@example.com?to=a@b.c,d@e.f")
    with pytest.raises(ValueError, match="apprise cannot send"):
        parse_notify_urls(["json://a/b", "bogus://x"])


def test_an_http_webhook_becomes_apprise_json_with_the_slack_body():
    assert webhook_as_apprise("https://hooks.example.com/services/T/B/X?x=1") == (
        "jsons://hooks.example.com/services/T/B/X?x=1&:version=&:title=&:attachments=&:type=&:message=text")
    assert webhook_as_apprise("slack://T/B/C") == "slack://T/B/C"


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
    assert notice.title == "ralph proj: breaker OPEN no-progress"
    assert notice.body == "3 iterations without progress (iteration 9)"
    text = format_text(notice)
    assert text.startswith("*ralph proj: breaker OPEN no-progress*\n")
    assert "workspace `/home/u/proj` · breaker OPEN · trigger no-progress · iteration 9" in text
    assert notice.verdict == "Paused by the breaker (no-progress) at iteration 9: it tries again after the cooldown."


def test_child_exit_notice_says_how_the_loop_ended():
    done = notice_for_child_exit(code=0, workspace="/w/p", state="CLOSED", trigger="none", iteration=12)
    assert (done.kind, done.title) == ("child_exited", "ralph p: loop finished")
    crashed = notice_for_child_exit(code=137, workspace="/w/p", state="CLOSED", trigger="none", iteration=3)
    assert crashed.title == "ralph p: loop exited with code 137"
    assert "trigger" not in format_text(crashed)
    assert crashed.verdict == "Finished by itself with code 137 after 3 iterations."


def test_a_limit_wait_notice_says_until_when():
    notice = notice_for_limit_wait(until="2026-11-30T17:10:00.000Z", reason="usage limit reached", iteration=7,
                                   workspace="/w/p")
    assert notice.kind == "limit_wait" and notice.title == "ralph p: usage limit, waiting until 2026-11-30T17:10:00.000Z"
    assert notice.verdict == "Waiting for a usage limit to reset until 17:10 UTC (iteration 7)."
    assert message_for(notice).splitlines()[:2] == [notice.verdict, "Why: usage limit reached"]


@given(st.integers(min_value=0, max_value=20), st.floats(min_value=0.001, max_value=10))
def test_backoff_is_bounded_and_never_shrinks(retries, base):
    delays = backoff_delays(retries, base=base, cap=4.0)
    assert len(delays) == retries
    assert all(0 < d <= 4.0 for d in delays)
    assert delays == sorted(delays)

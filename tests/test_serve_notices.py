"""Notices link to the loop's page while `serve` runs (its public address, never a token): `serve.page`, read
by the supervisor's notifier, and a real supervisor's open notice to a real HTTP receiver."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ralph_supervisor.notify import Notifier, format_text, message_for, notice_for_transition
from ralph_supervisor.serve import announce
from tests.helpers.serve import sign_in, start_serve
from tests.helpers.supervise import LOOP, loop_env, start, wait_for


def test_a_running_serve_is_announced_and_withdrawn(tmp_path: Path):
    where = tmp_path / "serve.page"
    assert announce.page_for("proj-1", where) is None
    announce.announce("https://ralph.example.net/", where)
    assert os.stat(where).st_mode & 0o777 == 0o600
    assert announce.page_for("proj-1", where) == "https://ralph.example.net/loop/proj-1"
    announce.withdraw(where)
    assert not where.exists()


@pytest.mark.parametrize("content", [
    b"garbage", b"[]", b'{"pid": "1", "address": "http://x"}', b'{"pid": 1, "address": "javascript:alert(1)"}',
    json.dumps({"pid": 2 ** 22 - 5, "address": "http://127.0.0.1:8765"}).encode(),   # a serve that is gone
])
def test_a_stale_or_garbage_announcement_gives_no_link(tmp_path: Path, content: bytes):
    where = tmp_path / "serve.page"
    where.write_bytes(content)
    assert announce.page_for("proj-1", where) is None
    announce.withdraw(where)
    assert where.exists()    # not ours: left alone


def test_a_notice_carries_the_page_when_there_is_one():
    opened = notice_for_transition(from_state="CLOSED", to_state="OPEN", trigger="no-progress", reason="stuck",
                                   iteration=3, workspace="/srv/demo")
    assert opened is not None
    assert "Page:" not in message_for(opened)
    from dataclasses import replace

    linked = replace(opened, page="https://ralph.example.net/loop/demo-1")
    assert message_for(linked).splitlines()[-1] == "Page: https://ralph.example.net/loop/demo-1"
    assert format_text(linked).endswith("\npage: https://ralph.example.net/loop/demo-1")
    asked: list[int] = []
    notifier = Notifier(desktop=False, page=lambda: asked.append(1) or None)
    notifier.send(opened)   # no endpoint: nothing to send, nothing asked
    notifier.close(0.1)
    assert asked == []


@pytest.fixture
def posts() -> Iterator[tuple[int, list[dict]]]:
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1], received
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_an_open_notice_links_to_the_loops_page_on_the_public_address(tmp_path: Path, posts, private_registry: Path):
    port, received = posts
    home = tmp_path / "home"
    serve = start_serve(home, "--public-url", "https://ralph.example.net")
    workspace = tmp_path / "proj"
    workspace.mkdir()
    sup = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                "--no-progress", "2", "--on-open", "stop", "--notify", f"json://127.0.0.1:{port}/hook",
                "--", "bash", str(LOOP), env={**loop_env("stuck"), "XDG_STATE_HOME": str(home)})
    try:
        sign_in(serve)
        assert (private_registry / "serve.page").exists()
        assert sup.wait(timeout=90) == 2
        opened = wait_for(lambda: [p for p in received if "stopped" in p.get("message", "").lower()
                                   or "OPEN" in p.get("title", "")], what="the open notice")
        message = opened[0]["message"]
        page = [line for line in message.splitlines() if line.startswith("Page: ")]
        assert page and page[0].startswith("Page: https://ralph.example.net/loop/proj-"), message
        token = (home / "ralph-supervise" / "serve.token").read_text().strip()
        assert token not in json.dumps(received) and serve.code not in json.dumps(received)
    finally:
        if sup.poll() is None:
            sup.kill()
        sup.communicate(timeout=30)
        serve.stop()
    assert not (private_registry / "serve.page").exists()     # withdrawn at exit

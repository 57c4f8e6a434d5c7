"""Helpers for the `serve` tests: start the real `ralph-supervise serve` on a free port of 127.0.0.1, sign in
with the code it prints, and talk HTTP to it (with any Host, Origin or cookie a test wants to forge)."""

from __future__ import annotations

import http.client as httpclient
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph_supervisor.process.frozen import held
from ralph_supervisor.process.linux import read_stat
from tests.helpers import REPO, wait_for

ADDRESS_RE = re.compile(r"open (http://127\.0\.0\.1:(\d+)/\?code=(\S+))")


@dataclass
class Serve:
    proc: subprocess.Popen[str]
    port: int
    code_url: str
    code: str
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _out, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate(timeout=5)
        return self.proc.returncode, err


def serve_env(state_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", XDG_STATE_HOME=str(state_home),
               XDG_CONFIG_HOME=str(state_home / "config"))
    return env


def start_serve(state_home: Path, *args: str) -> Serve:
    """`ralph-supervise serve --listen 127.0.0.1:0 ARGS`, once it prints its address (the caller stops it)."""
    proc = subprocess.Popen([sys.executable, "-m", "ralph_supervisor", "serve", "--listen", "127.0.0.1:0", *args],
                            env=serve_env(state_home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            _out, err = proc.communicate(timeout=10)
            raise AssertionError(f"serve exited {proc.returncode} before listening: {err}")
        lines.append(line)
        match = ADDRESS_RE.search(line)
        if match:
            return Serve(proc, int(match.group(2)), match.group(1), match.group(3), lines)
    proc.kill()
    proc.communicate(timeout=10)
    raise AssertionError(f"serve printed no address in 30 s: {lines}")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def http(port: int, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None,
         cookie: str | None = None, timeout: float = 90.0) -> Answer:
    """One request with exactly these headers (Host defaults to 127.0.0.1:PORT)."""
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        if cookie:
            sent["Cookie"] = f"ralph_serve={cookie}"
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in sent.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def sign_in(serve: Serve) -> str:
    """Redeem the printed code; the session cookie's value."""
    answer = http(serve.port, "GET", f"/?code={serve.code}")
    assert answer.status == 303, answer.text
    cookie = answer.headers.get("set-cookie", "")
    match = re.search(r"ralph_serve=([0-9a-f]+)", cookie)
    assert match and "HttpOnly" in cookie and "SameSite=Strict" in cookie, answer.headers
    return match.group(1)


def next_code(serve: Serve, timeout: float = 10.0) -> str:
    """The code serve printed after the last one was used."""
    assert serve.proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = serve.proc.stdout.readline()
        serve.lines.append(line)
        match = re.search(r"for another one: open http://\S+/\?code=(\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError(f"serve printed no next code: {serve.lines}")


def page_token(serve: Serve, cookie: str, path: str = "/") -> str:
    page = http(serve.port, "GET", path, cookie=cookie)
    assert page.status == 200, page.text
    match = re.search(r'name="page-token" content="([^"]+)"', page.text)
    assert match
    return match.group(1)


def post_action(serve: Serve, cookie: str, token: str, loop_id: str, action: str, **kw: Any) -> Answer:
    headers = {"Origin": serve.base, "X-Page-Token": token, **kw.pop("headers", {})}
    return http(serve.port, "POST", f"/api/loop/{loop_id}/{action}", headers=headers, cookie=cookie, **kw)


def loops(serve: Serve, cookie: str) -> list[dict[str, Any]]:
    answer = http(serve.port, "GET", "/api/loops", cookie=cookie)
    assert answer.status == 200, answer.text
    return answer.json()["loops"]


def wait_loops(serve: Serve, cookie: str, count: int, what: str = "", timeout: float = 30.0,
               **where: Any) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]]:
        rows = loops(serve, cookie)
        if len(rows) != count:
            return []
        return rows if all(all(r.get(k) == v for k, v in where.items()) for r in rows) else []

    return wait_for(ready, timeout=timeout, what=what or f"{count} loops listed", interval=0.1)


def frozen(pids: list[int]) -> bool:
    """Every one of these processes is held still, as the supervisor itself judges it (`process/frozen.py`:
    stopped by a signal, or in a frozen cgroup); gone ones do not count, nor does a zombie (it runs nothing: a
    child that exited just before its parent was frozen, not yet reaped)."""
    found = [(pid, stat.state) for pid in pids if (stat := read_stat(pid)) is not None and stat.state not in ("Z", "X")]
    return bool(found) and all(held(pid, state) for pid, state in found)


def tree_pids(root_pid: int) -> list[int]:
    """The process and every descendant, read from /proc (children files)."""
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                todo.extend(int(p) for p in text.split())
        except OSError:
            continue
    return found

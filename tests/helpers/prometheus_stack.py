"""A real Prometheus, a real Alertmanager and a webhook, as plain processes on 127.0.0.1, for the fleet tests.

Each server gets a free port, a scratch storage folder and its log in the test's folder; `stop()` ends it
and waits. A server that cannot start (a port in use, a bad configuration) raises StackError with one line
naming the server and the reason its own log gave. The webhook is a tiny http.server that keeps every
notification Alertmanager POSTs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class StackError(RuntimeError):
    """A server of the stack could not start or answer: the message is one line saying which and why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _last_error_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
    for line in reversed(lines):
        if "level=error" in line or "err=" in line:
            return line.strip()[-300:]
    return lines[-1].strip()[-300:] if lines else "(no output)"


@dataclass
class Server:
    """One server process of the stack."""

    what: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StackError(f"{self.what} exited with {self.proc.returncode} at start: "
                                 f"{_last_error_line(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        raise StackError(f"{self.what} did not answer on {self.url}/-/ready within {timeout:.0f} s: "
                         f"{_last_error_line(self.log)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def _start(what: str, argv: list[str], port: int, log: Path) -> Server:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    server = Server(what, port, proc, log)
    server.wait_ready()
    return server


def start_alertmanager(binary: str, folder: Path, webhook_url: str, port: int | None = None) -> Server:
    """Alertmanager routing every alert to `webhook_url` at once (group wait 0.5 s), one group per alert and
    loop; clustering off (it would bind 0.0.0.0:9094)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "route": {"receiver": "webhook", "group_by": ["alertname", "instance", "name"], "group_wait": "500ms",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "webhook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
    (folder / "alertmanager.yml").write_text(json.dumps(config))  # JSON is YAML
    port = port or free_port()
    argv = [binary, f"--config.file={folder / 'alertmanager.yml'}", f"--storage.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=info"]
    return _start("Alertmanager", argv, port, folder / "alertmanager.log")


def start_prometheus(binary: str, folder: Path, *, targets: list[str], rules: Path, interval: str,
                     alertmanager: str | None = None, scrape_timeout: str | None = None,
                     port: int | None = None) -> Server:
    """Prometheus scraping `targets` (job ralph-supervise) and evaluating `rules` every `interval`, sending
    alerts to `alertmanager` (host:port) without the usual minute of resend delay."""
    folder.mkdir(parents=True, exist_ok=True)
    job: dict[str, Any] = {"job_name": "ralph-supervise", "static_configs": [{"targets": targets}]}
    if scrape_timeout:
        job["scrape_timeout"] = scrape_timeout
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [job],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    (folder / "prometheus.yml").write_text(json.dumps(config))
    port = port or free_port()
    argv = [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--rules.alert.resend-delay=1s", "--log.level=info"]
    return _start("Prometheus", argv, port, folder / "prometheus.log")


# -- Prometheus's HTTP API ------------------------------------------------------------------------


def query(prometheus: Server, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The instant query's result (a list of {metric, value}); StackError on an error answer."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    try:
        answer = get_json(f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode(params)}")
    except urllib.error.HTTPError as exc:
        raise StackError(f"Prometheus refused the query {expr!r}: {exc.read().decode()[:300]}") from None
    if answer.get("status") != "success":
        raise StackError(f"Prometheus could not run {expr!r}: {answer.get('error')}")
    return list(answer["data"]["result"])


def alerts(prometheus: Server) -> list[dict[str, Any]]:
    """The alerts Prometheus holds now (pending and firing), each with `labels`, `state`."""
    return list(get_json(f"{prometheus.url}/api/v1/alerts")["data"]["alerts"])


def targets(prometheus: Server) -> list[dict[str, Any]]:
    return list(get_json(f"{prometheus.url}/api/v1/targets")["data"]["activeTargets"])


# -- the webhook ----------------------------------------------------------------------------------


@dataclass
class Webhook:
    """Every notification POSTed to it, with the wall-clock time it arrived."""

    server: ThreadingHTTPServer
    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/alerts"

    def alerts(self, status: str = "firing") -> list[tuple[float, dict[str, Any]]]:
        """(arrival time, alert) for every alert of that status received so far."""
        with self.lock:
            return [(at, alert) for at, note in self.received for alert in note.get("alerts", [])
                    if alert.get("status") == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_webhook() -> Webhook:
    hook: Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                note = json.loads(body)
            except ValueError:
                note = {"unreadable": body.decode(errors="replace")}
            with hook.lock:
                hook.received.append((time.time(), note))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Webhook(server)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return hook

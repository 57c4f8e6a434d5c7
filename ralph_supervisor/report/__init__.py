"""`ralph-supervise report`: what happened in a state folder, for the person who left the loop running.

The latest run by default (`since` for more): the verdict first, then the timeline, the commits, the
recurring errors, the restated blockers, the agent's last reply, process hygiene and what to decide.
Markdown for terminals and GitHub, JSON for scripts, one self-contained HTML file for browsers; the
supervisor writes `report.html` itself at every open and when it exits (`ReportWriter`, in a helper
process: `render_apart`).

    account = collect(Path("proj/.ralph-supervise"))
    print(render_markdown(account))
    write_html(account, Path("proj/.ralph-supervise/report.html"))
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor import masking
from ralph_supervisor.masking import Masker

from ralph_supervisor import store
from ralph_supervisor.files import report_html
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.records import Warnings
from ralph_supervisor.serial import Job, SerialWorker
from ralph_supervisor.report.account import Account, build_account
from ralph_supervisor.report.html import render_html
from ralph_supervisor.report.markdown import render_markdown
from ralph_supervisor.report.runs import choose_runs, split_runs
from ralph_supervisor.report.sources import GitFacts, Records, read_git, read_records

__all__ = ["Account", "ReportWriter", "collect", "main", "parse_since", "render_apart", "render_html",
           "render_markdown", "to_json", "write_html"]

log = structlog.get_logger(__name__)

def parse_since(text: str, now: float) -> float:
    """`--since`: an ISO-8601 moment (`2026-12-01T08:00Z`, naive means UTC) or a duration back from now
    (`90s`, `30m`, `12h`, `2d`, `1w`, `1h30m`). ValueError with what would be valid."""
    raw = text.strip()
    parts = re.fullmatch(r"((?:\d+(?:\.\d+)?[smhdw])+)", raw.lower())
    if parts:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
        seconds = sum(float(n) * unit[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhdw])", parts.group(1)))
        return now - seconds
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError("expected an ISO-8601 time (2026-12-01T08:00Z) or a duration (12h, 30m, 2d), "
                         f"got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def collect(state_dir: Path, *, since: float | None = None, now: float | None = None, git: bool = True,
            records: Records | None = None) -> Account:
    """Read the state folder (and the workspace's git) into the account of its latest run, or of every
    run since `since`."""
    moment = time.time() if now is None else now
    records = read_records(state_dir) if records is None else records
    runs = choose_runs(split_runs(records.events), since, moment)
    facts = GitFacts(note="not asked for")
    if git:
        workspace = next((r.workspace for r in reversed(runs) if r.workspace), "") or str(state_dir.parent)
        facts = read_git(Path(workspace), runs[0].started_at if runs else None)
    html = report_html.path(state_dir)
    return build_account(records, runs, facts, now=moment, since=since,
                         report_html=str(html) if html.exists() else "")


def to_json(account: Account) -> dict[str, Any]:
    """The account as JSON-ready data: every field, runs without their raw events."""
    data: dict[str, Any] = {}
    for f in dataclasses.fields(account):
        value = getattr(account, f.name)
        if f.name == "runs":
            data["runs"] = [{k: v for k, v in dataclasses.asdict(dataclasses.replace(r, events=())).items()
                             if k != "events"} for r in value]
        elif dataclasses.is_dataclass(value):
            data[f.name] = dataclasses.asdict(value)  # type: ignore[arg-type]
        elif isinstance(value, tuple):
            data[f.name] = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v  # type: ignore[arg-type]
                            for v in value]
        else:
            data[f.name] = value
    return data


def _masked(account: Account, text: str) -> str:
    """The report shows what the agent printed: credentials in it are masked (masking.py)."""
    return Masker.for_workspace(account.workspace).mask(text) if account.workspace else masking.mask(text)


def write_html(account: Account, path: Path) -> int:
    """Write the HTML report atomically (a reader never sees half of it); returns its size in bytes."""
    data = _masked(account, render_html(account)).encode("utf-8")
    store.atomic_write_bytes(path, data)
    return len(data)


def write_report(state_dir: Path) -> Path:
    """`state_dir/report.html` from what the folder holds now (its latest run)."""
    path = report_html.path(state_dir)
    account = collect(state_dir)
    text = render_html(dataclasses.replace(account, report_html=str(path)))
    store.atomic_write_bytes(path, _masked(account, text).encode("utf-8"))
    return path


def render_apart(state_dir: Path, *, timeout: float = 120.0,
                 started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> str | None:
    """Write `state_dir/report.html` in a helper process (`python -m ralph_supervisor.report`, see its
    docstring for why); None when it was written, else what went wrong in one line. `started` is told the
    process, so a closing writer can end it. A helper killed half way leaves the last report whole (the write
    is atomic)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p))
    proc = HELPERS.popen([sys.executable, "-m", "ralph_supervisor.report", str(state_dir)], env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         close_fds=True)
    if started is not None:
        started(proc)
    code, last = HELPERS.wait_briefly(proc, timeout)
    if code is None:
        return f"the report took more than {timeout:g} s and was ended"
    if code == 0:
        return None
    return last[:300] or f"the report's process exited {code}"


class ReportWriter:
    """Rewrites `report.html` in a helper process (`render_apart`), so a render never delays the supervisor.

    `request()` returns at once; requests that arrive while a render runs are folded into one more render
    after it (the newest state is what counts): a serial worker of its own (`ralph-report`), so a render never
    waits behind a snapshot. A failed render is logged once per kind of error, never raised. The helper and its
    git processes are helpers (`process/helpers.py`): never part of the loop's tree.

    Threads: the event loop requests and closes; the worker renders. The helper process and whether the writer
    is closing are behind `_lock`.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._worker = SerialWorker("ralph-report", merge={"render"}, on_error=self._failed)
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._warnings = Warnings()
        self._closing = False

    def request(self) -> None:
        self._worker.submit(Job("render", self._render))  # a render still waiting will see the newest state

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._process = proc
            closing = self._closing
        if closing:
            proc.kill()

    def _render(self) -> None:
        problem = render_apart(self.state_dir, started=self._started)
        with self._lock:
            self._process = None
            closing = self._closing
        if problem is not None and not closing:
            self._warnings.once(f"report_unwritable:{problem.split(':')[0]}", event_name=events.REPORT_UNWRITABLE,
                                error=problem)

    def _failed(self, job: Job, exc: BaseException) -> None:
        self._warnings.once(f"report_unwritable:{type(exc).__name__}", event_name=events.REPORT_UNWRITABLE,
                            error=repr(exc)[:300])

    def close(self, timeout: float = 10.0) -> None:
        """End a render in progress (the one at exit follows); none starts after this."""
        with self._lock:
            self._closing = True
            proc = self._process
        if proc is not None and proc.poll() is None:
            proc.kill()
        self._worker.close(timeout, drain=False)


def main(state_dir: Path, *, html: Path | None = None, as_json: bool = False, since: str | None = None) -> int:
    """The `report` command: Markdown on stdout (or JSON), the HTML file on request. 1 without state."""
    import json

    now = time.time()
    moment = None
    if since is not None:
        try:
            moment = parse_since(since, now)
        except ValueError as exc:
            print(f"ralph-supervise report: --since: {exc}", file=sys.stderr)
            return 1
    records = read_records(state_dir)
    if not records.found:
        print(f"ralph-supervise report: no supervisor state in {state_dir}", file=sys.stderr)
        return 1
    account = collect(state_dir, since=moment, now=now, records=records)
    if html is not None:
        try:
            write_html(dataclasses.replace(account, report_html=str(html)), html)
        except OSError as exc:
            print(f"ralph-supervise report: --html: cannot write {html}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        account = dataclasses.replace(account, report_html=str(html))
    for warning in account.warnings:
        print(f"ralph-supervise report: warning: {warning}", file=sys.stderr)
    if as_json:
        print(_masked(account, json.dumps(to_json(account), indent=2, ensure_ascii=False, default=str)))
    else:
        sys.stdout.write(_masked(account, render_markdown(account)))
    return 0

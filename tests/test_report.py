"""`ralph-supervise report`: recorded state folders (tests/fixtures/report, see record.py there), a long
synthetic run, the HTML in a real headless Chromium, and bad input that must never crash the report."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor import report
from ralph_supervisor.breaker import Snapshot
from ralph_supervisor.files import events_jsonl, history_jsonl, ledger_json, state_json
from ralph_supervisor.format import sparkline
from ralph_supervisor.report.account import build_account
from ralph_supervisor.report.runs import choose_runs, split_runs
from ralph_supervisor.report.verdict import verdict_line
from ralph_supervisor.report.sources import GitFacts, Records, read_records
from ralph_supervisor.rotating import read_json_lines
from tests.helpers import state_dir_of
from tests.helpers.debian import installed
from tests.helpers.supervise import REPO
from tests.helpers.synthetic_runs import write_run

FIXTURES = Path(__file__).parent / "fixtures" / "report"
NOW = 1796200000.0  # after every recorded run


def fixture(tmp_path: Path, name: str) -> Path:
    """A copy of a recorded state folder, inside a workspace folder of its own."""
    target = tmp_path / "proj" / ".ralph-supervise"
    shutil.copytree(FIXTURES / name, target)
    return target


def run_main(state_dir: Path, **kwargs: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = report.main(state_dir, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


# -- recorded runs ------------------------------------------------------------------------------


def test_a_stuck_run_reports_its_final_stop_opens_trial_and_what_to_decide(tmp_path: Path) -> None:
    account = report.collect(fixture(tmp_path, "stuck"), now=NOW, git=False)
    v = account.verdict
    assert (v.status, v.by, v.trigger, v.code) == ("stopped", "breaker", "no-progress", 2)
    assert v.line == "Stopped for good by the breaker (no-progress) at iteration 4."
    assert "trial iteration 4 made no progress" in v.reason
    assert [m.kind for m in account.marks] == ["open", "trial", "final", "exit"]
    assert [r.number for r in account.iterations] == [1, 2, 3, 4]
    assert [r.trial for r in account.iterations] == [False, False, False, True]
    assert [r.tripped for r in account.iterations] == ["", "", "no-progress", "no-progress"]
    assert {b.kind for b in account.bands} == {"OPEN", "HALF_OPEN"}
    trial = next(b for b in account.bands if b.kind == "HALF_OPEN")
    assert trial.x0 <= 3 <= trial.x1  # the band covers the trial iteration (position 3 = iteration 4)
    final = [b for b in account.bands if b.kind == "OPEN"][-1]
    assert final.x1 > 3.5  # the final open holds to the end of the plot
    assert account.residual is not None and account.residual.kind == "actionable"
    assert any("Whether another attempt is worth it" in line for line in account.decide)
    assert any("ralph-supervise reset -w /srv/proj" in line for line in account.next_steps)
    assert account.hygiene.survivors == 0 and account.hygiene.tree_stops == 1
    assert account.spend.tokens == 4800 and account.spend.cost_usd is None

    markdown = report.render_markdown(account)
    assert markdown.splitlines()[2] == "**Stopped for good by the breaker (no-progress) at iteration 4.**"
    for heading in ("## Timeline", "## Commits and diffstat since the run began", "## Recurring errors",
                    "## Blockers the agent stated", "## The agent's last reply", "## Process hygiene",
                    "## What a human should decide next"):
        assert heading in markdown
    assert "survivors: zero" in markdown
    assert "| 4 | " in markdown and "trial; opened the breaker (no-progress)" in markdown


def test_a_blocked_run_says_only_a_person_can_clear_it_and_groups_the_blocker(tmp_path: Path) -> None:
    account = report.collect(fixture(tmp_path, "blocked"), now=NOW, git=False)
    assert account.verdict.line == "Stopped for good by the breaker (blocked) at iteration 3."
    assert account.residual is not None and account.residual.kind == "blocked"
    assert any("do not simply resume" in line for line in account.decide)
    assert [(b.count, b.first) for b in account.blockers] == [(1, 3)]
    assert "Invalid API key" in account.blockers[0].text
    assert [(e.count, e.first, e.last) for e in account.errors] == [(1, 3, 3)]
    assert account.iterations[-1].label == "blocked"
    assert account.last_reply is not None and account.last_reply.iteration == 2
    assert account.last_reply.status["STATUS"] == "IN_PROGRESS"  # the RALPH_STATUS block of that reply


def test_a_limit_wait_is_a_mark_and_a_band_between_its_iterations(tmp_path: Path) -> None:
    account = report.collect(fixture(tmp_path, "limit-wait"), now=NOW, git=False)
    assert account.verdict.line == "Finished by itself with code 0 after 5 iterations."
    limited = [r.number for r in account.iterations if r.usage_limited]
    assert limited == [3] and account.iterations[2].label == "usage limit"
    wait = next(m for m in account.marks if m.kind == "limit_wait")
    assert wait.iteration == 3 and "waiting until" in wait.text
    band = next(b for b in account.bands if b.kind == "LIMIT")
    assert band.x0 == pytest.approx(2.5) and band.x1 == pytest.approx(2.5)  # after iteration 3, before 4
    assert "hit a usage limit" in report.render_markdown(account)


def test_a_clean_finish_reports_the_code_and_asks_whether_the_work_is_done(tmp_path: Path) -> None:
    code, out, err = run_main(fixture(tmp_path, "clean"))
    assert code == 0 and err == ""
    assert "**Finished by itself with code 0 after 4 iterations.**" in out
    assert "4 iterations, 4 with progress" in out
    assert "Whether the work is done" in out
    assert "Why:" not in out  # nothing went wrong: no reason line


def test_an_empty_or_missing_folder_is_exit_1_with_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "proj" / ".ralph-supervise"
    empty.mkdir(parents=True)
    (empty / ".gitignore").write_text("*\n")
    for folder in (empty, tmp_path / "nowhere" / ".ralph-supervise"):
        code, out, err = run_main(folder)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "no supervisor state in" in err


def test_a_corrupt_history_line_is_one_warning_and_the_rest_is_reported(tmp_path: Path) -> None:
    code, out, err = run_main(fixture(tmp_path, "corrupt-history"))
    assert code == 0
    assert err.splitlines() == [
        "ralph-supervise report: warning: history.jsonl: 1 line is not a JSON object (line 2): "
        "skipped, the rest is reported"]
    assert "**Stopped for good by the breaker (no-progress) at iteration 4.**" in out
    assert "breaker opened (no-progress)" in out and "stopped for good (no-progress)" in out
    assert "## Warnings" in out


def test_json_is_the_same_account_for_scripts_and_html_is_written_on_request(tmp_path: Path) -> None:
    state_dir = fixture(tmp_path, "stuck")
    html = tmp_path / "out" / "r.html"
    html.parent.mkdir()
    code, out, _ = run_main(state_dir, as_json=True, html=html)
    assert code == 0
    data = json.loads(out)
    assert data["verdict"]["status"] == "stopped" and data["verdict"]["trigger"] == "no-progress"
    assert [i["number"] for i in data["iterations"]] == [1, 2, 3, 4]
    assert [m["kind"] for m in data["marks"]] == ["open", "trial", "final", "exit"]
    assert data["report_html"] == str(html)
    assert "events" not in data["runs"][0]
    page = html.read_text()
    assert "Stopped for good by the breaker (no-progress) at iteration 4." in page
    assert "<script src" not in page and "<link" not in page and "http://" not in page.replace(
        "http://www.w3.org", "")  # self-contained: nothing to fetch


def test_the_cli_runs_report_with_its_flags_and_exit_codes(tmp_path: Path) -> None:
    state_dir = fixture(tmp_path, "clean")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cli = [sys.executable, "-m", "ralph_supervisor", "report", "-w", str(state_dir.parent)]
    done = subprocess.run([*cli, "--since", "2026-12-01T00:00Z", "--json"], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"]["code"] == 0
    bad = subprocess.run([*cli, "--since", "yesterday"], capture_output=True, env=env, timeout=60)
    assert bad.returncode == 1 and bad.stderr.decode().count("\n") == 1 and b"--since" in bad.stderr


def test_since_takes_every_run_still_going_then_and_marks_the_restart(tmp_path: Path) -> None:
    state_dir = fixture(tmp_path, "clean")
    later = (FIXTURES / "stuck" / "events.jsonl").read_text()  # a second run, earlier stamps do not matter here
    first_run = (state_dir / "events.jsonl").read_text()
    (state_dir / "events.jsonl").write_text(first_run + later)
    records = read_records(state_dir)
    runs = split_runs(records.events)
    assert len(runs) == 2 and sum(map(len, runs)) == len(records.events)
    latest = build_account(records, choose_runs(runs, None, NOW), GitFacts(), now=NOW)
    assert len(latest.runs) == 1 and latest.runs[0].exit_code == 2
    both = build_account(records, choose_runs(runs, 0.0, NOW), GitFacts(), now=NOW)
    assert [r.index for r in both.runs] == [1, 2] and len(both.iterations) == 8
    assert "run_start" in [m.kind for m in both.marks]


def test_since_understands_iso_times_and_durations() -> None:
    assert report.parse_since("2026-12-01T08:00Z", 0) == 1796112000.0
    assert report.parse_since("2026-12-01T08:00", 0) == 1796112000.0  # naive means UTC
    assert report.parse_since("12h", 100000.0) == 100000.0 - 43200
    assert report.parse_since("1h30m", 10000.0) == 10000.0 - 5400
    with pytest.raises(ValueError, match="ISO-8601"):
        report.parse_since("last tuesday", 0)


def test_a_running_supervisor_is_running_paused_or_waiting_by_its_state(tmp_path: Path) -> None:
    records = read_records(fixture(tmp_path, "stuck"))
    events = [e for e in records.events if e.get("event") != "supervisor_stopped"]

    def verdict(state: dict[str, object]) -> str:
        live = Records(records.state_dir, state_json.parse(state)[0], [], events, records.ledger, None,
                       running_pid=4242)
        runs = choose_runs(split_runs(events), None, NOW)
        return build_account(live, runs, GitFacts(), now=NOW).verdict.line

    opened = {"state": "OPEN", "trigger": "no-progress", "iteration": 4, "opened_at": NOW - 60, "cooldown_s": 1800}
    assert verdict(opened).startswith("Paused by the breaker (no-progress) at iteration 4: it tries again")
    assert verdict({**opened, "trigger": "manual"}).startswith("Paused by hand at iteration 4")
    assert verdict({"state": "CLOSED", "iteration": 4}) == "Running: iteration 4, breaker CLOSED."
    waiting = verdict({"state": "CLOSED", "iteration": 4, "limit_until": NOW + 3600})
    assert waiting.startswith("Waiting for a usage limit to reset until ")


# -- a long run ---------------------------------------------------------------------------------


def test_a_thousand_iterations_fit_in_a_small_html_file(tmp_path: Path) -> None:
    state_dir = tmp_path / "proj" / ".ralph-supervise"
    write_run(state_dir, 1000)
    account = report.collect(state_dir, git=False)
    assert len(account.iterations) == 1000 and account.spend.cost_usd is not None
    size = report.write_html(account, tmp_path / "r.html")
    assert size < 2_000_000
    assert len(report.html.plot_data(account)["n"]) == 1000
    markdown = report.render_markdown(account)
    assert "The last 30 of 1000 iterations" in markdown and len(markdown) < 40_000


def test_the_supervisor_renders_in_a_helper_process_and_hears_its_failure_in_one_line(tmp_path: Path) -> None:
    """A long run's render takes tens of MiB and the GIL: `render_apart` does it in a process of its own,
    registered as a helper while it runs (never taken for the loop's tree), and reports a failure as one line."""
    from ralph_supervisor.process.helpers import HELPERS

    state_dir = fixture(tmp_path, "stuck")
    seen: list[int] = []
    assert report.render_apart(state_dir, started=lambda proc: seen.append(proc.pid)) is None
    assert seen and seen[0] != os.getpid() and seen[0] not in HELPERS
    page = (state_dir / "report.html").read_text()
    assert "Stopped for good by the breaker (no-progress) at iteration 4." in page
    (state_dir / "report.html").unlink()
    (state_dir / "report.html").mkdir()  # cannot be replaced by a file
    problem = report.render_apart(state_dir)
    assert problem is not None and "\n" not in problem and "report.html" in problem
    assert (state_dir / "report.html").is_dir()


# -- the HTML in a real browser -------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, installed with apt when missing and we are root; else the test is skipped."""
    found, why = installed("chromium", "chromium")
    if found is None:
        pytest.skip(f"headless Chromium: {why}")
    sys.stderr.write(f"\n(chromium: {why})\n")
    return found


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,1200",
                               "--virtual-time-budget=5000", *args], capture_output=True, timeout=120)


@pytest.mark.slow
def test_the_html_draws_a_plot_in_headless_chromium(tmp_path: Path, chromium: str) -> None:
    from PIL import Image

    state_dir = fixture(tmp_path, "stuck")
    page = tmp_path / "report.html"
    report.write_html(report.collect(state_dir, now=NOW, git=False), page)
    # Where the plot is: a copy of the page writes the canvas's box into its title, read back with --dump-dom.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", "<script>var c=document.querySelector('#timeline canvas');"
                                              "var r=c.getBoundingClientRect();document.title='BOX '+JSON.stringify("
                                              "[r.left,r.top,r.width,r.height]);</script></body>"))
    dom = _chromium(chromium, "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = dom.stdout.decode().split("<title>BOX ", 1)[1].split("</title>", 1)[0]
    left, top, width, height = json.loads(title)
    assert width > 300 and height > 200
    shot = tmp_path / "shot.png"
    done = _chromium(chromium, f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    plot = image.crop((int(left), int(top), int(left + width), int(top + height)))
    colours = plot.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 20  # not blank: axes, bands, rules and the spend line are drawn
    counts = dict((colour, n) for n, colour in colours)

    def near(target: tuple[int, int, int]) -> int:
        return sum(n for colour, n in counts.items() if max(abs(a - b) for a, b in zip(colour, target)) <= 14)

    # The HALF_OPEN band (amber over white), the final OPEN band (red over white), the tokens line (violet).
    assert near((249, 232, 191)) > 2000 and near((243, 200, 196)) > 2000 and near((108, 79, 196)) > 50
    image.save(tmp_path / "kept.png")


# -- bad input never crashes it ---------------------------------------------------------------------

RECORD = st.dictionaries(
    st.sampled_from(["event", "ts", "iteration", "files_changed", "errors", "tokens", "outcome", "failed",
                     "usage_limited", "blocked", "duration_s", "reply", "status_block", "error_signatures",
                     "code", "reason", "survivors", "until", "budgets", "cost_usd", "returned_to"]),
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=20),
              st.sampled_from(["iteration_started", "iteration_finished", "supervisor_started", "orphans_swept",
                               "child_exited", "supervisor_stopped", "tree_stopped", "limit_wait_started",
                               "2026-12-01T17:20:24.000Z"]),
              st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2)),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(RECORD, max_size=25), history=st.lists(RECORD, max_size=6),
       state=st.one_of(st.none(), RECORD), running=st.booleans())
def test_any_records_give_a_report_in_every_format(events, history, state, running) -> None:
    recorded = state_json.parse(state)[0] if state is not None else None
    records = Records(Path("/srv/proj/.ralph-supervise"), recorded, history_jsonl.transitions(history), events, [], None,
                      running_pid=1 if running else None)
    account = build_account(records, choose_runs(split_runs(events), None, NOW), GitFacts(), now=NOW)
    assert account.verdict.line
    report.render_markdown(account)
    report.render_html(account)
    json.dumps(report.to_json(account), default=str)


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(st.one_of(st.binary(max_size=30), st.just(b'{"event": "iteration_finished", "iteration": 1}')),
                      max_size=30))
def test_damaged_jsonl_is_read_line_by_line_and_counted(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        records, warnings = read_json_lines(path)
        good = sum(1 for line in lines if line == b'{"event": "iteration_finished", "iteration": 1}')
        assert len(records) >= good and len(warnings) <= 1


@given(st.lists(st.floats(0, 1e9), max_size=300), st.integers(1, 120))
def test_a_sparkline_is_at_most_as_wide_as_asked(values: list[float], width: int) -> None:
    line = sparkline(values, width)
    assert len(line) == min(len(values), width)
    assert set(line) <= set("▁▂▃▄▅▆▇█")


def test_every_verdict_is_one_line_that_names_the_iteration() -> None:
    for status, by in [("running", ""), ("trial", "breaker"), ("paused", "breaker"), ("paused", "hand"),
                       ("paused", "restart"), ("waiting", "limit"), ("finished", "itself"), ("stopped", "breaker"),
                       ("stopped", "request"), ("stopped", "signal"), ("ended", "")]:
        line = verdict_line(status, by, trigger="same-error", iteration=7, code=1)
        assert "\n" not in line and "7" in line, (status, by, line)


# -- the supervisor writes report.html and notifies, end to end ---------------------------------------


@pytest.mark.slow
def test_the_supervisor_writes_report_html_and_notifies_each_event_once_without_leaking_urls(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.helpers.supervise import LOOP, loop_env, run

    posts: list[tuple[str, dict[str, object]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = server.server_address[1]
    workspace = tmp_path / "proj"
    workspace.mkdir()
    try:
        done = run(workspace, "--no-echo", "--log-format", "json", "--notify-desktop", "false", "--grace", "1",
                   "--cooldown", "0.02", "--max-opens", "2",
                   "--notify", f"json://127.0.0.1:{port}/apprise/SECRETAAAA",
                   "--notify", f"mmost://127.0.0.1:{port}/SECRETBBBB",
                   "--notify-webhook", f"http://127.0.0.1:{port}/hooks/SECRETCCCC",
                   "--", str(LOOP), env=loop_env("stuck"), timeout=90)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    state_dir = state_dir_of(workspace)
    html = state_dir / "report.html"
    page = html.read_text()
    assert "Stopped for good by the breaker (no-progress)" in page and 0 < len(page) < 2_000_000

    by_path: dict[str, list[dict[str, object]]] = {}
    for path, body in posts:
        by_path.setdefault(path, []).append(body)
    apprise_kinds = [b["title"] for b in by_path["/apprise/SECRETAAAA"]]
    assert apprise_kinds == ["ralph proj: breaker OPEN no-progress", "ralph proj: loop stopped for good (no-progress)"]
    final = by_path["/apprise/SECRETAAAA"][1]["message"]
    assert str(final).startswith("Stopped for good by the breaker (no-progress) at iteration ")
    assert f"Report: {html}" in str(final)
    assert len(by_path["/hooks/SECRETBBBB"]) == 2  # the Slack-style endpoint: the same two events
    webhook = [str(b["text"]).splitlines()[0] for b in by_path["/hooks/SECRETCCCC"]]
    assert webhook == ["*ralph proj: breaker OPEN no-progress*", "*ralph proj: breaker HALF_OPEN, trial next*",
                       "*ralph proj: loop stopped for good (no-progress)*"]

    leaks = [name for name, text in (("stderr", done.stderr.decode()), ("stdout", done.stdout.decode()),
                                     ("events.jsonl", (state_dir / "events.jsonl").read_text()),
                                     ("report.html", page)) if "SECRET" in text]
    assert leaks == []

    code, out, _ = run_main(state_dir)
    assert code == 0 and "**Stopped for good by the breaker (no-progress) at iteration" in out
    assert f"| HTML report | `{html}` |" in out

    bad = subprocess.run([sys.executable, "-m", "ralph_supervisor", "--notify", "slak://T0/B0/SECRETDDDD", "--",
                          "true"], cwd=workspace, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.decode().count("\n") == 1 and b"--notify" in bad.stderr and b"SECRET" not in bad.stderr


@pytest.mark.slow
def test_report_html_is_written_at_an_open_while_paused_and_again_at_exit(tmp_path: Path) -> None:
    from tests.helpers.supervise import LOOP, loop_env, start, wait_for

    workspace = tmp_path / "proj"
    workspace.mkdir()
    state_dir = state_dir_of(workspace)
    html = state_dir / "report.html"
    proc = start(workspace, "--no-echo", "--log-format", "json", "--notify-desktop", "false", "--grace", "1",
                 "--cooldown", "30", "--", str(LOOP), env=loop_env("stuck"))
    try:
        wait_for(lambda: html.exists() and "Paused by the breaker (no-progress)" in html.read_text(), timeout=60,
                 what="report.html written at the open, saying the loop is paused")
        code, out, _ = run_main(state_dir)
        assert code == 0 and "**Paused by the breaker (no-progress) at iteration 3: it tries again after the " \
                              "cooldown at " in out
        stop = subprocess.run([sys.executable, "-m", "ralph_supervisor", "stop", "-w", str(workspace)],
                              capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
        assert stop.returncode == 0, stop.stderr
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Stopped on request (`ralph-supervise stop`) at iteration 3." in html.read_text()


def test_a_human_called_in_is_told_the_snapshot_to_restore_and_the_exact_command(tmp_path: Path) -> None:
    from ralph_supervisor.snapshots.store import SnapshotStore

    state_dir = fixture(tmp_path, "stuck")
    workspace = state_dir.parent
    (workspace / "src.py").write_text("x = 1\n")
    SnapshotStore(workspace, state_dir).take(4, "end", None, now=NOW)
    code, out, _ = run_main(state_dir)
    assert code == 0
    decide = out[out.index("## What a human should decide next"):]
    assert "`ralph-supervise restore 4 -w /srv/proj`" in decide  # the workspace the run recorded
    assert "newest snapshot (iteration 4" in decide
    code, out, _ = run_main(fixture(tmp_path / "other", "stuck"))
    assert "ralph-supervise restore" not in out  # no store: nothing to restore


def test_the_diffstat_since_the_run_began_is_gits_own_summary_and_file_lines(tmp_path: Path) -> None:
    """One `git diff --stat` gives both: its file lines and its last line, which is `--shortstat`."""
    from ralph_supervisor.report.sources import read_git

    ws = tmp_path / "ws"
    ws.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")

    def git(*args: str, at: int | None = None) -> str:
        stamp = {"GIT_AUTHOR_DATE": f"@{at} +0000", "GIT_COMMITTER_DATE": f"@{at} +0000"} if at else {}
        return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True,
                              env={**env, **stamp}).stdout

    git("init", "-q")
    (ws / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "before", at=1796100000)
    (ws / "a.py").write_text("x = 2\ny = 3\n")
    (ws / "b.py").write_text("z = 1\n")
    git("add", "-A")
    git("commit", "-qm", "during", at=1796100600)
    facts = read_git(ws, 1796100300)
    base = git("rev-list", "-1", "--before=@1796100300", "HEAD").strip()
    assert facts.diffstat == git("diff", "--shortstat", base, "HEAD").strip()
    assert facts.diffstat.startswith("2 files changed")
    assert [line.split("|")[0].strip() for line in facts.files] == ["a.py", "b.py"]
    assert facts.commits[0][1] == "during" and facts.total_commits == 1


def test_the_iterations_line_counts_each_call_once_by_its_worst_outcome(tmp_path: Path) -> None:
    """A call cut short by a stop, or blocked, also failed: it is counted as cut short (or blocked), not as
    failed as well, as the console and the timeline say it."""
    import dataclasses

    from ralph_supervisor.report.markdown import iterations_line

    account = report.collect(fixture(tmp_path, "blocked"), now=NOW, git=False)
    base = account.iterations[0]
    base = dataclasses.replace(base, progress=False)
    rows = [dataclasses.replace(base, failed=True, cut_short=True),
            dataclasses.replace(base, failed=True, blocked=True),
            dataclasses.replace(base, failed=True),
            dataclasses.replace(base, failed=False, progress=True)]
    line = iterations_line(dataclasses.replace(account, iterations=rows))
    assert "1 failed" in line and "1 blocked" in line and "1 cut short" in line and "1 with progress" in line, line


def test_a_loop_that_failed_by_itself_is_sent_to_the_child_log_of_its_own_state_folder(tmp_path: Path) -> None:
    """Under `--state-dir` the loop's output is not in `DIR/.ralph-supervise/`: the report names the file where
    the records it read are (it once wrote `DIR/.ralph-supervise/child.log` whatever the folder)."""
    state_dir = tmp_path / "elsewhere" / "state-of-proj"
    shutil.copytree(FIXTURES / "clean", state_dir)
    events = state_dir / "events.jsonl"
    events.write_text(events.read_text().replace('"code": 0, "iteration": 4, "event": "child_exited"',
                                                 '"code": 3, "iteration": 4, "event": "child_exited"'))
    code, out, err = run_main(state_dir)
    assert code == 0 and err == ""
    assert "code 3" in out
    assert f"`{state_dir / 'child.log'}`" in out
    assert ".ralph-supervise/child.log" not in out


def test_the_runs_dollars_come_from_state_json_when_no_iteration_says_what_it_cost(tmp_path: Path) -> None:
    """The events that carry each call's cost rotated away, the ledger and state.json left: the dollars are the
    breaker's count in state.json (`cost_used`; the report once looked for a `cost_usd` key never written)."""
    state_dir = tmp_path / "proj" / ".ralph-supervise"
    state_dir.mkdir(parents=True)
    state_json.save(state_dir, Snapshot(iteration=3, tokens_used=900, cost_used=1.25))
    (state_dir / ledger_json.NAME).write_text(json.dumps({"goal": "g", "attempts": [
        {"iteration": n, "action": f"step {n}", "outcome": "success", "error": None, "tokensUsed": 300}
        for n in (1, 2, 3)]}))
    (state_dir / events_jsonl.NAME).write_text("".join(json.dumps(e) + "\n" for e in [  # a run, its calls rotated away
        {"event": "supervisor_started", "ts": "2026-12-01T10:00:00.000Z", "workspace": str(state_dir.parent)},
        {"event": "supervisor_stopped", "ts": "2026-12-01T11:00:00.000Z", "code": 0}]))
    account = report.collect(state_dir, now=NOW, git=False)
    assert account.spend.iterations == 3 and account.spend.cost_usd == 1.25
    assert "| dollars | $1.25 |" in report.render_markdown(account)

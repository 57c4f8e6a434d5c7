"""The fleet for real: a real Prometheus scrapes two real supervisors (one loop working, one stuck), evaluates
the shipped alert rules (only their `for:` shortened), and a real Alertmanager routes the stuck loop's alerts
to a webhook on 127.0.0.1; the Grafana dashboard's queries run against the same Prometheus.

Prometheus and Alertmanager are Debian's binaries (tests/helpers/debian_binaries.py, fetched by
scripts/setup.d/40-prometheus-stack.sh); without them the tests skip and say why. The scenario runs once
(about 50 s, one test) and each `check_` function checks one part of what it recorded.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.debian_binaries import find_binary
from tests.helpers.prometheus_stack import (
    Server,
    StackError,
    Webhook,
    alerts,
    get_json,
    query,
    start_alertmanager,
    start_prometheus,
    start_webhook,
    targets,
)
from tests.helpers.supervise import LOOP, REPO, events, loop_env, run, start, wait_for

pytestmark = pytest.mark.slow

RULES = REPO / "deploy" / "prometheus" / "ralph-supervise.rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "ralph-supervise-dashboard.json"
INTERVAL = 1.0
"""Scrape and evaluation interval of the test's Prometheus, in seconds."""
FAST = ("--no-echo", "--log-format", "json", "--grace", "1")


def binaries() -> tuple[str, str]:
    prometheus, why = find_binary("prometheus", "prometheus")
    if prometheus is None:
        pytest.skip(f"no Prometheus: {why}")
    alertmanager, why = find_binary("prometheus-alertmanager", "prometheus-alertmanager")
    if alertmanager is None:
        pytest.skip(f"no Alertmanager: {why}")
    return prometheus, alertmanager


def rules_with_short_for(rules_text: str) -> str:
    """The shipped rules with every `for:` at 0s: an alert fires at the first evaluation that sees it."""
    return re.sub(r"^(\s+for:) \S+$", r"\1 0s", rules_text, flags=re.M)


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


# -- the scenario ---------------------------------------------------------------------------------


@dataclass
class Loop:
    name: str
    workspace: Path
    state_dir: Path
    proc: subprocess.Popen[bytes]
    port: int = 0

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Fleet:
    prometheus: Server
    alertmanager: Server
    webhook: Webhook
    working: Loop
    stuck: Loop
    started: float
    """Wall-clock time Prometheus started."""
    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """(wall-clock time, alert) for every alert Prometheus's API showed, polled every 0.2 s."""
    seen: dict[str, float] = field(default_factory=dict)
    """Wall-clock time each milestone of the scenario was reached."""
    stuck_code: int | None = None
    last_stuck_scrape: float = 0.0
    """Prometheus's timestamp of the last sample it took from the stuck loop."""

    def firing(self, alertname: str, **labels: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, a) for at, a in self.samples if a["state"] == "firing" and a["labels"]["alertname"] == alertname
                and all(a["labels"].get(k) == v for k, v in labels.items())]


def start_loop(tmp: Path, name: str, scenario: str, *extra: str) -> Loop:
    workspace = tmp / name
    workspace.mkdir()
    state_dir = tmp / f"state-{name}"
    out = open(tmp / f"{name}.out", "wb")
    env = loop_env(scenario, FAKE_AGENT_TOKENS="10")  # a calm spender: RalphSpendRateHigh stays quiet
    proc = start(workspace, *FAST, "--state-dir", str(state_dir), "--name", name, "--metrics-port", "0",
                 *extra, "--", str(LOOP), env=env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    loop = Loop(name, workspace, state_dir, proc)
    loop.port = wait_for(lambda: events(state_dir, "metrics_listening"), 30, f"{name}'s metrics")[0]["port"]
    return loop


def stop_loop(loop: Loop) -> None:
    if loop.proc.poll() is None:
        loop.proc.terminate()
        loop.proc.wait(timeout=30)


def poll_until(fleet: Fleet, done: Any, timeout: float, what: str) -> None:
    """Record Prometheus's alerts every 0.2 s until `done()` holds."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.time()
        fleet.samples.extend((now, a) for a in alerts(fleet.prometheus))
        if fleet.stuck_code is None and fleet.stuck.proc.poll() is not None:
            fleet.stuck_code = fleet.stuck.proc.returncode
            fleet.seen["stuck exited"] = now
        if done():
            fleet.seen[what] = now
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; Prometheus's alerts: "
                                 f"{[(a['labels'], a['state']) for _, a in fleet.samples[-10:]]}")
        time.sleep(0.2)


def webhook_got(fleet: Fleet, alertname: str, **labels: str) -> list[dict[str, Any]]:
    return [a for _, a in fleet.webhook.alerts("firing") if a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())]


@contextmanager
def running_fleet(tmp: Path) -> Iterator[Fleet]:
    """The scenario, from the start of both loops to the SIGKILL of the working one's supervisor; the servers
    stay up (for queries) until the block ends, then everything is stopped."""
    prometheus_bin, alertmanager_bin = binaries()
    rules = tmp / RULES.name
    rules.write_text(rules_with_short_for(RULES.read_text()))
    servers: list[Server] = []
    loops: list[Loop] = []
    webhook = start_webhook()
    try:
        working = start_loop(tmp, "working", "progress")
        loops.append(working)
        # Stuck: opens after 2 calls without progress, paused 24 s (Prometheus may take 10 s to start and discover
        # its targets under load), the trial fails too: the 2nd open is final.
        stuck = start_loop(tmp, "stuck", "stuck", "--no-progress", "2", "--max-opens", "2", "--cooldown", "0.4")
        loops.append(stuck)
        alertmanager = start_alertmanager(alertmanager_bin, tmp / "alertmanager", webhook.url)
        servers.append(alertmanager)
        started = time.time()
        prometheus = start_prometheus(prometheus_bin, tmp / "prometheus", targets=[working.instance, stuck.instance],
                                      rules=rules, interval=f"{INTERVAL:g}s",
                                      alertmanager=f"127.0.0.1:{alertmanager.port}")
        servers.append(prometheus)
        f = Fleet(prometheus, alertmanager, webhook, working, stuck, started)
        poll_until(f, lambda: len([t for t in targets(prometheus) if t["health"] == "up"]) == 2, 30, "both up")
        poll_until(f, lambda: f.firing("RalphBreakerOpenTooLong", name="stuck"), 60, "open alert")
        poll_until(f, lambda: webhook_got(f, "RalphBreakerOpenTooLong", name="stuck"), 30, "open at webhook")
        poll_until(f, lambda: f.firing("RalphFinalStop", name="stuck"), 90, "final alert")
        poll_until(f, lambda: webhook_got(f, "RalphFinalStop", name="stuck"), 30, "final at webhook")
        poll_until(f, lambda: f.stuck_code is not None, 30, "stuck exited")
        raw = query(prometheus, 'ralph_supervise_breaker_final{name="stuck"}[10m]')
        f.last_stuck_scrape = float(raw[0]["values"][-1][0])
        poll_until(f, lambda: f.firing("RalphSupervisorDown", instance=stuck.instance), 30, "stuck down")
        # SIGKILL the working loop's supervisor: nothing stops its tree, so end what is left of it afterwards.
        tree = psutil.Process(working.proc.pid).children(recursive=True)
        f.seen["kill"] = time.time()
        os.kill(working.proc.pid, signal.SIGKILL)
        working.proc.wait(timeout=10)
        for proc in tree:
            try:
                proc.kill()
            except psutil.Error:
                pass
        poll_until(f, lambda: f.firing("RalphSupervisorDown", instance=working.instance), 30, "working down")
        poll_until(f, lambda: webhook_got(f, "RalphSupervisorDown", instance=working.instance), 30,
                   "working down at webhook")
        yield f
    finally:
        for loop in loops:
            stop_loop(loop)
        for server in reversed(servers):
            server.stop()
        webhook.close()


# -- the rules are the shipped ones ---------------------------------------------------------------


def test_the_rules_loaded_differ_from_the_shipped_file_only_in_their_for_durations():
    shipped = RULES.read_text()
    changed = changed_lines(shipped, rules_with_short_for(shipped))
    fors = re.findall(r"^\s+for: (\S+)$", shipped, re.M)
    assert fors and len(changed) == 2 * len(fors) - 2 * fors.count("0s")
    assert all(re.fullmatch(r"[+-]\s+for: \S+", line) for line in changed), changed


# -- alerts end to end ----------------------------------------------------------------------------


def check_the_stuck_loop_fires_breaker_open_then_final_stop_in_prometheus(fleet: Fleet) -> None:
    assert fleet.stuck_code == 2  # the breaker opened for good
    opened = fleet.firing("RalphBreakerOpenTooLong", name="stuck")
    final = fleet.firing("RalphFinalStop", name="stuck")
    assert opened and final and opened[0][0] < final[0][0]
    labels = final[0][1]["labels"]
    assert labels["workspace"] == str(fleet.stuck.workspace) and labels["severity"] == "critical"
    assert labels["instance"] == fleet.stuck.instance
    assert "stopped for good" in final[0][1]["annotations"]["summary"]
    # The supervisor's exit waited for one more scrape, which saw the final state.
    lingered = events(fleet.stuck.state_dir, "metrics_linger_ended")
    assert lingered and lingered[0]["scraped"] is True


def check_alertmanager_routes_the_stuck_loops_alerts_to_the_webhook_with_its_name_and_workspace(fleet: Fleet) -> None:
    for alertname in ("RalphBreakerOpenTooLong", "RalphFinalStop"):
        got = webhook_got(fleet, alertname, name="stuck", workspace=str(fleet.stuck.workspace))
        assert got, alertname
        assert got[0]["labels"]["job"] == "ralph-supervise" and got[0]["annotations"]["description"]
    # The open alert was resolved by the trial (the breaker went HALF_OPEN), and Alertmanager said so.
    resolved = [a for _, a in fleet.webhook.alerts("resolved") if a["labels"]["alertname"] == "RalphBreakerOpenTooLong"]
    assert resolved and resolved[0]["labels"]["name"] == "stuck"


def check_the_working_loop_raises_nothing_until_its_supervisor_is_killed(fleet: Fleet) -> None:
    before_kill = [(at, a) for at, a in fleet.samples if at < fleet.seen["kill"]]
    assert len(before_kill) > 10
    about_working = [a["labels"] for _, a in before_kill if a["labels"].get("name") == "working"
                     or a["labels"].get("instance") == fleet.working.instance]
    assert about_working == []
    notified = [a["labels"] for at, a in fleet.webhook.alerts("firing")
                if a["labels"].get("name") == "working" and at < fleet.seen["kill"]]
    assert notified == []
    # Only the stuck loop's own alerts fired at all.
    names = {a["labels"]["alertname"] for _, a in before_kill}
    assert names == {"RalphBreakerOpenTooLong", "RalphFinalStop", "RalphSupervisorDown"}


def check_a_supervisor_killed_with_sigkill_fires_supervisor_down(fleet: Fleet) -> None:
    down = fleet.firing("RalphSupervisorDown", instance=fleet.working.instance)
    assert down and down[0][0] > fleet.seen["kill"]
    assert down[0][1]["labels"]["severity"] == "critical"
    # Named after the loop its last heartbeat named, as the other alerts are.
    got = webhook_got(fleet, "RalphSupervisorDown", instance=fleet.working.instance, name="working",
                      workspace=str(fleet.working.workspace))
    assert got and "is down (loop working)" in got[0]["annotations"]["summary"], got


# -- the dashboard against the same Prometheus ----------------------------------------------------


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel.get("targets", [])]


def substituted(expr: str, workspace: str, span_s: float) -> str:
    """The query as Grafana sends it from the row repeated for `workspace` (one value per row)."""
    values = {"$workspace": workspace, "$__rate_interval": f"{4 * INTERVAL:g}s", "$__range": f"{int(span_s) + 1}s",
              "$__interval": f"{INTERVAL:g}s"}
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def check_every_dashboard_query_returns_series_for_the_stuck_loop(fleet: Fleet) -> None:
    at = fleet.last_stuck_scrape  # the last moment both loops were scraped
    span = at - fleet.started
    queries = dashboard_queries()
    assert len(queries) >= 5
    for title, expr in queries:
        result = query(fleet.prometheus, substituted(expr, str(fleet.stuck.workspace), span), at=at)
        assert result, f"panel {title!r}: {expr} returned nothing for the stuck loop"
    trips = [r for title, expr in queries if title.startswith("Trips")
             for r in query(fleet.prometheus, substituted(expr, str(fleet.stuck.workspace), span), at=at)]
    assert [r["metric"]["trigger"] for r in trips] == ["no-progress"]
    state = query(fleet.prometheus, substituted(queries[0][1], str(fleet.stuck.workspace), span), at=at)
    assert float(state[0]["value"][1]) == 3  # OPEN (2) and final (1)


def check_the_dashboard_shows_the_working_loop_with_no_trips(fleet: Fleet) -> None:
    at = fleet.last_stuck_scrape
    span = at - fleet.started
    for title, expr in dashboard_queries():
        result = query(fleet.prometheus, substituted(expr, str(fleet.working.workspace), span), at=at)
        if title.startswith("Trips"):
            assert result == [], f"the working loop never tripped: {result}"
        else:
            assert result, f"panel {title!r}: {expr} returned nothing for the working loop"
    iterations = query(fleet.prometheus, f'max(ralph_supervise_iteration{{workspace="{fleet.working.workspace}"}})',
                       at=at)
    assert float(iterations[0]["value"][1]) >= 3


def check_the_dashboards_loop_variable_lists_both_loops(fleet: Fleet) -> None:
    board = json.loads(DASHBOARD.read_text())
    variable = next(v for v in board["templating"]["list"] if v["name"] == "workspace")
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"]).groups()  # type: ignore[union-attr]
    found = get_json(f"{fleet.prometheus.url}/api/v1/label/{label}/values?match[]={metric}"
                     f"&start={fleet.started:.0f}")["data"]
    assert sorted(found) == sorted([str(fleet.working.workspace), str(fleet.stuck.workspace)])


# -- the whole scenario, once ---------------------------------------------------------------------


def test_the_fleet_for_real_alerts_routed_and_the_dashboard_answered(tmp_path: Path):
    """One run of the scenario (about 50 s), then each check on what it recorded. One test, not one per check:
    the suite's workers would each run the scenario again."""
    with running_fleet(tmp_path) as fleet:
        check_the_stuck_loop_fires_breaker_open_then_final_stop_in_prometheus(fleet)
        check_alertmanager_routes_the_stuck_loops_alerts_to_the_webhook_with_its_name_and_workspace(fleet)
        check_the_working_loop_raises_nothing_until_its_supervisor_is_killed(fleet)
        check_a_supervisor_killed_with_sigkill_fires_supervisor_down(fleet)
        check_every_dashboard_query_returns_series_for_the_stuck_loop(fleet)
        check_the_dashboard_shows_the_working_loop_with_no_trips(fleet)
        check_the_dashboards_loop_variable_lists_both_loops(fleet)


# -- what goes wrong says so ----------------------------------------------------------------------


def test_a_port_in_use_is_one_clear_line_naming_the_server(tmp_path: Path):
    prometheus_bin, alertmanager_bin = binaries()
    webhook = start_webhook()
    taken = webhook.server.server_address[1]
    try:
        with pytest.raises(StackError) as raised:
            start_alertmanager(alertmanager_bin, tmp_path / "am", webhook.url, port=taken)
        message = str(raised.value)
        assert "\n" not in message and message.startswith("Alertmanager exited")
        assert "address already in use" in message
        with pytest.raises(StackError) as raised:
            start_prometheus(prometheus_bin, tmp_path / "prom", targets=[], rules=RULES, interval="1s", port=taken)
        assert str(raised.value).startswith("Prometheus exited") and "address already in use" in str(raised.value)
    finally:
        webhook.close()


def test_a_scrape_that_times_out_is_named_in_the_target_and_fires_supervisor_down(tmp_path: Path):
    """A target that accepts the connection and never answers (a frozen supervisor): the scrape times out."""
    prometheus_bin, _ = binaries()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    instance = f"127.0.0.1:{silent.getsockname()[1]}"
    rules = tmp_path / RULES.name
    rules.write_text(rules_with_short_for(RULES.read_text()))
    prometheus = start_prometheus(prometheus_bin, tmp_path / "prom", targets=[instance], rules=rules,
                                  interval="1s", scrape_timeout="500ms")
    try:
        target = wait_for(lambda: [t for t in targets(prometheus) if t["lastError"]], 30, "a failed scrape")[0]
        assert target["health"] == "down" and "deadline exceeded" in target["lastError"]
        wait_for(lambda: [a for a in alerts(prometheus) if a["labels"]["alertname"] == "RalphSupervisorDown"
                          and a["labels"]["instance"] == instance and a["state"] == "firing"], 30, "down alert")
    finally:
        prometheus.stop()
        silent.close()



def test_a_metrics_port_in_use_is_one_warning_naming_the_flag_and_the_loop_runs_on(tmp_path: Path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        result = run(tmp_path, *FAST, "--state-dir", str(tmp_path / "state"), "--metrics-port", str(port), "--",
                     "sh", "-c", "exit 3")
    finally:
        taken.close()
    assert result.returncode == 3  # the loop ran, and its code came through
    (warning,) = events(tmp_path / "state", "metrics_unavailable")
    assert warning["option"] == "--metrics-port" and warning["port"] == port
    assert "in use" in warning["error"]
    lines = [line for line in result.stderr.decode().splitlines() if "metrics_unavailable" in line]
    assert len(lines) == 1 and str(port) in lines[0], result.stderr.decode()[-2000:]

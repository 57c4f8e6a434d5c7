"""Fleets in Prometheus and Grafana: deploy/'s alert rules, their unit tests, the scrape config and the
dashboard, checked by Prometheus's own promtool against what the supervisor really exposes.

promtool comes from PATH, else from Debian's prometheus package (tests/helpers/promtool.py); without
either the tests are skipped and say why.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph_supervisor.metrics import Metrics
from tests.helpers.promtool import find_promtool
from tests.helpers.supervise import LOOP, REPO, loop_env, run

PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS / "ralph-supervise.rules.yml"
RULE_TESTS = PROMETHEUS / "ralph-supervise.rules.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "ralph-supervise-dashboard.json"
ALERTS = ("RalphBreakerOpenTooLong", "RalphFinalStop", "RalphLimitWaitTooLong", "RalphSupervisorDown",
          "RalphSupervisorSilent", "RalphSpendRateHigh", "RalphDailyBudgetNearlySpent", "RalphTreeSurvivors")
GRAFANA_VARIABLES = {"$workspace": "/srv/loop", "$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}


@pytest.fixture(scope="module")
def promtool() -> str:
    path, how = find_promtool()
    if path is None:
        pytest.skip(f"no promtool: {how}")
    return path


def promtool_run(promtool: str, *args: str, cwd: Path = PROMETHEUS, stdin: str | None = None
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, input=stdin)


def exposed_names(text: str) -> set[str]:
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}


def exposition(tmp_path: Path) -> str:
    metrics = Metrics("/srv/loop")
    try:
        metrics.write_textfile(tmp_path / "ralph.prom")
    finally:
        metrics.close()
    return (tmp_path / "ralph.prom").read_text()


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


# -- the files, as promtool reads them ---------------------------------------------------------


def test_the_rules_pass_promtool_and_their_unit_tests_and_the_config_loads_them(promtool: str):
    checked = promtool_run(promtool, "check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    tested = promtool_run(promtool, "test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    config = promtool_run(promtool, "check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout
    names = re.findall(r"^\s+- alert: (\S+)", RULES.read_text(), re.M)
    assert tuple(names) == ALERTS
    for name in ALERTS:  # every alert has a unit test that sees it fire
        assert re.search(rf"alertname: {name}\n\s+exp_alerts:\n\s+- exp_labels", RULE_TESTS.read_text()), name


def test_the_unit_tests_have_teeth(promtool: str, tmp_path: Path):
    """The same tests against rules with a changed threshold fail, naming the alert."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("for: 60m", "for: 30m"))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    tested = promtool_run(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0 and "RalphBreakerOpenTooLong" in tested.stdout + tested.stderr


def test_the_supervisors_exposition_passes_promtool_check_metrics(promtool: str, tmp_path: Path):
    text = exposition(tmp_path)
    checked = promtool_run(promtool, "check", "metrics", stdin=text)
    assert checked.returncode == 0 and checked.stdout.strip() == "", checked.stdout + checked.stderr


def test_rules_and_dashboard_use_only_metrics_the_supervisor_exposes(tmp_path: Path):
    exposed = exposed_names(exposition(tmp_path))
    used = set(re.findall(r"ralph_supervise_[a-z_]+", RULES.read_text() + DASHBOARD.read_text()))
    assert used and used <= exposed, used - exposed


def test_the_dashboard_has_one_row_per_loop_with_state_iterations_spend_and_trips(promtool: str, tmp_path: Path):
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    loops = variables["workspace"]
    assert loops["multi"] and loops["includeAll"] and "ralph_supervise_breaker_state" in loops["query"]["query"]
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert len(rows) == 1 and rows[0]["repeat"] == "workspace" and rows[0]["title"] == "$workspace"
    inside = [p for p in board["panels"] if p["type"] != "row"]
    titles = " ".join(p["title"] for p in inside).lower()
    for word in ("state", "iteration", "spend", "trips"):
        assert word in titles
    # Laid out side by side under the row: 24 columns, no overlap, every query scoped to the row's loop.
    assert sum(p["gridPos"]["w"] for p in inside) == 24
    spans = sorted((p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"]) for p in inside)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert {p["gridPos"]["y"] for p in inside} == {rows[0]["gridPos"]["y"] + 1}
    for panel in inside:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert 'workspace="$workspace"' in target["expr"], target["expr"]
    # Every query is valid PromQL (Grafana's variables replaced as Grafana would): promtool parses
    # them as recording rules.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": _expand(expr)} for i, expr in enumerate(dashboard_exprs())]}]}
    (tmp_path / "dashboard.rules.yml").write_text(json.dumps(rules))  # JSON is YAML
    checked = promtool_run(promtool, "check", "rules", "dashboard.rules.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _expand(expr: str) -> str:
    for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


# -- a real supervisor's textfile, evaluated by the rules -----------------------------------------


def series_of(text: str, extra: dict[str, str]) -> list[dict[str, str]]:
    """Every sample of an exposition as a promtool input series, constant for 30 minutes."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        more = ",".join(f'{k}="{v}"' for k, v in extra.items())
        labels = f"{{{more},{labels}" if labels else f"{{{more}}}"
        out.append({"series": name + labels, "values": f"{float(value)}x30"})
    return out


@pytest.mark.slow
def test_a_real_final_stop_in_a_textfile_fires_the_final_stop_alert_for_that_loop(promtool: str, tmp_path: Path):
    workspace = tmp_path / "my loop"
    workspace.mkdir()
    prom = tmp_path / "textfile" / "ralph-nightly.prom"
    prom.parent.mkdir()
    result = run(workspace, "run", "--no-echo", "--log-format", "json", "--grace", "1", "--no-progress", "2",
                 "--max-opens", "1", "--name", "nightly", "--metrics-textfile", str(prom), "--", str(LOOP),
                 env=loop_env("stuck"))
    assert result.returncode == 2, result.stderr.decode()[-2000:]  # the breaker opened for good
    text = prom.read_text()
    labels = {"workspace": str(workspace), "name": "nightly"}
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": series_of(text, {"job": "node", "instance": "box:9100"}),
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "RalphFinalStop", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "job": "node", "instance": "box:9100", **labels},
                "exp_annotations": {
                    "summary": "Loop nightly was stopped for good",
                    "description": f"The breaker of {workspace} opened for good (the last allowed open, a cap, "
                                   "or a blocked agent): the tree is stopped and a human decides. Read "
                                   f"escalation.md, then `ralph-supervise reset -w {workspace}` to start again."}}]},
            {"eval_time": "2m", "alertname": "RalphBreakerOpenTooLong", "exp_alerts": []},
            {"eval_time": "2m", "alertname": "RalphSpendRateHigh", "exp_alerts": []},
        ]}]}
    (tmp_path / "final.test.yml").write_text(json.dumps(tests))
    tested = promtool_run(promtool, "test", "rules", "final.test.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    samples: dict[str, Any] = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                               for line in text.splitlines() if line.startswith("ralph_supervise_breaker_")
                               and "opens" not in line}
    assert samples == {"ralph_supervise_breaker_state": 2.0, "ralph_supervise_breaker_final": 1.0}
    opened = [line for line in text.splitlines() if line.startswith("ralph_supervise_breaker_opens_total{")
              and line.endswith(" 1.0")]
    assert len(opened) == 1 and 'trigger="no-progress"' in opened[0] and f'workspace="{workspace}"' in opened[0]


def test_without_promtool_and_without_apt_the_tests_say_why_they_skip(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, why = find_promtool()
    assert path is None and "no apt-get/dpkg-deb" in why

"""Prometheus metrics, scraped over real loopback HTTP and read back from real textfiles."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from ralph_supervisor.metrics import BUDGET_KINDS, KNOWN_TRIGGERS, Metrics, breaker_state_value

WS = "/home/u/proj"
NAME = "proj"  # no --name: the workspace's folder name


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}; parsing fails loudly on malformed exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted({"workspace": WS, "name": NAME, **labels}.items())))]


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    m = Metrics(WS)
    yield m
    m.close()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def feed(m: Metrics) -> None:
    m.child_running(True)
    m.tree_size(5)
    m.iteration_started(now=1_790_000_000.5)
    m.iteration_finished(files_changed=3, output_bytes=1200, tokens=5000)
    m.iteration_finished(files_changed=0, output_bytes=0, tokens=700)
    m.add_output_bytes(300)
    m.breaker_opened("no-progress")
    m.breaker_state("OPEN")
    m.tree_stopped(survivors=0)
    m.tree_stopped(survivors=2)
    m.snapshots(count=4, store_bytes=123_456)


def test_a_scrape_over_loopback_shows_what_the_supervisor_reported(metrics: Metrics):
    port = metrics.serve(0)
    assert port > 0
    assert metrics.address == ("127.0.0.1", port)
    feed(metrics)
    text = scrape(port)
    assert value(text, "ralph_supervise_iterations_total") == 2
    assert value(text, "ralph_supervise_files_changed_total") == 3
    assert value(text, "ralph_supervise_output_bytes_total") == 1500
    assert value(text, "ralph_supervise_tokens_total") == 5700
    assert value(text, "ralph_supervise_breaker_opens_total", trigger="no-progress") == 1
    assert value(text, "ralph_supervise_breaker_opens_total", trigger="same-error") == 0
    assert value(text, "ralph_supervise_breaker_state") == 2
    assert value(text, "ralph_supervise_tree_processes") == 5
    assert value(text, "ralph_supervise_tree_stops_total") == 2
    assert value(text, "ralph_supervise_tree_survivors_total") == 2
    assert value(text, "ralph_supervise_child_running") == 1
    assert value(text, "ralph_supervise_iteration_started_timestamp_seconds") == 1_790_000_000.5
    assert value(text, "ralph_supervise_snapshots") == 4
    assert value(text, "ralph_supervise_snapshot_bytes") == 123_456


def test_a_verify_shows_its_tests_by_outcome_and_its_time(metrics: Metrics):
    port = metrics.serve(0)
    metrics.verified(seconds=2.5, counts={"passed": 41, "failed": 2, "errors": 0, "skipped": 1})
    metrics.verified(seconds=600.0, counts=None)  # unverified: the counts of the last verified one stay
    text = scrape(port)
    assert value(text, "ralph_supervise_tests", outcome="passed") == 41
    assert value(text, "ralph_supervise_tests", outcome="failed") == 2
    assert value(text, "ralph_supervise_tests", outcome="skipped") == 1
    assert value(text, "ralph_supervise_verify_seconds") == 600.0
    assert value(text, "ralph_supervise_verifies_total", result="failed") == 1
    assert value(text, "ralph_supervise_verifies_total", result="unverified") == 1


def test_every_metric_is_present_as_zero_before_anything_happens(metrics: Metrics):
    port = metrics.serve(0)
    text = scrape(port)
    for name in ("iterations_total", "output_bytes_total", "files_changed_total", "tokens_total",
                 "tree_stops_total", "tree_survivors_total", "breaker_state", "tree_processes",
                 "child_running", "iteration_started_timestamp_seconds", "breaker_final", "iteration",
                 "cost_usd_total", "limit_wait_until_timestamp_seconds",
                 "snapshots", "snapshot_bytes", "verify_seconds"):
        assert value(text, f"ralph_supervise_{name}") == 0
    for outcome in ("passed", "failed", "errors", "skipped"):
        assert value(text, "ralph_supervise_tests", outcome=outcome) == 0
    for result in ("passed", "failed", "unverified"):
        assert value(text, "ralph_supervise_verifies_total", result=result) == 0
    for trigger in KNOWN_TRIGGERS:
        assert value(text, "ralph_supervise_breaker_opens_total", trigger=trigger) == 0
    for kind in BUDGET_KINDS:
        assert value(text, "ralph_supervise_budget", kind=kind) == 0
    for kind in ("token", "cost"):
        assert value(text, "ralph_supervise_daily_spend", kind=kind) == 0


def test_spend_stands_beside_its_budgets_so_an_alert_can_divide(metrics: Metrics, tmp_path: Path):
    metrics.budgets(token=100_000, cost=5.0, daily_token=0, daily_cost=20.0)
    metrics.add_cost(1.25)
    metrics.daily_spend(tokens=40_000, cost_usd=7.5)
    metrics.write_textfile(tmp_path / "ralph.prom")
    text = (tmp_path / "ralph.prom").read_text()
    assert value(text, "ralph_supervise_budget", kind="token") == 100_000
    assert value(text, "ralph_supervise_budget", kind="cost") == 5.0
    assert value(text, "ralph_supervise_budget", kind="daily_token") == 0  # off
    assert value(text, "ralph_supervise_daily_spend", kind="cost") / value(text, "ralph_supervise_budget",
                                                                          kind="daily_cost") == 0.375
    assert value(text, "ralph_supervise_cost_usd_total") / value(text, "ralph_supervise_budget", kind="cost") == 0.25


def test_breaker_state_follows_transitions(metrics: Metrics):
    port = metrics.serve(0)
    for state, expected in (("OPEN", 2), ("HALF_OPEN", 1), ("CLOSED", 0)):
        metrics.breaker_state(state)
        assert value(scrape(port), "ralph_supervise_breaker_state") == expected
    assert breaker_state_value("half-open") == 1
    with pytest.raises(ValueError, match="unknown breaker state"):
        breaker_state_value("AJAR")


def test_two_supervisors_in_one_process_keep_separate_metrics():
    first, second = Metrics("/a"), Metrics("/b")
    try:
        first.iteration_finished(files_changed=1, output_bytes=1, tokens=1)
        p1, p2 = first.serve(0), second.serve(0)
        assert samples(scrape(p1))[("ralph_supervise_iterations_total", (("name", "a"), ("workspace", "/a")))] == 1
        assert samples(scrape(p2))[("ralph_supervise_iterations_total", (("name", "b"), ("workspace", "/b")))] == 0
    finally:
        first.close()
        second.close()


def test_close_frees_the_port(metrics: Metrics):
    port = metrics.serve(0)
    metrics.close()
    assert metrics.address is None
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))  # would fail with EADDRINUSE if still listening
    finally:
        probe.close()


def test_a_busy_port_is_an_error_for_the_caller(metrics: Metrics):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        with pytest.raises(OSError):
            metrics.serve(holder.getsockname()[1])
    finally:
        holder.close()


def test_textfile_is_parseable_and_replaced_atomically(metrics: Metrics, tmp_path: Path):
    path = tmp_path / "ralph.prom"
    feed(metrics)
    assert metrics.write_textfile(path)
    text = path.read_text()
    assert value(text, "ralph_supervise_iterations_total") == 2
    assert value(text, "ralph_supervise_breaker_opens_total", trigger="no-progress") == 1
    first_inode = path.stat().st_ino
    metrics.iteration_finished(files_changed=1, output_bytes=0, tokens=0)
    assert metrics.write_textfile(path)
    assert path.stat().st_ino != first_inode  # a new file renamed over the old, not rewritten in place
    assert value(path.read_text(), "ralph_supervise_iterations_total") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ralph.prom"]  # no temp file left over


def test_a_reader_never_sees_a_half_written_textfile(metrics: Metrics, tmp_path: Path):
    path = tmp_path / "ralph.prom"
    feed(metrics)
    metrics.write_textfile(path)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            metrics.iteration_finished(files_changed=1, output_bytes=10, tokens=10)
            metrics.write_textfile(path)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(200):
            text = path.read_text()
            # Every read is a whole exposition: it parses and ends with the last metric family.
            assert value(text, "ralph_supervise_iterations_total") >= 2
            assert text.endswith("\n")
            assert "ralph_supervise_iteration_started_timestamp_seconds{" in text
    finally:
        stop.set()
        thread.join()


def test_an_unwritable_textfile_is_logged_once_and_never_raises(metrics: Metrics, tmp_path: Path):
    path = tmp_path / "missing-dir" / "ralph.prom"
    with capture_logs() as logs:
        assert metrics.write_textfile(path) is False
        assert metrics.write_textfile(path) is False
    assert [e["event"] for e in logs].count("metrics_textfile_failed") == 1


def test_every_sample_carries_the_workspace_and_the_name_label_given_with_name(tmp_path: Path):
    m = Metrics(WS, "nightly")
    try:
        feed(m)
        m.write_textfile(tmp_path / "ralph.prom")
        found = samples((tmp_path / "ralph.prom").read_text())
    finally:
        m.close()
    assert found
    for metric, labels in found:
        assert metric.startswith("ralph_supervise_")
        assert dict(labels)["workspace"] == WS and dict(labels)["name"] == "nightly", metric


def test_followed_state_is_read_at_each_exposition_and_what_it_lacks_is_tolerated(metrics: Metrics, tmp_path: Path):
    path = tmp_path / "ralph.prom"
    state: dict[str, Any] = {"state": "CLOSED", "iteration": 7}  # no final: tolerated
    metrics.follow(lambda: state)

    def read() -> str:
        assert metrics.write_textfile(path)
        return path.read_text()

    text = read()
    assert value(text, "ralph_supervise_breaker_state") == 0
    assert value(text, "ralph_supervise_iteration") == 7
    assert value(text, "ralph_supervise_breaker_final") == 0
    state.update(state="OPEN", final=True, iteration=9)
    scraped = scrape(metrics.serve(0))  # read in the server's thread, at the scrape
    assert value(scraped, "ralph_supervise_breaker_state") == 2
    assert value(scraped, "ralph_supervise_breaker_final") == 1
    assert value(scraped, "ralph_supervise_iteration") == 9
    metrics.breaker_state("HALF_OPEN")  # the source decides now
    state.clear()
    state.update(state="AJAR", iteration="nine", final="yes")  # garbage reads as zeros
    text = read()
    for name in ("breaker_state", "iteration", "breaker_final"):
        assert value(text, f"ralph_supervise_{name}") == 0


def test_a_failing_source_never_fails_a_scrape(metrics: Metrics):
    def broken() -> dict[str, Any]:
        raise RuntimeError("bookkeeping bug")

    metrics.follow(broken)
    assert value(scrape(metrics.serve(0)), "ralph_supervise_breaker_state") == 0


def test_cost_and_the_limit_wait_carry_the_loops_labels(metrics: Metrics, tmp_path: Path):
    for usd in (0.25, 0.0, float("nan"), -1.0, 0.5):  # only real spend counts
        metrics.add_cost(usd)
    reset = datetime(2026, 12, 1, 15, 28, tzinfo=timezone.utc).timestamp()
    metrics.limit_wait(reset)
    metrics.write_textfile(tmp_path / "ralph.prom")
    text = (tmp_path / "ralph.prom").read_text()
    assert value(text, "ralph_supervise_cost_usd_total") == 0.75
    assert value(text, "ralph_supervise_limit_wait_until_timestamp_seconds") == reset
    metrics.limit_wait(None)
    metrics.write_textfile(tmp_path / "ralph.prom")
    assert value((tmp_path / "ralph.prom").read_text(), "ralph_supervise_limit_wait_until_timestamp_seconds") == 0


def test_the_heartbeat_is_the_time_of_the_scrape_or_the_write(metrics: Metrics, tmp_path: Path):
    import time

    before = time.time()
    metrics.write_textfile(tmp_path / "ralph.prom")
    beat = value((tmp_path / "ralph.prom").read_text(), "ralph_supervise_heartbeat_timestamp_seconds")
    assert before <= beat <= time.time()


def test_an_outage_and_the_usage_windows_carry_the_loops_labels(metrics: Metrics, tmp_path: Path):
    path = tmp_path / "ralph.prom"
    metrics.write_textfile(path)
    assert value(path.read_text(), "ralph_supervise_outage_since_timestamp_seconds") == 0  # present from the start
    metrics.outage(1_790_000_000.0)
    metrics.usage_window("five_hour", 93.0)
    metrics.usage_window("seven_day", 41.5)
    metrics.write_textfile(path)
    text = path.read_text()
    assert value(text, "ralph_supervise_outage_since_timestamp_seconds") == 1_790_000_000.0
    assert value(text, "ralph_supervise_usage_window_percent", window="five_hour") == 93.0
    assert value(text, "ralph_supervise_usage_window_percent", window="seven_day") == 41.5
    metrics.outage(None)
    metrics.write_textfile(path)
    assert value(path.read_text(), "ralph_supervise_outage_since_timestamp_seconds") == 0


def test_the_loops_cgroup_figures_are_read_at_each_exposition(metrics: Metrics, tmp_path: Path):
    from ralph_supervisor.process.cgroup import Figures

    now: list[Figures | None] = [Figures(12.5, 64 * 2**20, None, 7)]
    metrics.follow_cgroup(lambda: now[0])
    path = tmp_path / "ralph.prom"
    metrics.write_textfile(path)
    text = path.read_text()
    assert value(text, "ralph_supervise_cgroup_cpu_seconds") == 12.5
    assert value(text, "ralph_supervise_cgroup_memory_bytes") == 64 * 2**20
    assert value(text, "ralph_supervise_cgroup_tasks") == 7
    now[0] = None  # the cgroup is gone: zeros, never a failed scrape
    metrics.write_textfile(path)
    assert value(path.read_text(), "ralph_supervise_cgroup_tasks") == 0

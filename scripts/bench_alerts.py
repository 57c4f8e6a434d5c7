#!/usr/bin/env python3
"""Benchmark the fleet's alert path: the cost of a scrape, and how soon a stuck loop's alert arrives.

  1. Scrape time of one real supervisor's /metrics after 1,000 iterations (the soak's marker-mode loop,
     examples/fast_loop.sh, which changes a file per iteration), over loopback, 300 scrapes (--quick 100), side by side
     with the same supervisor at its first iterations. Target: under 20 ms (median and 95th percentile).
  2. Open to webhook: a real Prometheus (1 s scrape and evaluation interval) with the shipped rules at
     `for: 0s`, a real Alertmanager (group wait 0.5 s) and a webhook on 127.0.0.1; a stuck supervisor opens
     its breaker; the time from the open (its history.jsonl) to RalphBreakerOpenTooLong reaching the webhook.
     3 runs (--quick 1). Target: under two scrape intervals plus the group wait (2.5 s).

Prometheus and Alertmanager are Debian's (tests/helpers/debian_binaries.py). Usage:
  scripts/bench_alerts.py [--quick] [--out docs/bench/alerts.md]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _benchkit as kit  # noqa: E402

from tests.helpers.debian_binaries import find_binary  # noqa: E402
from tests.helpers.prometheus_stack import (  # noqa: E402
    alerts,
    free_port,
    query,
    start_alertmanager,
    start_prometheus,
    start_webhook,
    targets,
)

SCRAPE_TARGET_MS = 20.0
INTERVAL_S = 1.0
GROUP_WAIT_S = 0.5
ITERATIONS = 1000
FAST_LOOP = str(ROOT / "examples" / "fast_loop.sh")


def events(state_dir: Path, name: str) -> list[dict]:
    path = state_dir / "events.jsonl"
    found = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
    return found


def wait(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"bench_alerts: timed out waiting for {what}")


def scrape_ms(port: int, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            response.read()
        times.append((time.perf_counter() - started) * 1000)
    return times


def iteration_of(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^ralph_supervise_iterations_total\{[^}]*\} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


def bench_scrape(count: int) -> tuple[list[float], list[float], float]:
    tmp = kit.temp_dir("alerts-scrape")
    workspace = tmp / "ws"
    workspace.mkdir()
    # The soak's loop (scripts/soak.py), kept alive after its last iteration so that it can be scraped.
    argv = kit.supervisor_argv(workspace, ["bash", "-c", f"{FAST_LOOP}; exec sleep 1000"],
                               "--state-dir", str(tmp / "state"), "--iteration-marker", r"^\[fast-loop\] iteration ",
                               "--metrics-port", "0", "--no-progress", "1000000", "--on-open", "stop",
                               "--grace", "1")
    proc = kit.start(argv, env={"FAST_LOOP_ITERATIONS": str(ITERATIONS), "FAST_LOOP_SLEEP": "0.02"})
    try:
        port = wait(lambda: events(tmp / "state", "metrics_listening"), 60, "metrics")[0]["port"]
        wait(lambda: iteration_of(port) >= 3, 60, "the first iterations")
        early = scrape_ms(port, count)
        wait(lambda: iteration_of(port) >= ITERATIONS - 1, 600, f"{ITERATIONS} iterations")
        done = iteration_of(port)
        late = scrape_ms(port, count)
    finally:
        kit.stop_supervisor(proc)
    return late, early, done


def iso(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def bench_open_to_webhook(runs: int) -> list[tuple[float, float, float]]:
    """Per run: (open to the first scrape that saw it, that scrape to the alert's activeAt, activeAt to the
    webhook); their sum is the open-to-webhook time."""
    prometheus_bin, why = find_binary("prometheus", "prometheus")
    alertmanager_bin, why_am = find_binary("prometheus-alertmanager", "prometheus-alertmanager")
    if prometheus_bin is None or alertmanager_bin is None:
        raise SystemExit(f"bench_alerts: {why if prometheus_bin is None else why_am}")
    rules_text = (ROOT / "deploy" / "prometheus" / "ralph-supervise.rules.yml").read_text()
    delays = []
    for run in range(runs):
        tmp = kit.temp_dir(f"alerts-open-{run}")
        rules = tmp / "rules.yml"
        rules.write_text(re.sub(r"^(\s+for:) \S+$", r"\1 0s", rules_text, flags=re.M))
        workspace = tmp / "ws"
        workspace.mkdir()
        env = {"FAKE_AGENT_SCENARIO": "stuck", "FAKE_AGENT_DELAY": "0.5", "FAKE_AGENT_TOKENS": "10",
               "RALPH_LOOP_PAUSE": "0.2", "PATH": f"{ROOT / 'examples' / 'bin'}:/usr/bin:/bin"}
        # Prometheus first, so that it scrapes the supervisor from its start (the open comes after 4 calls, ~3 s).
        port = free_port()
        argv = kit.supervisor_argv(workspace, [str(ROOT / "examples" / "ralph_loop.sh")], "--state-dir",
                                   str(tmp / "state"), "--metrics-port", str(port), "--no-progress", "4",
                                   "--cooldown", "5", "--grace", "1", "--name", "stuck")
        webhook = start_webhook()
        servers = []
        proc = None
        try:
            servers.append(start_alertmanager(alertmanager_bin, tmp / "am", webhook.url))
            servers.append(start_prometheus(prometheus_bin, tmp / "prom", targets=[f"127.0.0.1:{port}"], rules=rules,
                                            interval=f"{INTERVAL_S:g}s",
                                            alertmanager=f"127.0.0.1:{servers[0].port}"))
            # Prometheus scrapes a target only once discovery handed it over (up to 5 s after the start).
            wait(lambda: [t for t in targets(servers[1]) if not t["lastScrape"].startswith("0001")], 60,
                 "Prometheus's first scrape")
            proc = kit.start(argv, env=env)
            wait(lambda: events(tmp / "state", "metrics_listening"), 60, "metrics")
            arrived = wait(lambda: [at for at, a in webhook.alerts("firing")
                                    if a["labels"]["alertname"] == "RalphBreakerOpenTooLong"], 120, "the alert")[0]
            history = [json.loads(line) for line in (tmp / "state" / "history.jsonl").read_text().splitlines()]
            opened = next(iso(h["ts"]) for h in history if h["to"] == "OPEN")
            samples = query(servers[1], "ralph_supervise_breaker_state[10m]")[0]["values"]
            if float(samples[0][1]) == 2:
                raise SystemExit("bench_alerts: the breaker opened before Prometheus's first scrape")
            scraped = next(float(t) for t, v in samples if float(v) == 2)
            active = next(iso(a["activeAt"]) for a in alerts(servers[1])
                          if a["labels"]["alertname"] == "RalphBreakerOpenTooLong")
            delays.append((scraped - opened, active - scraped, arrived - active))
        finally:
            if proc is not None:
                kit.stop_supervisor(proc)
            for server in reversed(servers):
                server.stop()
            webhook.close()
    return delays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=kit.DOCS / "alerts.md")
    args = parser.parse_args()
    kit.become_subreaper()
    load_start = kit.loadavg()
    count = 100 if args.quick else 300
    runs = 1 if args.quick else 3
    try:
        late, early, done = bench_scrape(count)
        parts = bench_open_to_webhook(runs)
    finally:
        kit.cleanup()
    target_s = 2 * INTERVAL_S + GROUP_WAIT_S
    delays = [sum(p) for p in parts]
    med_late, med_early = statistics.median(late), statistics.median(early)
    rows = [
        kit.Row(f"scrape of /metrics after {int(done):,} iterations, median of {count}", f"{med_late:.2f} ms",
                f"{med_early:.2f} ms (first iterations)", f"{med_late / med_early:.2f}",
                f"< {SCRAPE_TARGET_MS:g} ms", med_late < SCRAPE_TARGET_MS),
        kit.Row("same, 95th percentile", f"{p95(late):.2f} ms", f"{p95(early):.2f} ms", "",
                f"< {SCRAPE_TARGET_MS:g} ms", p95(late) < SCRAPE_TARGET_MS),
        kit.Row(f"breaker open to the alert at the webhook (`for: 0s`), worst of {runs}", f"{max(delays):.2f} s",
                "", "", f"< {target_s:g} s (2 scrape intervals + group wait)", max(delays) < target_s),
    ]
    markdown = f"""## Alerts: a scrape's cost, and a stuck loop's open to the webhook

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {kit.loadavg():.1f} at the end.
Mode: {"quick" if args.quick else "full"}. Scrapes over loopback from this process, one at a time, of a real
supervisor whose marker-mode loop has run {int(done):,} iterations (baseline: the same supervisor at its first
iterations). Open to webhook: Debian's Prometheus (scrape and evaluation every {INTERVAL_S:g} s, the shipped
rules at `for: 0s`) and Alertmanager (group wait {GROUP_WAIT_S:g} s) as plain processes on 127.0.0.1, from the
OPEN line of the stuck loop's history.jsonl to the webhook's receipt of `RalphBreakerOpenTooLong`.

{kit.table(rows)}

- Open to webhook, each run: {", ".join(f"{d:.2f} s" for d in delays)}; in parts (open to the first scrape
  that saw it + that scrape to the alert's `activeAt` + `activeAt` to the webhook):
  {"; ".join(" + ".join(f"{x:.2f}" for x in p) + " s" for p in parts)}.
"""
    kit.publish("alerts", markdown, rows, args.out, load_start)
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

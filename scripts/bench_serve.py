#!/usr/bin/env python3
"""Benchmark `ralph-supervise serve`: how fast an open reaches the page, how fast the list loads, what it costs idle.

  1. Breaker open to the page: a real supervisor runs a stuck loop (`--no-progress 2`, `--cooldown 0.05`:
     it opens, half-opens after 3 s, fails its trial and opens again); a loop page's event stream is open.
     For each open, the time from the `breaker_transition` event's own timestamp to the stream's `row`
     that says OPEN. 5 opens (--quick 3). Target: under 1 s.
  2. Page load with 50 loops registered (each a state folder with a state.json and 400 events): the server's
     answer to the list page and to `/api/loops` (what the page's script shows), measured on loopback as
     the whole request, first request after start (cold: every folder read) and median of 20 (warm).
     Target: under 300 ms.
  3. `serve` CPU while idle with 20 loops registered: its utime + stime over 60 s (--quick 10 s) with nobody
     watching, then with one list page open (its stream), nothing changing. Target: under 0.2 % of one core.

Usage: scripts/bench_serve.py [--quick] [--out docs/bench/serve.md]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402

sys.path.insert(0, str(kit.ROOT))
OPEN_TARGET_S = 1.0
LOAD_TARGET_MS = 300.0
IDLE_TARGET = 0.2
ADDRESS_RE = re.compile(r"open http://127\.0\.0\.1:(\d+)/\?code=(\S+)")


def start_serve(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int, str]:
    proc = kit.start([sys.executable, "-m", "ralph_supervisor", "serve", "--listen", "127.0.0.1:0"], env=env,
                     stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = ADDRESS_RE.search(line)
    if not match:
        raise SystemExit(f"bench_serve: serve printed {line!r}")
    port, code = int(match.group(1)), match.group(2)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", f"/?code={code}")
    answer = conn.getresponse()
    answer.read()
    cookie = re.search(r"ralph_serve=([0-9a-f]+)", answer.getheader("Set-Cookie", ""))
    if answer.status != 303 or not cookie:
        raise SystemExit(f"bench_serve: sign-in failed ({answer.status})")
    return proc, port, cookie.group(1)


def get_ms(port: int, cookie: str, path: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    conn.request("GET", path, headers={"Cookie": f"ralph_serve={cookie}"})
    answer = conn.getresponse()
    answer.read()
    took = (time.perf_counter() - started) * 1000
    conn.close()
    if answer.status != 200:
        raise SystemExit(f"bench_serve: GET {path} answered {answer.status}")
    return took


def stream(port: int, cookie: str, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path, headers={"Cookie": f"ralph_serve={cookie}"})
    return conn.getresponse()


def next_event(response: http.client.HTTPResponse) -> tuple[str, dict, float]:
    kind, data = "", ""
    while True:
        line = response.fp.readline().decode()
        if not line:
            raise SystemExit("bench_serve: the stream ended")
        line = line.rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]
        elif not line and data:
            return kind, json.loads(data), time.time()


def fake_loops(registry: Path, tmp: Path, count: int) -> None:
    """`count` registry entries naming this (live) process, each with a state folder and some history."""
    from ralph_supervisor import registry as reg

    me, ticks, boot = os.getpid(), reg.start_ticks(os.getpid()), reg.current_boot_id()
    registry.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        workspace = tmp / f"loop-{i:03d}"
        state_dir = workspace / ".ralph-supervise"
        state_dir.mkdir(parents=True)
        (state_dir / "state.json").write_text(json.dumps({
            "state": ("CLOSED", "OPEN", "HALF_OPEN")[i % 3], "trigger": "no-progress" if i % 3 else "none",
            "reason": "3 iterations without progress" if i % 3 else "", "iteration": 200, "tokens_used": 1000 * i,
            "cost_used": 0.01 * i, "updated_at": "2026-12-01T10:00:00.000Z"}))
        lines = [json.dumps({"event": "supervisor_started", "ts": "2026-12-01T09:00:00.000Z",
                             "budgets": {"token_budget": 2_000_000}})]
        for n in range(1, 201):
            lines.append(json.dumps({"event": "iteration_started", "iteration": n, "ts": "2026-12-01T09:00:01.000Z"}))
            lines.append(json.dumps({"event": "iteration_finished", "iteration": n, "files_changed": n % 4,
                                     "commits": 0, "output_bytes": 4000, "errors": n % 2, "tokens": 1200,
                                     "outcome": "success", "reply": f"Implemented step {n}. " * 10,
                                     "ts": "2026-12-01T09:00:02.000Z"}))
        (state_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
        entry = reg.Entry(registry / reg.entry_file_name(workspace, state_dir), pid=me, workspace=str(workspace),
                          state_dir=str(state_dir), name=workspace.name, started_at="2026-12-01T09:00:00.000Z",
                          start_ticks=ticks, boot_id=boot, command=("./ralph_loop.sh",))
        entry.path.write_text(json.dumps(entry.to_dict()))


def bench_open(tmp: Path, opens: int) -> list[float]:
    registry = tmp / "open-registry"
    env = {"RALPH_SUPERVISE_REGISTRY": str(registry), "XDG_STATE_HOME": str(tmp / "open-home"),
           "FAKE_CLAUDE_SCENARIO": "stuck", "FAKE_CLAUDE_DELAY": "0.3", "RALPH_LOOP_PAUSE": "0.2",
           "PATH": f"{kit.ROOT / 'examples' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    workspace = tmp / "stuck"
    workspace.mkdir()
    sup = kit.start(kit.supervisor_argv(workspace, ["bash", str(kit.ROOT / "examples" / "ralph_loop.sh")],
                                        "--grace", "1", "--no-progress", "2", "--cooldown", "0.05",
                                        "--max-opens", str(opens + 2), "--notify-desktop", "false"), env=env)
    serve, port, cookie = start_serve(env)
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 60
        loop_id = ""
        while not loop_id and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/api/loops", headers={"Cookie": f"ralph_serve={cookie}"})
            rows = json.loads(conn.getresponse().read())["loops"]
            loop_id = rows[0]["id"] if rows else ""
            time.sleep(0.2)
        response = stream(port, cookie, f"/api/loop/{loop_id}/stream")
        from ralph_supervisor.values import parse_time

        state_dir = workspace / ".ralph-supervise"
        last = ""
        seen_opens = 0
        while len(latencies) < opens:
            kind, data, at = next_event(response)
            if kind != "row":
                continue
            state = data.get("state", "")
            if state == "OPEN" and last != "OPEN":
                seen_opens += 1
                transitions = [json.loads(line) for line in (state_dir / "events.jsonl").read_text().splitlines()
                               if '"breaker_transition"' in line]
                opened = [t for t in transitions if t.get("to") == "OPEN"]
                if len(opened) >= seen_opens:
                    latencies.append(at - (parse_time(opened[seen_opens - 1]["ts"]) or at))
            last = state
    finally:
        kit.stop_supervisor(serve)
        kit.stop_supervisor(sup)
    return latencies


def bench_load(tmp: Path, count: int) -> dict[str, float]:
    registry = tmp / "load-registry"
    fake_loops(registry, tmp / "load", count)
    env = {"RALPH_SUPERVISE_REGISTRY": str(registry), "XDG_STATE_HOME": str(tmp / "load-home")}
    serve, port, cookie = start_serve(env)
    try:
        cold = get_ms(port, cookie, "/api/loops")
        rows = json.loads(http_body(port, cookie, "/api/loops"))["loops"]
        if len(rows) != count:
            raise SystemExit(f"bench_serve: {len(rows)} loops listed of {count}")
        warm, shell, one = [], [], []
        for _ in range(20):
            time.sleep(0.3)  # past the poll interval: each request re-stats every folder
            shell.append(get_ms(port, cookie, "/"))
            warm.append(get_ms(port, cookie, "/api/loops"))
        for _ in range(5):
            one.append(get_ms(port, cookie, f"/api/loop/{rows[0]['id']}"))
    finally:
        kit.stop_supervisor(serve)
    return {"cold": cold, "warm": statistics.median(warm), "shell": statistics.median(shell),
            "loop": statistics.median(one)}


def http_body(port: int, cookie: str, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Cookie": f"ralph_serve={cookie}"})
    return conn.getresponse().read()


def bench_idle(tmp: Path, count: int, seconds: float) -> tuple[float, float]:
    registry = tmp / "idle-registry"
    fake_loops(registry, tmp / "idle", count)
    env = {"RALPH_SUPERVISE_REGISTRY": str(registry), "XDG_STATE_HOME": str(tmp / "idle-home")}
    serve, port, cookie = start_serve(env)
    try:
        get_ms(port, cookie, "/api/loops")
        time.sleep(2)

        def cpu_over(window: float) -> float:
            before, t0 = kit.cpu_seconds(serve.pid), time.monotonic()
            time.sleep(window)
            after = kit.cpu_seconds(serve.pid)
            if before is None or after is None:
                raise SystemExit("bench_serve: serve ended during the measurement")
            return (after - before) / (time.monotonic() - t0) * 100

        nobody = cpu_over(seconds)
        response = stream(port, cookie, "/api/stream")
        next_event(response)
        time.sleep(1)
        watched = cpu_over(seconds)
        response.close()
    finally:
        kit.stop_supervisor(serve)
    return nobody, watched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 opens, 10 s idle windows")
    parser.add_argument("--out", type=Path, default=kit.DOCS / "serve.md")
    args = parser.parse_args()
    opens, seconds = (3, 10.0) if args.quick else (5, 60.0)
    kit.become_subreaper()
    load_start = kit.loadavg()
    tmp = kit.temp_dir("serve")
    print(f"open to page: {opens} opens", flush=True)
    latencies = bench_open(tmp, opens)
    print("page load: 50 loops", flush=True)
    load = bench_load(tmp, 50)
    print(f"idle: 20 loops, {seconds:.0f} s nobody watching, {seconds:.0f} s one page open", flush=True)
    nobody, watched = bench_idle(tmp, 20, seconds)
    load_end = kit.loadavg()
    median_open, worst_open = statistics.median(latencies), max(latencies)
    rows = [
        kit.Row(f"breaker open to the loop page's stream (median of {len(latencies)})", f"{median_open * 1000:.0f} ms",
                "", "", f"< {OPEN_TARGET_S:g} s", median_open < OPEN_TARGET_S),
        kit.Row("same, the slowest", f"{worst_open * 1000:.0f} ms", "", "", f"< {OPEN_TARGET_S:g} s",
                worst_open < OPEN_TARGET_S),
        kit.Row("`/api/loops` with 50 loops, first request (every folder read)", f"{load['cold']:.0f} ms", "", "",
                f"< {LOAD_TARGET_MS:g} ms", load["cold"] < LOAD_TARGET_MS),
        kit.Row("same, median of 20 (files re-statted each time)", f"{load['warm']:.1f} ms", "", "",
                f"< {LOAD_TARGET_MS:g} ms", load["warm"] < LOAD_TARGET_MS),
        kit.Row("the list page itself (the HTML shell)", f"{load['shell']:.1f} ms", "", "", "(for reference)"),
        kit.Row("one loop's page data (`/api/loop/ID`: the report of 200 iterations)", f"{load['loop']:.0f} ms",
                "", "", "(for reference)"),
        kit.Row(f"`serve` CPU, 20 loops registered, nobody watching, {seconds:.0f} s", f"{nobody:.3f} %", "", "",
                f"< {IDLE_TARGET} %", nobody < IDLE_TARGET),
        kit.Row(f"same, one list page open (its stream), nothing changing, {seconds:.0f} s", f"{watched:.3f} %", "",
                "", "(for reference)"),
    ]
    missed = [r.metric for r in rows if r.met is False]
    verdict = "Every target is met." if not missed else "**Targets missed**: " + "; ".join(missed) + "."
    md = f"""## serve: an open to the page, the list with 50 loops, idle cost

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {load_end:.1f} at the end (the machine was
shared with other work). Mode: {"quick" if args.quick else "full"}. A real supervisor with a stuck loop for the
opens; registry entries with state folders (a state.json and 400 events each) for the list and the idle cost.
Times are whole requests on loopback; CPU is serve's own utime + stime, as % of one core.

{kit.table(rows)}

{verdict}

- Each open to the page (ms): {" | ".join(f"{x * 1000:.0f}" for x in latencies)}.
- serve stats each loop's state.json and events.jsonl every 0.25 s while a page is open, and not at all while
  nobody watches; an open reaches the page within one poll plus the supervisor's write.
"""
    kit.publish("serve", md, rows, args.out, load_start)
    left = kit.leftovers()
    if left:
        print(f"bench_serve: processes left behind: {left} (killing them)", file=sys.stderr)
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())

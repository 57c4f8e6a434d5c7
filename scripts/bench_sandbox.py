#!/usr/bin/env python3
"""Benchmark what `--sandbox bwrap` costs: the box's start, each agent call in it, the supervisor idle.

Side by side, the same loop boxed and not, in a home of the benchmark's own holding every agent's folder:
  - the box's start: `bwrap <the loop's box> true` against `true` alone, and the same box with the six
    agents' folders (folders of the run with the user's settings bound into them, made before each start)
    against one without them (median of interleaved runs);
  - each agent call: a loop of back-to-back calls of a quick sh agent through the shims, timed by the loop
    itself (first call's start to last call's end, per call), boxed against not; and the NSpid mapping the
    supervisor does per call in a box (process/namespace.host_pid over this machine's /proc);
  - the supervisor's CPU while the loop sleeps (boxed against not).

Usage: scripts/bench_sandbox.py [--quick] [--out docs/bench/sandbox.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _benchkit as kit  # noqa: E402

from ralph_supervisor.process.namespace import box_namespace, host_pid  # noqa: E402
from ralph_supervisor.sandbox import Box  # noqa: E402

AGENT = "#!/bin/sh\necho '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\"}'\n"


AGENTS = ("claude", "codex", "gemini", "opencode", "cursor-agent", "amp")
HOME_FILES = {".claude/settings.json": "{}", ".claude/CLAUDE.md": "x\n", ".claude/.credentials.json": "{}",
              ".claude.json": "{}", ".claude/commands/x.md": "x\n", ".codex/config.toml": "", ".codex/auth.json": "{}",
              ".codex/sessions/x": "", ".gemini/settings.json": "{}", ".gemini/oauth_creds.json": "{}",
              ".config/opencode/opencode.json": "{}", ".local/share/opencode/auth.json": "{}", ".cursor/mcp.json": "{}",
              ".cursor/cli-config.json": "{}", ".config/amp/settings.json": "{}"}
"""A user of every agent: the home the benchmark's loops run with (never the machine's own)."""


def bench_home() -> Path:
    home = kit.temp_dir("sandbox-home")
    for relative, text in HOME_FILES.items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    return home


def box_start(runs: int, home: Path) -> tuple[float, float, float]:
    """Medians (ms) of `true` in the loop's box with the six agents' folders (made before each start, as
    `probe` does), in the same box without them, and alone."""
    tmp = kit.temp_dir("sandbox-start")
    ws = tmp / "ws"
    ws.mkdir()
    env = {**os.environ, "HOME": str(home)}
    box = Box.plan(workspace=ws, state_dir=tmp / "state", env=env, agents=AGENTS, run_dir=tmp / "run")
    bare = Box.plan(workspace=ws, state_dir=tmp / "state", env=env)
    agents, boxed, plain = [], [], []
    for _ in range(runs):
        began = time.perf_counter()
        assert box.folders is not None and box.folders.prepare() is None
        subprocess.run(box.wrap(["true"]), env=box.env, check=True)
        agents.append(time.perf_counter() - began)
        began = time.perf_counter()
        subprocess.run(bare.wrap(["true"]), env=bare.env, check=True)
        boxed.append(time.perf_counter() - began)
        began = time.perf_counter()
        subprocess.run(["true"], check=True)
        plain.append(time.perf_counter() - began)
    return tuple(statistics.median(times) * 1000 for times in (agents, boxed, plain))  # type: ignore[return-value]


def per_call(calls: int, boxed: bool, home: Path) -> float:
    tmp = kit.temp_dir("sandbox-calls-boxed" if boxed else "sandbox-calls")
    ws, tools = tmp / "ws", tmp / "tools"
    ws.mkdir()
    tools.mkdir()
    (tools / "claude").write_text(AGENT)
    (tools / "claude").chmod(0o755)
    body = (f"s=$(date +%s%N); for i in $(seq 1 {calls}); do claude -p go >/dev/null; done; "
            "e=$(date +%s%N); echo $(( (e - s) / 1000 )) > elapsed_us")
    flags = ("--no-progress", "100000", "--paraphrase", "0", "--same-error", "100000", "--output-decline", "0",
             "--grace", "2", *(("--sandbox", "bwrap") if boxed else ()))
    proc = kit.start(kit.supervisor_argv(ws, ["sh", "-c", body], *flags),
                     env={"PATH": f"{tools}:{os.environ['PATH']}", "HOME": str(home)})
    proc.wait(timeout=60 + calls)
    return int((ws / "elapsed_us").read_text()) / 1000 / calls


def mapping_cost(runs: int) -> float:
    """ms for one NSpid lookup of a PID of a real box, over this machine's /proc."""
    outer = subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                              "--die-with-parent", "sleep", "60"])
    try:
        namespace = None
        for _ in range(200):
            namespace = box_namespace(outer.pid)
            if namespace:
                break
            time.sleep(0.01)
        assert namespace is not None
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            host_pid(namespace, 2)
            times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000
    finally:
        outer.kill()
        outer.wait()


def idle_cpu(seconds: float, boxed: bool, home: Path) -> float:
    tmp = kit.temp_dir("sandbox-idle-boxed" if boxed else "sandbox-idle")
    ws = tmp / "ws"
    ws.mkdir()
    flags = ("--grace", "2", *(("--sandbox", "bwrap") if boxed else ()))
    proc = kit.start(kit.supervisor_argv(ws, ["sleep", "1000"], *flags), env={"HOME": str(home)})
    return kit.supervisor_cpu_percent(proc, seconds, who="bench_sandbox")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        raise SystemExit("bench_sandbox: bubblewrap (bwrap) is not installed")
    kit.become_subreaper()
    load_start = kit.loadavg()
    n_start, n_calls, n_map, idle_s = (20, 50, 50, 10.0) if args.quick else (100, 300, 200, 30.0)
    try:
        home = bench_home()
        started_agents, started_box, started_plain = box_start(n_start, home)
        call_box, call_plain = per_call(n_calls, True, home), per_call(n_calls, False, home)
        mapping = mapping_cost(n_map)
        cpu_box, cpu_plain = idle_cpu(idle_s, True, home), idle_cpu(idle_s, False, home)
    finally:
        kit.cleanup()

    def ms(value: float) -> str:
        return f"{value:.1f} ms"

    rows = [
        kit.Row("the box's start: `true` in the loop's box (vs `true` alone)", ms(started_box), ms(started_plain),
                f"{started_box / started_plain:.1f}" if started_plain else "", "(for reference)"),
        kit.Row("the box's start with the six agents' folders, made before it (vs the box without them)",
                ms(started_agents), ms(started_box), f"{started_agents / started_box:.2f}" if started_box else "",
                "(for reference)"),
        kit.Row("time the box adds to each agent call (shimmed quick call, boxed vs not)",
                ms(call_box - call_plain), ms(call_plain) + " (a call unboxed)", "", "< 50 ms"),
        kit.Row("NSpid mapping of a call's PID (one /proc scan)", ms(mapping), "", "", "(for reference)"),
        kit.Row("supervisor CPU, loop asleep (boxed vs not)", f"{cpu_box:.2f} %", f"{cpu_plain:.2f} %",
                f"{cpu_box / cpu_plain:.2f}" if cpu_plain else "", "<= 1.2"),
    ]
    for row in rows:
        row.met = kit.judge(row.ours, row.ratio, row.target)
    markdown = f"""## sandbox: what `--sandbox bwrap` costs

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {kit.loadavg():.1f} at the end (a
machine shared with other developers: the lead re-runs it quietly). Mode: {'quick' if args.quick else 'full'}.

{kit.table(rows)}

Start: `bwrap` with the loop's own box (system, a home, the workspace) running `true`, and the same box
with the six agents' folders of a home holding each agent's settings (each a folder of the run with the
settings bound read-only, the sessions and logins read-write; made, and Claude's configuration copied,
before each start as the supervisor does), {n_start} interleaved runs. Per call: {n_calls} back-to-back calls
of a sh agent through the shims, timed by the loop itself, boxed and not; the box's share is the difference
(the agent runs in the box's PID namespace, so each notice is mapped through NSpid: the row below it). Idle:
the loop sleeps, {idle_s:.0f} s after 3 s of start-up.
"""
    kit.publish("sandbox", markdown, rows, args.out or kit.DOCS / "sandbox.md", load_start)


if __name__ == "__main__":
    main()

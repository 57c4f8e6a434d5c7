#!/usr/bin/env python3
"""Benchmark many loops on one box: the idle CPU of 20 supervisors at once, and `ls` over 100 entries.

  1. 20 supervisors started together, each with its loop idle between agent calls (a bash loop of six
     sleeping processes, no agent call: the tick runs every 0.5 s), each writing a node-exporter textfile
     every 10 s (a fleet's set-up), all registered in one registry. After they settle, the CPU of every
     one of them over the same 60 s (--quick 10 s), from /proc/PID/stat. Target: each under 0.5 % of one core.
  2. `ralph-supervise ls` with 100 registry entries: the 20 live supervisors above and 80 more (half of
     them stale: their pid is gone), each with a state folder. The whole process (start-up included),
     median of 15 runs, side by side (alternating) with `ralph-supervise --version`, the same interpreter
     and CLI start-up doing nothing. Target: under 0.3 s. `ls --json` and `watch --all --once` for reference.

Usage: scripts/bench_fleet.py [--quick] [--loops 20] [--out docs/bench/fleet.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402

IDLE_TARGET = 0.5
LS_TARGET_S = 0.3
ENTRIES = 100
LOOP = "for i in 1 2 3 4 5; do sleep 1000 & done; wait"


def start_fleet(tmp: Path, count: int, env: dict[str, str]) -> list[tuple[Path, object]]:
    fleet = []
    textfiles = tmp / "textfile"
    textfiles.mkdir()
    for i in range(count):
        workspace = tmp / f"loop-{i:02d}"
        workspace.mkdir()
        argv = kit.supervisor_argv(workspace, ["bash", "-c", LOOP], "--grace", "2", "--name", f"loop-{i:02d}",
                                   "--metrics-textfile", str(textfiles / f"ralph-loop-{i:02d}.prom"))
        fleet.append((workspace, kit.start(argv, env=env)))
    return fleet


def wait_registered(registry: Path, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if registry.is_dir() and len(list(registry.glob("*.json"))) >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f"bench_fleet: only {len(list(registry.glob('*.json')))} of {count} supervisors registered")


def bench_idle(fleet: list[tuple[Path, object]], seconds: float) -> tuple[list[float], list[float]]:
    """CPU % of one core of every supervisor over the same window, and their RSS in MiB at its end."""
    pids = [proc.pid for _, proc in fleet]  # type: ignore[attr-defined]
    start = [(kit.cpu_seconds(pid), time.monotonic()) for pid in pids]
    time.sleep(seconds)
    cpu, rss = [], []
    for pid, (cpu0, t0) in zip(pids, start):
        cpu1 = kit.cpu_seconds(pid)
        if cpu0 is None or cpu1 is None:
            raise SystemExit(f"bench_fleet: supervisor {pid} ended during the measurement")
        cpu.append((cpu1 - cpu0) / (time.monotonic() - t0) * 100)
        mem = kit.memory_kib(pid)
        rss.append(mem[0] / 1024 if mem else float("nan"))
    return cpu, rss


def add_entries(registry: Path, tmp: Path, count: int) -> None:
    """`count` more entries, each with a state folder: even ones name a live process (us), odd ones a dead pid."""
    from ralph_supervisor import registry as reg

    dead = subprocess.Popen(["true"])
    dead.wait()
    me, ticks, boot = os.getpid(), reg.start_ticks(os.getpid()), reg.current_boot_id()
    for i in range(count):
        workspace = tmp / f"extra-{i:03d}"
        state_dir = workspace / ".ralph-supervise"
        state_dir.mkdir(parents=True)
        (state_dir / "state.json").write_text(json.dumps({
            "state": ("CLOSED", "OPEN", "HALF_OPEN")[i % 3], "trigger": "no-progress" if i % 3 else "none",
            "iteration": i, "tokens_used": 1000 * i, "final": i % 10 == 9, "updated_at": "2026-12-01T10:00:00.000Z"}))
        entry = reg.Entry(registry / reg.entry_file_name(workspace, state_dir), pid=me if i % 2 == 0 else dead.pid,
                          workspace=str(workspace), state_dir=str(state_dir), name=workspace.name,
                          started_at="2026-12-01T09:00:00.000Z", start_ticks=ticks, boot_id=boot,
                          command=("./ralph_loop.sh",))
        entry.path.write_text(json.dumps(entry.to_dict()))


def time_command(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench_fleet: {argv[3:]} failed: {done.stderr.decode()[-500:]}")
    return took


def bench_ls(env: dict[str, str], rounds: int) -> dict[str, float]:
    base = [sys.executable, "-m", "ralph_supervisor"]
    commands = {"ls": [*base, "ls"], "json": [*base, "ls", "--json"], "watch": [*base, "watch", "--all", "--once"],
                "version": [*base, "--version"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name, argv in commands.items():
        time_command(argv, env)  # warm the page cache and the bytecode cache
    for _ in range(rounds):
        for name, argv in commands.items():  # alternating: the same load for each
            times[name].append(time_command(argv, env))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 s of idle instead of 60, 5 ls rounds instead of 15")
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--out", type=Path, default=kit.DOCS / "fleet.md")
    args = parser.parse_args()
    seconds, rounds = (10.0, 5) if args.quick else (60.0, 15)
    kit.become_subreaper()
    load_start = kit.loadavg()
    tmp = kit.temp_dir("fleet")
    registry = tmp / "registry"
    env = {**os.environ, "RALPH_SUPERVISE_REGISTRY": str(registry), "PYTHONPATH": str(kit.ROOT)}
    print(f"starting {args.loops} supervisors", flush=True)
    fleet = start_fleet(tmp, args.loops, {"RALPH_SUPERVISE_REGISTRY": str(registry)})
    try:
        wait_registered(registry, args.loops)
        time.sleep(8)  # start-up settles: workspace priming, first scans, the first textfiles
        print(f"idle: {seconds:.0f} s, {args.loops} at once", flush=True)
        cpu, rss = bench_idle(fleet, seconds)
        add_entries(registry, tmp, ENTRIES - args.loops)
        print(f"ls: {ENTRIES} entries, {rounds} rounds", flush=True)
        ls = bench_ls(env, rounds)
        live = sum(1 for row in json.loads(subprocess.run([sys.executable, "-m", "ralph_supervisor", "ls", "--json"],
                                                          env=env, capture_output=True, text=True).stdout)
                   if row["alive"])
    finally:
        codes = [kit.stop_supervisor(proc) for _, proc in fleet]  # type: ignore[arg-type]
    load_end = kit.loadavg()
    from ralph_supervisor import registry as reg

    left = [e for e in reg.read_registry(registry).entries if e.path.name.startswith("loop-") and not e.ended]
    mean, worst = statistics.mean(cpu), max(cpu)
    rows = [
        kit.Row(f"CPU per supervisor, {args.loops} at once, loops idle between agent calls, {seconds:.0f} s (mean)",
                f"{mean:.2f} %", "", "", f"< {IDLE_TARGET} %", mean < IDLE_TARGET),
        kit.Row(f"same, the busiest of the {args.loops}", f"{worst:.2f} %", "", "", f"< {IDLE_TARGET} %",
                worst < IDLE_TARGET),
        kit.Row(f"same, all {args.loops} together", f"{sum(cpu):.1f} % of one core", "", "", "(for reference)"),
        kit.Row("RSS per supervisor (mean)", kit.fmt_mib(statistics.mean(rss)), "", "", "(for reference)"),
        kit.Row(f"`ls`, {ENTRIES} registry entries ({live} live), whole process (median)", kit.fmt_s(ls["ls"]),
                f"{kit.fmt_s(ls['version'])} (`--version`)", f"{ls['ls'] / ls['version']:.2f}",
                f"< {LS_TARGET_S} s", ls["ls"] < LS_TARGET_S),
        kit.Row("`ls --json`, same", kit.fmt_s(ls["json"]), "", "", "(for reference)"),
        kit.Row("`watch --all --once`, same", kit.fmt_s(ls["watch"]), "", "", "(for reference)"),
        kit.Row("registry entries not marked ended after SIGTERM to every supervisor", str(len(left)), "", "", "0",
                not left),
    ]
    missed = [r.metric for r in rows if r.met is False]
    verdict = "Every target is met." if not missed else "**Targets missed**: " + "; ".join(missed) + "."
    spread = " | ".join(f"{c:.2f}" for c in sorted(cpu))
    md = f"""## Many loops on one box: {args.loops} idle supervisors, `ls` over {ENTRIES} entries

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {load_end:.1f} at the end (the machine was
shared with other work). Mode: {"quick" if args.quick else "full"}. {args.loops} supervisors run at once, each
supervising `bash -c '{LOOP}'` (a loop idle between agent calls) and writing its `--metrics-textfile` every 10 s;
CPU is each supervisor's own utime + stime over the same window, as % of one core. `ls` is timed as a whole
process (interpreter start-up included) against `ralph-supervise --version`, alternating, median of {rounds}.

{kit.table(rows)}

{verdict}

- CPU of each supervisor, sorted (%): {spread}.
- Exit codes after SIGTERM: {sorted(set(c for c in codes if c is not None))} (143 is the contract's).
"""
    kit.publish("fleet", md, rows, args.out, load_start)
    left_procs = kit.leftovers()
    if left_procs:
        print(f"bench_fleet: processes left behind: {left_procs} (killing them)", file=sys.stderr)
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark `ralph-supervise check` against loop-context 1.5.0's `--check`, and how our time grows.

Side by side, whole-process time (start-up included), on the same ledger files; ours is the `ralph-supervise
check` command of a regular (not editable) install in a virtual environment of its own, as a user runs it
(its lean path imports the ledger rules only, jiter for a middling ledger and msgspec for a big one):
  - a realistic mixed ledger (successes, failures, noops) and
  - a worst case for the similarity walks: every attempt a failure with the same error, `--stagnation N`
    so the walk covers the whole ledger.
Growth: our time from 100 to 100,000 attempts, whole process and in-process (parse + decide), which should be
linear or better. Both programs' outputs are compared too (a benchmark of a wrong answer is worthless).

loop-context is found from --loop-context PATH, $LOOP_CONTEXT_BIN, or ./node_modules; when none is there the
benchmark installs 1.5.0 itself from the npm registry (scripts/install-loop-context.sh, into ./node_modules),
unless --no-install; only without node, npm or the registry does the baseline column say n/a.

Targets: at least 2x faster than loop-context (ratio <= 0.5) at 1,000, 10,000 and 100,000 attempts.

Like for like, neither side runs the start-up work a machine may add for its network: node is started without
NODE_EXTRA_CA_CERTS (node reads and parses that certificate bundle at every start: on this machine 38 ms of a
60 ms `node -e 0`), and our virtual environment does not see the base interpreter's site-packages (where a
`.pth` file may import certifi at every start: 25 ms here). A user's machine usually has neither; one row
says what node takes with the variable as this machine sets it.

Usage: scripts/bench_check.py [--quick] [--sizes N,N] [--loop-context PATH/TO/cli.js] [--no-install]
                              [--out docs/bench/check.md]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import _benchkit as kit  # noqa: E402

from ralph_supervisor.ledger import BreakerConfig, check_breaker, parse_ledger  # noqa: E402


def mixed_ledger(n: int, seed: int = 1) -> dict[str, Any]:
    rnd = random.Random(seed)
    attempts = []
    for i in range(n):
        outcome = rnd.choices(["success", "failure", "noop"], [3, 5, 1])[0]
        a: dict[str, Any] = {
            "iteration": i + 1,
            "action": f"action {rnd.randint(0, 50)}: edit src/mod{rnd.randint(0, 30)}.py",
            "outcome": outcome,
            "tokensUsed": rnd.randint(200, 3000),
        }
        if outcome == "failure":
            a["error"] = (
                f"AssertionError: test_{rnd.randint(0, 300)} failed at /repo/tests/test_{rnd.randint(0, 40)}.py:"
                f"{rnd.randint(1, 500)}\nTraceback (most recent call last):\n  line 2"
            )
        attempts.append(a)
    return {"goal": "Make the test suite pass", "attempts": attempts}


def failing_ledger(n: int) -> dict[str, Any]:
    attempts = [
        {
            "iteration": i + 1,
            "action": f"retry step {i % 7}",
            "outcome": "failure",
            "error": f"Error: connect ECONNREFUSED 127.0.0.1:{5000 + i % 100}\n    at TCPConnectWrap.afterConnect "
            f"(node:net:1{i % 10}:16)",
            "tokensUsed": 1000 + i % 500,
        }
        for i in range(n)
    ]
    return {"goal": "Connect to the database", "attempts": attempts}


def distinct_errors_ledger(n: int, seed: int = 3) -> dict[str, Any]:
    """Every failure a different error: the worst case for --inject's grouping of failure patterns."""
    rnd = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
    attempts = [
        {
            "iteration": i + 1,
            "action": f"attempt {i % 50}",
            "outcome": "failure",
            "error": " ".join(rnd.choice(words) for _ in range(4)) + " " + "".join(rnd.choice("abcdefghijklmnop") for _ in range(8)),
        }
        for i in range(n)
    ]
    return {"goal": "Many different failures", "attempts": attempts}


def find_loop_context(explicit: str | None, install: bool = True) -> str | None:
    """loop-context 1.5.0's cli.js: the one named, else the environment's, else ./node_modules' (installed there
    from the npm registry first when it is missing and `install`)."""
    for candidate in (explicit, os.environ.get("LOOP_CONTEXT_BIN"),
                      str(ROOT / "node_modules/@cobusgreyling/loop-context/dist/cli.js")):
        if candidate and Path(candidate).is_file():
            return candidate
    if explicit or not install:
        return None
    print("bench_check: installing loop-context 1.5.0 from the npm registry (scripts/install-loop-context.sh)",
          file=sys.stderr)
    done = subprocess.run([str(ROOT / "scripts/install-loop-context.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"bench_check: {done.stderr.strip() or 'could not install loop-context'}: the baseline is n/a",
              file=sys.stderr)
        return None
    return done.stdout.strip().splitlines()[-1]


def installed_command(tmp: Path) -> list[str]:
    """`ralph-supervise` from a regular install of this tree in a new virtual environment (no editable-install
    import hook, which adds its own start-up); of the dependencies check needs msgspec (a big ledger) and jiter
    (a middling one) only, so only those are installed beside it."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--ignore-installed", str(ROOT), "msgspec", "jiter"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [str(venv / "bin" / "ralph-supervise"), "check"]


NODE_ENV = {k: v for k, v in os.environ.items() if k != "NODE_EXTRA_CA_CERTS"}
"""node's environment: this machine's, without the certificate bundle node would read at every start."""


class Timing:
    """Whole-process wall times of one command, its CPU times (user + system, its children's included), its
    last exit code and stdout."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.code = 0
        self.out = b""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def cell(self) -> str:
        """`median (min-max)` in ms."""
        return f"{fmt(self.median)} ({min(self.times) * 1000:.0f}-{max(self.times) * 1000:.0f})"


def timed(cmds: list[tuple[list[str], dict[str, str] | None]], runs: int, cwd: Path) -> list[Timing]:
    """`runs` whole-process runs of each command (argv, environment).

    The commands take turns within each round, so a busy moment on a shared machine hits both alike, and every
    other round in the other order: a process started right after another one runs measurably slower here (its
    page faults and caches), which a fixed order would always charge to the same command."""
    timings = [Timing() for _ in cmds]
    for number in range(runs):
        turns = list(zip(timings, cmds))
        for timing, (cmd, env) in (turns if number % 2 == 0 else turns[::-1]):
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, cwd=cwd, timeout=900, env=env)
            timing.times.append(time.perf_counter() - start)
            done = resource.getrusage(resource.RUSAGE_CHILDREN)
            timing.cpu.append(done.ru_utime + done.ru_stime - used.ru_utime - used.ru_stime)
            timing.code, timing.out = proc.returncode, proc.stdout
    return timings


def in_process(path: Path, flags: BreakerConfig, runs: int) -> float:
    """Best time of `runs` to read, parse, validate and decide, without interpreter start-up: the best run is
    the one least disturbed by other work on a shared machine, which is what a growth curve needs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        data = path.read_bytes()
        gc.disable()
        try:
            ledger = parse_ledger(data)
        finally:
            gc.enable()
        check_breaker(ledger, flags)
        times.append(time.perf_counter() - start)
    return min(times)


def fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and fewer runs, for development")
    ap.add_argument("--loop-context", help="path to loop-context 1.5.0's dist/cli.js")
    ap.add_argument("--no-install", action="store_true", help="never install loop-context (the baseline is n/a)")
    ap.add_argument("--sizes", help="ledger sizes, comma separated (default 100,1000,10000,100000; quick: to 10000)")
    ap.add_argument("--runs", type=int, help="runs of each command (default 11; quick: 3)")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/check.md"))
    args = ap.parse_args()

    sizes = [100, 1000, 10000] if args.quick else [100, 1000, 10000, 100000]
    if args.sizes:
        try:
            sizes = sorted({int(n) for n in args.sizes.split(",")})
        except ValueError:
            ap.error(f"--sizes: expected numbers separated by commas, got {args.sizes!r}")
    runs = args.runs or (4 if args.quick else 12)
    side_n = 10000 if 10000 in sizes else sizes[-1]
    node = shutil.which("node")
    lc = find_loop_context(args.loop_context, install=not args.no_install) if node else None
    rows: list[str] = []
    growth: list[str] = []
    mismatches: list[str] = []
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ours_cmd = installed_command(tmp)
        python = str(Path(ours_cmd[0]).with_name("python"))
        floors = timed([([python, "-c", "pass"], None)] + ([([node, "-e", "0"], NODE_ENV)] if node else []), runs, tmp)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for kind, make in (("mixed", mixed_ledger), ("all-failing", failing_ledger)):
            for n in sizes:
                path = tmp / f"{kind}-{n}.json"
                path.write_text(json.dumps(make(n)), encoding="utf-8")
                if kind == "all-failing":
                    flags = ["--stagnation", str(n), "--max-iterations", "1000000", "--no-progress", "1000000"]
                    config = BreakerConfig(stagnation=n, max_iterations=1000000, no_progress=1000000)
                else:
                    flags, config = [], BreakerConfig()
                cmds: list[tuple[list[str], dict[str, str] | None]] = [([*ours_cmd, "-f", str(path), "--json", *flags], None)]
                if lc is not None:
                    cmds.append(([node or "node", lc, "--check", "-f", str(path), "--json", *flags], NODE_ENV))
                timings = timed(cmds, runs, tmp)
                base = timings[1] if lc is not None else None
                if base is not None and (base.code, base.out) != (timings[0].code, timings[0].out):
                    mismatches.append(f"{kind} {n}")
                inproc = in_process(path, config, runs)
                results[(kind, n)] = {"ours": timings[0], "base": base, "inproc": inproc}
                print(f"{kind:12} {n:>7}: ours {timings[0].cell()} (in-process {fmt(inproc)}), "
                      f"loop-context {base.cell() if base else 'n/a'}", file=sys.stderr)

        as_set = None  # loop-context as this machine starts node, with its certificate bundle
        if lc is not None and "NODE_EXTRA_CA_CERTS" in os.environ and 1000 in sizes:
            path = tmp / "mixed-1000.json"
            as_set = timed([([*ours_cmd, "-f", str(path), "--json"], None),
                            ([node or "node", lc, "--check", "-f", str(path), "--json"], None)], runs, tmp)

        npx_t = None
        if lc is not None and shutil.which("npx"):
            prefix = Path(lc).resolve().parents[4] if "node_modules" in lc else None
            if prefix is not None and (prefix / "node_modules").is_dir():
                path = tmp / f"mixed-{side_n}.json"
                npx_t = timed([(["npx", "--no", "@cobusgreyling/loop-context", "--check", "-f", str(path), "--json"],
                                NODE_ENV)], runs, prefix)[0]

        if not args.quick:  # loop-context's grouping is quadratic: one run, a modest size
            inject_n = 2000
            path = tmp / f"distinct-{inject_n}.json"
            path.write_text(json.dumps(distinct_errors_ledger(inject_n)), encoding="utf-8")
            cmds = [([*ours_cmd, "-f", str(path), "--inject"], None)]
            if lc is not None:
                cmds.append(([node or "node", lc, "--inject", "-f", str(path)], NODE_ENV))
            timings = timed(cmds, 1, tmp)
            if lc is not None and (timings[0].code, timings[0].out) != (timings[1].code, timings[1].out):
                mismatches.append(f"inject distinct {inject_n}")
            base_t = timings[1].median if lc is not None else None
            ratio = f"{timings[0].median / base_t:.3f}" if base_t else "n/a"
            rows.append(f"| --inject, {inject_n:,} failures all with different errors (grouping worst case), one run "
                        f"| {fmt(timings[0].median)} | {fmt(base_t)} | {ratio} | ≤ 1.0 | |")
            print(f"inject distinct {inject_n}: ours {fmt(timings[0].median)}, loop-context {fmt(base_t)}", file=sys.stderr)

        for kind in ("mixed", "all-failing"):
            for n in [size for size in sizes if size >= 1000]:
                r = results[(kind, n)]
                ours, base = r["ours"], r["base"]
                ratio = f"{ours.median / base.median:.2f}" if base else "n/a"
                met = "n/a" if not base else ("yes" if ours.median / base.median <= 0.5 else "**no**")
                rows.append(f"| check, {n:,} attempts, {kind}, whole process | {ours.cell()} | "
                            f"{base.cell() if base else 'n/a'} | {ratio} | ≤ 0.5 (2x faster) | {met} |")
        if as_set is not None:
            rows.append(f"| check, 1,000 attempts, mixed, node with this machine's NODE_EXTRA_CA_CERTS | "
                        f"{as_set[0].cell()} | {as_set[1].cell()} | {as_set[0].median / as_set[1].median:.2f} | "
                        "(for reference) | |")
        if npx_t is not None:
            r = results[("mixed", side_n)]
            rows.append(f"| check, {side_n:,} attempts, mixed, vs `npx @cobusgreyling/loop-context --check` | "
                        f"{r['ours'].cell()} | {npx_t.cell()} | {r['ours'].median / npx_t.median:.2f} | ≤ 1.0 | |")
        if len(floors) == 2:
            rows.append(f"| start-up alone: `python -c pass` (our virtual environment) vs `node -e 0` | "
                        f"{floors[0].cell()} | {floors[1].cell()} | {floors[0].median / floors[1].median:.2f} | "
                        "(for reference) | |")
        cpu_rows = []
        for kind in ("mixed", "all-failing"):
            for n in [size for size in sizes if size >= 1000]:
                ours, base = results[(kind, n)]["ours"], results[(kind, n)]["base"]
                ours_cpu = statistics.median(ours.cpu)
                base_cpu = statistics.median(base.cpu) if base else None
                ratio = f"{ours_cpu / base_cpu:.2f}" if base_cpu else "n/a"
                cpu_rows.append(f"| {kind} | {n:,} | {fmt(ours_cpu)} | {fmt(base_cpu)} | {ratio} |")
        for kind in ("mixed", "all-failing"):
            prev = None
            for n in sizes:
                r = results[(kind, n)]
                per = r["inproc"] / n * 1e6
                step = f"×{r['inproc'] / prev:.1f} for ×10 attempts" if prev else ""
                base_cell = fmt(r["base"].median) if r["base"] is not None else "n/a"
                growth.append(f"| {kind} | {n:,} | {fmt(r['ours'].median)} | {fmt(r['inproc'])} | {per:.2f} µs | {step} "
                              f"| {base_cell} |")
                prev = r["inproc"]

    machine = f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, code {kit.commit()}"
    if node:
        machine += f", Node {subprocess.run([node, '--version'], capture_output=True, text=True).stdout.strip()}"
    load = os.getloadavg()
    lines = [
        "## check: ledger breaker vs loop-context 1.5.0",
        "",
        f"Machine: {machine}; load average {load_start:.1f} at the start, {load[0]:.1f} at the end (the machine was shared).",
        "Ours: `ralph-supervise check` of a regular install (a virtual environment of its own, with jiter, which "
        "reads a ledger of 256 KB to 6 MB, and msgspec, which reads a bigger one), whole process.",
        f"Mode: {'quick' if args.quick else 'full'}; each cell is the median of {runs} runs (the fastest and the "
        "slowest in brackets), ours and loop-context taking turns, the one to go first changing every round. Baseline: "
        + (f"`node {Path(lc).name}` of @cobusgreyling/loop-context 1.5.0 run directly (no npx start-up)" if lc else "n/a (loop-context not installed)")
        + ".",
        "Like for like, neither side does the start-up work this machine adds for its network: node runs without "
        "NODE_EXTRA_CA_CERTS (it reads that certificate bundle at every start), our virtual environment does not "
        "see the base interpreter's site-packages (a `.pth` there imports certifi at every start). One row gives "
        "node with the variable as this machine sets it.",
        "Outputs compared on every size: " + ("identical stdout and exit code." if lc and not mismatches else
                                             ("DIFFERENT on " + ", ".join(mismatches) if mismatches else "no baseline.")),
        "",
        "| metric | ours | baseline | ratio | target | met? |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "CPU time of the same runs (user + system, median): less moved by other work on the machine than the wall "
        "time, though node spreads its start over several threads, so its CPU time runs above its wall time.",
        "",
        "| ledger | attempts | ours, CPU | loop-context, CPU | ratio |",
        "|---|---|---|---|---|",
        *cpu_rows,
        "",
        "Growth of our time (in-process = read + parse + validate + decide, without interpreter start-up, best of "
        f"{runs}; "
        "target: linear or better, i.e. about ×10 per ×10 attempts or less):",
        "",
        "Read the per-attempt column: flat means linear. On a loaded machine single steps are noisy (the same "
        "size measured twice in a row can differ 2×); nothing in parse, validation or the rules is worse than one "
        "pass over the attempts.",
        "",
        "| ledger | attempts | ours, whole process | ours, in-process | per attempt | step | loop-context, whole process |",
        "|---|---|---|---|---|---|---|",
        *growth,
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

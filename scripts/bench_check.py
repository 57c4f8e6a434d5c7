#!/usr/bin/env python3
"""Benchmark `ralph-supervise check` against loop-context 1.5.0's `--check`, and how our time grows.

Side by side, whole-process time (start-up included), on the same ledger files; ours is the `ralph-supervise
check` command of a regular (not editable) install in a virtual environment of its own, as a user runs it
(its lean path imports the ledger rules only):
  - a realistic mixed ledger (successes, failures, noops) and
  - a worst case for the similarity walks: every attempt a failure with the same error, `--stagnation N`
    so the walk covers the whole ledger.
Growth: our time from 100 to 100,000 attempts, whole process and in-process (parse + decide), which should be
linear or better. Both programs' outputs are compared too (a benchmark of a wrong answer is worthless).

loop-context is found from --loop-context PATH, $LOOP_CONTEXT_BIN, or ./node_modules; when none is there the
benchmark installs 1.5.0 itself from the npm registry (scripts/install-loop-context.sh, into ./node_modules),
unless --no-install; only without node, npm or the registry does the baseline column say n/a.

Targets: at least 2x faster than loop-context (ratio <= 0.5) at 1,000, 10,000 and 100,000 attempts.

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
    import hook, which adds its own start-up); check needs none of the dependencies, so none is installed."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--ignore-installed", str(ROOT)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [str(venv / "bin" / "ralph-supervise"), "check"]


def timed(cmds: list[list[str]], runs: int, cwd: Path) -> list[tuple[float, int, bytes]]:
    """Median wall time of `runs` whole-process runs of each command, with the last exit code and stdout.

    The commands take turns within each round, so a busy moment on a shared machine hits both alike."""
    times: list[list[float]] = [[] for _ in cmds]
    last: list[tuple[int, bytes]] = [(0, b"")] * len(cmds)
    for _ in range(runs):
        for i, cmd in enumerate(cmds):
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, cwd=cwd, timeout=900)
            times[i].append(time.perf_counter() - start)
            last[i] = (proc.returncode, proc.stdout)
    return [(statistics.median(t), rc, out) for t, (rc, out) in zip(times, last)]


def in_process(path: Path, flags: BreakerConfig, runs: int) -> float:
    """Best time of `runs` to read, parse, validate and decide, without interpreter start-up: the best run is
    the one least disturbed by other work on a shared machine, which is what a growth curve needs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        text = path.read_text(encoding="utf-8")
        gc.disable()
        try:
            ledger = parse_ledger(text)
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
    ap.add_argument("--out", default=str(ROOT / "docs/bench/check.md"))
    args = ap.parse_args()

    sizes = [100, 1000, 10000] if args.quick else [100, 1000, 10000, 100000]
    if args.sizes:
        try:
            sizes = sorted({int(n) for n in args.sizes.split(",")})
        except ValueError:
            ap.error(f"--sizes: expected numbers separated by commas, got {args.sizes!r}")
    runs = 3 if args.quick else 7
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
                cmds = [[*ours_cmd, "-f", str(path), "--json", *flags]]
                if lc is not None:
                    cmds.append([node or "node", lc, "--check", "-f", str(path), "--json", *flags])
                timings = timed(cmds, runs, tmp)
                ours_t, ours_rc, ours_out = timings[0]
                base_t = None
                if lc is not None:
                    base_t, base_rc, base_out = timings[1]
                    if (base_rc, base_out) != (ours_rc, ours_out):
                        mismatches.append(f"{kind} {n}")
                inproc = in_process(path, config, runs)
                results[(kind, n)] = {"ours": ours_t, "base": base_t, "inproc": inproc}
                print(f"{kind:12} {n:>7}: ours {fmt(ours_t)} (in-process {fmt(inproc)}), loop-context {fmt(base_t)}",
                      file=sys.stderr)

        npx_t = None
        if lc is not None and shutil.which("npx"):
            prefix = Path(lc).resolve().parents[4] if "node_modules" in lc else None
            if prefix is not None and (prefix / "node_modules").is_dir():
                path = tmp / f"mixed-{side_n}.json"
                npx_t = timed([["npx", "--no", "@cobusgreyling/loop-context", "--check", "-f", str(path), "--json"]],
                              runs, prefix)[0][0]

        if not args.quick:  # loop-context's grouping is quadratic: one run, a modest size
            inject_n = 2000
            path = tmp / f"distinct-{inject_n}.json"
            path.write_text(json.dumps(distinct_errors_ledger(inject_n)), encoding="utf-8")
            cmds = [[*ours_cmd, "-f", str(path), "--inject"]]
            if lc is not None:
                cmds.append([node or "node", lc, "--inject", "-f", str(path)])
            timings = timed(cmds, 1, tmp)
            if lc is not None and timings[0][1:] != timings[1][1:]:
                mismatches.append(f"inject distinct {inject_n}")
            base = timings[1][0] if lc is not None else None
            ratio = f"{timings[0][0] / base:.3f}" if base else "n/a"
            rows.append(f"| --inject, {inject_n:,} failures all with different errors (grouping worst case), one run "
                        f"| {fmt(timings[0][0])} | {fmt(base)} | {ratio} | ≤ 1.0 | |")
            print(f"inject distinct {inject_n}: ours {fmt(timings[0][0])}, loop-context {fmt(base)}", file=sys.stderr)

        for kind in ("mixed", "all-failing"):
            for n in [size for size in sizes if size >= 1000]:
                r = results[(kind, n)]
                ratio = f"{r['ours'] / r['base']:.2f}" if r["base"] else "n/a"
                met = "n/a" if not r["base"] else ("yes" if r["ours"] / r["base"] <= 0.5 else "**no**")
                rows.append(f"| check, {n:,} attempts, {kind}, whole process | {fmt(r['ours'])} | {fmt(r['base'])} "
                            f"| {ratio} | ≤ 0.5 (2x faster) | {met} |")
        if npx_t is not None:
            r = results[("mixed", side_n)]
            rows.append(f"| check, {side_n:,} attempts, mixed, vs `npx @cobusgreyling/loop-context --check` | "
                        f"{fmt(r['ours'])} | {fmt(npx_t)} | {r['ours'] / npx_t:.2f} | ≤ 1.0 | |")
        for kind in ("mixed", "all-failing"):
            prev = None
            for n in sizes:
                r = results[(kind, n)]
                per = r["inproc"] / n * 1e6
                step = f"×{r['inproc'] / prev:.1f} for ×10 attempts" if prev else ""
                base = fmt(r["base"]) if r["base"] is not None else "n/a"
                growth.append(f"| {kind} | {n:,} | {fmt(r['ours'])} | {fmt(r['inproc'])} | {per:.2f} µs | {step} | {base} |")
                prev = r["inproc"]

    machine = f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, code {kit.commit()}"
    if node:
        machine += f", Node {subprocess.run([node, '--version'], capture_output=True, text=True).stdout.strip()}"
    load = os.getloadavg()
    lines = [
        "## check: ledger breaker vs loop-context 1.5.0",
        "",
        f"Machine: {machine}; load average {load_start:.1f} at the start, {load[0]:.1f} at the end (the machine was shared).",
        "Ours: `ralph-supervise check` of a regular install (a virtual environment of its own), whole process.",
        f"Mode: {'quick' if args.quick else 'full'}; median of {runs} runs each. Baseline: "
        + (f"`node {Path(lc).name}` of @cobusgreyling/loop-context 1.5.0 run directly (no npx start-up)" if lc else "n/a (loop-context not installed)")
        + ".",
        "Outputs compared on every size: " + ("identical stdout and exit code." if lc and not mismatches else
                                             ("DIFFERENT on " + ", ".join(mismatches) if mismatches else "no baseline.")),
        "",
        "| metric | ours | baseline | ratio | target | met? |",
        "|---|---|---|---|---|---|",
        *rows,
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

#!/usr/bin/env python3
"""Benchmark the verify (`--verify`): its cost over the test command alone, and the judge's memory.

  1. Latency: a generated pytest project of 500 tests (10 failing). The test command alone (`python -m pytest
     -q` in a copy of the project), against the verify of a snapshot of it: from `submit` to the verdict
     (the snapshot written out, the box, nice 19 and idle I/O, JUnit XML read, the tampering diff).
     Target: the verify within 1.2x the command alone plus 0.5 s.
  2. The loop's own time: examples/fast_loop.sh (200 iterations, --quick 100, each rewriting a file) under the
     supervisor in marker mode, with and without `--verify` (a small pytest project), from child start to exit.
     Target: within 5 %.
  3. Memory: the judge (per-test history, regression, tampering rule, fixed/broken sets) fed 10,000 tests per
     verify for 1,000 verifies (--quick 200), a few tests flipping each time. RSS after the first tenth and at
     the end. Target: flat (within 10 % or 4 MiB).

Usage: scripts/bench_verify.py [--quick] [--out docs/bench/verify.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchkit as kit  # noqa: E402

from ralph_supervisor.snapshots.store import SnapshotStore  # noqa: E402
from ralph_supervisor.verify.judgement import VerifyJudge  # noqa: E402
from ralph_supervisor.verify.results import FAILED, PASSED, TestResults  # noqa: E402
from ralph_supervisor.verify.runner import Verifier, VerifyPlan, VerifyRun, changes  # noqa: E402

MIB = 1 << 20


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def make_project(root: Path, tests: int = 500, failing: int = 10) -> None:
    root.mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    per_file = 50
    for f in range(tests // per_file):
        lines = ["from calc import add\n\n"]
        for t in range(per_file):
            n = f * per_file + t
            expected = "n + 1" if n >= failing else "n + 2"
            lines.append(f"def test_{n}():\n    n = {n}\n    assert add(n, 1) == {expected}\n\n\n")
        (root / f"test_part{f}.py").write_text("".join(lines))


def latency(reps: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        ws, state = tmp / "ws", tmp / "state"
        make_project(ws)
        command = f"{sys.executable} -m pytest -q -p no:cacheprovider"
        alone: list[float] = []
        for _ in range(reps):
            copy = tmp / "alone"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(ws, copy)
            began = time.monotonic()
            subprocess.run(command, shell=True, cwd=copy, capture_output=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
            alone.append(time.monotonic() - began)
        store = SnapshotStore(ws, state)
        store.open()
        done = threading.Event()
        runs: list[VerifyRun] = []

        def finished(run: VerifyRun) -> None:
            runs.append(run)
            done.set()

        verifier = Verifier(VerifyPlan(command, 600, ws, state), store, on_finished=finished)
        verifier.start()
        verified: list[float] = []
        try:
            for i in range(reps):
                (ws / "calc.py").write_text(f"def add(a, b):\n    return a + b  # {i}\n")
                info = store.take(i + 1, "iteration", None, now=time.time())
                done.clear()
                began = time.monotonic()
                verifier.submit(info)
                done.wait(600)
                verified.append(time.monotonic() - began)
        finally:
            verifier.close()
        last = runs[-1].results
        assert last is not None and last.passed == 490 and last.failed == 10, last
        a, v = statistics.median(alone), statistics.median(verified)
        return {"alone_s": a, "verify_s": v, "target_s": 1.2 * a + 0.5}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


MARKER = r"^\[fast-loop\] iteration "


def loop_time(iterations: int, verify: bool) -> tuple[float, int]:
    """The loop's run time under the supervisor, from its child_started to its child_exited events."""
    import json

    tmp = Path(tempfile.mkdtemp(prefix="bench-verify-loop-"))
    try:
        ws = tmp / "ws"
        make_project(ws, tests=50, failing=0)
        argv = [sys.executable, "-m", "ralph_supervisor", "--no-echo", "--log-format", "json", "--iteration-marker",
                MARKER, "--no-progress", "100000", "--stall", "600"]
        if verify:
            argv += ["--verify", f"{sys.executable} -m pytest -q -p no:cacheprovider"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FAST_LOOP_ITERATIONS": str(iterations), "FAST_LOOP_SLEEP": "0.05"}
        subprocess.run([*argv, "--", "bash", str(ROOT / "examples" / "fast_loop.sh")], cwd=ws, env=env,
                       capture_output=True, timeout=900)
        events = [json.loads(line) for line in (ws / ".ralph-supervise" / "events.jsonl").read_text().splitlines()
                  if line.startswith("{")]

        def at(name: str) -> float:
            from datetime import datetime

            ts = next(e["ts"] for e in events if e.get("event") == name)
            return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()

        return at("child_exited") - at("child_started"), sum(1 for e in events if e.get("event") == "verify_finished")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def memory(verifies: int, tests: int = 10_000) -> dict[str, float]:
    judge = VerifyJudge(regression=2)
    names = [f"tests/test_mod{i // 100}.py::TestThing::test_case_{i}" for i in range(tests)]
    previous: TestResults | None = None
    first = 0
    for v in range(verifies):
        flip = {(v * 37 + k) % tests for k in range(20)}
        outcomes = {n: (FAILED if i in flip else PASSED) for i, n in enumerate(names)}
        now = TestResults("junit", passed=tests - len(flip), failed=len(flip), tests=outcomes)
        fixed, broke = changes(previous, now)
        run = VerifyRun(iteration=v, snapshot=v + 1, covers=(v,), started=0.0, seconds=1.0, exit_code=1, results=now,
                        fixed=fixed, broke=broke, previous_iteration=v - 1 if previous else None,
                        previous_results=previous)
        judge.judge(run, False)
        previous = now
        if v == verifies // 10:
            first = rss()
    return {"rss_tenth_mib": first / MIB, "rss_end_mib": rss() / MIB, "tracked": judge.tracked}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=kit.DOCS / "verify.md")
    args = parser.parse_args()
    lat = latency(2 if args.quick else 5)
    n = 100 if args.quick else 200
    without = statistics.median([loop_time(n, False)[0] for _ in range(2)])
    timed = [loop_time(n, True) for _ in range(2)]
    with_verify, verifies = statistics.median([t for t, _ in timed]), min(v for _, v in timed)
    ok_loop = with_verify <= without * 1.05
    mem = memory(200 if args.quick else 1000)
    ok_lat = lat["verify_s"] <= lat["target_s"]
    ok_mem = mem["rss_end_mib"] - mem["rss_tenth_mib"] <= max(4.0, 0.1 * mem["rss_tenth_mib"])
    text = "\n".join([
        "# Benchmark: the verify",
        "",
        f"Measured on {kit.machine_line()}, load average {kit.loadavg():.1f}{' (--quick)' if args.quick else ''}.",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| 500-test pytest project: the command alone (median) | {lat['alone_s']:.2f} s | |",
        f"| the same as a verify: submit to verdict (median) | {lat['verify_s']:.2f} s | <= {lat['target_s']:.2f} s "
        f"(1.2x + 0.5 s): {'met' if ok_lat else 'NOT met'} |",
        f"| fast_loop.sh, {n} iterations: the loop's time without / with --verify (median of 2) | {without:.2f} / "
        f"{with_verify:.2f} s ({(with_verify / without - 1) * 100:+.1f} %; at least {verifies} verifies ran meanwhile) | within 5 %: {'met' if ok_loop else 'NOT met'} |",
        f"| judge memory, 10,000 tests per verify: RSS after a tenth / at the end | {mem['rss_tenth_mib']:.1f} / "
        f"{mem['rss_end_mib']:.1f} MiB ({mem['tracked']} tests tracked) | flat: {'met' if ok_mem else 'NOT met'} |",
        "",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0 if ok_lat and ok_mem and ok_loop else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark the output tap: a child writes 1 GB to stdout under the real supervisor vs into `cat > file`.

Side by side in one run, alternating (cat first in even rounds, the supervisor first in odd rounds), the
same writer child (this script with `--emit`: realistic agent output, a 1 MiB block written again and
again) runs
  - as `CHILD | cat > FILE` (the baseline: a consumer that does nothing but store the bytes), through a pipe
    of the same size the supervisor gives its child (the tap's PIPE_SIZE, 1 MiB: `cat` behind the default
    64 KiB pipe would be a different race), and
  - as `python -m ralph_supervisor run --no-echo -w TMP -- CHILD` (tee to child.log under its 500 MB
    budget, line splitting and the error filter behind it, the tree sampler, the workspace watcher).
Measured: the child's own time from its first write to its exit (is it ever held up by its reader?),
the whole-process time (the supervisor's start-up and shutdown included), the supervisor's CPU time, its
peak RSS (wait4's ru_maxrss, and /proc/PID/status VmHWM sampled every 20 ms), and how many of the bytes
the error filter behind the tap scanned and how many it dropped because it fell behind (the run's
`output_analysed` event). Medians over the rounds (default 5), with each side's spread (min-max).
Targets (issue 2): child time supervised <= 1.25x of cat; supervisor RSS < 60 MB.

Usage: scripts/bench_tap.py [--quick] [--size MB] [--rounds N] [--out docs/bench/tap.md]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402
from ralph_supervisor.state_folder import default_state_dir  # noqa: E402 - the state is outside the workspace

from ralph_supervisor.evidence.tap import F_SETPIPE_SZ, PIPE_SIZE  # noqa: E402 - the baseline's pipe: the same size

RSS_TARGET_MB = 60.0
RATIO_TARGET = 1.25


def emit(total: int, stamp: Path) -> int:
    """The writer child: `total` bytes of realistic output on stdout, its start and end in `stamp`."""
    block = kit.realistic_block(kit.MIB)
    started = time.time()
    left = total
    while left > 0:
        view = memoryview(block)[: min(left, len(block))]
        left -= len(view)
        while view:
            view = view[os.write(1, view):]
    ended = time.time()
    stamp.write_text(f"{started} {ended}\n")
    return 0


def child_argv(size: int, stamp: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--emit", str(size), "--stamp", str(stamp)]


def read_stamp(stamp: Path) -> float:
    started, ended = (float(x) for x in stamp.read_text().split())
    return ended - started


def run_cat(tmp: Path, size: int) -> dict[str, float]:
    """CHILD | cat > FILE, the pipe between them as big as the supervisor's (the shell's would be 64 KiB)."""
    stamp = tmp / "cat.stamp"
    out = tmp / "cat.out"
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_SIZE)
    started = time.monotonic()
    with open(out, "wb") as sink:
        cat = kit.start(["cat"], stdin=read_end, stdout=sink)
        child = kit.start(child_argv(size, stamp), stdout=write_end)
        os.close(read_end)
        os.close(write_end)
        code, _ = kit.wait_rusage(child)
        cat_code, _ = kit.wait_rusage(cat)
    whole = time.monotonic() - started
    code = code or cat_code
    written = out.stat().st_size
    out.unlink()
    stamp_s = read_stamp(stamp)
    if code != 0 or written != size:
        raise SystemExit(f"bench_tap: the cat run failed (exit {code}, {written} of {size} bytes)")
    return {"child_s": stamp_s, "whole_s": whole}


def run_supervised(tmp: Path, size: int, round_no: int) -> dict[str, float]:
    stamp = tmp / "sup.stamp"
    workspace = tmp / f"ws{round_no}"
    workspace.mkdir()
    started = time.monotonic()
    proc = kit.start(kit.supervisor_argv(workspace, child_argv(size, stamp)))
    sampler = kit.Sampler(proc.pid, interval=0.02)
    limit = 60 + size / 20e6  # far beyond any sane run: 20 MB/s plus a minute
    hung = False
    try:
        code, usage = kit.wait_rusage(proc, timeout=limit)
    except kit.subprocess.TimeoutExpired:
        hung = True
        proc.send_signal(kit.signal.SIGTERM)
        try:
            code, usage = kit.wait_rusage(proc, timeout=10)
        except kit.subprocess.TimeoutExpired:
            proc.kill()
            code, usage = kit.wait_rusage(proc, timeout=10)
    whole = time.monotonic() - started
    sampler.stop()
    state = default_state_dir(workspace)
    logged = kit.dir_bytes(state, "child.log*")
    analysed = filter_counts(state)
    result = {
        "child_s": read_stamp(stamp),
        "whole_s": whole,
        "maxrss_mib": usage.ru_maxrss / 1024,
        "hwm_mib": sampler.peak_hwm_mib,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "logged_mb": logged / 1e6,
        "hung": hung,
        "limit_s": limit,
        "read_mb": analysed.get("bytes_read", 0) / 1e6,
        "scanned_mb": analysed.get("bytes_scanned", 0) / 1e6,
        "dropped_mb": analysed.get("analysis_dropped_bytes", 0) / 1e6,
    }
    kit.shutil.rmtree(workspace, ignore_errors=True)
    if code != 0 and not hung:
        raise SystemExit(f"bench_tap: the supervised run exited {code}")
    if hung:
        print(f"bench_tap: the supervisor had not exited {limit:.0f} s after it started (the child had finished"
              f" after {result['child_s']:.1f} s): SIGTERM, then SIGKILL", file=sys.stderr, flush=True)
    return result


def filter_counts(state: Path) -> dict[str, int]:
    """The run's `output_analysed` event: bytes read, scanned by the error filter, dropped unscanned."""
    try:
        lines = (state / "events.jsonl").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "output_analysed":
            return record
    return {}


def spread(runs: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in runs]
    return f"{min(values):.2f}-{max(values):.2f} s"


def startup_time(tmp: Path) -> float:
    """The supervisor's start-up and shutdown around a child that does nothing (`true`)."""
    times = []
    for i in range(3):
        workspace = tmp / f"empty{i}"
        workspace.mkdir()
        started = time.monotonic()
        proc = kit.start(kit.supervisor_argv(workspace, ["true"]))
        kit.wait_rusage(proc)
        times.append(time.monotonic() - started)
        kit.shutil.rmtree(workspace, ignore_errors=True)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 MB instead of 1 GB")
    parser.add_argument("--size", type=int, help="MB to write (MiB, 2^20 bytes)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=kit.DOCS / "tap.md")
    parser.add_argument("--emit", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stamp", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.emit is not None:
        return emit(args.emit, args.stamp)

    kit.become_subreaper()
    size_mib = args.size or (200 if args.quick else 1024)
    size = size_mib * kit.MIB
    load_start = kit.loadavg()
    tmp = kit.temp_dir("tap")
    cat_runs: list[dict[str, float]] = []
    sup_runs: list[dict[str, float]] = []
    for round_no in range(args.rounds):
        order = ("cat", "sup") if round_no % 2 == 0 else ("sup", "cat")
        for which in order:
            os.sync()  # the previous run's dirty pages must not throttle this one's writes
            if which == "cat":
                cat_runs.append(run_cat(tmp, size))
            else:
                sup_runs.append(run_supervised(tmp, size, round_no))
            last = (cat_runs if which == "cat" else sup_runs)[-1]
            print(f"round {round_no + 1} {which}: child {last['child_s']:.2f} s, whole {last['whole_s']:.2f} s"
                  + (f", peak RSS {last['maxrss_mib']:.1f} MiB" if which == "sup" else ""), flush=True)
    empty = startup_time(tmp)
    load_end = kit.loadavg()

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    cat_child, sup_child = med(cat_runs, "child_s"), med(sup_runs, "child_s")
    cat_whole, sup_whole = med(cat_runs, "whole_s"), med(sup_runs, "whole_s")
    peak_rss = max(max(r["maxrss_mib"], r["hwm_mib"]) for r in sup_runs)
    ratio = sup_child / cat_child
    whole_ratio = sup_whole / cat_whole
    mb = size / 1e6
    rows = [
        kit.Row(f"child writes {size_mib} MiB: child's time, first write to exit (median)",
                kit.fmt_s(sup_child), kit.fmt_s(cat_child), f"{ratio:.2f}", f"<= {RATIO_TARGET}",
                ratio <= RATIO_TARGET),
        kit.Row("same, spread over the rounds (min-max)", spread(sup_runs, "child_s"), spread(cat_runs, "child_s")),
        kit.Row("same, throughput", f"{mb / sup_child:.0f} MB/s", f"{mb / cat_child:.0f} MB/s"),
        kit.Row("whole process (supervisor start-up and shutdown included)", kit.fmt_s(sup_whole),
                kit.fmt_s(cat_whole), f"{whole_ratio:.2f}", "(for reference)"),
        kit.Row("supervisor start-up + shutdown around `true`", kit.fmt_s(empty), "", "", "(for reference)"),
        kit.Row("supervisor peak RSS (worst run)", kit.fmt_mib(peak_rss), "", "", f"< {RSS_TARGET_MB:.0f} MiB",
                peak_rss < RSS_TARGET_MB),
        kit.Row("supervisor CPU time (median)", kit.fmt_s(med(sup_runs, "cpu_s")), "", "", "(for reference)"),
        kit.Row("error filter: bytes scanned of the bytes read (median)",
                f"{med(sup_runs, 'scanned_mb'):.0f} of {med(sup_runs, 'read_mb'):.0f} MB",
                "", f"{med(sup_runs, 'scanned_mb') / max(med(sup_runs, 'read_mb'), 1e-9):.2f}", "(for reference)"),
        kit.Row("error filter: bytes dropped unscanned, it fell behind (median; worst run)",
                f"{med(sup_runs, 'dropped_mb'):.0f} MB ({max(r['dropped_mb'] for r in sup_runs):.0f} MB)", "", "",
                "(for reference: a burst far above any agent's rate)"),
        kit.Row("child.log on disk after the run (budget 500 MB)", f"{max(r['logged_mb'] for r in sup_runs):.0f} MB",
                f"{mb:.0f} MB", "", "<= 500 MB", max(r["logged_mb"] for r in sup_runs) <= 500),
    ]
    runs = "\n".join(
        f"| {i + 1} | {c['child_s']:.2f} s / {c['whole_s']:.2f} s | {s['child_s']:.2f} s / {s['whole_s']:.2f} s "
        f"| {s['maxrss_mib']:.1f} MiB | {s['cpu_s']:.2f} s | {s['scanned_mb']:.0f} / {s['dropped_mb']:.0f} MB |"
        for i, (c, s) in enumerate(zip(cat_runs, sup_runs)))
    hung_runs = [i + 1 for i, r in enumerate(sup_runs) if r["hung"]]
    rows.append(kit.Row("supervised runs where the supervisor did not exit after the child", str(len(hung_runs)),
                        "", "", "0", not hung_runs))
    verdict = "Both targets are met." if ratio <= RATIO_TARGET and peak_rss < RSS_TARGET_MB else (
        "**Not every target is met**: " + "; ".join(
            x for x in (f"child time ratio {ratio:.2f} > {RATIO_TARGET}" if ratio > RATIO_TARGET else "",
                        f"peak RSS {peak_rss:.1f} MiB >= {RSS_TARGET_MB:.0f} MiB" if peak_rss >= RSS_TARGET_MB
                        else "") if x) + " (see the notes below).")
    if hung_runs:
        verdict += (f" **The supervisor did not exit after the child in round(s) {', '.join(map(str, hung_runs))}**: it"
                    f" was still running {sup_runs[hung_runs[0] - 1]['limit_s']:.0f} s after it started and was"
                    " stopped with SIGTERM (then SIGKILL); those runs' whole-process times are that limit.")
    md = f"""## Output tap: {size_mib} MiB through the supervisor vs `cat > file`

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {load_end:.1f} at the end (the machine
was shared with other work). Mode: {"quick" if size_mib < 1024 else "full"}; {args.rounds} rounds, alternating, median.
The child (`scripts/bench_tap.py --emit`) writes a 1 MiB block of realistic agent output (stream-json events,
long tool results, test lines, a few error lines) again and again with `os.write`.
Baseline: `CHILD | cat > FILE` through a {PIPE_SIZE // kit.MIB} MiB pipe, the size the supervisor gives its child.
Ours: `python -m ralph_supervisor run --no-echo -w TMP -- CHILD` (child.log with its default 50 MB files and
500 MB budget, the error filter behind the tap: what it scanned and dropped is in the table).

{kit.table(rows)}

{verdict}

Runs (child's time / whole process):

| round | cat | supervised | supervisor ru_maxrss | supervisor CPU | filter scanned / dropped |
|---|---|---|---|---|---|
{runs}
"""
    kit.publish("tap", md, rows, args.out, load_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())

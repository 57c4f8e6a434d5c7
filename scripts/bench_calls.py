#!/usr/bin/env python3
"""Benchmark how agent calls are seen: announced by the shims on PATH vs sampled from the process tree.

Side by side, the same loops and the same sh agent, once with the shims (the default) and once with the
sampler alone (the loop puts the agent's folder before the shims on PATH, so the shim never runs):
  - latency: from the moment the agent starts (it writes its own start time first) to the supervisor's
    `iteration_started` event, p50 and the tail over calls of 0.3 s (p99 over the full run's 100 calls a
    side; the quick run's 15 give only their maximum, and say so);
  - the time a shim adds to a call of `true` (bash -p and /bin/sh shims, and a bash -p shim as in a box, which
    tells its notice to the channel too; baseline: `true` itself), median of interleaved runs, as a loop runs
    it: `true` found through PATH;
  - supervisor CPU while the loop makes 10 calls a second (the default tick vs the tick plus the shims);
  - calls missed out of 1,000 back-to-back calls of a few milliseconds (each writes a new file).

Usage: scripts/bench_calls.py [--quick] [--out docs/bench/calls.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _benchkit as kit  # noqa: E402

from ralph_supervisor.evidence.notices import NoticeChannel  # noqa: E402
from ralph_supervisor.evidence.shims import install_shims  # noqa: E402
from ralph_supervisor.state_folder import default_state_dir  # noqa: E402 - the state is outside the workspace
from tests.helpers.supervise import events as supervise_events  # noqa: E402

AGENT = r"""#!/bin/sh
date +%s.%N >> "$STARTS"
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
[ -n "$AGENT_SLEEP" ] && sleep "$AGENT_SLEEP"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""


def setup(name: str) -> tuple[Path, Path]:
    tmp = kit.temp_dir(name)
    ws = tmp / "ws"
    (ws / ".ralph").mkdir(parents=True)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(AGENT)
    (bin_dir / "claude").chmod(0o755)
    return ws, bin_dir


def loop(bin_dir: Path, body: str, sampled: bool) -> list[str]:
    """The loop; `sampled`: it puts the agent before the shims on PATH (as a loop replacing PATH does)."""
    prefix = f"export PATH={bin_dir}:$PATH; " if sampled else ""
    return ["bash", "-c", prefix + body]


def supervise(ws: Path, bin_dir: Path, child: list[str], timeout: float, **env: str) -> subprocess.Popen[bytes]:
    flags = ("--no-progress", "100000", "--paraphrase", "0", "--max-failures", "100000", "--same-error", "100000",
             "--output-decline", "0",
             "--grace", "2")
    return kit.start(kit.supervisor_argv(ws, child, *flags),
                     env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "STARTS": str(ws / ".ralph" / "starts"), **env})


def events(ws: Path, name: str) -> list[dict]:
    return supervise_events(default_state_dir(ws), name)


def ts(event: dict) -> float:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------------------------- 1. latency


def latency(calls: int, sampled: bool) -> list[float]:
    ws, bin_dir = setup("latency-sampled" if sampled else "latency-shim")
    proc = supervise(ws, bin_dir, loop(bin_dir, f"for i in $(seq 1 {calls}); do claude -p go; sleep 0.2; done",
                                       sampled), 120, AGENT_SLEEP="0.3")
    proc.wait(timeout=60 + calls * 2)
    starts = [float(x) for x in (ws / ".ralph" / "starts").read_text().split()]
    seen = {e["iteration"]: ts(e) for e in events(ws, "iteration_started")}
    return [(seen[n] - starts[n - 1]) * 1000 for n in sorted(seen) if n - 1 < len(starts)]


# ---------------------------------------------------------------------------------------------- 2. shim cost


def shim_cost(runs: int) -> dict[str, float]:
    tmp = kit.temp_dir("shim-cost")
    shims = {"bash": install_shims(tmp / "bash", ["true"], bash=True),
             "sh": install_shims(tmp / "sh", ["true"], bash=False),
             "boxed": install_shims(tmp / "boxed", ["true"], bash=True, channel=True)}
    channel = NoticeChannel(shims["boxed"].channel)  # held open, as the supervisor does for a box
    base_path = os.environ["PATH"]
    paths = {"plain": base_path, **{k: s.path_for(base_path) for k, s in shims.items()}}
    times: dict[str, list[float]] = {k: [] for k in paths}
    for i in range(runs):
        for kind, path in paths.items():
            env = {**os.environ, "PATH": path}
            began = time.perf_counter()
            subprocess.run(["true"], env=env, check=True)  # found through the PATH of env
            times[kind].append(time.perf_counter() - began)
            for s in shims.values():  # judged at once, as the supervisor does: the next call never waits
                for mark in s.pending.iterdir():
                    mark.unlink()
            channel.drain()
        if i % 50 == 0:
            for s in shims.values():
                for notice in s.calls.iterdir():
                    notice.unlink()
    channel.close()
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


# ---------------------------------------------------------------------------------------------- 3. CPU


class CpuRun:
    """The supervisor's CPU over a window of a loop that calls the agent as fast as `sleep 0.1` lets it (ten
    calls a second on an idle machine, fewer on a busy one), and how many calls the loop made meanwhile."""

    def __init__(self, percent: float, calls: int, seconds: float, helpers_percent: float = 0.0) -> None:
        self.percent, self.calls, self.seconds = percent, calls, seconds
        self.helpers_percent = helpers_percent

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    @property
    def per_call_ms(self) -> float:
        return self.percent / 100 * self.seconds / max(self.calls, 1) * 1000

    @property
    def at_ten(self) -> float:
        """The CPU at ten calls a second: as measured when the loop made ten or more, else scaled up from the
        calls it made (what a call costs, times ten: the idle share, 0.1 %, is left in)."""
        return self.percent if self.rate >= 10 else self.percent * 10 / max(self.rate, 0.1)

    @property
    def helpers_per_call_ms(self) -> float:
        return self.helpers_percent / 100 * self.seconds / max(self.calls, 1) * 1000

    @property
    def with_helpers_at_ten(self) -> float:
        """at_ten with the helper processes' CPU added, scaled the same way."""
        total = self.percent + self.helpers_percent
        return total if self.rate >= 10 else total * 10 / max(self.rate, 0.1)


class CpuRuns:
    """Several CpuRuns of one kind, taken in turns with the others: their median and their spread."""

    def __init__(self) -> None:
        self.runs: list[CpuRun] = []

    def median(self, attr: str) -> float:
        return statistics.median(getattr(run, attr) for run in self.runs)

    def cell(self, attr: str, unit: str) -> str:
        """`median unit (fastest-slowest)`."""
        values = [getattr(run, attr) for run in self.runs]
        return f"{self.median(attr):.1f}{unit} ({min(values):.1f}-{max(values):.1f})"

    def rates(self) -> str:
        return f"{self.median('percent'):.1f} % at {self.median('rate'):.1f}/s"


def cpu_rounds(rounds: int, seconds: float, before_source: Path | None) -> dict[str, CpuRuns]:
    """`rounds` CPU runs each of the shims, the sampler, and (with `before_source`) both of the code before,
    taking turns in every round, so that a busy spell of the machine falls on all of them alike; the kind that
    goes first changes from round to round."""
    kinds: dict[str, Callable[[], CpuRun | None]] = {
        "shims": lambda: cpu_at_ten_calls_a_second(seconds, False),
        "sampler": lambda: cpu_at_ten_calls_a_second(seconds, True),
    }
    if before_source is not None:
        kinds["shims before"] = lambda: before(before_source, lambda: cpu_at_ten_calls_a_second(seconds, False))
        kinds["sampler before"] = lambda: before(before_source, lambda: cpu_at_ten_calls_a_second(seconds, True))
    found = {kind: CpuRuns() for kind in kinds}
    order = list(kinds)
    for number in range(rounds):
        # each round begins with another kind: on this machine a run measured right after another is about a
        # tenth cheaper than the first of a round, and a fixed order would hand that to the same kinds every time
        turn = number % len(order)
        for kind in order[turn:] + order[:turn]:
            run = kinds[kind]()
            if run is not None:
                found[kind].runs.append(run)
    return found


def cpu_at_ten_calls_a_second(seconds: float, sampled: bool, settle: float = 3.0) -> CpuRun:
    ws, bin_dir = setup("cpu-sampled" if sampled else "cpu-shim")
    proc = supervise(ws, bin_dir, loop(bin_dir, "while :; do claude -p go; sleep 0.1; done", sampled), seconds)
    starts = ws / ".ralph" / "starts"

    def calls() -> int:
        return len(starts.read_bytes().split()) if starts.exists() else 0

    try:
        time.sleep(settle)
        cpu0, kids0, t0, n0 = kit.cpu_seconds(proc.pid), kit.cpu_seconds(proc.pid, children=True), time.monotonic(), calls()
        time.sleep(seconds)
        cpu1, kids1, t1, n1 = kit.cpu_seconds(proc.pid), kit.cpu_seconds(proc.pid, children=True), time.monotonic(), calls()
    finally:
        kit.stop_supervisor(proc)
    if cpu0 is None or cpu1 is None or kids0 is None or kids1 is None:
        raise SystemExit("bench_calls: the supervisor ended during the CPU measurement")
    # The loop, the supervisor's one long-lived child, is not waited for in the window: the children's CPU
    # counted here is its helpers' (git for the snapshots).
    return CpuRun((cpu1 - cpu0) / (t1 - t0) * 100, n1 - n0, t1 - t0, (kids1 - kids0) / (t1 - t0) * 100)


# ---------------------------------------------------------------------------------------------- 4. missed calls


def missed(calls: int, sampled: bool) -> tuple[int, int]:
    """(calls missed, calls whose files were not exactly their own) out of `calls` back-to-back calls."""
    ws, bin_dir = setup("missed-sampled" if sampled else "missed-shim")
    proc = supervise(ws, bin_dir, loop(bin_dir, f"for i in $(seq 1 {calls}); do claude -p go; done; sleep 0.5",
                                       sampled), 300)
    proc.wait(timeout=120 + calls * 0.2)
    done = events(ws, "iteration_finished")
    return calls - len(done), sum(1 for e in done if e["files_changed"] != 1)


def before(source: Path | None, measure: Callable[[], CpuRun]) -> CpuRun | None:
    """`measure()` with the supervisor started from `source` (a checkout of the code before a change)."""
    if source is None:
        return None
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(source / "ralph_supervisor")], check=True,
                   stdout=subprocess.DEVNULL)
    saved = os.environ.get("RALPH_BENCH_SOURCE")
    os.environ["RALPH_BENCH_SOURCE"] = str(source)
    try:
        return measure()
    finally:
        if saved is None:
            del os.environ["RALPH_BENCH_SOURCE"]
        else:
            os.environ["RALPH_BENCH_SOURCE"] = saved


def describe(source: Path) -> str:
    """Which code `source` holds: its git commit, or what its `.commit` file says (an exported tree)."""
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if head:
        return head
    marker = source / ".commit"
    return marker.read_text().strip() if marker.is_file() else str(source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--before", type=Path, help="a checkout of the code before a change: its CPU per call too")
    args = parser.parse_args()
    kit.become_subreaper()
    # Byte code compiled once, as an install has it: with PYTHONDONTWRITEBYTECODE set (as on some machines)
    # every supervisor started from the source tree would compile its ~200 modules again, a second of CPU.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(kit.ROOT / "ralph_supervisor")], check=True,
                   stdout=subprocess.DEVNULL)
    n_latency, n_cost, cpu_s, n_missed = (15, 200, 8.0, 200) if args.quick else (kit.TAIL_SAMPLES, 500, 12.0, 1000)
    cpu_n = 2 if args.quick else 4  # with four kinds, each goes first once
    load_start = kit.loadavg()
    try:
        shim_lat, sampled_lat = latency(n_latency, False), latency(n_latency, True)
        cost = shim_cost(n_cost)
        cpu = cpu_rounds(cpu_n, cpu_s, args.before)
        miss_shim, wrong_shim = missed(n_missed, False)
        miss_sampled, wrong_sampled = missed(n_missed, True)
    finally:
        kit.cleanup()

    before_commit = describe(args.before) if args.before is not None else "n/a"

    def ms(value: float) -> str:
        return f"{value:.1f} ms"

    shim_tail, sampled_tail = kit.tail(shim_lat), kit.tail(sampled_lat)

    rows = [
        kit.Row("call start reaches the supervisor, p50 (shim vs sampler)", ms(percentile(shim_lat, 0.5)),
                ms(percentile(sampled_lat, 0.5)), f"{percentile(shim_lat, 0.5) / percentile(sampled_lat, 0.5):.2f}",
                "(for reference)"),
        kit.Row(f"call start reaches the supervisor, {shim_tail[0]} (shim vs sampler)", ms(shim_tail[1]),
                ms(sampled_tail[1]), f"{shim_tail[1] / sampled_tail[1]:.2f}", "(for reference)"),
        kit.Row("time a bash -p shim adds to a call of `true`", ms(cost["bash"] - cost["plain"]),
                ms(cost["plain"]) + " (`true` itself)", "", "< 5 ms"),
        kit.Row("time a /bin/sh shim adds to a call of `true`", ms(cost["sh"] - cost["plain"]),
                ms(cost["plain"]) + " (`true` itself)", "", "< 5 ms"),
        kit.Row("time a bash -p shim adds in a box (its notice told to the channel too)",
                ms(cost["boxed"] - cost["plain"]), ms(cost["plain"]) + " (`true` itself)", "", "< 5 ms"),
        kit.Row("supervisor CPU, its own process, loop making 10 calls a second (shims vs sampler)",
                cpu["shims"].cell("at_ten", " %"), cpu["sampler"].cell("at_ten", " %"),
                f"{cpu['shims'].median('at_ten') / cpu['sampler'].median('at_ten'):.2f}", "< 10 %"),
        kit.Row("the same with its helper processes (git for the snapshots) (shims vs sampler)",
                cpu["shims"].cell("with_helpers_at_ten", " %"), cpu["sampler"].cell("with_helpers_at_ten", " %"),
                f"{cpu['shims'].median('with_helpers_at_ten') / cpu['sampler'].median('with_helpers_at_ten'):.2f}",
                "< 10 %"),
        kit.Row("the same, as measured: CPU at the calls a second the loop made (shims vs sampler)",
                cpu["shims"].rates(), cpu["sampler"].rates(), "", "(for reference)"),
        kit.Row("supervisor CPU per agent call (shims vs sampler)", cpu["shims"].cell("per_call_ms", " ms"),
                cpu["sampler"].cell("per_call_ms", " ms"),
                f"{cpu['shims'].median('per_call_ms') / cpu['sampler'].median('per_call_ms'):.2f}", "(for reference)"),
        kit.Row("its helper processes' CPU per agent call (shims vs sampler)",
                cpu["shims"].cell("helpers_per_call_ms", " ms"), cpu["sampler"].cell("helpers_per_call_ms", " ms"),
                f"{cpu['shims'].median('helpers_per_call_ms') / cpu['sampler'].median('helpers_per_call_ms'):.2f}",
                "(for reference)"),
        *[kit.Row(f"CPU per agent call, {kind}: this code vs the code before ({before_commit})",
                  cpu[kind].cell("per_call_ms", " ms"), cpu[f"{kind} before"].cell("per_call_ms", " ms"),
                  f"{cpu[kind].median('per_call_ms') / cpu[f'{kind} before'].median('per_call_ms'):.2f}",
                  "(for reference)")
          for kind in ("shims", "sampler") if cpu.get(f"{kind} before") and cpu[f"{kind} before"].runs],
        *[kit.Row(f"helpers' CPU per agent call, {kind}: this code vs the code before ({before_commit})",
                  cpu[kind].cell("helpers_per_call_ms", " ms"), cpu[f"{kind} before"].cell("helpers_per_call_ms", " ms"),
                  f"{cpu[kind].median('helpers_per_call_ms') / cpu[f'{kind} before'].median('helpers_per_call_ms'):.2f}",
                  "(for reference)")
          for kind in ("shims", "sampler") if cpu.get(f"{kind} before") and cpu[f"{kind} before"].runs],
        kit.Row(f"calls missed out of {n_missed:,} back-to-back short calls (shims vs sampler)", str(miss_shim),
                str(miss_sampled), "", "0"),
        kit.Row(f"calls of those {n_missed:,} whose files were not exactly their own", str(wrong_shim),
                str(wrong_sampled), "", "0"),
    ]
    for row in rows:
        row.met = kit.judge(row.ours, row.ratio, row.target)
    markdown = f"""## calls: agent calls announced by shims vs sampled from the tree

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {kit.loadavg():.1f} at the end (a machine shared with other developers).
Mode: {'quick' if args.quick else 'full'}. The same sh agent and loops both ways; the sampler's runs put the
agent's folder before the shims on PATH, so only the tree sampler (every 0.1-0.5 s) can see the calls.

{kit.table(rows)}

Latency: the agent writes its start time first; the supervisor's `iteration_started` event carries a
millisecond timestamp ({n_latency} calls of 0.3 s each way). Shim cost: `true` found through PATH, median of
{n_cost} interleaved runs each. CPU: a loop calling the agent with `sleep 0.1` between calls (10 calls a second
on an idle machine) for {cpu_s:.0f} s after 3 s of start-up, the calls it made counted, {cpu_n} times each, the
kinds taking turns and each round begun by another kind (a run right after another is about a tenth cheaper
here than a round's first: a fixed order favoured the kinds measured later); median, the lowest and highest
in brackets; on a busy machine the loop makes fewer, and the
first row scales the CPU to ten calls a second from what a call cost. Missed calls:
{n_missed:,} back-to-back calls of a few milliseconds, each writing one new file.

The first CPU row is the supervisor's own process (all its threads); the second adds its helper processes,
the children it started and waited for in the window: the git commands that store each call's snapshot
(`update-index` and `write-tree`; now and then `ls-files`, or `diff-tree` where the parent's trees were
packed; the `git cat-file` kept running is not counted until it ends). The loop, its one other child, is not waited for in the window, so none of the agent's
CPU is in either row.

A negative latency means the supervisor knew of the call before the agent's first command ran (the shim's
notice precedes the `exec`); the sampler sees a call only at its next tick (0.1 s while output flows,
0.5 s when idle), and misses a call shorter than that. The CPU row counts what every call costs the
supervisor (its report, the breaker, the state, ledger and event writes), so it grows with the calls
counted: the sampler's runs count only the calls they happen to see.
"""
    out = kit.write_section("calls", markdown, rows, args.out)
    print(out.read_text())


if __name__ == "__main__":
    main()

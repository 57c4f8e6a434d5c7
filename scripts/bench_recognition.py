#!/usr/bin/env python3
"""Benchmark calls started by absolute path (no shim sees them), side by side with the code before the call
recognition (`--base REV`, default d969294, checked out in a temporary worktree):

  - files credited to the right call, over N calls by absolute path that each write a new file at their
    very first instant (20 ms of work, 50 ms of the loop's own between calls);
  - supervisor CPU while a loop makes 10 such calls a second;
  - the sampler between calls: supervisor CPU while the loop runs no agent at all but starts a new
    `python3 script.py` (an interpreter with a script, the case recognition reads /proc for) 12 times a second.

Rounds alternate between the two codes; each figure is the median of the rounds, with the spread.

Usage: scripts/bench_recognition.py [--quick] [--base REV] [--out docs/bench/recognition.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _benchkit as kit  # noqa: E402

AGENT = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
sleep "${AGENT_WORK:-0.02}"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""
FLAGS = ("--no-progress", "100000", "--paraphrase", "0", "--max-failures", "100000", "--same-error", "100000",
         "--output-decline", "0", "--grace", "2")


def checkout(rev: str) -> Path:
    where = kit.temp_dir("base") / "src"
    subprocess.run(["git", "-C", str(kit.ROOT), "worktree", "add", "--detach", "-q", str(where), rev], check=True)
    return where


def drop(where: Path) -> None:
    subprocess.run(["git", "-C", str(kit.ROOT), "worktree", "remove", "--force", str(where)], check=False)


def setup(name: str) -> tuple[Path, Path]:
    tmp = kit.temp_dir(name)
    ws = tmp / "ws"
    (ws / ".ralph").mkdir(parents=True)
    (ws / ".gitignore").write_text(".ralph/\n")
    tools = tmp / "opt"
    tools.mkdir()
    (tools / "claude").write_text(AGENT)
    (tools / "claude").chmod(0o755)
    (tools / "noop.py").write_text("pass\n")
    return ws, tools


def supervise(source: Path, ws: Path, script: str, **env: str) -> subprocess.Popen[bytes]:
    os.environ["RALPH_BENCH_SOURCE"] = str(source)
    try:
        return kit.start(kit.supervisor_argv(ws, ["bash", "-c", script], *FLAGS), env=env)
    finally:
        del os.environ["RALPH_BENCH_SOURCE"]


def finished(ws: Path) -> list[dict]:
    path = ws / ".ralph-supervise" / "events.jsonl"
    out = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "iteration_finished":
            out.append(event)
    return out


def credited(source: Path, calls: int) -> tuple[int, int]:
    """(calls whose iteration holds exactly their own file, iterations) over `calls` calls by absolute path."""
    ws, tools = setup("credited")
    proc = supervise(source, ws, f"for i in $(seq 1 {calls}); do {tools}/claude -p go --output-format json; "
                                 "sleep 0.05; done; sleep 1")
    proc.wait(timeout=60 + calls * 0.5)
    done = finished(ws)
    right = sum(1 for e in done if len(e.get("paths", [])) == 1 and e["files_changed"] == 1)
    return right, len(done)


def cpu(source: Path, script: str, seconds: float, **env: str) -> float:
    ws, tools = setup("cpu")
    proc = supervise(source, ws, script.format(tools=tools), **env)
    return kit.supervisor_cpu_percent(proc, seconds, who="bench_recognition")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} % ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--base", default="d969294")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    kit.become_subreaper()
    calls, seconds, rounds = (200, 8.0, 2) if args.quick else (1000, 15.0, 3)
    base = checkout(args.base)
    ten_a_second = "while :; do {tools}/claude -p go --output-format json; sleep 0.08; done"
    no_agent = "while :; do python3 {tools}/noop.py; sleep 0.05; done"
    try:
        ours_right, ours_n = credited(kit.ROOT, calls)
        base_right, base_n = credited(base, calls)
        cpu_calls: dict[str, list[float]] = {"ours": [], "base": []}
        cpu_idle: dict[str, list[float]] = {"ours": [], "base": []}
        for _ in range(rounds):
            for name, source in (("ours", kit.ROOT), ("base", base)):
                cpu_calls[name].append(cpu(source, ten_a_second, seconds))
                cpu_idle[name].append(cpu(source, no_agent, seconds))
    finally:
        kit.cleanup()
        drop(base)
    med = {k: statistics.median(v) for k, v in cpu_idle.items()}
    rows = [
        kit.Row(f"calls by absolute path whose first-instant file is credited to their own call, of {calls:,}",
                f"{ours_right:,} ({ours_n:,} iterations)", f"{base_right:,} ({base_n:,} iterations)", "", f"{calls:,}"),
        kit.Row("supervisor CPU, 10 calls a second by absolute path", spread(cpu_calls["ours"]),
                spread(cpu_calls["base"]), "", "(for reference)"),
        kit.Row("supervisor CPU between calls: no agent, 12 `python3 script.py` a second", spread(cpu_idle["ours"]),
                spread(cpu_idle["base"]), f"{med['ours'] / med['base']:.2f}" if med["base"] else "",
                "no more than the base"),
    ]
    rows[0].met = ours_right == calls
    rows[2].met = med["ours"] <= max(cpu_idle["base"])
    markdown = f"""## recognition: calls by absolute path, against the code before ({args.base})

Code: {kit.commit()} against {args.base} (a temporary worktree), rounds alternating. Machine: {kit.machine_line()};
load average at the end {kit.loadavg():.1f}. Mode: {'quick' if args.quick else 'full'}.

{kit.table(rows)}

Credited: {calls:,} calls of `/abs/claude -p go` that write a new file first, work 20 ms and print a JSON
result, 50 ms apart; a call counts when its iteration holds exactly its own file. The base sees only the calls
its sampler catches alive (every 0.1-0.5 s), and those without the file they wrote before it looked. CPU: 
{seconds:.0f} s after 3 s of start-up, {rounds} rounds each, median (min-max). The CPU with calls grows with
the calls counted (each is judged, written, snapshotted): the base counts only those it sees.
"""
    out = kit.write_section("recognition", markdown, rows, args.out)
    print(out.read_text())


if __name__ == "__main__":
    main()

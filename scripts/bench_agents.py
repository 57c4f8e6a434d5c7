#!/usr/bin/env python3
"""Benchmark: how fast each agent adapter reads its agent's output, against the Claude adapter on the same volume.

For each agent a realistic call is generated deterministically in its own stream format (tool runs with long
outputs, reasoning, file changes, replies, usage; Gemini's reply in small deltas), each call about 2 MiB: the
most of a call's output the supervisor keeps and reads (`MAX_TEXT_BYTES`). `read_call` reads calls of that
format, as the supervisor does when a call ends, until 100 MB have been read; the rounds alternate between the
formats and the median round counts. The baseline is Claude Code's stream-json on the same volume; the target
is that no adapter takes more than twice its time. Writes docs/bench/agents.md.

Usage: scripts/bench_agents.py [--quick] [--size-mb N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from _benchkit import Row, loadavg, machine_line, table, write_section  # noqa: E402
from ralph_supervisor.agents import read_call  # noqa: E402
from ralph_supervisor.evidence.iterations import MAX_TEXT_BYTES  # noqa: E402

CALL_BYTES = MAX_TEXT_BYTES
STATUS = ("\n---RALPH_STATUS---\nSTATUS: IN_PROGRESS\nTASKS_COMPLETED_THIS_LOOP: 1\nFILES_MODIFIED: 2\n"
          "TESTS_STATUS: PASSING\nWORK_TYPE: IMPLEMENTATION\nEXIT_SIGNAL: false\nRECOMMENDATION: continue\n"
          "---END_RALPH_STATUS---")
WORDS = ("the parser module config loader test suite migration schema handler request response cache index build "
         "output fixture session token update refactor function variable component route service client").split()


def prose(rnd: random.Random, words: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(words)).capitalize() + "."


def test_output(rnd: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        if i % 97 == 13:
            out.append(f"Error: Failed to compile src/main_{i % 5}.ts:{i % 300}:5")
        else:
            out.append(f"tests/test_module_{rnd.randrange(40)}.py::test_case_{i} PASSED [{i % 100:3d}%]")
    return "\n".join(out)


def code(rnd: random.Random, lines: int) -> str:
    return "\n".join(f"    value_{i} = parse(tokens[{i}])  # {rnd.choice(WORDS)}" for i in range(lines))


def dump(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"))


def fill(rnd: random.Random, head: list[str], step: Callable[[random.Random, int], list[str]], tail: list[str]) -> str:
    """Events until the call holds about CALL_BYTES."""
    lines = list(head)
    size = sum(len(line) + 1 for line in lines) + sum(len(line) + 1 for line in tail)
    n = 0
    while size < CALL_BYTES:
        for line in step(rnd, n):
            lines.append(line)
            size += len(line) + 1
        n += 1
    return "\n".join(lines + tail) + "\n"


def claude_call(rnd: random.Random, tool_call_events: bool = False) -> str:
    sid = "4f1c2a9e-7b3d-4e8a-9c61-2d5b0e7f3a18"

    def step(rnd: random.Random, n: int) -> list[str]:
        usage = {"input_tokens": 3, "output_tokens": 140, "cache_read_input_tokens": 12000 + n}
        out = [dump({"type": "assistant", "message": {"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5",
                                                      "content": [{"type": "text", "text": prose(rnd, 40)},
                                                                  {"type": "tool_use", "id": f"toolu_{n}", "name": "Write",
                                                                   "input": {"file_path": f"src/m{n}.py", "content": code(rnd, 40)}}],
                                                      "usage": usage}, "session_id": sid})]
        if tool_call_events:
            out.append(dump({"type": "tool_call", "subtype": "completed", "call_id": f"toolu_{n}",
                             "tool_call": {"shellToolCall": {"args": {"command": "npm test"},
                                                             "result": {"success": {"stdout": test_output(rnd, 90)}}}},
                             "session_id": sid}))
        else:
            out.append(dump({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": test_output(rnd, 90), "is_error": False}]},
                "session_id": sid}))
        return out

    reply = prose(rnd, 60) + STATUS
    return fill(rnd, [dump({"type": "system", "subtype": "init", "session_id": sid, "model": "claude-sonnet-4-5"})], step,
                [dump({"type": "result", "subtype": "success", "is_error": False, "result": reply, "session_id": sid,
                       "total_cost_usd": 0.41, "usage": {"input_tokens": 900, "output_tokens": 7000}})])


def codex_call(rnd: random.Random) -> str:
    def step(rnd: random.Random, n: int) -> list[str]:
        cmd = {"id": f"item_{n}a", "type": "command_execution", "command": "bash -lc 'npm test'", "aggregated_output": "",
               "exit_code": None, "status": "in_progress"}
        return [dump({"type": "item.completed", "item": {"id": f"item_{n}r", "type": "reasoning", "text": prose(rnd, 30)}}),
                dump({"type": "item.started", "item": cmd}),
                dump({"type": "item.completed", "item": {**cmd, "aggregated_output": test_output(rnd, 90), "exit_code": 0,
                                                         "status": "completed"}}),
                dump({"type": "item.completed", "item": {"id": f"item_{n}f", "type": "file_change", "status": "completed",
                                                         "changes": [{"path": f"src/m{n}.py", "kind": "update"}]}}),
                dump({"type": "item.completed", "item": {"id": f"item_{n}m", "type": "agent_message", "text": prose(rnd, 40)}})]

    return fill(rnd, ["Reading prompt from stdin...", dump({"type": "thread.started", "thread_id": "0199a213"}),
                      dump({"type": "turn.started"})], step,
                [dump({"type": "item.completed", "item": {"id": "last", "type": "agent_message", "text": prose(rnd, 60) + STATUS}}),
                 dump({"type": "turn.completed", "usage": {"input_tokens": 48211, "cached_input_tokens": 40960,
                                                           "output_tokens": 1877}})])


def gemini_call(rnd: random.Random) -> str:
    ts = "2026-01-05T10:00:00.000Z"

    def step(rnd: random.Random, n: int) -> list[str]:
        text = prose(rnd, 60)
        out = [dump({"type": "message", "timestamp": ts, "role": "assistant", "content": text[i:i + 60], "delta": True})
               for i in range(0, len(text), 60)]
        return out + [dump({"type": "tool_use", "timestamp": ts, "tool_name": "run_shell_command", "tool_id": f"t{n}",
                            "parameters": {"command": "npm test"}}),
                      dump({"type": "tool_result", "timestamp": ts, "tool_id": f"t{n}", "status": "success",
                            "output": test_output(rnd, 90)})]

    return fill(rnd, [dump({"type": "init", "timestamp": ts, "session_id": "b2b90938", "model": "gemini-2.5-pro"})], step,
                [dump({"type": "message", "timestamp": ts, "role": "assistant", "content": STATUS, "delta": True}),
                 dump({"type": "result", "timestamp": ts, "status": "success",
                       "stats": {"total_tokens": 19803, "input_tokens": 18318, "output_tokens": 1021, "cached": 12788,
                                 "input": 5530, "duration_ms": 14211, "tool_calls": 2}})])


def gemini_json_call(rnd: random.Random) -> str:
    """`-o json`: one pretty-printed object; its `response` holds the whole reply."""
    parts, size = [], 0
    while size < CALL_BYTES - 4096:
        parts.append(prose(rnd, 60))
        size += len(parts[-1]) + 1
    stats = {"models": {"gemini-2.5-pro": {"tokens": {"input": 5530, "prompt": 18318, "candidates": 1021,
                                                      "cached": 12788}}}}
    return "Loaded cached credentials.\n" + json.dumps({"session_id": "b2b90938", "response": "\n".join(parts) + STATUS,
                                                         "stats": stats}, indent=2) + "\n"


def opencode_call(rnd: random.Random) -> str:
    sid = "ses_494719016ffe85dkDMj0FPRbHK"

    def oc(kind: str, n: int, **part: object) -> str:
        return dump({"type": kind, "timestamp": 1767036059338 + n, "sessionID": sid,
                     "part": {"id": f"prt_{kind}{n}", "sessionID": sid, "messageID": f"msg_{n}", **part}})

    def step(rnd: random.Random, n: int) -> list[str]:
        return [oc("step_start", n, type="step-start", snapshot="46358aa5"),
                oc("text", n, type="text", text=prose(rnd, 40)),
                oc("tool_use", n, type="tool", tool="bash", callID=f"c{n}",
                   state={"status": "completed", "input": {"command": "npm test"}, "output": test_output(rnd, 90)}),
                oc("step_finish", n, type="step-finish", reason="tool-calls", cost=0.0132,
                   tokens={"input": 1203, "output": 211, "reasoning": 0, "cache": {"read": 14592, "write": 0}})]

    return fill(rnd, [], step, [oc("step_start", 10**6, type="step-start"),
                                oc("text", 10**6, type="text", text=prose(rnd, 60) + STATUS),
                                oc("step_finish", 10**6, type="step-finish", reason="stop", cost=0.01,
                                   tokens={"input": 517, "output": 388, "reasoning": 0, "cache": {"read": 15795, "write": 0}})])


def amp_call(rnd: random.Random) -> str:
    text = claude_call(rnd)
    return text.replace('"session_id":"4f1c2a9e-7b3d-4e8a-9c61-2d5b0e7f3a18"', '"session_id":"T-2775dc92"')


FORMATS: list[tuple[str, str, str, Callable[[random.Random], str]]] = [  # (label, process, agent expected, generator)
    ("Claude Code stream-json (baseline)", "claude", "claude", claude_call),
    ("Codex `exec --json`", "codex", "codex", codex_call),
    ("Gemini CLI `-o stream-json` (reply in 60-character deltas)", "gemini", "gemini", gemini_call),
    ("Gemini CLI `-o json` (one pretty-printed object)", "gemini", "gemini", gemini_json_call),
    ("opencode `run --format json`", "opencode", "opencode", opencode_call),
    ("Cursor agent stream-json", "cursor-agent", "cursor", lambda rnd: claude_call(rnd, tool_call_events=True)),
    ("Amp `--stream-json`", "amp", "amp", amp_call),
]


def measure(texts: list[str], process: str, volume: int) -> tuple[float, int]:
    """Seconds to read calls (cycling through `texts`) until `volume` bytes were read; the bytes read."""
    done = 0
    started = time.perf_counter()
    index = 0
    while done < volume:
        text = texts[index % len(texts)]
        read_call(text, name=process, argv=(process,), now=1767607200.0)
        done += len(text.encode())
        index += 1
    return time.perf_counter() - started, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 MB per format instead of 100 MB")
    parser.add_argument("--size-mb", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "agents.md")
    args = parser.parse_args()
    volume = (args.size_mb or (10 if args.quick else 100)) * 1_000_000
    load_start = loadavg()

    samples: dict[str, list[tuple[float, int]]] = {label: [] for label, *_ in FORMATS}
    calls: dict[str, list[str]] = {}
    for label, process, agent, generate in FORMATS:
        calls[label] = [generate(random.Random(seed)) for seed in range(4)]
        out = read_call(calls[label][0], name=process, argv=(process,), now=1767607200.0)
        assert out.agent == agent and not out.failed and out.reply, (label, out.agent, out.failed, out.message)
    for round_no in range(args.rounds):  # alternate: no format gets a warmer machine for all its runs
        for label, process, _, _ in FORMATS:
            elapsed, done = measure(calls[label], process, volume)
            samples[label].append((elapsed, done))
            print(f"round {round_no + 1} {label}: {done / elapsed / 1e6:.1f} MB/s", flush=True)

    def rate(label: str) -> float:
        return statistics.median(done / elapsed for elapsed, done in samples[label]) / 1e6

    base_label = FORMATS[0][0]
    base = rate(base_label)
    mb = volume / 1e6
    rows = []
    for label, *_ in FORMATS[1:]:
        slower = base / rate(label)
        rows.append(Row(f"{label}: read throughput, {mb:.0f} MB in calls of {CALL_BYTES / 2**20:.0f} MiB",
                        f"{rate(label):.1f} MB/s", f"{base:.1f} MB/s (Claude stream-json)", f"{slower:.2f}", "<= 2",
                        slower <= 2))
    rows.append(Row(f"{base_label}: read throughput, {mb:.0f} MB", f"{base:.1f} MB/s", "", "", "(for reference)"))
    met = all(r.met for r in rows if r.met is not None)
    sizes = ", ".join(f"{label.split(' (')[0]} {statistics.mean(len(t) for t in calls[label]) / 2**20:.2f} MiB"
                      for label, *_ in FORMATS)
    markdown = f"""## Agent adapters: output read per second, per agent

Each agent's stream format, generated deterministically by `scripts/bench_agents.py` (tool runs with long outputs,
reasoning, file changes, replies, usage; Gemini's reply in 60-character deltas), in calls of about
{CALL_BYTES / 2**20:.0f} MiB, the most of a call's output the supervisor keeps and reads when the call ends. Each row is
`read_call` over {mb:.0f} MB of that format (the median of {args.rounds} alternating rounds), against Claude Code's
stream-json on the same volume. Ratio: Claude's throughput over the row's (the time it takes, relative to
Claude's); target: at most twice Claude's time. Call sizes: {sizes}.

{table(rows)}

{"Every adapter is within 2x of the Claude adapter." if met else "**Not every adapter is within 2x of the Claude adapter** (see the rows)."}

Machine: {machine_line()}; load average {load_start:.1f} at the start, {loadavg():.1f} at the end (the machine was shared
with other work while this ran; the ratios, from alternating rounds, travel better than the absolute numbers).
The reading runs once per call, after the call ended, on the event loop: at these rates a 2 MiB call costs
{CALL_BYTES / 1e6 / min(rate(label) for label, *_ in FORMATS) * 1000:.0f} ms at most.
"""
    write_section("agents", markdown, rows, out=args.out)
    print(markdown)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

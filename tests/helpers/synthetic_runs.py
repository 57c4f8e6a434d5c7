"""A long run's state folder, written the way the supervisor writes it (for the report's size and speed).

Real runs of 1,000 or 10,000 iterations take hours; this writes the same files in the same shapes in a
second: events.jsonl through the supervisor's RotatingFile (so 10,000 iterations rotate like they would),
history.jsonl with an open, a trial and a close every `open_every` iterations, a bounded ledger.json and
state.json. The mix (progress, no progress, errors, failed calls, usage limits) is fixed by `seed`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ralph_supervisor.files import events_jsonl
from ralph_supervisor.rotating import RotatingFile
from ralph_supervisor.store import iso_utc

REPLIES = [
    "Implemented the parser for the config file and added tests for the edge cases.",
    "Fixed the failing test in test_api.py by handling the empty response.",
    "Refactored the storage layer; no behaviour change.",
    "Still blocked: the deploy needs the production API key, which is missing.",
    "Investigated the flaky timeout in the CI job; nothing conclusive yet.",
]
ERRORS = [
    "src/app.ts(12,5): error TS2345: Argument of type 'string' is not assignable to parameter of type 'number'.",
    "FAILED tests/test_api.py::test_empty_response - AssertionError: assert 500 == 200",
    "Error: Cannot find module './config'",
]


def write_run(state_dir: Path, iterations: int, *, seed: int = 7, open_every: int = 100,
              start: float = 1796100000.0, workspace: str = "/srv/proj") -> None:
    rng = random.Random(seed)
    state_dir.mkdir(parents=True, exist_ok=True)
    events = RotatingFile(events_jsonl.path(state_dir), events_jsonl.MAX_BYTES, events_jsonl.TOTAL_BYTES,
                          whole_lines=True)
    history: list[str] = []
    attempts: list[dict[str, object]] = []
    t = start

    def log(event: str, at: float, **fields: object) -> None:
        fields.update(event=event, level="info", ts=iso_utc(at))
        events.write((json.dumps(fields) + "\n").encode())

    def transition(at: float, number: int, frm: str, to: str, trigger: str, reason: str) -> None:
        history.append(json.dumps({"ts": iso_utc(at), "iteration": number, "from": frm, "to": to,
                                   "trigger": trigger, "reason": reason}))

    log("orphans_swept", t, count=0)
    log("supervisor_started", t, pid=4242, workspace=workspace, state_dir=str(state_dir),
        command=["./ralph_loop.sh"], budgets={"token_budget": iterations * 2000, "cost_budget": 0.0,
                                               "max_iterations": 0, "on_open": "pause", "name": "proj"})
    log("child_started", t, pid=4243)
    tokens = 0
    for number in range(1, iterations + 1):
        t += rng.uniform(0.2, 2.0)
        log("iteration_started", t, iteration=number, pid=5000 + number)
        took = rng.uniform(20, 400)
        roll = rng.random()
        failed = roll < 0.05
        limited = 0.05 <= roll < 0.07
        progress = not failed and not limited and roll < 0.6
        errors = [rng.choice(ERRORS)] if (failed or rng.random() < 0.2) and not limited else []
        used = 0 if limited else rng.randint(800, 4000)
        tokens += used
        reply = "" if failed or limited else rng.choice(REPLIES)
        outcome = "success" if progress else ("failure" if failed or errors else "noop")
        t += took
        log("iteration_finished", t, iteration=number, files_changed=rng.randint(1, 12) if progress else 0,
            commits=1 if progress and rng.random() < 0.3 else 0, output_bytes=rng.randint(500, 50000),
            errors=len(errors), tokens=used, outcome=outcome, failed=failed, usage_limited=limited, blocked=False,
            cut_short=False, duration_s=round(took, 3), error_signatures=errors, first_error=errors[0] if errors else "",
            reply=reply, status_block={"STATUS": "IN_PROGRESS", "EXIT_SIGNAL": "false"} if reply else {},
            completed=False, cost_usd=round(used * 0.000015, 5))
        attempts.append({"iteration": number, "action": reply.splitlines()[0][:200] if reply else "failed call",
                         "outcome": outcome, **({"error": errors[0]} if errors else {}), "tokensUsed": used})
        if number % open_every == 0:
            transition(t + 0.01, number, "CLOSED", "OPEN", "no-progress",
                       "no progress in 3 iterations in a row (threshold 3): no file changed, no commit")
            log("tree_paused", t + 0.02, processes=4, iteration=number)
            t += 1800
            transition(t, number, "OPEN", "HALF_OPEN", "no-progress", "cooldown of 30 min over: the next iteration is the trial")
            log("tree_resumed", t, processes=4, iteration=number)
        elif number % open_every == 1 and number > 1:
            transition(t + 0.01, number, "HALF_OPEN", "CLOSED", "no-progress", f"trial iteration {number} made progress")
    log("child_exited", t + 1, pid=4243, code=0, iteration=iterations)
    log("tree_stopped", t + 1.1, reason="child_exited", survivors=0, survivor_pids=[], duration_ms=12, signalled=1,
        iteration=iterations)
    log("supervisor_stopped", t + 1.2, code=0)
    events.close()
    (state_dir / "history.jsonl").write_text("\n".join(history) + ("\n" if history else ""))
    (state_dir / "ledger.json").write_text(json.dumps({"goal": "supervised: ./ralph_loop.sh",
                                                       "attempts": attempts[-1000:]}, indent=2))
    (state_dir / "state.json").write_text(json.dumps({
        "state": "CLOSED", "trigger": "none", "reason": "", "iteration": iterations, "consecutive_no_progress": 0,
        "consecutive_same_error": 0, "consecutive_failures": 0, "opened_at": None,
        "total_opens": iterations // open_every, "cooldown_s": 1800.0, "tokens_used": tokens, "final": False}))

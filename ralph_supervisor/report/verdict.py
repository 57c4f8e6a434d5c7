"""The verdict and what a human must decide: where the latest run stands, in one line, and the next steps.

Pure: the runs, `state.json`'s values, the rows and the history in, a `Verdict` out; `what_next` adds the
residual (when the breaker called a human) and the commands that continue, in escalation's words
(`classify_residual`, `decide_next`, `how_to_continue`), so the report and `escalation.md` say the same.

    verdict = judge(runs, records.state, rows, running=False, now=now, history=history)
    verdict.line   # "Stopped for good by the breaker (no-progress) at iteration 6."
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph_supervisor import events as ev
from ralph_supervisor.event_fields import Budgets, LimitWaitStarted
from ralph_supervisor.breaker import Decision, Snapshot, State
from ralph_supervisor.escalation import Residual, classify_residual, decide_next, how_to_continue
from ralph_supervisor.files import child_log
from ralph_supervisor.files.history_jsonl import Transition
from ralph_supervisor.files.state_json import Recorded
from ralph_supervisor.format import utc_clock
from ralph_supervisor.report.rows import IterationRow, as_iteration_report
from ralph_supervisor.report.runs import RunInfo
from ralph_supervisor.values import as_int, as_text

@dataclass(frozen=True)
class Verdict:
    """The first line of the report. `status`: running, trial, paused, waiting, finished, stopped, ended."""

    status: str
    by: str
    """Who or what: breaker, hand, request, signal, limit, itself, or ""."""
    line: str
    trigger: str
    reason: str
    iteration: int
    code: int | None


def verdict_line(status: str, by: str, *, trigger: str = "none", iteration: int = 0, code: int | None = None,
                 until: float | None = None, iterations: int | None = None) -> str:
    """The one line that says where the loop stands; the report's first line and every notice's."""
    t = f" ({trigger})" if trigger and trigger != "none" else ""
    at = f" at iteration {iteration}"
    when = f" at {utc_clock(until)}" if until else ""
    if status == "running":
        return f"Running: iteration {iteration}, breaker CLOSED."
    if status == "trial":
        return f"Running, on trial{t}: the next iteration decides whether the breaker closes (iteration {iteration})."
    if status == "paused":
        if by == "hand":
            return f"Paused by hand{at}: it waits for `ralph-supervise resume`."
        if by == "restart":
            return f"Stopped by the breaker{t}{at}: the loop starts again after the cooldown{when}."
        return f"Paused by the breaker{t}{at}: it tries again after the cooldown{when}."
    if status == "waiting":
        return f"Waiting for a usage limit to reset{' until ' + utc_clock(until) if until else ''} (iteration {iteration})."
    if status == "finished":
        count = iterations if iterations is not None else iteration
        return f"Finished by itself with code {code} after {count} iteration{'s' if count != 1 else ''}."
    if status == "stopped":
        if by == "request":
            return f"Stopped on request (`ralph-supervise stop`){at}."
        if by == "signal":
            return f"Stopped by a signal{at} (exit {code})."
        if by == "refused":
            return f"Did not start: the breaker is open for good since an earlier run{t}."
        return f"Stopped for good by the breaker{t}{at}."
    if status == "ended":
        return f"Ended without a stop record after iteration {iteration} (the supervisor was killed or crashed)."
    return "Nothing ran yet."


def judge(runs: Sequence[RunInfo], state: Recorded | None, rows: Sequence[IterationRow],
          running: bool, now: float, history: Sequence[Transition] = ()) -> Verdict:
    """Where the latest run stands: running (and how), or how it ended. An open is told at the iteration
    that opened it (the history's), not at the one that had just started when the tree froze."""
    s = state.snapshot if state is not None else Snapshot()
    run = runs[-1] if runs else None
    breaker = s.state.value
    trigger = as_text(s.trigger, 40) or "none"
    reason = as_text(s.reason, 400)
    iteration = s.iteration or (rows[-1].number if rows else 0)
    last = history[-1] if history else None
    if breaker == "OPEN" and last is not None and last.to_state == "OPEN":
        iteration = last.iteration or iteration
    opened = s.opened_at
    cooldown = s.cooldown_s
    budgets = run.budgets if run else Budgets()

    def make(status: str, by: str, code: int | None = None, until: float | None = None,
             why: str = reason, what: str = trigger) -> Verdict:
        line = verdict_line(status, by, trigger=what, iteration=iteration, code=code, until=until,
                            iterations=len(rows))
        return Verdict(status, by, line, what, why, iteration, code)

    if run is None and not rows:
        return Verdict("empty", "", verdict_line("empty", ""), trigger, reason, iteration, None)
    if running and (run is None or run.ended_at is None):
        until = limit_until(state, run, now)
        if until is not None:
            return make("waiting", "limit", until=until, why="a usage limit was reached", what="usage-limit")
        if breaker == "OPEN":
            if trigger == "manual":
                return make("paused", "hand")
            mode = budgets.on_open
            return make("paused", "restart" if mode == "kill" else "breaker",
                        until=opened + cooldown if opened is not None and cooldown else None)
        if breaker == "HALF_OPEN":
            return make("trial", "breaker")
        return make("running", "", why="")
    assert run is not None
    code = run.exit_code
    if run.ended_at is None:
        return make("ended", "")
    if ev.STOP_BREAKER_FINAL in run.stop_reasons:
        return make("stopped", "breaker", code)
    if ev.STOP_REQUEST in run.stop_reasons:
        return make("stopped", "request", code, why="stopped with `ralph-supervise stop`", what="manual")
    if ev.STOP_SIGNAL in run.stop_reasons or (code in (130, 143) and not run.child_codes):
        return make("stopped", "signal", code, why=f"the supervisor got a signal (exit {code})", what="none")
    if run.child_starts == 0 and s.final:
        return make("stopped", "refused", code)
    if run.child_codes:
        return make("finished", "itself", run.child_codes[-1], why="", what="none")
    return make("stopped", "", code, why=f"the supervisor exited with code {code}")


def limit_until(state: Recorded | None, run: RunInfo | None, now: float) -> float | None:
    """The end of a usage-limit wait in progress: `limit_until` in state.json, or an unended wait event."""
    until = state.limit_until if state is not None else None
    if until is not None and until > now:
        return until
    if run is None:
        return None
    waiting: float | None = None
    for event in run.events:
        name = ev.name(event)
        if name == ev.LIMIT_WAIT_STARTED:
            waiting = LimitWaitStarted.of(event).until or float("inf")
        elif name == ev.LIMIT_WAIT_ENDED or name == ev.ITERATION_STARTED:
            waiting = None
    if waiting is None or waiting <= now:
        return None
    return None if waiting == float("inf") else waiting


def _decision(state: Recorded | None, verdict: Verdict) -> Decision:
    """The breaker's decision as `escalation` judges one, from what state.json holds (OPEN when it holds none)."""
    s = state.snapshot if state is not None else Snapshot(state=State.OPEN)
    final = s.final or verdict.status == "stopped"
    return Decision(action="final" if final else "open", state=s.state, trigger=verdict.trigger,
                    reason=verdict.reason, iteration=verdict.iteration, final=final,
                    cooldown_s=s.cooldown_s, total_opens=s.total_opens)


def what_next(verdict: Verdict, state: Recorded | None, rows: Sequence[IterationRow],
              workspace: str, verdict_budgets: Budgets | None = None, state_dir: Path | None = None
              ) -> tuple[Residual | None, list[str], list[str]]:
    """The residual (when the breaker called a human), what to decide, and the commands that continue.
    `state_dir`: the folder the records came from, where the loop's output is (wherever `--state-dir` put it)."""
    w = workspace or "DIR"
    verdict_budgets = verdict_budgets or Budgets()
    if verdict.by in ("breaker", "restart", "hand", "refused"):
        decision = _decision(state, verdict)
        reports = [as_iteration_report(r) for r in rows[-10:]]
        residual = classify_residual(decision, reports)
        has_errors = any(r.signatures for r in rows[-10:])
        on_open = verdict_budgets.on_open or "pause"
        return residual, decide_next(residual, decision, has_errors), how_to_continue(decision, w, on_open)
    if verdict.status == "running":
        return None, ["- Nothing yet: the loop is running and the breaker is closed."], [
            f"- `ralph-supervise watch -w {w}` follows it live; `ralph-supervise stop -w {w}` ends it."]
    if verdict.status == "trial":
        return None, ["- Nothing yet: the trial decides by itself whether the loop carries on."], [
            f"- `ralph-supervise watch -w {w}` follows it live."]
    if verdict.status == "waiting":
        return None, ["- Nothing: the loop waits for the usage limit to reset and carries on by itself."], [
            f"- `ralph-supervise stop -w {w}` ends the wait and the loop, if the work should stop here."]
    if verdict.status == "finished" and verdict.code == 0:
        return None, ["- Whether the work is done: the loop finished by itself (code 0); "
                      "check the commits and the last reply above."], [
            f"- `ralph-supervise run -w {w} -- <your loop command>` starts another run."]
    if verdict.status == "finished":
        output = (f"`{child_log.path(state_dir)}`" if state_dir is not None else
                  f"`child.log` in the state folder, which `ralph-supervise status -w {w}` names")
        return None, [f"- Why the loop exited with code {verdict.code} by itself: read the last iterations above "
                      f"and the end of the loop's output ({output}); then start it again or stop here."], [
            f"- `ralph-supervise run -w {w} -- <your loop command>` starts it again."]
    if verdict.status == "ended":
        return None, ["- The supervisor ended without its stop record (killed, or the machine went down): "
                      "whether to start the loop again; the next start sweeps what it left behind."], [
            f"- `ralph-supervise status -w {w}` shows the breaker; `ralph-supervise run -w {w} -- ...` starts again."]
    return None, ["- Whether to start the loop again: it was stopped from outside, not by the breaker."], [
        f"- `ralph-supervise run -w {w} -- <your loop command>` starts it again."]


def restore_steps(summary: Mapping[str, Any] | None, workspace: str, *, called_a_human: bool) -> list[str]:
    """The snapshot a human may restore, with the exact command (when the store holds one)."""
    from ralph_supervisor.snapshots.info import restore_command

    latest = (summary or {}).get("latest")
    if not isinstance(latest, Mapping) or not called_a_human:
        return []
    number = as_int(latest.get("iteration"))
    w = workspace or "DIR"
    return [f"- `{restore_command(number, w)}` brings back the workspace's files as the newest snapshot "
            f"(iteration {number}, {as_int(latest.get('files'))} files) holds them; "
            f"`ralph-supervise snapshots -w {w}` lists the others."]

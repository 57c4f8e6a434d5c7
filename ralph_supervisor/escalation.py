"""The escalation summary (`escalation.md`): one clear account for the human the breaker calls in.

Pure: it renders values handed to it (the decision, the last reports, the history lines, a summary of the
settings, the time as text) and never reads a file or a clock, so it is tested with plain values.

It states the residual ONCE, as goal-circuit-breaker asks: **actionable** work (code
errors, failing tests: another attempt may fix them) or **blocked** work (credentials, permissions, quota or
billing, a decision only a human can take: retrying only burns tokens).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ralph_supervisor.breaker import Decision, State
from ralph_supervisor.decisions import Plan, plan_for
from ralph_supervisor.files.history_jsonl import transition
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.outcomes import outcome_of, outcome_words
from ralph_supervisor.residual import CODE_ERROR, HUMAN_NEEDED, needs_a_human
from ralph_supervisor.format import md_cell, md_code
from ralph_supervisor.text import one_line
from ralph_supervisor.triggers import CAPS, FINAL

EVIDENCE_ROWS = 10
PATTERN_ROWS = 10
TRIED_ROWS = 12

@dataclass(frozen=True)
class Residual:
    """What is left, classified once: `kind` and the evidence behind the call."""

    kind: Literal["actionable", "blocked"]
    because: tuple[str, ...]
    """The lines of evidence that decided it (blocking items for `blocked`, code errors for `actionable`)."""


def status_line(report: IterationReport) -> str:
    """The reply's RALPH_STATUS in a few words: `STATUS: RECOMMENDATION`."""
    status = {str(k).upper(): str(v) for k, v in report.status.items()}
    parts = [p for p in (status.get("STATUS", ""), status.get("RECOMMENDATION", "")) if p.strip()]
    return one_line(": ".join(parts), 100)


def outcome(report: IterationReport) -> str:
    """One word or two for the evidence table, the worst thing first: the words everybody uses (`outcomes.py`)."""
    said = outcome_of(progress=report.progress, failed=report.failed, usage_limited=report.usage_limited,
                      blocked=report.blocked, cut_short=report.cut_short, outage=report.outage)
    return outcome_words(said, completed=report.completed, timed_out=report.timed_out)


def classify_residual(decision: Decision, reports: Sequence[IterationReport]) -> Residual:
    """Blocked when the trigger or the evidence says only a person can clear it; actionable otherwise."""
    recent = list(reports)[-EVIDENCE_ROWS:]
    blockers: list[str] = []
    if decision.trigger == "blocked":
        blockers.append(f"the breaker tripped on `blocked`: {decision.reason}")
    elif decision.trigger == "destructive":
        blockers.append(f"the agent destroyed files ({decision.reason}): only a person can tell whether it meant to")
    elif decision.trigger in FINAL:
        blockers.append(f"a cap was reached ({decision.trigger}): raising it or stopping is a human decision")
    for report in recent:
        if report.blocked:
            blockers.append(
                f"iteration {report.number} was blocked: {one_line(report.blocked_reason or report.first_error)}"
            )
        status = {str(k).upper(): str(v) for k, v in report.status.items()}
        if status.get("STATUS", "").strip().upper() == "BLOCKED":
            blockers.append(f"iteration {report.number} reported STATUS: BLOCKED ({status_line(report)})")
    if decision.trigger == "paraphrase":
        human = [r for r in recent if r.reply and HUMAN_NEEDED.search(r.reply)]
        if human:
            blockers.append(
                f"the agent restated the same blocker in {len(human)} replies: {one_line(human[-1].reply or '', 140)}"
            )
    if not blockers:
        for report in recent:
            hits = [line for line in report.error_lines if needs_a_human(line)]
            if hits:
                blockers.append(f"iteration {report.number}: {one_line(hits[0])}")
    if blockers:
        return Residual("blocked", tuple(_dedupe(blockers)))

    code: list[str] = []
    for report in recent:
        for line in report.error_lines:
            if CODE_ERROR.search(line):
                code.append(one_line(line))
    if not code:
        code = [one_line(line) for report in recent for line in report.error_lines]
    return Residual("actionable", tuple(_dedupe(code)[:5]))


def _dedupe(items: Sequence[str]) -> list[str]:
    """Keep the first of each item, counting items that differ only in numbers (line, port) as one."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = re.sub(r"\d+", "#", item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def error_patterns(reports: Sequence[IterationReport]) -> list[tuple[str, int, str]]:
    """(signature, in how many iterations, a raw sample line), most frequent first."""
    counts: Counter[str] = Counter()
    samples: dict[str, str] = {}
    for report in reports:
        for sig in report.error_signatures:
            counts[sig] += 1
            if sig not in samples:
                samples[sig] = report.first_error if len(report.error_signatures) == 1 else ""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(sig, n, samples.get(sig, "")) for sig, n in ordered]


def _evidence_table(reports: Sequence[IterationReport]) -> list[str]:
    if not reports:
        return ["No iteration finished before the breaker opened."]
    lines = [
        "| iteration | files changed | commits | errors | tokens | outcome | status |",
        "|---:|---:|---:|---|---:|---|---|",
    ]
    for r in reports:
        if r.error_lines:
            errors = f"{len(r.error_signatures)}: {r.first_error}"
        else:
            errors = str(len(r.error_signatures)) if r.error_signatures else "0"
        files = str(r.files_changed)
        if r.changed_paths:
            files += " (" + ", ".join(r.changed_paths[:3]) + (", …" if len(r.changed_paths) > 3 else "") + ")"
        lines.append(
            f"| {r.number} | {md_cell(files)} | {r.commits} | {md_cell(errors)} | {'unknown' if r.tokens is None else r.tokens} "
            f"| {md_cell(outcome(r))} "
            f"| {md_cell(status_line(r))} |"
        )
    return lines


def _tried(history: Sequence[Mapping[str, object]]) -> list[str]:
    rows = [transition(h) for h in history if isinstance(h, Mapping)]
    if not rows:
        return ["Nothing yet: this is the first time the breaker opened in this run."]
    opens = sum(1 for h in rows if h.to_state == State.OPEN.value)
    trials = sum(1 for h in rows if h.to_state == State.HALF_OPEN.value)
    failed = sum(1 for h in rows if h.from_state == State.HALF_OPEN.value and h.to_state == State.OPEN.value)
    closed = sum(1 for h in rows if h.from_state == State.HALF_OPEN.value and h.to_state == State.CLOSED.value)
    out = [
        f"{opens} open(s) before this one were recorded; {trials} trial(s) started, "
        f"{closed} closed the breaker, {failed} failed and re-opened it.",
        "",
    ]
    for h in rows[-TRIED_ROWS:]:
        out.append(
            f"- {h.ts or '?'} iteration {'?' if h.iteration is None else h.iteration}: {h.from_state or '?'} -> "
            f"{h.to_state or '?'} ({h.trigger or '?'}): {one_line(h.reason, 200)}"
        )
    if len(rows) > TRIED_ROWS:
        out.append(f"- … {len(rows) - TRIED_ROWS} earlier transition(s) in history.jsonl")
    return out


CAP_FLAGS = {"token-budget": "--token-budget", "cost-budget": "--cost-budget",
             "daily-budget": "--daily-token-budget", "daily-cost-budget": "--daily-cost-budget",
             "max-iterations": "--max-iterations"}
"""The option that sets each cap."""


def decide_next(residual: Residual, decision: Decision, has_errors: bool = True) -> list[str]:
    """What a human must decide now (Markdown bullets); the escalation summary and the report share it."""
    if decision.trigger == "destructive":
        return [
            "- Whether the agent meant to delete those files (or discard their uncommitted changes). If not, restore "
            "them from the snapshot below before anything else, and change the prompt or the agent's permissions "
            "before resuming.",
            "- If it did (a cleanup you asked for), resume: the next iteration is the trial.",
        ]
    if decision.trigger in CAPS:
        return [
            f"- The run reached a cap ({decision.trigger}). Decide whether the work is worth more: raise the cap "
            f"(`{CAP_FLAGS[decision.trigger]}`) and start again, or stop here."
        ]
    if residual.kind == "blocked":
        return [
            "- Something only a person can provide stands in the way (see the verdict). Provide it "
            "(credentials, a permission, money, an answer), or decide the work should stop.",
            "- Retrying without that change will only burn tokens: do not simply resume.",
        ]
    worth = ("the errors above are code errors the agent may fix on retry" if has_errors
             else "nothing in the evidence names a blocker, but the same approach made no progress")
    return [
        f"- Whether another attempt is worth it: {worth}.",
        "- Whether the plan or prompt needs a change first (a clearer task, a smaller step, a hint about the error).",
        "- Or whether to stop the loop here.",
    ]


def how_to_continue(decision: Decision, workspace: str, on_open: str = "pause") -> list[str]:
    """The commands that take it from here (Markdown lines). `on_open`: what the run's `--on-open` was, since
    with `stop` an open is the end of the run whatever the breaker would wait for."""
    w = workspace
    stopped = decision.state is State.OPEN and plan_for(decision, on_open=on_open) is Plan.STOP_FOR_GOOD
    if stopped:
        return [
            "The run has stopped for good (the supervisor exits 2). To continue after fixing the cause:",
            "",
            f"- `ralph-supervise reset -w {w}` clears the breaker (CLOSED, counters cleared),",
            f"- then start the loop again: `ralph-supervise run -w {w} -- <your loop command>`.",
            f"- `ralph-supervise status -w {w}` shows where it stands.",
        ]
    lines: list[str] = []
    if decision.state is State.OPEN and decision.trigger != "manual" and decision.cooldown_s > 0:
        lines.append(
            f"The supervisor tries again by itself after the cooldown ({decision.cooldown_s / 60:g} min): "
            "the next iteration is a trial; progress closes the breaker, anything else opens it again."
        )
        lines.append("")
    elif decision.trigger == "manual":
        lines.append("The tree stays paused until someone resumes it.")
        lines.append("")
    elif decision.trigger == "destructive":
        lines.append("No cooldown: the breaker waits for a human (restore the files first, then resume or stop).")
        lines.append("")
    lines += [
        f"- `ralph-supervise resume -w {w}` ends the wait now and starts the trial,",
        f"- `ralph-supervise reset -w {w}` clears the breaker to CLOSED and resumes the tree,",
        f"- `ralph-supervise stop -w {w}` stops the loop and its whole tree,",
        f"- `ralph-supervise status -w {w}` shows where it stands.",
    ]
    return lines


def render_escalation(
    decision: Decision,
    reports: Sequence[IterationReport],
    history: Sequence[Mapping[str, object]],
    settings_summary: Mapping[str, object],
    now_iso: str,
    restore: Sequence[str] = (),
    spend: Sequence[str] = (),
) -> str:
    """The Markdown of `escalation.md` for this open.

    `reports`: the last iterations (the newest last; only the last 10 are shown). `history`: the earlier
    `history.jsonl` lines as they were read (each taken as its owner reads it, `history_jsonl.transition`; a
    damaged line gives empty fields). `settings_summary`: the
    thresholds worth showing; its `workspace` entry (if any) is used in the commands. `restore`: the lines
    that name the workspace snapshot to restore and the commands (from the snapshot keeper). `spend`: the
    tokens and dollars against the budgets (`spend.spend_lines`).
    """
    recent = list(reports)[-EVIDENCE_ROWS:]
    residual = classify_residual(decision, recent)
    workspace = str(settings_summary.get("workspace", "DIR")) or "DIR"
    if decision.final:
        headline = "stopped the loop for good"
    elif decision.trigger == "manual":
        headline = "was paused by hand"
    else:
        headline = "opened"
    out: list[str] = [
        f"# ralph-supervise: the circuit breaker {headline}",
        "",
        f"- **When:** {now_iso}",
        f"- **Trigger:** `{decision.trigger}`",
        f"- **Why:** {one_line(decision.reason, 400)}",
        f"- **State:** {decision.state.value} at iteration {decision.iteration}, open {decision.total_opens}"
        + (" (final)" if decision.final else ""),
        "",
        f"## Verdict: {residual.kind}",
        "",
    ]
    if residual.kind == "blocked":
        out.append(
            "**Blocked: this needs a human.** Retrying cannot clear it; the loop would only burn tokens. Because:"
        )
    else:
        out.append(
            "**Actionable: code errors or a stuck approach that another attempt may fix.** Nothing in the "
            "evidence says a person must act first."
            + (" The errors:" if residual.because else "")
        )
    if residual.because:
        out.append("")
        out += [f"- {md_code(item) if residual.kind == 'actionable' else one_line(item, 300)}" for item in residual.because]
    has_errors = any(r.error_signatures for r in recent)
    out += ["", "## What a human must decide", ""] + decide_next(residual, decision, has_errors)
    out += ["", "## How to continue", ""] + how_to_continue(decision, workspace,
                                                             str(settings_summary.get("on_open") or "pause"))
    if restore:
        out += ["", "## The workspace's files", ""] + list(restore)
    out += ["", f"## Evidence: the last {len(recent)} iteration(s)", ""] + _evidence_table(recent)
    patterns = error_patterns(recent)
    out += ["", "## Error patterns", ""]
    if patterns:
        for sig, count, sample in patterns[:PATTERN_ROWS]:
            extra = f" (e.g. {md_code(sample)})" if sample and sample != sig else ""
            out.append(f"- ({count}×) {md_code(sig)}{extra}")
        if len(patterns) > PATTERN_ROWS:
            out.append(f"- … {len(patterns) - PATTERN_ROWS} more pattern(s)")
    else:
        out.append("No error lines in these iterations.")
    replies = [r for r in recent if r.reply]
    if replies:
        out += ["", "## The agent's last replies", ""]
        for r in replies[-3:]:
            out.append(f"- iteration {r.number}: {one_line(r.reply or '', 240)}")
    if spend:
        out += ["", "## Spend", ""] + list(spend)
    out += ["", "## What was tried", ""] + _tried(history)
    if settings_summary:
        out += ["", "## Settings", "", "| setting | value |", "|---|---|"]
        for key, value in settings_summary.items():
            out.append(f"| {md_cell(key)} | {md_cell(value)} |")
    return "\n".join(out) + "\n"


__all__ = ["Residual", "classify_residual", "decide_next", "error_patterns", "how_to_continue", "outcome",
           "render_escalation", "status_line"]

"""The report as Markdown: readable in a terminal as it is, and on GitHub as a page.

    print(render_markdown(account))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ralph_supervisor.format import dollars_share, duration, md_cell, share, sparkline, utc_time
from ralph_supervisor.outcomes import BLOCKED, CUT_SHORT, FAILED, LIMITED, OUTAGE, outcome_of
from ralph_supervisor.report import verified
from ralph_supervisor.report.account import Account
from ralph_supervisor.report.rows import IterationRow
from ralph_supervisor.text import one_line

TIMELINE_ROWS = 30
"""The last iterations shown as table rows (the sparkline covers all of them)."""
SPARK_WIDTH = 72
MARK_ROWS = 30
ERROR_ROWS = 10
BLOCKER_ROWS = 8
COMMIT_ROWS = 15

MARK_SYMBOL = {"open": "⏸", "final": "■", "pause": "⏸", "trial": "▶", "close": "✔", "reset": "↺",
               "limit_wait": "⌛", "restart": "↻", "run_start": "↻", "exit": "⏹"}


def _note(row: IterationRow) -> str:
    notes = []
    if row.trial:
        notes.append("trial")
    if row.tripped:
        notes.append(f"opened the breaker ({row.tripped})")
    if row.returned_to is not None:
        notes.append(f"back to the state after iteration {row.returned_to}")
    if row.first_error:
        notes.append(row.first_error)
    elif row.action:
        notes.append(row.action)
    return "; ".join(notes)


def _tokens(row: IterationRow) -> str:
    return "?" if row.tokens is None else f"{row.tokens:,}"


def timeline_table(rows: Sequence[IterationRow]) -> list[str]:
    out = ["| # | started | took | files | commits | errors | tokens | outcome | note |",
           "|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r.number} | {utc_time(r.started_at, '%H:%M:%S')} | {duration(r.duration_s, 'tenths')} | {r.files_changed} "
                   f"| {r.commits} | {r.errors} | {_tokens(r)} | {md_cell(r.said, 30)} | {md_cell(_note(r))} |")
    return out


def why(a: Account) -> str:
    """The reason under the verdict ("" when there is none worth saying): the report's and the run's end."""
    v = a.verdict
    return one_line(v.reason, 400) if v.reason and v.status not in ("running", "finished") else ""


def iterations_line(a: Account) -> str:
    """`6 iterations, 2 with progress, 1 failed (cap 10)`."""
    s = a.spend
    counts = [f"{s.iterations} iteration{'s' if s.iterations != 1 else ''}"]
    outcomes = [outcome_of(progress=r.progress, failed=r.failed, usage_limited=r.usage_limited, blocked=r.blocked,
                           cut_short=r.cut_short, outage=r.outage) for r in a.iterations]  # each call once, by its worst
    for label, n in (("with progress", sum(1 for r in a.iterations if r.progress)),
                     ("failed", outcomes.count(FAILED)),
                     ("hit a usage limit", outcomes.count(LIMITED)),
                     ("met an API outage", outcomes.count(OUTAGE)),
                     ("blocked", outcomes.count(BLOCKED)),
                     ("cut short", outcomes.count(CUT_SHORT)),
                     ("trial", sum(1 for r in a.iterations if r.trial))):
        if n:
            counts.append(f"{n} {label}" + ("s" if label == "trial" and n > 1 else ""))
    iterations = ", ".join(counts)
    if s.max_iterations:
        iterations += f" (cap {s.max_iterations})"
    return iterations


def box_of(a: Account) -> str:
    """The box the last run was in (`--sandbox bwrap`) and the writes it refused, as the output shows them;
    "" for a run in no box."""
    if not a.runs or a.runs[-1].budgets.sandbox != "bwrap":
        return ""
    from ralph_supervisor.sandbox import refused_in_log

    refused = refused_in_log(Path(a.state_dir)) if a.state_dir else None
    said = "" if refused is None else f", {refused} write(s) refused (`Read-only file system` in the output)"
    return f"bubblewrap (`--sandbox bwrap`){said}"


def worktree_of(state_dir: str) -> dict[str, Any] | None:
    """The run's worktree (`--worktree`), from the state folder's worktree.json; None without one."""
    from ralph_supervisor.worktree import read

    return read(Path(state_dir)) if state_dir else None


def render_markdown(a: Account) -> str:
    """The whole report: the verdict first, then the timeline and the evidence, then what to decide."""
    v = a.verdict
    out = [f"# ralph-supervise report: {a.name}", "", f"**{v.line}**"]
    if why(a):
        out += ["", f"Why: {why(a)}"]
    if a.waits:
        out += [""] + [f"- {line}" for line in a.waits]
    first = a.runs[0].started_at if a.runs else None
    last = a.runs[-1].ended_at if a.runs else None
    span = f"{utc_time(first)} → {utc_time(last) if last else 'now'}"
    s = a.spend
    iterations = iterations_line(a)
    out += [
        "",
        "| | |",
        "|---|---|",
        f"| workspace | `{a.workspace}` |",
        *([f"| worktree | branch `{w['branch']}` of `{w['checkout']}`, kept for review (nothing is merged) |"]
          if (w := worktree_of(a.state_dir)) else []),
        *([f"| box | {box_of(a)} |"] if box_of(a) else []),
        f"| runs | {len(a.runs)}: {span} |",
        f"| wall time | {duration(a.wall_s)} |",
        f"| iterations | {iterations} |",
        f"| tokens | {share(s.tokens, s.token_budget)} |",
        f"| dollars | {dollars_share(s.cost_usd, s.cost_budget)} |",
    ]
    if a.runs and a.runs[-1].exit_code is not None:
        out.append(f"| supervisor exit code | {a.runs[-1].exit_code} |")
    if a.report_html:
        out.append(f"| HTML report | `{a.report_html}` |")
    if a.escalation:
        out.append(f"| escalation | `{a.escalation}` |")

    out += ["", "## Timeline", ""]
    if not a.iterations:
        out.append("No iteration finished.")
    else:
        changes = [float(r.files_changed + r.commits) for r in a.iterations]
        errors = [float(r.errors or (1 if r.failed else 0)) for r in a.iterations]
        out += ["```", f"changes {sparkline(changes, SPARK_WIDTH)}", f"errors  {sparkline(errors, SPARK_WIDTH)}",
                f"        iterations {a.iterations[0].number} to {a.iterations[-1].number}", "```", ""]
        if a.marks:
            out.append("On the timeline:")
            out.append("")
            for m in a.marks[-MARK_ROWS:]:
                where = f"iteration {m.iteration}" if m.iteration is not None else f"after {max(0, int(m.x + 0.5))} iterations"
                out.append(f"- {MARK_SYMBOL.get(m.kind, '•')} {utc_time(m.at, '%H:%M:%S')} ({where}): {one_line(m.text, 240)}")
            if len(a.marks) > MARK_ROWS:
                out.append(f"- … {len(a.marks) - MARK_ROWS} earlier mark(s)")
            out.append("")
        shown = a.iterations[-TIMELINE_ROWS:]
        if len(a.iterations) > len(shown):
            out += [f"The last {len(shown)} of {len(a.iterations)} iterations (`--json` has them all):", ""]
        out += timeline_table(shown)

    out += verified.markdown(verified.read_points(Path(a.state_dir))) if a.state_dir else []
    out += ["", "## Commits and diffstat since the run began", ""]
    g = a.git
    if g.note:
        out.append(f"Not available: {g.note}.")
    else:
        out.append(f"{g.total_commits} commit(s) since {('`' + g.base + '`') if g.base else 'the first commit'}"
                   + (f": {g.diffstat}." if g.diffstat else ", no change in the tree."))
        for sha, subject in g.commits[:COMMIT_ROWS]:
            out.append(f"- `{sha}` {one_line(subject, 120)}")
        if g.total_commits > COMMIT_ROWS:
            out.append(f"- … {g.total_commits - COMMIT_ROWS} more")
        if g.files:
            out += ["", "```", *g.files[:COMMIT_ROWS * 2], "```"]
        if g.uncommitted:
            out += ["", f"Not committed yet: {g.uncommitted}."]

    out += ["", "## Recurring errors", ""]
    if not a.errors:
        out.append("No error lines.")
    else:
        out += ["| count | first | last | signature |", "|---:|---:|---:|---|"]
        for e in a.errors[:ERROR_ROWS]:
            out.append(f"| {e.count} | {e.first} | {e.last} | {md_cell(e.signature, 160)} |")
        if len(a.errors) > ERROR_ROWS:
            out.append(f"\n… and {len(a.errors) - ERROR_ROWS} more signature(s).")

    out += ["", "## Blockers the agent stated", ""]
    if not a.blockers:
        out.append("None.")
    for b in a.blockers[:BLOCKER_ROWS]:
        where = f"iteration {b.first}" if b.count == 1 else f"{b.count}×, iterations {b.first} to {b.last}"
        out.append(f"- ({where}) {one_line(b.text, 240)}")

    out += ["", "## The agent's last reply", ""]
    if a.last_reply is None:
        out.append("No reply recorded.")
    else:
        out.append(f"Iteration {a.last_reply.iteration}:")
        out += ["", *[f"> {line}" if line else ">" for line in (a.last_reply.text or "(no text)").splitlines()[:12]]]
        if a.last_reply.status:
            out += ["", "```", "---RALPH_STATUS---", *[f"{k}: {v}" for k, v in a.last_reply.status.items()],
                    "---END_RALPH_STATUS---", "```"]

    h = a.hygiene
    out += ["", "## Process hygiene", "",
            f"- Orphans swept at start: {h.orphans_swept}.",
            f"- Tree stops: {h.tree_stops}; survivors: {'zero' if not h.survivors else h.survivors}"
            + (f" (pids {', '.join(map(str, h.survivor_pids))})" if h.survivor_pids else "") + "."]

    out += ["", "## What a human should decide next", ""]
    if a.residual is not None:
        out += [f"Verdict on what is left: **{a.residual.kind}**"
                + (" (only a person can clear it)." if a.residual.kind == "blocked" else
                   " (another attempt may fix it)."), ""]
        if a.residual.because:
            out += [f"- {one_line(item, 300)}" for item in a.residual.because[:5]] + [""]
    out += list(a.decide)
    if a.next_steps:
        out += ["", *a.next_steps]
    if a.warnings:
        out += ["", "## Warnings", "", *[f"- {one_line(w, 300)}" for w in a.warnings]]
    return "\n".join(out).rstrip() + "\n"

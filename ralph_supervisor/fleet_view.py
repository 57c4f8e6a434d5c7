"""`ralph-supervise watch --all`: every registered loop in one live view, one line each.

The same rows as `ls` (the registry, and each loop's state.json), refreshed every second through the
same terminal outlet as `watch` (a terminal that stops reading only skips frames). It reads files
only: watching a hundred loops costs their supervisors nothing.

    fleet_view.main(once=True)      # print one frame
"""

from __future__ import annotations


from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ralph_supervisor import fleet
from ralph_supervisor.format import time_of_day
from ralph_supervisor.outcomes import STATE_STYLE
from ralph_supervisor.watch import show


def render(rows: list[fleet.LoopRow], problems: list[str], now: float) -> RenderableType:
    """One table row per loop, the breaker state in its colour; ended and stale entries dimmed; problems below."""
    counts = {state: sum(1 for r in rows if r.alive and r.state == state) for state in fleet.STATES}
    ended = sum(1 for r in rows if not r.alive and r.ended)
    stale = sum(1 for r in rows if not r.alive and not r.ended)
    title = f"ralph-supervise · {len(rows)} loop{'s' if len(rows) != 1 else ''}"
    summary = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
    for n, label in ((ended, "ended"), (stale, "stale")):
        if n:
            summary += (", " if summary else "") + f"{n} {label}"
    table = Table(title=f"{title}" + (f" ({summary})" if summary else ""), title_justify="left",
                  box=box.SIMPLE_HEAD, expand=True)
    for column in ("name", "state", "trigger", "iter", "spend", "pid", "since", "changed", "alive", "workspace"):
        table.add_column(column, justify="right" if column in ("iter", "pid") else "left",
                         no_wrap=column != "workspace", overflow="fold" if column == "workspace" else "ellipsis",
                         ratio=1 if column == "workspace" else None)
    for row in rows:
        name, state, trigger, iteration, spend, pid, since, alive, workspace, note = fleet.cells(row, now)
        style = STATE_STYLE.get(row.state, "magenta") if row.alive else "dim"
        where = Text(workspace)
        if note:
            where.append(f"  {note}", style="yellow" if row.alive else "dim")
        table.add_row(name, Text(state, style=style), trigger, iteration, spend, pid, since,
                      fleet.age(row.updated_at, now),
                      Text(alive, style="green" if row.alive else "bold" if row.ended else "bold red"),
                      where, style="dim" if not row.alive else None)
    if not rows:
        table.add_row("", Text("no supervisor is registered", style="dim"), *([""] * 8))
    footer = Text(f"updated {time_of_day(now, '%H:%M:%S')}   `ralph-supervise ls --prune` "
                  "removes ended and stale entries", style="dim")
    for problem in problems:
        footer.append(f"\n! {problem}", style="yellow")
    return Group(table, footer)


def frame(now: float) -> RenderableType:
    rows, problems, _ = fleet.collect()
    return render(rows, problems, now)


def main(*, once: bool = False, interval: float = 1.0) -> int:
    """Show every loop until Ctrl-C (or one frame with `once`). Always 0: watching cannot fail."""
    return show(frame, once=once, interval=interval, width=160)

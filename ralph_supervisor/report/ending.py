"""The last lines `run` prints: what happened, in the report's own first words, and the one command that continues.

A person who comes back to a finished terminal reads the end first. So `run` ends with the report's verdict
(`account.verdict.line`, the same line as the report's and the notices'), its reason, the iterations and the
spend as the report counts them, where the report and the escalation are, and the command to go on with.

    lines = end_lines(collect(state_dir, git=False), run_args=["-w", "proj", "--", "./loop.sh"], breaker_open=True)
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ralph_supervisor.breaker import State
from ralph_supervisor.format import dollars_share, share
from ralph_supervisor.report import collect
from ralph_supervisor.report.account import Account
from ralph_supervisor.report.markdown import iterations_line, why
from ralph_supervisor.report.sources import read_records
from ralph_supervisor.state_folder import is_default

LABEL = 12
"""The labels' column: `  Why:        ...`."""


def _where(account: Account) -> list[str]:
    """`-w DIR` (and `--state-dir DIR` when it is not the default), as `reset` needs them."""
    flags = ["-w", account.workspace]
    if account.state_dir and not is_default(Path(account.workspace), Path(account.state_dir)):
        flags += ["--state-dir", account.state_dir]
    return flags


def continue_command(account: Account, run_args: Sequence[str], *, breaker_open: bool) -> str:
    """The one command that continues: the run again, after `reset` when the breaker is not CLOSED
    (an open for good, a cap, an open left by a stop or a signal)."""
    args = list(run_args)
    if args[:1] == ["run"]:
        args = args[1:]
    again = shlex.join(["ralph-supervise", "run", *args])
    if breaker_open or account.verdict.by in ("breaker", "refused"):
        return f"{shlex.join(['ralph-supervise', 'reset', *_where(account)])} && {again}"
    return again


def end_lines(account: Account, *, run_args: Sequence[str], breaker_open: bool) -> list[str]:
    """The lines, without colour: the verdict first, then the facts, each under its label."""
    s = account.spend
    rows = [("Why", why(account)),
            ("Iterations", iterations_line(account)),
            ("Spend", f"tokens {share(s.tokens, s.token_budget)}; dollars {dollars_share(s.cost_usd, s.cost_budget)}"),
            ("Report", account.report_html),
            ("Escalation", account.escalation or "" if account.residual is not None else ""),
            ("Continue", continue_command(account, run_args, breaker_open=breaker_open))]
    code = account.runs[-1].exit_code if account.runs else None
    head = f"ralph-supervise: {account.verdict.line}" + (f" Exit code {code}." if code is not None else "")
    return [head] + [f"  {label + ':':<{LABEL}}{text}" for label, text in rows if text]


def say_the_end(state_dir: Path, run_args: Sequence[str], stream: TextIO, *, colors: bool = False) -> None:
    """Read the state folder as the report does (the supervisor has stopped: nothing runs any more) and write
    the end lines to `stream`. The end is a courtesy: a folder it cannot read costs one line, never the exit."""
    try:
        records = dataclasses.replace(read_records(state_dir), running_pid=None)  # ours: we are leaving
        account = collect(state_dir, git=False, records=records)
        breaker_open = records.state is not None and records.state.snapshot.state is not State.CLOSED
        lines = end_lines(account, run_args=run_args, breaker_open=breaker_open)
    except Exception as exc:  # noqa: BLE001 - the run is over whatever the account says
        lines = [f"ralph-supervise: the run's summary cannot be read ({type(exc).__name__}: {exc}); "
                 f"`ralph-supervise report -w ...` tells what happened"]
    if colors:
        lines[0] = f"\x1b[1m{lines[0]}\x1b[0m"
    try:
        stream.write("\n".join(lines) + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass

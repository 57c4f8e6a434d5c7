"""`ralph-supervise check`: loop-context's `--check` as a command, the imperative shell around ledger.py.

No structlog here: stdout carries the decision (scripts parse it), so nothing else may be printed there.
A loop runs `check` before every iteration, so its start-up is most of its cost: it imports nothing of the
supervisor (ralph_supervisor.entry sends `check` here before the command line module loads), and what only
the daily budget needs is imported there.

Reads the ledger (file or stdin), the daily-spend state file and the clock; runs the `--on-exceed` hook;
prints the decision. Exit 0 continue, 2 escalate, 1 error (one line on stderr naming the flag, file or field).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from ralph_supervisor.ledger import (
    MAX_SAFE_INTEGER,
    BreakerConfig,
    Verdict,
    DailyState,
    LedgerError,
    PruneConfig,
    apply_daily_budget,
    build_injection,
    check_breaker,
    check_level,
    daily_cap_for,
    daily_state_from_json,
    human_line,
    parse_ledger,
    pattern_table,
    record_daily_spend,
    to_json,
    token_budget_for,
)
from ralph_supervisor.signature import js_trim

if TYPE_CHECKING:
    from pathlib import Path  # the daily state's paths; imported where they are made (not on every check)

PROG = "ralph-supervise check"
EXIT_CONTINUE, EXIT_ERROR, EXIT_ESCALATE = 0, 1, 2

# ── flag values, read the way JavaScript's Number() reads them ─────

_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)", re.ASCII)
_RADIX = re.compile(r"0([xXoObB])([0-9a-zA-Z]+)", re.ASCII)


def js_number(raw: str) -> float:
    """JavaScript's Number(string): so `--max-iterations 1e3` or ` 5 ` mean what they mean to loop-context."""
    s = js_trim(raw)
    if s == "":
        return 0.0
    if _DECIMAL.fullmatch(s):
        return float(s)
    if s in ("Infinity", "+Infinity"):
        return math.inf
    if s == "-Infinity":
        return -math.inf
    m = _RADIX.fullmatch(s)
    if m:
        base = {"x": 16, "o": 8, "b": 2}[m.group(1).lower()]
        try:
            return float(int(m.group(2), base))
        except ValueError:
            return math.nan
        except OverflowError:  # too big for a double: JavaScript says Infinity
            return math.inf
    return math.nan


def positive_int(flag: str, raw: str) -> int:
    if raw == "":
        raise LedgerError(f"{flag} requires a positive integer value.")
    n = js_number(raw)
    if not math.isfinite(n) or n != int(n) or n < 1:
        raise LedgerError(f'{flag} must be a positive integer; got "{raw}".')
    if n > MAX_SAFE_INTEGER:
        raise LedgerError(f'{flag} must be at most {MAX_SAFE_INTEGER}; got "{raw}".')
    return int(n)


def threshold(flag: str, raw: str) -> float:
    """A similarity threshold in (0, 1]: loop-context takes 95 and silently disables its similarity rules."""
    if raw == "":
        raise LedgerError(f"{flag} requires a number greater than 0 and at most 1.")
    n = js_number(raw)
    if math.isnan(n) or n <= 0 or n > 1:
        raise LedgerError(f'{flag} must be a number greater than 0 and at most 1; got "{raw}".')
    return n


# ── arguments ──────────────────────────────────────────────────────


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise LedgerError(message)


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, told its width: argparse builds a formatter for every flag it is given, and
    without a width each asks `shutil` (whose import pulls in bz2 and lzma) for the terminal's size."""

    def __init__(self, prog: str) -> None:
        try:
            columns = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError, AttributeError):
            columns = 80
        super().__init__(prog, width=max(columns, 40) - 2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Decide like loop-context 1.5.0 --check whether a ledger's loop may continue. "
        "Exit 0 continue, 2 escalate, 1 error.",
        allow_abbrev=False,
        formatter_class=_Formatter,
    )
    p.add_argument("--ledger", "-f", metavar="FILE", help="ledger JSON file (default: stdin when it is not a terminal)")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.add_argument("--inject", action="store_true", help="print the Markdown context block for the next prompt")
    p.add_argument("--check", action="store_true", help="accepted and ignored (loop-context's operation flag)")
    p.add_argument("--list", action="store_true", help="list the pattern ids and their budgets")
    p.add_argument("--max-iterations", metavar="N", help="iteration cap (default 10)")
    p.add_argument("--stagnation", metavar="N", help="same-error repeat limit (default 3)")
    p.add_argument("--no-progress", metavar="N", help="consecutive-failure limit (default 5)")
    p.add_argument("--token-budget", metavar="N", help="total token cap (default none)")
    p.add_argument("--similarity-threshold", metavar="F", help="similarity in (0, 1] (default 0.85)")
    p.add_argument("--window", metavar="N", help="attempts kept by --inject (default 5)")
    p.add_argument("--max-trace-lines", metavar="N", help="error lines kept by --inject (default 8)")
    p.add_argument("--budget-from-pattern", metavar="ID", help="token cap from loop-cost's estimate for ID")
    p.add_argument("--budget-level", metavar="L", default="L1", help="L1|L2|L3 for the pattern (default L1)")
    p.add_argument("--daily-budget-from-pattern", metavar="ID", help="daily cap from loop-cost's suggestion for ID")
    p.add_argument("--daily-token-budget", metavar="N", help="daily token cap (wins over the pattern's)")
    p.add_argument("--daily-state-dir", metavar="DIR", default=".loop-context", help="default .loop-context")
    p.add_argument("--on-exceed", metavar="CMD", help="on escalation, run CMD (shell) with the decision JSON on stdin")
    return p


@dataclass(frozen=True)
class Options:
    ledger: str | None
    json: bool
    inject: bool
    list: bool
    breaker: BreakerConfig
    prune: PruneConfig
    daily_key: str | None
    daily_pattern: str | None
    daily_cap: int | None
    daily_state_dir: str
    on_exceed: str | None


def parse_options(argv: list[str]) -> Options:
    a = _parser().parse_args(argv)
    ints = {}
    for flag in ("max_iterations", "stagnation", "no_progress", "token_budget", "window", "max_trace_lines",
                 "daily_token_budget"):
        raw = getattr(a, flag)
        if raw is not None:
            ints[flag] = positive_int("--" + flag.replace("_", "-"), raw)
    sim = threshold("--similarity-threshold", a.similarity_threshold) if a.similarity_threshold is not None else 0.85
    if a.list:
        return Options(None, False, False, True, BreakerConfig(), PruneConfig(), None, None, None, "", None)
    check_level(a.budget_level)
    token_budget = ints.get("token_budget")
    if a.budget_from_pattern is not None:
        budget = token_budget_for(a.budget_from_pattern, a.budget_level)
        token_budget = budget if token_budget is None else token_budget
    daily_cap = ints.get("daily_token_budget")
    if a.daily_budget_from_pattern is not None:
        cap = daily_cap_for(a.daily_budget_from_pattern)
        daily_cap = cap if daily_cap is None else daily_cap
    breaker = BreakerConfig(
        max_iterations=ints.get("max_iterations", 10),
        stagnation=ints.get("stagnation", 3),
        no_progress=ints.get("no_progress", 5),
        similarity_threshold=sim,
        token_budget=token_budget,
    )
    prune = PruneConfig(max_trace_lines=ints.get("max_trace_lines", 8), window=ints.get("window", 5),
                        similarity_threshold=sim)
    pattern = a.daily_budget_from_pattern
    key = pattern if pattern is not None else ("default" if daily_cap is not None else None)
    return Options(a.ledger, a.json, a.inject, False, breaker, prune, key, pattern, daily_cap,
                   a.daily_state_dir, a.on_exceed)


# ── the edges: ledger text, state file, hook, output ───────────────


def read_ledger_text(path: str | None) -> tuple[str, str]:
    """The ledger's text and a name for it in messages."""
    if path is not None:
        try:
            with open(path, "rb") as ledger_file:
                data = ledger_file.read()
        except OSError as exc:
            raise LedgerError(f"ledger {path}: cannot read: {exc.strerror or exc}") from None
        source = path
    else:
        if sys.stdin is None or sys.stdin.isatty():
            raise LedgerError("No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.")
        data = sys.stdin.buffer.read()
        source = "<stdin>"
    try:
        return data.decode("utf-8"), source
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{source}: not UTF-8 text (byte {exc.start})") from None


def _warn(message: str) -> None:
    sys.stderr.write(f"{PROG}: warning: {message}\n")
    sys.stderr.flush()


def load_daily_state(path: Path) -> DailyState | None:
    """The state file, or None when there is none. A corrupt file is set aside (kept) and reported."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(f"daily state {path}: cannot read: {exc.strerror or exc}") from None
    try:
        return daily_state_from_json(json.loads(data.decode("utf-8")))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, a huge number, a wrong shape (LedgerError)
        from ralph_supervisor.store import move_aside  # only here: store's imports would slow every check

        aside = move_aside(path)
        kept = f"moved to {aside}" if aside is not None else "left in place"
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _warn(f"daily state {path} is unreadable ({why}); {kept}; today's spend counted from 0 again")
        return None


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so a reader never sees half a file."""
    from ralph_supervisor.store import atomic_write_text

    atomic_write_text(path, text)


def spend_today(state_dir: str, key: str, ledger: Any, today: str) -> int:
    """Count the ledger's not-yet-counted attempts into the day's total; returns the total.

    Read-modify-write happens under an exclusive lock on the state folder, so concurrent checks add up.
    """
    import fcntl
    from pathlib import Path

    folder = Path(state_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise LedgerError(f"daily state dir {folder}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        path = folder / f"daily-spend.{key}.json"
        state, added = record_daily_spend(load_daily_state(path), ledger, today)
        try:
            write_atomically(path, json.dumps(state.as_dict(), indent=2))
        except OSError as exc:
            raise LedgerError(f"daily state {path}: cannot write: {exc.strerror or exc}") from None
        return state.tokens_used_today
    finally:
        os.close(dir_fd)


def run_on_exceed(command: str, decision: Verdict) -> None:
    """Pipe the decision as one compact JSON line to CMD's stdin; its exit code is not ours."""
    import subprocess

    payload = to_json(decision.as_dict(), indent=None).encode("utf-8")
    sys.stdout.flush()
    try:
        subprocess.run(command, shell=True, input=payload, check=False)
    except OSError as exc:
        sys.stderr.write(f"{PROG}: --on-exceed hook failed to start: {exc}\n")


def _out(text: str) -> None:
    sys.stdout.flush()
    try:
        sys.stdout.buffer.write(text.encode("utf-8") + b"\n")
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        pass


def main(argv: list[str]) -> int:
    """The whole `ralph-supervise check ...` command; argv excludes the word `check`."""
    try:
        try:
            opts = parse_options(argv)
        except SystemExit as done:  # --help: argparse printed it and wants to exit
            return int(done.code or 0)
        if opts.list:
            _out(pattern_table())
            return EXIT_CONTINUE
        text, source = read_ledger_text(opts.ledger)
        gc.disable()  # a big ledger is 100,000s of acyclic objects: collecting while building them is wasted work
        try:
            ledger = parse_ledger(text, source)
        finally:
            gc.enable()
        if opts.inject:
            _out(build_injection(ledger, opts.breaker, opts.prune))
            return EXIT_CONTINUE
        decision = check_breaker(ledger, opts.breaker)
        if opts.daily_key is not None and opts.daily_cap is not None:
            from datetime import datetime, timezone

            today = datetime.now(timezone.utc).date().isoformat()
            spent = spend_today(opts.daily_state_dir, opts.daily_key, ledger, today)
            decision = apply_daily_budget(decision, spent, opts.daily_cap, opts.daily_pattern)
    except LedgerError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return EXIT_ERROR
    if decision.escalate and opts.on_exceed:
        run_on_exceed(opts.on_exceed, decision)
    _out(to_json(decision.as_dict()) if opts.json else human_line(decision))
    return EXIT_ESCALATE if decision.escalate else EXIT_CONTINUE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

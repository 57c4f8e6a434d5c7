"""`ralph-supervise check`: loop-context's `--check` as a command, the imperative shell around ledger.py.

No structlog here: stdout carries the decision (scripts parse it), so nothing else may be printed there.
A loop runs `check` before every iteration, so its start-up is most of its cost: it imports nothing of the
supervisor (ralph_supervisor.entry sends `check` here before the command line module loads), and of the
standard library only what the decision needs. The flags are read by hand in the common forms (`--flag
value`); argparse reads every other form, prints `--help` and words the errors. What only `--inject`, the
daily budget or the hook need is imported there.

Reads the ledger (file or stdin), the daily-spend state file and the clock; runs the `--on-exceed` hook;
prints the decision. Exit 0 continue, 2 escalate, 1 error (one line on stderr naming the flag, file or field).
"""

from __future__ import annotations

import gc
import os
import sys

from ralph_supervisor.ledger import (
    BIG_LEDGER_CHARS,
    MAX_SAFE_INTEGER,
    BreakerConfig,
    LedgerError,
    Record,
    Verdict,
    check_breaker,
    check_level,
    daily_cap_for,
    human_line,
    load_big_reader,
    parse_ledger,
    pattern_table,
    to_json,
    token_budget_for,
)
from ralph_supervisor.signature import js_trim

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and argparse cost a check's start-up more than its decision
    import argparse
    from pathlib import Path
    from typing import Any, BinaryIO, NoReturn

    from ralph_supervisor.ledger import Ledger
    from ralph_supervisor.ledger_daily import DailyState

PROG = "ralph-supervise check"
EXIT_CONTINUE, EXIT_ERROR, EXIT_ESCALATE = 0, 1, 2

# ── flag values, read the way JavaScript's Number() reads them ─────

_number_patterns: tuple[Any, Any] | None = None


def _patterns() -> tuple[Any, Any]:
    """A decimal and a 0x/0o/0b number, compiled the first time a flag is not plain digits."""
    global _number_patterns
    if _number_patterns is None:
        import re

        _number_patterns = (
            re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)", re.ASCII),
            re.compile(r"0([xXoObB])([0-9a-zA-Z]+)", re.ASCII),
        )
    return _number_patterns


def js_number(raw: str) -> float:
    """JavaScript's Number(string): so `--max-iterations 1e3` or ` 5 ` mean what they mean to loop-context."""
    import math  # here, as in the two below: a check given no flag needs none

    s = js_trim(raw)
    if s == "":
        return 0.0
    if s.isascii() and s.isdigit():
        return float(s)
    decimal, radix = _patterns()
    if decimal.fullmatch(s):
        return float(s)
    if s in ("Infinity", "+Infinity"):
        return math.inf
    if s == "-Infinity":
        return -math.inf
    m = radix.fullmatch(s)
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
    import math

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
    import math

    if raw == "":
        raise LedgerError(f"{flag} requires a number greater than 0 and at most 1.")
    n = js_number(raw)
    if math.isnan(n) or n <= 0 or n > 1:
        raise LedgerError(f'{flag} must be a number greater than 0 and at most 1; got "{raw}".')
    return n


# ── arguments ──────────────────────────────────────────────────────

FLAGS: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("--ledger", "-f"), "FILE", "ledger JSON file (default: stdin when it is not a terminal)"),
    (("--json",), None, "print the decision as JSON"),
    (("--inject",), None, "print the Markdown context block for the next prompt"),
    (("--check",), None, "accepted and ignored (loop-context's operation flag)"),
    (("--list",), None, "list the pattern ids and their budgets"),
    (("--max-iterations",), "N", "iteration cap (default 10)"),
    (("--stagnation",), "N", "same-error repeat limit (default 3)"),
    (("--no-progress",), "N", "consecutive-failure limit (default 5)"),
    (("--token-budget",), "N", "total token cap (default none)"),
    (("--similarity-threshold",), "F", "similarity in (0, 1] (default 0.85)"),
    (("--window",), "N", "attempts kept by --inject (default 5)"),
    (("--max-trace-lines",), "N", "error lines kept by --inject (default 8)"),
    (("--budget-from-pattern",), "ID", "token cap from loop-cost's estimate for ID"),
    (("--budget-level",), "L", "L1|L2|L3 for the pattern (default L1)"),
    (("--daily-budget-from-pattern",), "ID", "daily cap from loop-cost's suggestion for ID"),
    (("--daily-token-budget",), "N", "daily token cap (wins over the pattern's)"),
    (("--daily-state-dir",), "DIR", "default .loop-context"),
    (("--on-exceed",), "CMD", "on escalation, run CMD (shell) with the decision JSON on stdin"),
)
"""check's flags: names, the value's name (None for a switch) and the help text."""

DEFAULTS = {"budget_level": "L1", "daily_state_dir": ".loop-context"}


def _dest(names: tuple[str, ...]) -> str:
    return names[0][2:].replace("-", "_")


_SWITCHES = {name: _dest(names) for names, value, _ in FLAGS if value is None for name in names}
_VALUED = {name: _dest(names) for names, value, _ in FLAGS if value is not None for name in names}


def read_flags(argv: list[str]) -> dict[str, Any] | None:
    """check's flags in the forms a loop writes (`--flag value`, `-f FILE`, switches), read as argparse reads
    them; None for anything else (`--help`, `--flag=value`, a value that starts with `-`, a word of no flag),
    which argparse reads: `parse_flags`."""
    values: dict[str, Any] = {_dest(names): (False if value is None else DEFAULTS.get(_dest(names)))
                              for names, value, _ in FLAGS}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _SWITCHES:
            values[_SWITCHES[word]] = True
            i += 1
        elif word in _VALUED and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            values[_VALUED[word]] = argv[i + 1]
            i += 2
        else:
            return None
    return values


def parse_flags(argv: list[str]) -> dict[str, Any]:
    """check's flags by name (`max_iterations`, ...), as strings: the quick reading, or argparse's."""
    quick = read_flags(argv)
    return quick if quick is not None else vars(_parser().parse_args(argv))


def _parser() -> argparse.ArgumentParser:
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise LedgerError(message)

    class Formatter(argparse.HelpFormatter):
        """argparse's help layout, told its width: argparse builds a formatter for every flag it is given, and
        without a width each asks `shutil` (whose import pulls in bz2 and lzma) for the terminal's size."""

        def __init__(self, prog: str) -> None:
            try:
                columns = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
            except (ValueError, OSError, AttributeError):
                columns = 80
            super().__init__(prog, width=max(columns, 40) - 2)

    p = Parser(
        prog=PROG,
        description="Decide like loop-context 1.5.0 --check whether a ledger's loop may continue. "
        "Exit 0 continue, 2 escalate, 1 error.",
        allow_abbrev=False,
        formatter_class=Formatter,
    )
    for names, value, text in FLAGS:
        if value is None:
            p.add_argument(*names, action="store_true", help=text)
        else:
            p.add_argument(*names, metavar=value, default=DEFAULTS.get(_dest(names)), help=text)
    return p


class Options(Record):
    ledger: str | None
    json: bool
    inject: bool
    list: bool
    breaker: BreakerConfig
    window: int
    max_trace_lines: int
    daily_key: str | None
    daily_pattern: str | None
    daily_cap: int | None
    daily_state_dir: str
    on_exceed: str | None

    def __new__(cls, ledger: str | None = None, json: bool = False, inject: bool = False, list: bool = False,
                breaker: BreakerConfig = BreakerConfig(), window: int = 5, max_trace_lines: int = 8,
                daily_key: str | None = None, daily_pattern: str | None = None, daily_cap: int | None = None,
                daily_state_dir: str = ".loop-context", on_exceed: str | None = None) -> Options:
        return tuple.__new__(cls, (ledger, json, inject, list, breaker, window, max_trace_lines, daily_key,
                                   daily_pattern, daily_cap, daily_state_dir, on_exceed))


def parse_options(argv: list[str]) -> Options:
    a = parse_flags(argv)
    ints = {}
    for flag in ("max_iterations", "stagnation", "no_progress", "token_budget", "window", "max_trace_lines",
                 "daily_token_budget"):
        raw = a[flag]
        if raw is not None:
            ints[flag] = positive_int("--" + flag.replace("_", "-"), raw)
    sim = threshold("--similarity-threshold", a["similarity_threshold"]) if a["similarity_threshold"] is not None else 0.85
    if a["list"]:
        return Options(list=True, daily_state_dir="")
    check_level(a["budget_level"])
    token_budget = ints.get("token_budget")
    if a["budget_from_pattern"] is not None:
        budget = token_budget_for(a["budget_from_pattern"], a["budget_level"])
        token_budget = budget if token_budget is None else token_budget
    daily_cap = ints.get("daily_token_budget")
    if a["daily_budget_from_pattern"] is not None:
        cap = daily_cap_for(a["daily_budget_from_pattern"])
        daily_cap = cap if daily_cap is None else daily_cap
    breaker = BreakerConfig(
        max_iterations=ints.get("max_iterations", 10),
        stagnation=ints.get("stagnation", 3),
        no_progress=ints.get("no_progress", 5),
        similarity_threshold=sim,
        token_budget=token_budget,
    )
    pattern = a["daily_budget_from_pattern"]
    key = pattern if pattern is not None else ("default" if daily_cap is not None else None)
    return Options(a["ledger"], a["json"], a["inject"], False, breaker, ints.get("window", 5),
                   ints.get("max_trace_lines", 8), key, pattern, daily_cap, a["daily_state_dir"], a["on_exceed"])


# ── the edges: ledger text, state file, hook, output ───────────────


def read_ledger(path: str | None) -> tuple[bytes, str]:
    """The ledger's bytes and a name for it in messages."""
    if path is not None:
        try:
            with open(path, "rb") as ledger_file:
                if os.fstat(ledger_file.fileno()).st_size >= BIG_LEDGER_CHARS:
                    return read_while_loading(ledger_file), path
                return ledger_file.read(), path
        except OSError as exc:
            raise LedgerError(f"ledger {path}: cannot read: {exc.strerror or exc}") from None
    if sys.stdin is None or sys.stdin.isatty():
        raise LedgerError("No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.")
    return sys.stdin.buffer.read(), "<stdin>"


def read_while_loading(ledger_file: BinaryIO) -> bytes:
    """A big ledger's bytes, read on a second thread while this one loads its reader (msgspec).

    The two wait on different things: the read on the kernel's copying and page faults (about 9 ms for 17 MB,
    the interpreter's lock released), the import on the interpreter (about 15 ms). Doing them side by side takes
    the shorter off a big check's time. `_thread`, not `threading`: it is built in, so it costs no import."""
    import _thread

    outcome: list[bytes | BaseException] = []
    done = _thread.allocate_lock()
    done.acquire()

    def read() -> None:
        try:
            outcome.append(ledger_file.read())
        except BaseException as exc:  # handed to the caller below, which says what went wrong
            outcome.append(exc)
        finally:
            done.release()

    _thread.start_new_thread(read, ())
    try:
        load_big_reader()
    finally:
        done.acquire()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _warn(message: str) -> None:
    sys.stderr.write(f"{PROG}: warning: {message}\n")
    sys.stderr.flush()


def load_daily_state(path: Path) -> DailyState | None:
    """The state file, or None when there is none. A corrupt file is set aside (kept) and reported."""
    import json

    from ralph_supervisor.ledger_daily import daily_state_from_json

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


def spend_today(state_dir: str, key: str, ledger: Ledger, today: str) -> int:
    """Count the ledger's not-yet-counted attempts into the day's total; returns the total.

    Read-modify-write happens under an exclusive lock on the state folder, so concurrent checks add up.
    """
    import fcntl
    import json
    from pathlib import Path

    from ralph_supervisor.ledger_daily import record_daily_spend

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


def main(argv: list[str], *, exit_when_done: bool = False) -> int:
    """The whole `ralph-supervise check ...` command; argv excludes the word `check`.

    `exit_when_done` (the command itself, not a caller that goes on): end the process as soon as the answer is
    written. The interpreter's own exit would free the ledger an object at a time (100,000 attempts are half a
    million objects) and then every module, which costs a big check more than its decision."""
    code, ledger = _command(argv)  # kept until here: os._exit frees it at no cost
    if exit_when_done:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said on it
                pass
        os._exit(code)
    del ledger
    return code


def _command(argv: list[str]) -> tuple[int, Ledger | None]:
    """The exit code, and the ledger read (so that it lives as long as the caller wants)."""
    ledger = None
    try:
        try:
            opts = parse_options(argv)
        except SystemExit as done:  # --help: argparse printed it and wants to exit
            return int(done.code or 0), None
        if opts.list:
            _out(pattern_table())
            return EXIT_CONTINUE, None
        data, source = read_ledger(opts.ledger)
        gc.disable()  # a big ledger is 100,000s of acyclic objects: collecting while building them is wasted work
        try:
            ledger = parse_ledger(data, source)
        finally:
            gc.enable()
        if opts.inject:
            from ralph_supervisor.ledger_inject import PruneConfig, build_injection

            prune = PruneConfig(opts.max_trace_lines, opts.window, opts.breaker.similarity_threshold)
            _out(build_injection(ledger, opts.breaker, prune))
            return EXIT_CONTINUE, ledger
        decision = check_breaker(ledger, opts.breaker)
        if opts.daily_key is not None and opts.daily_cap is not None:
            from datetime import datetime, timezone

            from ralph_supervisor.ledger_daily import apply_daily_budget

            today = datetime.now(timezone.utc).date().isoformat()
            spent = spend_today(opts.daily_state_dir, opts.daily_key, ledger, today)
            decision = apply_daily_budget(decision, spent, opts.daily_cap, opts.daily_pattern)
    except LedgerError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return EXIT_ERROR, ledger
    if decision.escalate and opts.on_exceed:
        run_on_exceed(opts.on_exceed, decision)
    _out(to_json(decision.as_dict()) if opts.json else human_line(decision))
    return (EXIT_ESCALATE if decision.escalate else EXIT_CONTINUE), ledger


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], exit_when_done=True))

"""The events' schema has one owner (`ralph_supervisor/events.py`), and every name a reader looks for is one
somebody writes. Checked on the package's source: a reader waiting for a name nobody writes (the report's
`limit_wait_over`) fails no other test, it just never finds anything."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from ralph_supervisor import events
from ralph_supervisor.report import sources
from tests.helpers.supervise import REPO

PACKAGE = REPO / "ralph_supervisor"
LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
NOT_AN_EVENT = {
    ("notify.py", "child_exited"): "a notice kind (notify.Notice.kind), not an event",
    ("settings.py", "verify_timeout"): "an option's name",
    ("settings.py", "usage_ceiling"): "an option's name",
}
"""String constants that happen to equal an event's name but mean something else."""

SCHEMA = {name: value for name, value in vars(events).items()
          if name.isupper() and isinstance(value, str) and not name.startswith("STOP_")}
"""The event names events.py declares (its STOP_* constants are values of `tree_stopped`'s `reason`)."""


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_log_method(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr in LEVELS
    if isinstance(func, ast.IfExp):  # `(log.warning if bad else log.info)("name", ...)`
        return _is_log_method(func.body) and _is_log_method(func.orelse)
    return False


def _written(node: ast.Call) -> Iterator[ast.expr]:
    """The expressions a call passes as an event's name."""
    if _is_log_method(node.func) and node.args:
        yield node.args[0]
    for keyword in node.keywords:
        if keyword.arg == "event_name":
            yield keyword.value


def _value(expr: ast.expr) -> str | None:
    """A name given as a literal, or as a constant of events.py (`events.X`, whatever it is imported as)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.attr in SCHEMA:
        return SCHEMA[expr.attr]
    return None


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))  # docstrings, and the attribute docstrings after constants
    return found


def written_names() -> dict[str, set[str]]:
    """Every event name the package writes, and the modules that write it."""
    writers: dict[str, set[str]] = defaultdict(set)
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for expr in _written(node):
                    value = _value(expr)
                    if value is not None:
                        writers[value].add(str(path.relative_to(PACKAGE)))
    return writers


def test_the_report_reads_only_events_that_are_written() -> None:
    written = written_names()
    assert sources.EVENTS_READ, "the report reads events"
    never = sorted(sources.EVENTS_READ - set(written))
    assert not never, f"the report looks for events nobody writes: {never}"


def test_every_event_the_schema_names_is_written_through_it() -> None:
    """Each name in events.py is written somewhere as `events.NAME` (not as a literal beside it)."""
    used: set[str] = set()
    for _path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for expr in _written(node):
                    if isinstance(expr, ast.Attribute) and expr.attr in SCHEMA:
                        used.add(expr.attr)
    assert SCHEMA, "events.py names events"
    assert not sorted(set(SCHEMA) - used), f"declared but never written: {sorted(set(SCHEMA) - used)}"


def test_no_event_name_is_a_literal_in_more_than_one_module() -> None:
    """An event written or read in two modules is named once, in events.py; a literal elsewhere is a copy."""
    writers = written_names()
    owner: dict[str, set[str]] = {name: set(files) for name, files in writers.items()}
    for value in SCHEMA.values():
        owner[value] = {"events.py"}
    copies: dict[str, set[str]] = defaultdict(set)
    for path, tree in _modules():
        module = str(path.relative_to(PACKAGE))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                continue
            if node.value in owner and (path.name, node.value) not in NOT_AN_EVENT:
                copies[node.value].add(module)
    spread = {name: sorted(modules) for name, modules in copies.items()
              if len(modules) > 1 or (name in SCHEMA.values() and modules != {"events.py"})}
    assert not spread, f"event names written as literals in more than one module: {spread}"


def test_the_limit_wait_carries_its_end_in_the_field_the_readers_read() -> None:
    """`limit_wait_started` is written with `until` (the report once also looked for a `limit_until` key)."""
    calls = []
    for _path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and any(
                    isinstance(e, ast.Attribute) and e.attr == "LIMIT_WAIT_STARTED" for e in _written(node)):
                calls.append({k.arg for k in node.keywords})
    assert calls, "somebody writes limit_wait_started"
    assert all("until" in keywords for keywords in calls), calls
    account = (PACKAGE / "report" / "account.py").read_text(encoding="utf-8")
    assert 'event.get("limit_until")' not in account


def test_no_function_that_names_events_through_the_schema_hides_it_behind_a_local() -> None:
    """`events = configure_logging(...)` in a function that logs `events.SUPERVISOR_STOPPED` breaks it at run
    time only (an AttributeError on the way out): every use of the module is a use of the module."""
    hidden = []
    for path, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            arguments = fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs
            local = {a.arg for a in arguments} | {
                n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            used = {n.value.id for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name) and n.attr in SCHEMA}
            if used & local:
                hidden.append(f"{path.relative_to(REPO)}:{fn.lineno} {fn.name}: {sorted(used & local)}")
    assert not hidden, "\n".join(hidden)

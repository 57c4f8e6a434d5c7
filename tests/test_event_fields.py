"""The fields of the events several modules read have one reader (`ralph_supervisor/event_fields.py`): every key it
reads is one somebody writes, whatever a record holds it gives values of the declared types, and no function that
handles one of those events reads that event's keys itself.

The last check is a rule on the source, kept simple: a function that names one of these events (`events.X`, or
the console's `_on_<name>`) reads none of that event's keys by a literal (`.get("files_changed")`,
`record["reason"]`, `"tokens" in record`), the envelope aside (`ts`, `iteration`, ...). A function handed a record
without naming its event is not seen by it; the owner's docstring says the rule for those."""

from __future__ import annotations

import ast
import dataclasses
import doctest
import types
import typing
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor import event_fields, events
from tests.helpers.supervise import REPO

PACKAGE = REPO / "ralph_supervisor"
OWNER = PACKAGE / "event_fields.py"
ENVELOPE = frozenset({"event", "ts", "timestamp", "level", "logger", "iteration"})
"""Keys every event carries (structlog adds the first ones): read where they are used."""
LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
CONSTANTS = {value: name for name, value in vars(events).items() if name.isupper() and isinstance(value, str)
             and not name.startswith("STOP_")}


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keys_read(tree: ast.AST, receiver: str | None = None) -> set[str]:
    """The literal keys read in `tree` (of the name `receiver` only, when given): `.get("k")`, `x["k"]`, `"k" in x`."""
    def of(node: ast.expr) -> bool:
        return receiver is None or (isinstance(node, ast.Name) and node.id == receiver)

    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and of(node.func.value)):
            found.add(_key(node.args[0]) or "")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and of(node.value):
            found.add(_key(node.slice) or "")
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
              and of(node.comparators[0])):
            found.add(_key(node.left) or "")
    return found - {""}


def reader_keys(cls: type) -> set[str]:
    """The keys of the record `cls.of(record)` reads."""
    tree = ast.parse(OWNER.read_text(encoding="utf-8"))
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    of = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "of")
    return _keys_read(of, of.args.args[1].arg)


def _functions() -> dict[str, list[ast.FunctionDef]]:
    found: dict[str, list[ast.FunctionDef]] = defaultdict(list)
    for _path, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                found[node.name].append(node)
    return found


def _returned_keys(function: ast.FunctionDef) -> set[str]:
    """The keys a function that builds fields gives: of its dict literals, `fields["k"] = ...`, `.update(k=...)`."""
    keys: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Dict):
            keys |= {k for k in (_key(k) for k in node.keys if k is not None) if k}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _key(node.slice):
            keys.add(node.slice.value)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            keys |= {k.arg for k in node.keywords if k.arg}
    return keys


def _event_written(call: ast.Call) -> str | None:
    func = call.func
    while isinstance(func, ast.IfExp):  # `(log.warning if bad else log.info)(name, ...)`
        func = func.body
    if not (isinstance(func, ast.Attribute) and func.attr in LEVELS and call.args):
        return None
    first = call.args[0]
    if isinstance(first, ast.Attribute) and first.attr in vars(events):
        value = getattr(events, first.attr)
        return value if isinstance(value, str) else None
    return _key(first)


def written_keys() -> dict[str, set[str]]:
    """The keys each event is written with, across its writers (a `**fields(...)` of a package function counted
    by what that function builds); an event written with keys that cannot be told has "*" among them."""
    functions = _functions()
    written: dict[str, set[str]] = defaultdict(set)
    for _path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _event_written(node)
            if name is None:
                continue
            for keyword in node.keywords:
                if keyword.arg is not None:
                    written[name].add(keyword.arg)
                    continue
                splat = keyword.value
                callee = splat.func if isinstance(splat, ast.Call) else None
                named = callee.id if isinstance(callee, ast.Name) else None
                if named and len(functions.get(named, [])) == 1:
                    written[name] |= _returned_keys(functions[named][0])
                else:
                    written[name].add("*")
    return written


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(event_fields).failed == 0


def test_every_key_a_reader_reads_is_one_its_event_is_written_with() -> None:
    """A reader looking for a key nobody writes finds nothing and says nothing (the report once looked for a
    `limit_until` the limit wait never wrote)."""
    written = written_keys()
    assert event_fields.READERS
    for name, cls in event_fields.READERS.items():
        assert name in written, f"nobody writes {name}"
        read = reader_keys(cls) - ENVELOPE
        assert read, f"{cls.__name__}.of reads no key"
        if "*" not in written[name]:
            assert not read - written[name], f"{name}: read but never written: {sorted(read - written[name])}"


def test_the_check_sees_the_fields_an_iteration_is_written_with() -> None:
    """The check above has teeth: the call judge's keywords and `iteration_fields`' keys are both seen."""
    written = written_keys()[events.ITERATION_FINISHED]
    assert {"files_changed", "outcome", "cost_usd"} <= written  # keywords of the log call
    assert {"reply", "status_block", "blocked_reason", "outage"} <= written  # built by iteration_fields
    assert "*" not in written
    assert "budgets" in written_keys()[events.SUPERVISOR_STARTED]


def _handled(function: ast.FunctionDef) -> set[str]:
    """The events (of the owner's) a function names: `events.X` / `ev.X`, or a console handler `_on_<name>`."""
    names = {getattr(events, n.attr) for n in ast.walk(function)
             if isinstance(n, ast.Attribute) and n.attr in vars(events) and getattr(events, n.attr) in CONSTANTS}
    if function.name.startswith("_on_"):
        names.add(function.name[len("_on_"):])
    return names & set(event_fields.READERS)


def test_no_function_that_handles_an_event_reads_its_keys_itself() -> None:
    keys = {name: reader_keys(cls) - ENVELOPE for name, cls in event_fields.READERS.items()}
    found = []
    for path, tree in _modules():
        if path == OWNER:
            continue
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            handled = _handled(function)  # type: ignore[arg-type]
            if not handled:
                continue
            theirs = set().union(*(keys[name] for name in handled))
            read = _keys_read(function) & theirs
            if read:
                found.append(f"{path.relative_to(REPO)}:{function.lineno} {function.name}: {sorted(read)}")
    assert not found, "read outside event_fields.py:\n" + "\n".join(found)


def test_the_rule_has_teeth() -> None:
    code = ast.parse("def f(r):\n    if ev.name(r) == ev.TREE_STOPPED:\n        return r.get('survivors')\n")
    function = code.body[0]
    assert isinstance(function, ast.FunctionDef)
    assert _handled(function) == {events.TREE_STOPPED}
    assert _keys_read(function) & reader_keys(event_fields.TreeStopped) == {"survivors"}


# -- whatever a record holds ---------------------------------------------------------------------------------

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=30)
    | st.sampled_from(["2026-12-01T17:20:24.000Z", "success", "failure", "noop", "12", "nan"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
ALL_KEYS = sorted(set().union(*(reader_keys(cls) for cls in event_fields.READERS.values()))
                  | {"window", "utilization", "resets_at", "token_budget", "cost_budget", "on_open", "name"})


def _conforms(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        inner = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_conforms(v, inner) for v in value)
    if origin is Mapping or hint is Mapping:
        return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint) and _all_conform(value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _all_conform(value: Any) -> bool:
    hints = typing.get_type_hints(type(value))
    return all(_conforms(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(value))


@settings(max_examples=300, deadline=None)
@given(record=st.dictionaries(st.sampled_from(ALL_KEYS), VALUES, max_size=12),
       nested=st.dictionaries(st.sampled_from(ALL_KEYS), VALUES, max_size=6))
def test_any_record_gives_values_of_the_declared_types(record: dict[str, Any], nested: dict[str, Any]) -> None:
    for name, cls in event_fields.READERS.items():
        for shape in (record, {**record, "budgets": nested, "windows": [nested, nested, "x"]}):
            value = cls.of({"event": name, **shape})
            assert _all_conform(value), value
            texts = [t for t in (getattr(value, f.name) for f in dataclasses.fields(value)) if isinstance(t, str)]
            assert all("\n" not in t and len(t) <= 1000 for t in texts)

"""Which test functions can fail: a small pass over the tests' syntax trees (nothing is imported or run).

A test proves something only if some check in it can fail, whichever way it runs. A check is an `assert`
that is not trivially true, a `raise`, a `pytest.raises` / `warns` / `fail` / `deprecated_call` call, or a
call to a function that checks: one of the same module or of the shared helpers (tests/helpers, conftest),
found by its name and followed through any depth of helpers (`wait_for` raises an AssertionError when its
condition never holds, so it checks). A test is weak when some way through it passes no check: none at all,
a check only under an `if` whose other side has none, or only in an `except` (a skip ends a way: skips are
reported by tests/helpers/skips.py).

An `assert` is trivially true when its test is a true constant (`assert True`, `assert "text"`), a
non-empty tuple (`assert (x, "why")`: always true, the parentheses swallowed the message), or an `or`
with a true constant in it. Such an assert is reported on its own: it is a check that cannot fail.

    >>> weak_tests({"t.py": "def test_a():\\n    x = 1\\n\\ndef test_b():\\n    assert 1 == 1\\n"})
    ['t.py:1:test_a']
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CHECKING_CALLS = frozenset({"raises", "warns", "fail", "deprecated_call"})
"""pytest's own checks, called as `pytest.raises(...)` and the like."""


@dataclass(frozen=True)
class Function:
    """One function of the tests (test, helper or method), by where it is and what it calls."""

    where: str
    name: str
    is_test: bool
    checks_itself: bool
    calls: frozenset[str]
    trivial_asserts: tuple[int, ...]
    body: tuple[ast.stmt, ...]


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _truthy_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and bool(node.value)


def trivially_true(test: ast.expr) -> bool:
    """The `assert` test can never be false (see the module's docstring)."""
    if _truthy_constant(test):
        return True
    if isinstance(test, ast.Tuple) and test.elts:
        return True
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(trivially_true(value) for value in test.values)
    return False


ENDING_CALLS = frozenset({"skip", "xfail", "importorskip"})
"""A branch that skips the test ends it without passing: it needs no check of its own (skips are reported)."""


def _checking_node(node: ast.AST, checking: frozenset[str]) -> bool:
    """Anything under `node` checks (used for the expressions of one statement)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Assert) and not trivially_true(n.test):
            return True
        if isinstance(n, ast.Raise):
            return True
        if isinstance(n, ast.Call) and _called_name(n) in checking | CHECKING_CALLS | ENDING_CALLS:
            return True
    return False


def surely_checks(body: list[ast.stmt], checking: frozenset[str]) -> bool:
    """Every way through `body` passes a check (or skips): a check under an `if` with no check on the other
    side, or only in an `except`, leaves a way through in which the test can pass having proved nothing.
    Loops count as their body (a loop over nothing is the test's own bug, not found here)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if surely_checks(stmt.body, checking) and surely_checks(stmt.orelse, checking):
                return True
            if _checking_node(stmt.test, checking):
                return True
        elif isinstance(stmt, ast.Try | ast.TryStar):
            if surely_checks(stmt.body, checking) or surely_checks(stmt.finalbody, checking):
                return True
            if stmt.handlers and all(surely_checks(h.body, checking) for h in stmt.handlers) \
                    and surely_checks(stmt.orelse, checking):
                return True
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            if any(_checking_node(item.context_expr, checking) for item in stmt.items) \
                    or surely_checks(stmt.body, checking):
                return True
        elif isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            if surely_checks(stmt.body, checking) or _checking_node(stmt.iter if not isinstance(stmt, ast.While)
                                                                     else stmt.test, checking):
                return True
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue  # defined, not run here: what calls it is what counts
        elif isinstance(stmt, ast.Match):
            if all(surely_checks(case.body, checking) for case in stmt.cases):
                return True
        elif _checking_node(stmt, checking):
            return True
    return False


def _functions(path: str, tree: ast.Module) -> Iterator[Function]:
    """Every function and method, nested ones included (a test's own `async def scenario()` is called by name),
    with the checks and calls of its whole body."""
    tests = {id(n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    tests |= {id(n) for c in tree.body if isinstance(c, ast.ClassDef) and c.name.startswith("Test")
              for n in c.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            walked = list(ast.walk(node))
            asserts = [n for n in walked if isinstance(n, ast.Assert)]
            trivial = tuple(n.lineno for n in asserts if trivially_true(n.test))
            calls = frozenset(_called_name(n) for n in walked if isinstance(n, ast.Call)) - {""}
            checks = (len(asserts) > len(trivial) or any(isinstance(n, ast.Raise) for n in walked)
                      or bool(calls & CHECKING_CALLS))
            is_test = node.name.startswith("test") and id(node) in tests
            yield Function(f"{path}:{node.lineno}", node.name, is_test, checks, calls, trivial, tuple(node.body))


def analyse(sources: Mapping[str, str]) -> list[Function]:
    return [f for path, text in sources.items() for f in _functions(path, ast.parse(text, filename=path))]


def _shared(path: str) -> bool:
    """Modules whose functions every test module may call: the helpers and conftest."""
    parts = Path(path).parts
    return "helpers" in parts or parts[-1] == "conftest.py"


def checking_names(functions: list[Function]) -> dict[str, frozenset[str]]:
    """For each module, the names it can call that check, themselves or through what they call (a fixed
    point). A name is looked up in the module itself and in the shared helpers, not in other test modules."""
    modules = {f.where.rpartition(":")[0] for f in functions}
    shared = {f.name for f in functions if f.checks_itself and _shared(f.where.rpartition(":")[0])}
    own = {m: {f.name for f in functions if f.checks_itself and f.where.rpartition(":")[0] == m} for m in modules}
    grew = True
    while grew:
        grew = False
        for f in functions:
            module = f.where.rpartition(":")[0]
            known = shared | own[module]
            if f.name not in known and f.calls & known:
                (shared if _shared(module) else own[module]).add(f.name)
                grew = True
    return {m: frozenset(shared | own[m]) for m in modules}


def weak_tests(sources: Mapping[str, str]) -> list[str]:
    """`path:line:name` of every test function that has a way through it in which nothing can fail."""
    functions = analyse(sources)
    checking = checking_names(functions)
    return [f"{f.where}:{f.name}" for f in functions
            if f.is_test and not surely_checks(list(f.body), checking[f.where.rpartition(":")[0]])]


def trivial_asserts(sources: Mapping[str, str]) -> list[str]:
    """`path:line` of every assert that cannot fail, wherever it stands."""
    found = {(f.where.rpartition(":")[0], line) for f in analyse(sources) for line in f.trivial_asserts}
    return [f"{path}:{line}" for path, line in sorted(found)]


def sources_under(folder: Path) -> dict[str, str]:
    """Every Python file under `folder`, by its path relative to the folder's parent (tests/...)."""
    return {str(p.relative_to(folder.parent)): p.read_text() for p in sorted(folder.rglob("*.py"))}

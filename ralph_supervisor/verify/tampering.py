"""Tests weakened instead of code fixed: what changed in the test files between two snapshots.

Agents asked to make tests pass have been seen deleting the failing tests or their files, removing or
weakening assertions, marking tests skipped or expected to fail, and narrowing what the test command runs
(`addopts = -k "not slow"`, `testPathIgnorePatterns`, `--passWithNoTests`, a `Makefile` test target that
runs a subset). Each of those leaves lines in the diff, so each finding quotes them with file:line.

A finding alone does not fire: renaming, merging and moving tests is ordinary work. `judge` fires only when
the weakened tests were failing before the iteration, or the passing count did not rise with it.

Pure: the caller hands over the changed files' texts before and after (`None`: the file is absent), and
the two verifies' results; nothing here reads a file or runs git.

    >>> before = {"test_calc.py": "def test_add():\\n    assert add(2, 2) == 4\\n"}
    >>> after = {"test_calc.py": "import pytest\\n@pytest.mark.skip\\ndef test_add():\\n    assert add(2, 2) == 4\\n"}
    >>> [f.where for f in find_weakening(before, after)]
    ['test_calc.py:2']
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import PurePosixPath

from ralph_supervisor.verify.results import ERROR, FAILED, TestResults

DELETED_FILE = "deleted-test-file"
REMOVED_TEST = "removed-test"
REMOVED_ASSERT = "removed-assert"
WEAKENED_ASSERT = "weakened-assert"
SKIP_ADDED = "skip-added"
CONFIG_NARROWED = "config-narrowed"
FEWER_RUN = "fewer-tests-run"

QUOTE_MAX = 80
"""A quoted line is cut to this many characters."""
REASON_FIT = 300
"""The breaker keeps reasons this long: the restore command is left out of one it would not fit."""
FINDINGS_MAX = 200
"""Findings kept from one diff (a reason quotes only the first few)."""

_TEST_FILE_PATTERNS: tuple[str, ...] = (
    "test_*.py", "*_test.py", "conftest.py", "*.test.js", "*.test.jsx", "*.test.ts", "*.test.tsx", "*.test.mjs",
    "*.test.cjs", "*.spec.js", "*.spec.jsx", "*.spec.ts", "*.spec.tsx", "*.spec.mjs", "*.spec.cjs", "*_test.go",
)
_TEST_DIRS = frozenset({"tests", "test", "__tests__", "spec"})
_SOURCE_SUFFIXES = frozenset({".py", ".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".go", ".rs"})

_CONFIG_PATTERNS: tuple[str, ...] = (
    "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "package.json", "jest.config.*", "vitest.config.*",
    "vite.config.*", ".mocharc*", "Makefile", "makefile", "GNUmakefile", "nextest.toml", "Cargo.toml", "conftest.py",
)


def is_test_file(path: str, text: str | None = None) -> bool:
    """A file of tests, by its name or folder (and a Rust file by its `#[test]` functions)."""
    p = PurePosixPath(path)
    if any(fnmatch(p.name, pattern) for pattern in _TEST_FILE_PATTERNS):
        return True
    if p.suffix in _SOURCE_SUFFIXES and _TEST_DIRS.intersection(p.parts[:-1]):
        return True
    return p.suffix == ".rs" and text is not None and "#[test]" in text


def is_test_config(path: str) -> bool:
    """A file that says which tests run (pytest's, jest's, vitest's, mocha's, nextest's settings, a Makefile)."""
    name = PurePosixPath(path).name
    return any(fnmatch(name, pattern) for pattern in _CONFIG_PATTERNS)


def watched(path: str, text: str | None = None) -> bool:
    """A file whose change can weaken the tests."""
    return is_test_file(path, text) or is_test_config(path)


@dataclass(frozen=True)
class Finding:
    """One way the tests were weakened, with the line that shows it (`line` 0: the file as a whole)."""

    kind: str
    path: str
    line: int
    text: str
    test: str | None = None
    """The test it weakened, where one is named."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    def describe(self) -> str:
        what = {
            DELETED_FILE: "test file deleted",
            REMOVED_TEST: "test removed",
            REMOVED_ASSERT: "assertion removed",
            WEAKENED_ASSERT: "assertion weakened",
            SKIP_ADDED: "skip marker added",
            CONFIG_NARROWED: "test configuration narrowed",
            FEWER_RUN: "fewer tests ran",
        }.get(self.kind, self.kind)
        quote = f": `{self.text}`" if self.text else ""
        return f"{self.where} {what}{quote}"


# Reading test sources -----------------------------------------------------------------------------------

_TEST_DEFS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?def[ \t]+(?P<name>test\w*)[ \t]*\("),
    re.compile(r"^(?P<indent>[ \t]*)x?(?:it|test|specify)(?:\.\w+)?[ \t]*\([ \t]*(?P<q>['\"`])(?P<name>.+?)(?P=q)"),
    re.compile(r"^(?P<indent>[ \t]*)func[ \t]+(?P<name>Test\w*)[ \t]*\("),
)
_RUST_TEST_ATTR = re.compile(r"^[ \t]*#\[(?:tokio::)?test\b")
_RUST_FN = re.compile(r"^(?P<indent>[ \t]*)(?:pub[ \t]+)?(?:async[ \t]+)?fn[ \t]+(?P<name>\w+)")

_ASSERTION = re.compile(
    r"^[ \t]*assert\b|\bassert\w*!?[ \t]*\(|\bassert_\w+!|\bassert!|\bself\.assert\w+|\bexpect[ \t]*\(|"
    r"\bpytest\.raises\b|\brequire\.\w+\(|\bt\.(?:Error|Errorf|Fatal|Fatalf|Fail|FailNow)\b|\.should\b"
)

_TRIVIAL = re.compile(
    r"^assert\(?(?:True|1)\)?$|^self\.assertTrue\((?:True|1)\)|^expect\((?:true|1)\)\.toBe(?:Truthy)?\((?:true)?\)|"
    r"^assert!\(true\)|^assert_eq!\((\w+),\1\)|^assert\.ok\(true\)"
)
"""An assertion that cannot fail (matched on text with its blanks removed)."""

SKIP_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("@pytest.mark.skip", re.compile(r"@pytest\.mark\.skip(?:if)?\b")),
    ("xfail", re.compile(r"\bxfail\b")),
    ("pytest.skip(", re.compile(r"\bpytest\.skip[ \t]*\(")),
    ("@unittest.skip", re.compile(r"@unittest\.skip\w*\b|@skip(?:If|Unless)?\b")),
    ("expectedFailure", re.compile(r"\bexpectedFailure\b")),
    ("skipTest(", re.compile(r"\.skipTest[ \t]*\(")),
    ("it.skip", re.compile(r"\b(?:it|test|specify)\.(?:skip|todo)\b")),
    ("describe.skip", re.compile(r"\b(?:describe|context|suite)\.skip\b")),
    ("xit", re.compile(r"(?<![\w.])(?:xit|xtest|xdescribe|xcontext|xspecify)[ \t]*\(")),
    (".only", re.compile(r"\b(?:it|test|describe|context)\.only\b")),
    ("t.Skip(", re.compile(r"\bt\.Skip(?:f|Now)?[ \t]*\(")),
    ("skip: true", re.compile(r"[{,][ \t]*(?:skip|todo)[ \t]*:[ \t]*(?:true|['\"`])")),
    ("t.skip(", re.compile(r"\bt\.(?:skip|todo)[ \t]*\(")),
    ("#[ignore]", re.compile(r"#\[ignore\b")),
)
"""Markers that stop a test from counting. `.only` belongs here: it makes every other test stop running."""


@dataclass(frozen=True)
class _Test:
    name: str
    line: int
    asserts: tuple[tuple[int, str], ...]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def read_tests(text: str) -> list[_Test]:
    """The tests a source defines and the assertion lines in each one's body (the lines indented under it)."""
    lines = text.splitlines()
    found: list[_Test] = []
    rust_next = False
    for number, line in enumerate(lines, start=1):
        if _RUST_TEST_ATTR.match(line):
            rust_next = True
            continue
        match = None
        if rust_next and (fn := _RUST_FN.match(line)):
            match, rust_next = fn, False
        else:
            for pattern in _TEST_DEFS:
                if match := pattern.match(line):
                    break
        if match is None:
            continue
        header = _indent(line)
        asserts: list[tuple[int, str]] = []
        if _ASSERTION.search(line[match.end():]):
            asserts.append((number, line.strip()))
        for offset, body in enumerate(lines[number:], start=number + 1):
            if body.strip() and _indent(body) <= header:
                if _ASSERTION.search(body) and body.lstrip().startswith(("})", "}")):
                    asserts.append((offset, body.strip()))
                break
            if _ASSERTION.search(body):
                asserts.append((offset, body.strip()))
        found.append(_Test(name=match.group("name"), line=number, asserts=tuple(asserts)))
    return found


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_MAX else text[: QUOTE_MAX - 1] + "…"


def _normal(line: str) -> str:
    return re.sub(r"\s+", "", line)


# The diff -----------------------------------------------------------------------------------------------


def find_weakening(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> list[Finding]:
    """Every weakening between two versions of the changed files (a path missing or None: no such file).

    Tests are matched by name across files, so a test moved to another file is not "removed".
    """
    paths = sorted(set(before) | set(after))
    old_tests: dict[str, list[_Test]] = {}
    new_tests: dict[str, list[_Test]] = {}
    for path in paths:
        old, new = before.get(path), after.get(path)
        if old is not None and is_test_file(path, old):
            old_tests[path] = read_tests(old)
        if new is not None and is_test_file(path, new):
            new_tests[path] = read_tests(new)
    new_names = Counter(t.name for tests in new_tests.values() for t in tests)
    for _path, test in _renamed(old_tests, new_tests):
        new_names[test.name] += 1  # renamed, its assertions kept: not removed
    findings: list[Finding] = []

    for path in paths:
        old, new = before.get(path), after.get(path)
        if old is not None and new is None and path in old_tests:
            moved = all(new_names[t.name] for t in old_tests[path]) and old_tests[path]
            if not moved:
                findings.append(Finding(DELETED_FILE, path, 0, "", None))
            for test in old_tests[path]:
                if not new_names[test.name]:
                    findings.append(Finding(REMOVED_TEST, path, test.line, "", test.name))
            continue
        if new is None:
            continue
        if path in new_tests or path in old_tests:
            findings += _test_file_changes(path, old or "", new, old_tests.get(path, []), new_tests.get(path, []), new_names)
        if is_test_config(path):
            findings += _config_changes(path, old or "", new)
        if len(findings) >= FINDINGS_MAX:
            break
    return findings[:FINDINGS_MAX]


def _renamed(old_tests: Mapping[str, list[_Test]], new_tests: Mapping[str, list[_Test]]) -> list[tuple[str, _Test]]:
    """Old tests whose name is gone but whose assertions all live on in a new test: renamed or merged, not removed."""
    old_names = {t.name for tests in old_tests.values() for t in tests}
    new_names = {t.name for tests in new_tests.values() for t in tests}
    added = [Counter(_normal(text) for _, text in t.asserts) for tests in new_tests.values() for t in tests
             if t.name not in old_names]
    renamed: list[tuple[str, _Test]] = []
    for path, tests in old_tests.items():
        for test in tests:
            if test.name in new_names or not test.asserts or not added:
                continue
            need = Counter(_normal(text) for _, text in test.asserts)
            for body in added:
                if not need - body:  # every assertion of the old test is in this new one
                    body.subtract(need)
                    renamed.append((path, test))
                    break
    return renamed


def _added_lines(old: str, new: str) -> list[tuple[int, str]]:
    """The new text's lines (numbered) that the old text did not hold as often (a multiset diff)."""
    left = Counter(_normal(line) for line in old.splitlines())
    added: list[tuple[int, str]] = []
    for number, line in enumerate(new.splitlines(), start=1):
        key = _normal(line)
        if left[key] > 0:
            left[key] -= 1
        elif key:
            added.append((number, line))
    return added


def _test_file_changes(path: str, old: str, new: str, old_tests: Sequence[_Test], new_tests: Sequence[_Test],
                       new_names: Counter[str]) -> list[Finding]:
    findings: list[Finding] = []
    by_line = {}
    for test in new_tests:
        by_line[test.line] = test.name
    starts = sorted(by_line)
    for number, line in _added_lines(old, new):
        code = line.lstrip()
        if code.startswith("//") or code.startswith("#") and not code.startswith("#["):
            continue  # a comment
        for _label, pattern in SKIP_MARKERS:
            if pattern.search(line):
                findings.append(Finding(SKIP_ADDED, path, number, _quote(line), _test_at(number, starts, by_line)))
                break
    here: dict[str, list[_Test]] = {}
    for test in new_tests:
        here.setdefault(test.name, []).append(test)
    seen: Counter[str] = Counter()
    for test in old_tests:
        if not new_names[test.name]:
            findings.append(Finding(REMOVED_TEST, path, test.line, "", test.name))
            continue
        same = here.get(test.name, [])
        index = seen[test.name]
        seen[test.name] += 1
        if index >= len(same):
            continue  # moved to another file
        findings += _assertion_changes(path, test, same[index])
    return findings


def _test_at(line: int, starts: Sequence[int], by_line: Mapping[int, str]) -> str | None:
    """The test a marker on this line belongs to: the next test defined at or after it, else the one it is in."""
    after = [s for s in starts if s >= line]
    if after and after[0] - line <= 3:
        return by_line[after[0]]
    before = [s for s in starts if s < line]
    return by_line[before[-1]] if before else None


def _assertion_changes(path: str, old: _Test, new: _Test) -> list[Finding]:
    gone = Counter(_normal(text) for _, text in old.asserts) - Counter(_normal(text) for _, text in new.asserts)
    came = Counter(_normal(text) for _, text in new.asserts) - Counter(_normal(text) for _, text in old.asserts)
    if not gone:
        return []
    removed = [(n, text) for n, text in old.asserts if gone[_normal(text)] > 0]
    findings: list[Finding] = []
    if sum(gone.values()) > sum(came.values()):
        for number, text in removed[: sum(gone.values()) - sum(came.values())]:
            findings.append(Finding(REMOVED_ASSERT, path, number, _quote(text), old.name))
        return findings
    added = list(came)
    trivial = any(_TRIVIAL.search(a) for a in added)
    for number, text in removed:
        key = _normal(text)
        if trivial or any(len(a) < len(key) and key.startswith(a.rstrip(")")) for a in added):
            findings.append(Finding(WEAKENED_ASSERT, path, number, _quote(text), old.name))
    return findings


_PYTEST_SECTIONS = frozenset({"pytest", "tool:pytest", "tool.pytest.ini_options", "tool.pytest"})
_PYTEST_NARROWING = re.compile(
    r"\baddopts\b|(?:^|[\s\"'=])-[km](?:\s|=|[\"'])|--deselect\b|--ignore(?:-glob)?\b|--lf\b|--last-failed\b|"
    r"(?:^|[\s\"'])-x(?:\s|$|[\"'])|--exitfirst\b|--maxfail\b|\bnorecursedirs\b|\btestpaths\b|\bpython_(?:files|classes|functions)\b"
)
_CONFTEST_NARROWING = re.compile(r"\bcollect_ignore\w*\b|\bpytest_collection_modifyitems\b|\bpytest_ignore_collect\b|\.deselect")
_JS_NARROWING = re.compile(
    r"\btestPathIgnorePatterns\b|\bmodulePathIgnorePatterns\b|\btestMatch\b|\btestRegex\b|\broots\b|"
    r"\bpassWithNoTests\b|\btestNamePattern\b|\bexclude\b|\binclude\b|\bgrep\b|\bspec\b|\bignore\b|\bbail\b"
)
_JS_CONFIGS = ("jest.config.*", "vitest.config.*", "vite.config.*", ".mocharc*")
_NEXTEST_NARROWING = re.compile(r"\bdefault-filter\b|\bfilter\b|\bfail-fast\b|\bignore\b")
_CARGO_NARROWING = re.compile(r"^\s*(?:test|harness|doctest)\s*=\s*false\b")


def _section_lines(text: str) -> list[str | None]:
    """Each line's `[section]` in an INI or TOML file (None before the first header)."""
    sections: list[str | None] = []
    current: str | None = None
    for line in text.splitlines():
        header = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+\s*$", line)
        if header:
            current = header.group(1).strip().strip("\"'")
        sections.append(current)
    return sections


def _config_changes(path: str, old: str, new: str) -> list[Finding]:
    """Added lines that narrow what runs (in the runner's own settings only); a Makefile test target's recipe changed."""
    name = PurePosixPath(path).name
    if name in ("Makefile", "makefile", "GNUmakefile"):
        return _makefile_changes(path, old, new)
    added = [(n, line) for n, line in _added_lines(old, new) if not line.strip().startswith(("#", "//", ";"))]
    narrows: list[tuple[int, str]] = []
    if name in ("pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"):
        sections = _section_lines(new)
        narrows = [(n, line) for n, line in added if sections[n - 1] in _PYTEST_SECTIONS and _PYTEST_NARROWING.search(line)]
    elif name == "conftest.py":
        narrows = [(n, line) for n, line in added if _CONFTEST_NARROWING.search(line)]
    elif name == "package.json":
        narrows = [(n, line) for n, line in added
                   if re.search(r"\"test(?::[\w:-]+)?\"\s*:\s*\"", line) or _JS_NARROWING.search(line) and "\"" in line
                   and not re.search(r"\"(?:files|workspaces|main|exports|dependencies|devDependencies)\"", line)]
    elif any(fnmatch(name, pattern) for pattern in _JS_CONFIGS):
        narrows = [(n, line) for n, line in added if _JS_NARROWING.search(line)]
    elif name == "nextest.toml":
        narrows = [(n, line) for n, line in added if _NEXTEST_NARROWING.search(line)]
    elif name == "Cargo.toml":
        narrows = [(n, line) for n, line in added if _CARGO_NARROWING.search(line)]
    return [Finding(CONFIG_NARROWED, path, n, _quote(line), None) for n, line in narrows]


def _makefile_changes(path: str, old: str, new: str) -> list[Finding]:
    """A test target whose recipe changed or went away (a new target weakens nothing)."""
    findings: list[Finding] = []
    old_recipe, new_recipe = _make_recipes(old), _make_recipes(new)
    for target, lines in new_recipe.items():
        before = old_recipe.get(target)
        if before is None or [_normal(t) for _, t in lines] == [_normal(t) for _, t in before]:
            continue
        olds = Counter(_normal(t) for _, t in before)
        changed = [(n, t) for n, t in lines if not olds[_normal(t)]] or lines[:1]
        findings += [Finding(CONFIG_NARROWED, path, n, _quote(t), None) for n, t in changed[:3]]
    for target in old_recipe:
        if target not in new_recipe:  # no line of the new Makefile holds it: the finding names the file alone
            findings.append(Finding(CONFIG_NARROWED, path, 0, _quote(f"{target}: target removed"), None))
    return findings


_MAKE_TARGET = re.compile(r"^(?P<targets>[A-Za-z0-9_.\- ]+?)\s*::?(?!=)(?P<deps>[^=]*)$")
_TEST_TARGETS = frozenset({"test", "tests", "check", "unittest", "unit", "pytest", "ci"})


def _make_recipes(text: str) -> dict[str, list[tuple[int, str]]]:
    """Each test-like target's rule line and recipe lines (numbered)."""
    recipes: dict[str, list[tuple[int, str]]] = {}
    current: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("\t"):
            for target in current:
                recipes[target].append((number, line))
            continue
        match = _MAKE_TARGET.match(line)
        if match:
            current = [t for t in match.group("targets").split() if t in _TEST_TARGETS or t.startswith("test")]
            for target in current:
                recipes.setdefault(target, []).append((number, line))
        elif line.strip() and not line.startswith("#"):
            current = []
    return recipes


# The rule -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tampering:
    """A weakening that fires, and why: the findings to quote and what made it count."""

    findings: tuple[Finding, ...]
    why: str

    def reason(self, iteration: int, restore_from: int | None, restore: str | None = None, limit: int = 2) -> str:
        """One line: what made it count, the lines quoted, then the snapshot to restore (and the command)."""
        quoted = "; ".join(f.describe() for f in self.findings[:limit])
        more = f" (+{len(self.findings) - limit} more)" if len(self.findings) > limit else ""
        where = command = ""
        if restore_from is not None:
            where = f"; the snapshot of iteration {restore_from} holds the tests before"
            command = f": `{restore}`" if restore else ""
        text = f"iteration {iteration} weakened the tests instead of the code ({self.why}): {quoted}{more}{where}"
        return text + command if len(text + command) <= REASON_FIT else text


def _matches(test: str, result_name: str) -> bool:
    """A test function's name against a runner's full name (`tests/test_a.py::TestX::test_b`, `pkg.T.test_b`)."""
    if result_name == test:
        return True
    for sep in ("::", ".", " > ", " ", "/"):
        if result_name.endswith(sep + test):
            return True
    return False


def judge(findings: Iterable[Finding], before: TestResults | None, after: TestResults | None) -> Tampering | None:
    """Whether the weakening counts: the weakened tests were failing before, or the passing count did not rise.

    `before` is the last verified snapshot's results, `after` this iteration's (None: unverified). Fewer
    tests run than before is a finding of its own. A change that made more tests pass, weakening none that
    was failing, is a refactor: it does not fire.
    """
    found = list(findings)
    if before is not None and after is not None and before.counted and after.counted and after.total < before.total:
        found.append(Finding(FEWER_RUN, "", 0, f"{before.total} tests ran before, {after.total} now", None))
    if not found:
        return None
    if before is not None:
        failing = [name for name, outcome in before.tests.items() if outcome in (FAILED, ERROR)]
        weakened_failing = sorted({f.test for f in found if f.test and any(_matches(f.test, n) for n in failing)})
        if weakened_failing:
            return Tampering(tuple(found), "tests that were failing: " + ", ".join(weakened_failing[:5]))
    if before is None or after is None:
        return None
    if not (before.counted and after.counted):
        return None
    if after.passed <= before.passed:
        return Tampering(tuple(found), f"passing tests {before.passed} before, {after.passed} after")
    return None

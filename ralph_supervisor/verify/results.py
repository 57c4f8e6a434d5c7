"""What a test run said: passed, failed, errors and skipped counts, and each test's outcome where known.

A verify runs whatever the project's test command is, so the reading takes the best evidence there is:
JUnit XML when the command wrote it (every test by name, read with junitparser), else the summary lines of
the runner that printed them (pytest, unittest, jest, vitest, mocha, go test, cargo test, nextest, node's own
`node --test`), else
only the exit code. Names are what make a per-test history (which tests a given iteration fixed or
broke), so every parser keeps the names its runner prints, and says when it knows none.

Pure: text in, a `TestResults` value out; nothing here runs a process or reads a clock.

    >>> r = read_results("3 failed, 41 passed, 1 skipped in 2.31s", exit_code=1)
    >>> (r.runner, r.passed, r.failed, r.skipped, r.total)
    ('pytest', 41, 3, 1, 45)
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

PASSED = "passed"
FAILED = "failed"
ERROR = "error"
SKIPPED = "skipped"
OUTCOMES: tuple[str, ...] = (PASSED, FAILED, ERROR, SKIPPED)
"""A test's outcome. Expected failures (`xfail`) count as skipped: the test is not proving anything."""

EXIT_CODE = "exit-code"
"""The runner named when nothing but the exit code is known."""

NAMES_MAX = 20_000
"""Tests kept by name in one reading (the counts stay exact): a verify's memory stays bounded."""

_NONE_FOUND = re.compile(
    r"^No tests found, exiting with code|^No test files found, exiting with code|\bno tests? (?:to run|were found)\b|"
    r"^Error: No test files found",
    re.MULTILINE | re.IGNORECASE,
)
"""A runner's words for "there was no test to run" (jest's --passWithNoTests, vitest, mocha, go)."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


@dataclass(frozen=True)
class TestResults:
    """One run's counts and, where the runner named them, each test's outcome.

    `runner` says where the counts came from (`junit`, `pytest`, ..., `exit-code`); `tests` maps a test's
    name to its outcome and may hold only some tests (pytest without `-rA` names only the failing ones).
    """

    __test__ = False  # not a pytest test class

    runner: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    exit_code: int | None = None
    tests: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def counted(self) -> bool:
        """The runner's own words were read (not only its exit code)."""
        return self.runner != EXIT_CODE

    @property
    def ran_nothing(self) -> bool:
        """The runner said it ran no test at all: such a run proves nothing (it is "unverified")."""
        return self.counted and self.total == 0

    @property
    def ok(self) -> bool:
        """No failure and no error: by the counts when they are known, else by the exit code."""
        if self.counted:
            return self.failed == 0 and self.errors == 0 and self.total > 0
        return self.exit_code == 0

    def named(self, outcome: str) -> frozenset[str]:
        """The tests known by name to have had this outcome."""
        return frozenset(name for name, got in self.tests.items() if got == outcome)


def read_results(output: str, exit_code: int | None, junit_xml: str | bytes | None = None) -> TestResults:
    """Read one run: its JUnit XML when that holds a test, else its printed summaries, else its exit code.

    Summaries of several runners in one output (a `make test` that runs pytest, then jest) are added up.
    """
    if junit_xml:
        junit = read_junit(junit_xml, exit_code)
        if junit is not None and junit.total > 0:
            return junit
    text = strip_ansi(output)
    readings = [reading for parse in PARSERS.values() if (reading := parse(text)) is not None]
    if not readings:
        if _NONE_FOUND.search(text[-200_000:]):
            return TestResults(runner="none-found", exit_code=exit_code)  # counted: it ran nothing
        return TestResults(runner=EXIT_CODE, exit_code=exit_code)
    return _combine(readings, exit_code)


def strip_ansi(text: str) -> str:
    """The text without terminal colour codes (vitest and jest colour their summaries on a TTY or with FORCE_COLOR)."""
    return _ANSI.sub("", text).replace("\r", "")


def _combine(readings: list[TestResults], exit_code: int | None) -> TestResults:
    tests: dict[str, str] = {}
    for reading in readings:
        for name, outcome in reading.tests.items():
            if len(tests) < NAMES_MAX or name in tests:
                tests[name] = outcome
    return TestResults(
        runner="+".join(r.runner for r in readings),
        passed=sum(r.passed for r in readings),
        failed=sum(r.failed for r in readings),
        errors=sum(r.errors for r in readings),
        skipped=sum(r.skipped for r in readings),
        exit_code=exit_code,
        tests=tests,
    )


def _bounded(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Names to outcomes, the last word on a name winning, at most NAMES_MAX names."""
    tests: dict[str, str] = {}
    for name, outcome in pairs:
        name = name.strip()
        if name and (len(tests) < NAMES_MAX or name in tests):
            tests[name] = outcome
    return tests


# JUnit XML --------------------------------------------------------------------------------------------


def read_junit(xml: str | bytes, exit_code: int | None = None) -> TestResults | None:
    """Every test case of a JUnit XML report (pytest, jest-junit, go-junit-report, nextest), or None if unreadable.

    A test case's name is `classname::name` (once where jest-junit repeats its words in both).
    """
    from junitparser import Error, Failure, JUnitXml, JUnitXmlError, Skipped

    try:
        # The standard library's parser (expat caps entity expansion), whatever XML library junitparser found.
        report = JUnitXml.fromroot(ElementTree.fromstring(xml))
        counts = dict.fromkeys(OUTCOMES, 0)
        pairs: list[tuple[str, str]] = []
        for suite in report:
            for case in suite:
                outcome = PASSED
                for result in case.result:
                    if isinstance(result, Error):
                        outcome = ERROR
                        break
                    if isinstance(result, Failure):
                        outcome = FAILED
                        break
                    if isinstance(result, Skipped):
                        outcome = SKIPPED
                counts[outcome] += 1
                pairs.append((_junit_name(case.classname, case.name), outcome))
    except (ElementTree.ParseError, JUnitXmlError, AttributeError, TypeError, ValueError):
        return None
    return TestResults(
        runner="junit",
        passed=counts[PASSED],
        failed=counts[FAILED],
        errors=counts[ERROR],
        skipped=counts[SKIPPED],
        exit_code=exit_code,
        tests=_bounded(pairs),
    )


def _junit_name(classname: str | None, name: str | None) -> str:
    """`classname::name`; jest-junit's default writes the same words in both (`suite test`): those once."""
    classname, name = (classname or "").strip(), (name or "").strip()
    if not classname or not name or (classname == name and " " in name):
        return name or classname
    return f"{classname}::{name}"


# pytest -----------------------------------------------------------------------------------------------

_PYTEST_SUMMARY = re.compile(
    r"^=*\s*(?P<body>(?:\d+ (?:failed|passed|skipped|deselected|xfailed|xpassed|errors?|warnings?|rerun)(?:, )?)+"
    r"|no tests ran)\s+in\s+[\d.]+s(?:\s+\([\d:]+\))?\s*=*\s*$",
    re.MULTILINE,
)
_PYTEST_PART = re.compile(r"(\d+) (failed|passed|skipped|deselected|xfailed|xpassed|errors?|warnings?|rerun)")
_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+::\S.*?)(?: - .*)?$", re.MULTILINE)
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$", re.MULTILINE)
_PYTEST_OUTCOME = {"PASSED": PASSED, "XPASS": PASSED, "FAILED": FAILED, "ERROR": ERROR, "SKIPPED": SKIPPED, "XFAIL": SKIPPED}


def read_pytest(text: str) -> TestResults | None:
    """pytest's last summary line (`=== 3 failed, 41 passed, 1 skipped in 2.31s ===`, or `-q`'s bare one).

    Names come from the short summary (`FAILED path::test - ...`; `-rA` adds `PASSED`) and from `-v` lines.
    """
    summaries = list(_PYTEST_SUMMARY.finditer(text))
    if not summaries:
        return None
    counts = dict.fromkeys(OUTCOMES, 0)
    for number, word in _PYTEST_PART.findall(summaries[-1].group("body")):
        if word in ("passed", "xpassed"):
            counts[PASSED] += int(number)
        elif word == "failed":
            counts[FAILED] += int(number)
        elif word.startswith("error"):
            counts[ERROR] += int(number)
        elif word in ("skipped", "xfailed"):
            counts[SKIPPED] += int(number)
    pairs = [(name, _PYTEST_OUTCOME[word]) for name, word in ((m[1], m[0]) for m in _PYTEST_LINE.findall(text))]
    pairs += [(name, _PYTEST_OUTCOME[word]) for name, word in _PYTEST_VERBOSE.findall(text)]
    return TestResults(
        runner="pytest", passed=counts[PASSED], failed=counts[FAILED], errors=counts[ERROR],
        skipped=counts[SKIPPED], tests=_bounded(pairs),
    )


# unittest ---------------------------------------------------------------------------------------------

_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*\n+\s*(OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?\s*$", re.MULTILINE)
_UNITTEST_VERBOSE = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)", re.MULTILINE)
_UNITTEST_HEADER = re.compile(r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)", re.MULTILINE)
_UNITTEST_OUTCOME = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "skipped": SKIPPED,
                     "expected failure": SKIPPED, "unexpected success": FAILED}


def read_unittest(text: str) -> TestResults | None:
    """unittest's `Ran 45 tests in 0.8s` and the `OK` / `FAILED (failures=2, errors=1, skipped=1)` under it.

    Several runs in one output are added up; names come from `-v` lines and the `FAIL: test (id)` headers.
    """
    runs = _UNITTEST_RAN.findall(text)
    if not runs:
        return None
    counts = dict.fromkeys(OUTCOMES, 0)
    for ran, _verdict, details in runs:
        parts = {key.strip(): int(value) for key, value in re.findall(r"([\w ]+)=(\d+)", details or "")}
        failed = parts.get("failures", 0) + parts.get("unexpected successes", 0)
        errors = parts.get("errors", 0)
        skipped = parts.get("skipped", 0) + parts.get("expected failures", 0)
        counts[FAILED] += failed
        counts[ERROR] += errors
        counts[SKIPPED] += skipped
        counts[PASSED] += max(0, int(ran) - failed - errors - skipped)
    pairs = [(_unittest_name(method, ident), _UNITTEST_OUTCOME[word]) for method, ident, word in _UNITTEST_VERBOSE.findall(text)]
    pairs += [(_unittest_name(method, ident), _UNITTEST_OUTCOME[word]) for word, method, ident in _UNITTEST_HEADER.findall(text)]
    return TestResults(
        runner="unittest", passed=counts[PASSED], failed=counts[FAILED], errors=counts[ERROR],
        skipped=counts[SKIPPED], tests=_bounded(pairs),
    )


def _unittest_name(method: str, ident: str) -> str:
    """`test_b (test_ut.T.test_b)` is `test_ut.T.test_b` (3.11+); older Pythons print `(test_ut.T)`."""
    return ident if ident.endswith("." + method) else f"{ident}.{method}"


# jest and vitest --------------------------------------------------------------------------------------

_JEST_TESTS = re.compile(r"^Tests:\s+(.*\d+ total)\s*$", re.MULTILINE)
_JEST_SUITES = re.compile(r"^Test Suites:\s+(.*\d+ total)\s*$", re.MULTILINE)
_JEST_PART = re.compile(r"(\d+) (failed|passed|skipped|todo|pending)")
_JEST_FAILURE = re.compile(r"^  ● (.+? › .+?)\s*$", re.MULTILINE)


def read_jest(text: str) -> TestResults | None:
    """jest's `Tests:       2 failed, 1 skipped, 40 passed, 43 total`; the failing tests' `● suite › test` headers.

    A test file that fails to load runs no test and shows only in `Test Suites: 1 failed`: it counts as an error.
    """
    lines = _JEST_TESTS.findall(text)
    if not lines:
        return None
    parts = {word: int(number) for number, word in _JEST_PART.findall(lines[-1])}
    suites = _JEST_SUITES.findall(text)
    suites_failed = {word: int(number) for number, word in _JEST_PART.findall(suites[-1])}.get("failed", 0) if suites else 0
    failed = parts.get("failed", 0)
    errors = suites_failed if failed == 0 else 0
    return TestResults(
        runner="jest", passed=parts.get("passed", 0), failed=failed, errors=errors,
        skipped=parts.get("skipped", 0) + parts.get("todo", 0) + parts.get("pending", 0),
        tests=_bounded((name.replace(" › ", " > "), FAILED) for name in _JEST_FAILURE.findall(text)),
    )


_VITEST_TESTS = re.compile(r"^\s*Tests\s+((?:\d+ \w+(?: \| )?)+)\s*\((\d+)\)\s*$", re.MULTILINE)
_VITEST_FILES = re.compile(r"^\s*Test Files\s+((?:\d+ \w+(?: \| )?)+)\s*\((\d+)\)\s*$", re.MULTILINE)
_VITEST_FAILURE = re.compile(r"^\s*FAIL\s+(\S+ > .+?)\s*$", re.MULTILINE)


def read_vitest(text: str) -> TestResults | None:
    """vitest's `Tests  2 failed | 40 passed | 1 skipped (43)`; the failing tests' `FAIL  file > suite > test`."""
    lines = _VITEST_TESTS.findall(text)
    if not lines:
        return None
    body, _total = lines[-1]
    parts = {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", body)}
    files = _VITEST_FILES.findall(text)
    files_failed = {w: int(n) for n, w in re.findall(r"(\d+) (\w+)", files[-1][0])}.get("failed", 0) if files else 0
    failed = parts.get("failed", 0)
    pairs = []
    for name in _VITEST_FAILURE.findall(text):
        file, _, rest = name.partition(" > ")
        pairs.append((rest if rest else name, FAILED))
    return TestResults(
        runner="vitest", passed=parts.get("passed", 0), failed=failed,
        errors=files_failed if failed == 0 else 0,
        skipped=parts.get("skipped", 0) + parts.get("todo", 0),
        tests=_bounded(pairs),
    )


# mocha ------------------------------------------------------------------------------------------------

_MOCHA_PASSING = re.compile(r"^\s*(\d+) passing \(\d+(?:\.\d+)?(?:ms|s|m)\)\s*$", re.MULTILINE)
_MOCHA_OTHER = re.compile(r"^\s*(\d+) (failing|pending)\s*$", re.MULTILINE)


def read_mocha(text: str) -> TestResults | None:
    """mocha's `41 passing (12ms)`, `2 failing`, `1 pending` (counts only: its failure list spans lines)."""
    passing = _MOCHA_PASSING.findall(text)
    if not passing:
        return None
    tail = text[text.rfind(passing[-1] + " passing"):]
    other = {word: int(number) for number, word in _MOCHA_OTHER.findall(tail)}
    return TestResults(runner="mocha", passed=int(passing[-1]), failed=other.get("failing", 0), skipped=other.get("pending", 0))


# go test ----------------------------------------------------------------------------------------------

_GO_LINE = re.compile(
    r"^\s*--- (?P<word>PASS|FAIL|SKIP): (?P<name>\S+) \([\d.]+s\)"
    r"|^(?P<verdict>ok|FAIL)\s+(?P<package>\S+)\s+(?:(?:[\d.]+s|\(cached\))(?P<none>.*\[no tests to run\])?"
    r"|\[(?:build|setup) failed\])",
    re.MULTILINE,
)
_GO_OUTCOME = {"PASS": PASSED, "FAIL": FAILED, "SKIP": SKIPPED}
_GO_JSON_OUTCOME = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}
_GO_JSON_ACTION = re.compile(r'^\{.*"Action":"(?:pass|fail|skip)"', re.MULTILINE)


def read_go(text: str) -> TestResults | None:
    """go test's `--- FAIL: TestName (0.00s)` (and `-v`'s `--- PASS`), `ok  pkg 0.1s` and `FAIL pkg`.

    Read in order, so each package's verdict line closes the test lines printed before it. A package whose
    tests are not named (plain `go test` names only the failing ones) counts as one test named by the
    package: passing when `ok`, an error when it failed with no failing test named (a build failure, a
    panic in `TestMain`). The counts are then packages more than tests; `-v` or `-json` names every test.
    """
    pairs: list[tuple[str, str]] = []
    pending: list[tuple[str, str]] = []
    seen = False
    for match in _GO_LINE.finditer(text):
        seen = True
        if match["word"]:
            pending.append((match["name"], _GO_OUTCOME[match["word"]]))
            continue
        if match["none"]:
            pending.clear()  # `ok pkg 0.1s [no tests to run]`: nothing ran there
            continue
        package, ok = match["package"], match["verdict"] == "ok"
        if not pending:
            pairs.append((package, PASSED if ok else ERROR))
        elif not ok and not any(outcome == FAILED for _, outcome in pending):
            pairs.extend(pending)
            pairs.append((package, ERROR))
        else:
            pairs.extend(pending)
        pending = []
    pairs.extend(pending)  # output cut short before its package's verdict
    if not seen:
        return None
    return _go_results("go", pairs)


def read_go_json(text: str) -> TestResults | None:
    """`go test -json`'s events: one `pass`, `fail` or `skip` action per test and per package (test2json).

    A package that failed with no failing test of its own (a panic outside a test, `FailedBuild` in Go
    1.24+) counts as one error named by the package; a package's own `skip` is "no test files". Lines that
    are not JSON (Go before 1.24 prints build failures as text on stderr) are left to `read_go`.
    """
    if not _GO_JSON_ACTION.search(text):
        return None
    tests: dict[str, str] = {}
    packages_of: dict[str, str] = {}  # a test's name to the first package that ran one of that name
    failed_packages: list[str] = []
    failing_in: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("{") or '"Action":"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        action, package, test = event.get("Action"), event.get("Package"), event.get("Test")
        if action not in ("pass", "fail", "skip") or not isinstance(package, str):
            continue
        if isinstance(test, str):
            home = packages_of.setdefault(test, package)
            tests[test if home == package else f"{package}.{test}"] = _GO_JSON_OUTCOME[action]
            if action == "fail":
                failing_in.add(package)
        elif action == "fail":
            failed_packages.append(package)
    pairs = list(tests.items()) + [(package, ERROR) for package in failed_packages if package not in failing_in]
    return _go_results("go-json", pairs)


def _go_results(runner: str, pairs: list[tuple[str, str]]) -> TestResults:
    counts = dict.fromkeys(OUTCOMES, 0)
    for _name, outcome in pairs:
        counts[outcome] += 1
    return TestResults(runner=runner, passed=counts[PASSED], failed=counts[FAILED], errors=counts[ERROR],
                       skipped=counts[SKIPPED], tests=_bounded(pairs))


# cargo test and nextest -------------------------------------------------------------------------------

_CARGO_RESULT = re.compile(
    r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; \d+ filtered out", re.MULTILINE
)
_CARGO_TEST = re.compile(r"^test (\S.*?) \.\.\. (ok|FAILED|ignored)\s*$", re.MULTILINE)
_CARGO_OUTCOME = {"ok": PASSED, "FAILED": FAILED, "ignored": SKIPPED}


def read_cargo(text: str) -> TestResults | None:
    """cargo test's `test result: FAILED. 40 passed; 2 failed; 1 ignored; ...`, one per test binary, added up."""
    results = _CARGO_RESULT.findall(text)
    if not results:
        return None
    return TestResults(
        runner="cargo",
        passed=sum(int(p) for p, _, _ in results),
        failed=sum(int(f) for _, f, _ in results),
        skipped=sum(int(i) for _, _, i in results),
        tests=_bounded((name, _CARGO_OUTCOME[word]) for name, word in _CARGO_TEST.findall(text)),
    )


_NEXTEST_SUMMARY = re.compile(r"^\s*Summary \[\s*[\d.]+s\]\s+(\d+) tests? run: (.*)$", re.MULTILINE)
_NEXTEST_TEST = re.compile(
    r"^\s*(PASS|FAIL|SKIP|TIMEOUT|SIGSEGV|SIGABRT) \[\s*(?:[\d.]+s)?\s*\] (?:\([\d/\u2500]+\) )?(\S.*?)\s*$", re.MULTILINE
)
"""`PASS [   0.012s] (1/3) calc tests::adds`; a skipped test (`--status-level all`) has `[         ] (───)`."""
_NEXTEST_OUTCOME = {"PASS": PASSED, "FAIL": FAILED, "SKIP": SKIPPED, "TIMEOUT": FAILED, "SIGSEGV": FAILED, "SIGABRT": FAILED}


def read_nextest(text: str) -> TestResults | None:
    """nextest's `Summary [ 1.2s] 43 tests run: 41 passed, 2 failed, 1 skipped` and its `PASS [0.01s] name` lines."""
    summaries = _NEXTEST_SUMMARY.findall(text)
    if not summaries:
        return None
    _run, body = summaries[-1]
    parts: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|timed out)", body):
        parts[word] = parts.get(word, 0) + int(number)
    return TestResults(
        runner="nextest", passed=parts.get("passed", 0), failed=parts.get("failed", 0) + parts.get("timed out", 0),
        skipped=parts.get("skipped", 0),
        tests=_bounded((name, _NEXTEST_OUTCOME[word]) for word, name in _NEXTEST_TEST.findall(text)),
    )


# node --test -----------------------------------------------------------------------------------------

_NODE_SUMMARY = re.compile(r"^(?:#|ℹ) (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)\s*$", re.MULTILINE)
_TAP_LINE = re.compile(r"^\s*(not ok|ok) \d+ - (.+?)(?:\s+#\s*(SKIP|TODO)\b.*)?\s*$", re.MULTILINE | re.IGNORECASE)


def read_node(text: str) -> TestResults | None:
    """Node's own runner (`node --test`): `# tests 4`, `# pass 2`, `# fail 1`, `# skipped 1` (`ℹ` for the spec
    reporter), and the TAP reporter's `ok 1 - name` / `not ok 2 - name` lines."""
    found = {key: int(number) for key, number in _NODE_SUMMARY.findall(text)}
    if "tests" not in found or "pass" not in found:
        return None
    pairs = []
    for verdict, name, directive in _TAP_LINE.findall(text):
        if directive:
            pairs.append((name, SKIPPED))
        else:
            pairs.append((name, PASSED if verdict.lower() == "ok" else FAILED))
    return TestResults(
        runner="node", passed=found.get("pass", 0), failed=found.get("fail", 0) + found.get("cancelled", 0),
        skipped=found.get("skipped", 0) + found.get("todo", 0), tests=_bounded(pairs),
    )


PARSERS: Mapping[str, Callable[[str], TestResults | None]] = {
    "pytest": read_pytest,
    "unittest": read_unittest,
    "jest": read_jest,
    "vitest": read_vitest,
    "mocha": read_mocha,
    "go": read_go,
    "go-json": read_go_json,
    "cargo": read_cargo,
    "nextest": read_nextest,
    "node": read_node,
}
"""Every runner whose summary lines are read, by name."""

"""No silent skip: at the end of a run every skipped test is listed with its reason, and with
`--allowed-skips FILE` (scripts/test.sh passes tests/allowed_skips.txt) a skip not on that list fails the run.

The list holds the few skips a machine really cannot avoid; anything else that skips is a tool the set-up
(scripts/setup.d) should have installed, or a test that hides a gap. One line per allowed skip:

    tests/test_control.py::test_a_client_of_another_user_*   # needs root: no other user to run as otherwise

a glob of test ids (fnmatch: `*` also crosses `::` and `[...]`), then `#` and why it cannot be avoided. A line
without its reason is refused: the list is read by people deciding whether a skip is still fair.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Allowed:
    pattern: str
    why: str


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str


class AllowListError(ValueError):
    """A line of the allow-list that cannot be read (named by file and line)."""


def read_allowed(text: str, name: str = "allowed skips") -> tuple[Allowed, ...]:
    """The allow-list's entries; AllowListError for a line with no pattern or no reason."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, hash_, why = line.partition("#")
        if not pattern.strip() or not hash_ or not why.strip():
            raise AllowListError(f"{name}:{number}: expected 'TEST-ID-GLOB  # why it cannot be avoided', "
                                 f"got {line!r}")
        entries.append(Allowed(pattern.strip(), why.strip()))
    return tuple(entries)


def not_allowed(skips: list[Skip], allowed: tuple[Allowed, ...]) -> list[Skip]:
    """The skips no entry of the list covers."""
    return [s for s in skips if not any(fnmatch.fnmatchcase(s.nodeid, a.pattern) for a in allowed)]


def skip_of(report: pytest.TestReport | pytest.CollectReport) -> Skip | None:
    """The skip a report tells of (an expected failure, `xfail`, is not a skip)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return Skip(report.nodeid, reason.removeprefix("Skipped: "))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--allowed-skips", metavar="FILE", default=None,
                     help="fail the run when a test skips that FILE does not allow (see tests/helpers/skips.py)")


class SkipReport:
    """Collects the skips (of the workers too: xdist replays their reports here) and says them at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.skips: dict[str, Skip] = {}  # by test id: each xdist worker reports a module-level skip again
        self.session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._add(skip_of(report))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._add(skip_of(report))

    def _add(self, skip: Skip | None) -> None:
        if skip is not None:
            self.skips.setdefault(skip.nodeid, skip)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        path = self.config.getoption("allowed_skips")
        if not self.skips and path is None:
            return
        terminalreporter.section(f"skips: {len(self.skips)}")
        allowed: tuple[Allowed, ...] = ()
        if path is not None:
            try:
                allowed = read_allowed(Path(path).read_text(encoding="utf-8"), str(path))
            except (OSError, AllowListError) as exc:
                terminalreporter.line(f"cannot read the allowed skips: {exc}", red=True)
                self._fail()
                return
        skips = sorted(self.skips.values(), key=lambda s: s.nodeid)
        unexpected = not_allowed(skips, allowed) if path is not None else []
        for skip in skips:
            mark = "NOT ALLOWED " if skip in unexpected else ""
            terminalreporter.line(f"{mark}{skip.nodeid}: {skip.reason}", red=bool(mark))
        if unexpected:
            terminalreporter.line(f"{len(unexpected)} skip(s) not allowed by {path}: install what they need "
                                  f"(scripts/setup.d) or, if no machine can avoid it, add it there with why",
                                  red=True)
            self._fail()

    def _fail(self) -> None:
        if self.session is not None and self.session.exitstatus == pytest.ExitCode.OK:
            self.session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers) reports
        config.pluginmanager.register(SkipReport(config), "ralph-skip-report")

"""What a verify means for the breaker: regression, tampering, false completion, and verified progress.

A verify's result arrives after its iteration was judged, so its verdicts are separate from the
breaker's rules over iteration reports: `VerifyJudge.judge` takes one finished verify (and whether the
agent said it was done) and gives the verdicts, each with its evidence in the reason. It keeps the
per-test history the rules need (when each test last passed, since when it fails), bounded by the
number of tests, not of iterations. Pure: no I/O, no clock.

- `regression`: a test that passed at an earlier verified iteration fails in `regression` verified
  iterations in a row; the reason names the tests and the iteration that broke them.
- `tampering`: the iteration weakened the tests (tampering.py decides when that counts).
- `false-completion`: the agent said the work is done while that iteration's verify failed (or passed
  only because the tests were weakened).
- progress: a verify that made a failing test pass; `no-progress` (with `no_verified_progress` N) after N
  verifies in a row of changed iterations that made no failing test pass and no new test pass.

A verify that proves nothing (unverified) gives no verdict and changes no history.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ralph_supervisor.triggers import rank
from ralph_supervisor.verify.results import ERROR, FAILED, PASSED
from ralph_supervisor.verify.runner import VerifyRun
from ralph_supervisor.verify.tampering import judge as judge_tampering

NO_PROGRESS = "no-progress"
REGRESSION = "regression"
TAMPERING = "tampering"
FALSE_COMPLETION = "false-completion"

NAMES_SHOWN = 5
HISTORY_MAX = 100_000
"""Tests whose history is kept; past that, the oldest names go first."""

_DONE_WORDS = re.compile(
    r"\ball (?:of the |the )?tests (?:now )?(?:pass|passed|passing|are passing|green)\b|"
    r"\b(?:task|work|everything|implementation) (?:is )?(?:complete|completed|done|finished)\b|"
    r"<promise>\s*(?:COMPLETE|DONE)\s*</promise>|\bEXIT_SIGNAL:\s*true\b",
    re.IGNORECASE,
)


def says_done(completed: bool, reply: str | None) -> bool:
    """The agent says the work is done: Ralph's `EXIT_SIGNAL: true`, a completion promise, "all tests pass"."""
    return completed or bool(reply and _DONE_WORDS.search(reply[-20_000:]))


@dataclass(frozen=True)
class Verdict:
    trigger: str
    reason: str
    trip: bool = True
    """False: only warned about (`--tampering warn`)."""


@dataclass(frozen=True)
class Judged:
    """All a verify means: its verdicts (in precedence order) and whether it showed progress."""

    verdicts: tuple[Verdict, ...]
    progress: bool
    fixed: tuple[str, ...]
    broke: tuple[str, ...]


def _names(names: list[str] | tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" (+{len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else "")


def _covered(run: VerifyRun) -> str:
    if len(run.covers) > 1:
        return f"iterations {run.covers[0]}-{run.covers[-1]}"
    return f"iteration {run.iteration}"


class VerifyJudge:
    """The per-test history and the three verdicts. `regression` 0 and the modes turn their rule off."""

    def __init__(self, *, regression: int = 2, tampering: str = "trip", false_completion: bool = True,
                 no_verified_progress: int = 0, restore_command: Callable[[int], str] | None = None) -> None:
        self.restore_command = restore_command
        self.no_verified_progress = no_verified_progress
        self._without_gain: list[int] = []
        """The verifies in a row (their iterations) that made no failing test pass and no new test pass."""
        self.regression = regression
        self.tampering = tampering
        self.false_completion = false_completion
        self._passed_at: dict[str, int] = {}
        """Each test's last verified iteration where it passed."""
        self._failing: dict[str, tuple[tuple[int, int], int]] = {}
        """A test that passed before and fails now: (the iterations the verify that broke it covered, its
        verified failures in a row)."""

    def judge(self, run: VerifyRun, claimed_done: bool) -> Judged:
        if not run.verified or run.results is None:
            return Judged((), False, (), ())
        results = run.results
        verdicts: list[Verdict] = []

        tampered = None
        if self.tampering != "off" and run.previous_results is not None:
            tampered = judge_tampering(run.findings, run.previous_results, results)
        if tampered is not None:
            before = run.previous_iteration
            command = self.restore_command(before) if self.restore_command and before is not None else None
            reason = tampered.reason(run.iteration, before, command)
            verdicts.append(Verdict(TAMPERING, reason, trip=self.tampering == "trip"))

        broke_now = self._record(run)
        if self.regression > 0:
            due = sorted(name for name, (_, streak) in self._failing.items() if streak >= self.regression)
            fresh = [name for name in due if self._failing[name][1] == self.regression]
            if fresh:
                by = sorted({self._failing[name][0] for name in fresh})
                since = "; ".join(f"iteration {a}" if a == b else f"iterations {a}-{b}" for a, b in by)
                verdicts.append(Verdict(
                    REGRESSION,
                    f"{len(fresh)} test(s) that passed before fail in {self.regression} verified iterations in a row, "
                    f"broken by {since}: {_names(fresh)}",
                ))

        if self.false_completion and claimed_done and (not results.ok or tampered is not None):
            if tampered is not None:
                why = "its tests pass only because they were weakened"
            else:
                failing = sorted(results.named(FAILED) | results.named(ERROR))
                counts = f"{results.failed} failed, {results.errors} errors, {results.passed} passed"
                why = f"its verify fails ({counts}" + (f": {_names(failing)})" if failing else ")")
            verdicts.append(Verdict(FALSE_COMPLETION, f"the agent said the work is done at {_covered(run)}, but {why}"))

        progress = bool(run.fixed) and tampered is None
        gained = progress or self._gained(run)
        if run.previous_results is not None:
            self._without_gain = [] if gained else [*self._without_gain, run.iteration]
            if self.no_verified_progress > 0 and len(self._without_gain) == self.no_verified_progress:
                first, last = self._without_gain[0], self._without_gain[-1]
                verdicts.append(Verdict(NO_PROGRESS, (
                    f"{self.no_verified_progress} verified iteration(s) in a row ({first}-{last}) changed files but "
                    f"made no failing test pass ({results.passed} passed, {results.failed + results.errors} failing)")))
        verdicts.sort(key=lambda v: rank(v.trigger))
        return Judged(tuple(verdicts), progress, run.fixed, tuple(broke_now))

    @staticmethod
    def _gained(run: VerifyRun) -> bool:
        """More tests pass, or fewer fail, than at the last verified snapshot."""
        before, after = run.previous_results, run.results
        if before is None or after is None:
            return False
        return after.passed > before.passed or (after.failed + after.errors) < (before.failed + before.errors)

    def _record(self, run: VerifyRun) -> list[str]:
        """Update the history with a verified run; the tests it broke (passed before, fail now)."""
        assert run.results is not None
        broke: list[str] = []
        for name, outcome in run.results.tests.items():
            if outcome == PASSED:
                self._passed_at.pop(name, None)
                self._passed_at[name] = run.iteration
                self._failing.pop(name, None)
            elif outcome in (FAILED, ERROR):
                if name in self._failing:
                    since, streak = self._failing[name]
                    self._failing[name] = (since, streak + 1)
                elif name in self._passed_at:
                    self._failing[name] = ((run.covers[0] if run.covers else run.iteration, run.iteration), 1)
                    broke.append(name)
        while len(self._passed_at) > HISTORY_MAX:
            self._passed_at.pop(next(iter(self._passed_at)))
        return broke

    @property
    def tracked(self) -> int:
        return len(self._passed_at) + len(self._failing)

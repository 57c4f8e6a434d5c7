"""The trip rules: one small pure function per rule, and `judge`, which applies them all to one report.

Each rule takes what it remembers (a counter or a window of the `Snapshot`), the new iteration's report and
the thresholds, and returns what it remembers now and whether it fired. None of them reads a clock, a file
or another rule's state, so each is tested alone; `judge` only composes them and sorts what fired by the
precedence of `triggers.py`.

    >>> t = Thresholds(no_progress=2)
    >>> no_progress(1, IterationReport(number=4, started_at=0, ended_at=1), t)
    (2, Fired(trigger='no-progress', reason='no progress in 2 iterations in a row (threshold 2): no file changed, no commit'))
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ralph_supervisor import format as fmt
from ralph_supervisor.breaker.snapshot import Snapshot
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.similarity import mean_pairwise_jaccard, repeats, word_set
from ralph_supervisor.text import one_line
from ralph_supervisor.triggers import rank

COOLDOWN_CAP = 8.0
"""The cooldown doubles after each failed trial, up to this many times the base."""

PARAPHRASE_WINDOW = 3
OUTPUT_WINDOW = 3


@dataclass(frozen=True)
class Thresholds:
    """The breaker's settings. 0 turns a rule off. These defaults are the defaults of the matching options."""

    no_progress: int = 3
    same_error: int = 5
    output_decline: float = 70.0
    max_failures: int = 5
    stall_s: float = 1800.0
    paraphrase: float = 0.82
    max_iterations: int = 0
    token_budget: int = 0
    daily_token_budget: int = 0
    cost_budget: float = 0.0
    daily_cost_budget: float = 0.0
    cooldown_s: float = 1800.0
    max_opens: int = 3
    trial_timeout_s: float | None = None
    """How long a trial iteration may run before it counts as failed. None: twice `stall_s` (one hour by
    default, four times Ralph's 15-minute call timeout), or one hour when stall detection is off."""
    same_error_similarity: float = 0.85
    """Passed to `repeats()`: how alike two error signatures must be to be the same error."""

    @property
    def trial_timeout(self) -> float:
        if self.trial_timeout_s is not None and self.trial_timeout_s > 0:
            return float(self.trial_timeout_s)
        return 2.0 * self.stall_s if self.stall_s > 0 else 3600.0

    @property
    def max_cooldown_s(self) -> float:
        return self.cooldown_s * COOLDOWN_CAP


@dataclass(frozen=True)
class Fired:
    """A rule that fired: its trigger and the one-line reason a human reads."""

    trigger: str
    reason: str


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 1 or value == 0 else f"{value:g} s"


def is_neutral(report: IterationReport) -> bool:
    """Usage-limited calls, calls that could not reach the agent's API (an outage) and iterations cut short by
    the supervisor itself count toward no rule."""
    return report.usage_limited or report.outage or report.cut_short


def progress_detail(report: IterationReport) -> str:
    if not report.progress:
        if report.returned_to is not None:
            return returned_detail(report.returned_to)
        return "no file changed, no commit"
    parts = []
    if report.files_changed:
        parts.append(f"{plural(report.files_changed, 'file')} changed")
    if report.commits:
        parts.append(plural(report.commits, "commit"))
    return ", ".join(parts)


def returned_detail(iteration: int) -> str:
    where = "the run's start" if iteration == 0 else f"iteration {iteration}"
    return f"the workspace returned to the state it had after {where}"


# -- one function per rule --------------------------------------------------------------------------


def blocked(report: IterationReport) -> Fired | None:
    """An error only a human can clear: one such call is enough."""
    if not report.blocked:
        return None
    what = report.blocked_reason or report.first_error or "an error only a human can clear"
    return Fired("blocked", f"iteration {report.number} is blocked: {one_line(what)}; retrying cannot help")


def consecutive_failures(count: int, last_error: str, report: IterationReport,
                         t: Thresholds) -> tuple[int, str, Fired | None]:
    """Failed calls in a row (any other counted call ends the run of them). `last_error` is the newest error
    line of the run, so the reason names what fails even when the last call's own words were lost."""
    if not report.failed:
        return 0, "", None
    count += 1
    last_error = report.first_error or last_error
    if t.max_failures <= 0 or count < t.max_failures:
        return count, last_error, None
    detail = f": {one_line(last_error)}" if last_error else ""
    if report.timed_out:
        detail = f": timed out{'; ' + one_line(last_error) if last_error else ''}"
    return count, last_error, Fired("consecutive-failures",
                                    f"{count} failed agent calls in a row (threshold {t.max_failures}){detail}")


def same_error(
    window: tuple[frozenset[str], ...], report: IterationReport, t: Thresholds
) -> tuple[tuple[frozenset[str], ...], int, Fired | None]:
    """How many iterations in a row (this one included) carry the same error set; the window keeps only
    the error sets of the current run of erroring iterations that the threshold needs."""
    current = frozenset(report.error_signatures)
    if not current:
        return (), 0, None
    same = 1
    for previous in reversed(window):
        if not repeats(current, [previous], t.same_error_similarity):
            break
        same += 1
    keep = max(1, t.same_error - 1) if t.same_error > 0 else 1
    window = (window + (current,))[-keep:]
    if t.same_error <= 0 or same < t.same_error:
        return window, same, None
    sample = one_line(report.first_error or sorted(current)[0])
    return window, same, Fired("same-error", f"the same error in {same} iterations in a row (threshold {t.same_error}): {sample}")


def no_progress(count: int, report: IterationReport, t: Thresholds) -> tuple[int, Fired | None]:
    """Iterations in a row without progress.

    A failed call neither counts nor resets the run: `consecutive-failures` judges it and names its error,
    so a loop whose calls all fail is reported as failing, not as "no file changed" (and a success after
    failures is judged as usual). A completed iteration (EXIT_SIGNAL: true) without progress is neither
    progress nor a stuck one: a finishing agent that has nothing left to change is not stuck."""
    if report.progress:
        return 0, None
    if report.failed or report.completed:
        return count, None
    count += 1
    if t.no_progress <= 0 or count < t.no_progress:
        return count, None
    return count, Fired("no-progress", f"no progress in {count} iterations in a row (threshold {t.no_progress}): "
                                       f"{progress_detail(report)}")


def paraphrase(
    window: tuple[frozenset[str], ...], blockers: tuple[bool, ...], report: IterationReport, t: Thresholds
) -> tuple[tuple[frozenset[str], ...], tuple[bool, ...], Fired | None]:
    """The last replies restate the same thing (`window` holds their word sets, `blockers` whether each
    stated a blocker). Failed calls and calls without a reply are not replies. Judged on an iteration without
    progress, or, whatever the files do, when every restatement is of a blocker: accounting for a blocker is
    progress, re-describing it is not ("Done, all tests pass" three times with progress is not a stall)."""
    if report.failed or report.reply is None:
        return window, blockers, None
    window = (window + (word_set(report.reply),))[-PARAPHRASE_WINDOW:]
    blockers = (blockers + (report.states_blocker,))[-PARAPHRASE_WINDOW:]
    restating_a_blocker = len(blockers) == PARAPHRASE_WINDOW and all(blockers)
    if t.paraphrase <= 0 or len(window) < PARAPHRASE_WINDOW or (report.progress and not restating_a_blocker):
        return window, blockers, None
    score = mean_pairwise_jaccard(list(window))
    if score < t.paraphrase:
        return window, blockers, None
    if restating_a_blocker:
        return window, blockers, Fired(
            "paraphrase", f"the last {PARAPHRASE_WINDOW} replies restate the same blocker (mean word-set Jaccard "
                          f"{score:.2f} >= {t.paraphrase:g}): {one_line(report.reply, 140)}")
    return window, blockers, Fired("paraphrase", f"the last {PARAPHRASE_WINDOW} replies restate the same thing "
                                                 f"(mean word-set Jaccard {score:.2f} >= {t.paraphrase:g})")


def output_decline(
    window: tuple[int, ...], report: IterationReport, t: Thresholds
) -> tuple[tuple[int, ...], Fired | None]:
    """Against the mean output of the 3 counted iterations before this one. Failed calls are neither judged
    nor kept (a failed call's short error output is not a decline of the agent's work)."""
    if report.failed:
        return window, None
    fired = None
    if t.output_decline > 0 and len(window) >= OUTPUT_WINDOW and not report.progress and not report.completed:
        mean = sum(window) / len(window)
        if mean > 0:
            decline = (mean - report.output_bytes) / mean * 100.0
            if decline >= t.output_decline:
                fired = Fired("output-decline",
                              f"iteration {report.number} printed {report.output_bytes} bytes, {decline:.0f}% less than "
                              f"the mean {mean:.0f} of the {OUTPUT_WINDOW} before it "
                              f"(threshold {t.output_decline:g}%), with no progress")
    return (window + (max(0, report.output_bytes),))[-OUTPUT_WINDOW:], fired


def dollars(value: float) -> str:
    """A budget's dollars in a reason: cents, or four places under ten cents."""
    return fmt.dollars(value, small=True)


def caps(s: Snapshot, report: IterationReport, t: Thresholds, daily_tokens_today: int,
         daily_cost_today: float = 0.0) -> Fired | None:
    """The first limit reached, in precedence order (tokens, dollars, daily tokens, daily dollars,
    iterations). `s` already counts this report's tokens and cost."""
    if t.token_budget > 0 and s.tokens_used >= t.token_budget:
        return Fired("token-budget", f"token budget reached ({s.tokens_used} >= {t.token_budget})")
    if t.cost_budget > 0 and s.cost_used >= t.cost_budget:
        return Fired("cost-budget", f"cost budget reached ({dollars(s.cost_used)} >= {dollars(t.cost_budget)})")
    if t.daily_token_budget > 0 and daily_tokens_today >= t.daily_token_budget:
        return Fired("daily-budget",
                     f"daily token budget reached ({daily_tokens_today} tokens today >= {t.daily_token_budget})")
    if t.daily_cost_budget > 0 and daily_cost_today >= t.daily_cost_budget:
        return Fired("daily-cost-budget", f"daily cost budget reached ({dollars(daily_cost_today)} today >= "
                                          f"{dollars(t.daily_cost_budget)})")
    if t.max_iterations > 0 and report.number >= t.max_iterations:
        return Fired("max-iterations", f"iteration cap reached ({report.number} >= {t.max_iterations})")
    return None


def stall_reason(silent_for: float, t: Thresholds) -> str:
    return (f"the current call has been silent for {seconds(silent_for)} (threshold {seconds(t.stall_s)}): "
            "no output, no file change, no CPU")


def no_call_reason(waited: float, t: Thresholds, loop_errors: tuple[str, ...]) -> str:
    """The loop runs but never reaches its agent: say so, with the loop's last error lines as evidence."""
    reason = (f"no agent call started for {seconds(waited)} (threshold {seconds(t.stall_s)}): "
              "the loop runs but never reaches its agent")
    if loop_errors:
        reason += "; its last errors: " + " | ".join(one_line(line) for line in loop_errors[-3:])
    return reason


# -- all of them ------------------------------------------------------------------------------------


def judge(s: Snapshot, report: IterationReport, t: Thresholds) -> tuple[Snapshot, list[Fired]]:
    """Apply a counted (not neutral) iteration to every rule: the snapshot with the rules' new counters and
    windows, and every rule that fired, in precedence order."""
    fired: list[Fired | None] = [blocked(report)]
    failures, failure_error, failed = consecutive_failures(s.consecutive_failures, s.failure_error, report, t)
    errors, same, repeated = same_error(s.recent_error_sets, report, t)
    stuck, idle = no_progress(s.consecutive_no_progress, report, t)
    replies, blockers, restated = paraphrase(s.recent_reply_words, s.recent_reply_blockers, report, t)
    outputs, declined = output_decline(s.recent_output_bytes, report, t)
    fired += [failed, repeated, idle, restated, declined]
    judged = replace(
        s,
        consecutive_failures=failures,
        failure_error=failure_error,
        consecutive_same_error=same,
        consecutive_no_progress=stuck,
        recent_error_sets=errors,
        recent_reply_words=replies,
        recent_reply_blockers=blockers,
        recent_output_bytes=outputs,
    )
    return judged, sorted((f for f in fired if f is not None), key=lambda f: rank(f.trigger))

"""The loop-context ledger: parse, validate, decide, summarise. Pure functions, no I/O.

A loop that keeps a ledger `{"goal", "attempts": [{iteration, action, outcome, error, tokensUsed}]}` asks
before each iteration whether it may go on. The rules, their order, the reason texts and the Markdown summary
follow `@cobusgreyling/loop-context` 1.5.0 exactly, so either tool gives the same answer on a well-formed
ledger; where loop-context crashes or misreads malformed input, `parse_ledger` refuses it with one line naming
the attempt and the field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ralph_supervisor.signature import JS_WHITESPACE, error_signature, js_trim, similarity, trigrams

OUTCOMES = ("success", "failure", "noop")
TRIGGERS = ("ok", "stagnation", "frustration", "no-progress", "token-budget", "max-iterations", "daily-budget")
MAX_SAFE_INTEGER = 2**53 - 1  # beyond this JavaScript's numbers (and so loop-context's sums) are inexact
FRUSTRATION_THRESHOLD = 3  # fixed in loop-context: no flag changes it

# loop-cost 1.x registry: realistic tokens per run by readiness level, and the suggested daily cap.
PATTERN_BUDGETS: dict[str, dict[str, int]] = {
    "pr-babysitter": {"L1": 10700, "L2": 23050, "L3": 91700, "daily": 2000000},
    "daily-triage": {"L1": 23000, "L2": 57500, "L3": 69500, "daily": 100000},
    "ci-sweeper": {"L1": 9500, "L2": 19250, "L3": 69500, "daily": 1000000},
    "post-merge-cleanup": {"L1": 19000, "L2": 44500, "L3": 53500, "daily": 200000},
    "dependency-sweeper": {"L1": 10500, "L2": 25250, "L3": 98000, "daily": 500000},
    "changelog-drafter": {"L1": 17000, "L2": 29000, "L3": 34250, "daily": 100000},
    "issue-triage": {"L1": 13800, "L2": 22500, "L3": 26700, "daily": 80000},
}
LEVELS = ("L1", "L2", "L3")


class LedgerError(ValueError):
    """A ledger (or a flag about it) that we refuse; the message is one line naming the thing."""


# ── values ─────────────────────────────────────────────────────────


class Attempt(NamedTuple):
    """One iteration of the loop. `iteration` is kept as given: loop-context never reads it.

    An immutable NamedTuple rather than a frozen dataclass: it is twice as cheap to build, and a ledger
    may hold 100,000 of them."""

    action: str
    outcome: str
    error: str | None = None
    tokens_used: int = 0
    iteration: Any = None


@dataclass(frozen=True)
class Ledger:
    goal: str
    attempts: tuple[Attempt, ...] = ()

    @property
    def tokens_used(self) -> int:
        return sum(a.tokens_used for a in self.attempts)


@dataclass(frozen=True)
class BreakerConfig:
    """loop-context's DEFAULT_BREAKER; `token_budget=None` means no budget."""

    max_iterations: int = 10
    stagnation: int = 3
    no_progress: int = 5
    similarity_threshold: float = 0.85
    token_budget: int | None = None
    frustration: int = FRUSTRATION_THRESHOLD


@dataclass(frozen=True)
class PruneConfig:
    """loop-context's DEFAULT_PRUNE: what `--inject` keeps of the recent attempts."""

    max_trace_lines: int = 8
    window: int = 5
    similarity_threshold: float = 0.85


@dataclass(frozen=True)
class Verdict:
    """What `check` decides about a ledger, as loop-context prints it (not the breaker's `Decision`)."""

    iterations: int
    tokens_used: int
    should_continue: bool
    escalate: bool
    trigger: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON object, keys in loop-context's order."""
        return {
            "iterations": self.iterations,
            "tokensUsed": self.tokens_used,
            "shouldContinue": self.should_continue,
            "escalate": self.escalate,
            "trigger": self.trigger,
            "reason": self.reason,
        }


# ── parsing ────────────────────────────────────────────────────────


def _reject_constant(name: str) -> Any:
    raise LedgerError(f"{name} is not JSON")


def _show(value: Any) -> str:
    """A short one-line rendering of a bad value for an error message."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_ledger(text: str, source: str = "ledger") -> Ledger:
    """Parse and validate ledger JSON text. Raises LedgerError with one line naming the attempt and field."""
    if not js_trim(text):
        raise LedgerError("No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.")
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{source}: bad JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except LedgerError as exc:
        raise LedgerError(f"{source}: bad JSON: {exc}") from None
    except RecursionError:
        raise LedgerError(f"{source}: bad JSON: nested too deeply") from None
    except ValueError:  # Python refuses integers of more than 4300 digits (sys.get_int_max_str_digits)
        raise LedgerError(f"{source}: bad JSON: a number too long to read") from None
    return ledger_from_json(raw, source)


def ledger_from_json(raw: Any, source: str = "ledger") -> Ledger:
    """Validate an already-decoded ledger object."""
    if not isinstance(raw, dict):
        raise LedgerError(f"{source}: expected an object {{goal, attempts}}, got {_json_type(raw)}")
    if "goal" not in raw:
        raise LedgerError(f"{source}: goal is missing")
    if not isinstance(raw["goal"], str):
        raise LedgerError(f"{source}: goal must be a string, got {_json_type(raw['goal'])}")
    if "attempts" not in raw:
        raise LedgerError(f"{source}: attempts is missing")
    if not isinstance(raw["attempts"], list):
        raise LedgerError(f"{source}: attempts must be an array, got {_json_type(raw['attempts'])}")
    attempts = tuple([_attempt(item, i, source) for i, item in enumerate(raw["attempts"])])
    return Ledger(goal=raw["goal"], attempts=attempts)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


_OUTCOME_SET = frozenset(OUTCOMES)


def _attempt(item: Any, index: int, source: str) -> Attempt:
    if type(item) is dict:  # fast path for a well-formed attempt; anything else gets the careful checks below
        action = item.get("action")
        outcome = item.get("outcome")
        error = item.get("error")
        tokens = item.get("tokensUsed")
        if (
            type(action) is str
            and type(outcome) is str
            and outcome in _OUTCOME_SET
            and (error is None or type(error) is str)
            and (tokens is None or (type(tokens) is int and 0 <= tokens <= MAX_SAFE_INTEGER))
        ):
            return Attempt(action, outcome, error, tokens or 0, item.get("iteration"))
    where = f"{source}: attempts[{index}]"
    if not isinstance(item, dict):
        raise LedgerError(f"{where} must be an object, got {_json_type(item)}")
    action = item.get("action")
    if "action" not in item:
        raise LedgerError(f"{where}.action is missing")
    if not isinstance(action, str):
        raise LedgerError(f"{where}.action must be a string, got {_json_type(action)}")
    if "outcome" not in item:
        raise LedgerError(f"{where}.outcome is missing")
    outcome = item["outcome"]
    if outcome not in OUTCOMES or not isinstance(outcome, str):
        raise LedgerError(f"{where}.outcome must be one of success, failure, noop; got {_show(outcome)}")
    error = item.get("error")
    if error is not None and not isinstance(error, str):
        raise LedgerError(f"{where}.error must be a string, got {_json_type(error)}")
    tokens = item.get("tokensUsed")
    if tokens is None:
        tokens = 0
    elif isinstance(tokens, bool) or not isinstance(tokens, (int, float)):
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {_json_type(tokens)} {_show(tokens)}")
    elif isinstance(tokens, float) and (not math.isfinite(tokens) or tokens != int(tokens)):
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {_show(tokens)}")
    tokens = int(tokens)
    if tokens < 0:
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {tokens}")
    if tokens > MAX_SAFE_INTEGER:
        raise LedgerError(f"{where}.tokensUsed is larger than {MAX_SAFE_INTEGER}")
    return Attempt(action=action, outcome=outcome, error=error, tokens_used=tokens, iteration=item.get("iteration"))


# ── writing (the supervisor's own ledger.json) ─────────────────────


def attempt_dict(iteration: int, action: str, outcome: str, error: str | None, tokens: int) -> dict[str, Any]:
    """One attempt as the supervisor writes it. `error` is left out when there is none, because
    loop-context's --inject crashes on `"error": null`."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}; got {outcome!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a non-negative integer; got {tokens!r}")
    out: dict[str, Any] = {"iteration": iteration, "action": action, "outcome": outcome}
    if error is not None:
        out["error"] = error
    out["tokensUsed"] = tokens
    return out


def dump_ledger(goal: str, attempts: list[dict[str, Any]]) -> str:
    """The ledger file's text: 2-space indented JSON, non-ASCII kept, with a final newline."""
    return json.dumps({"goal": goal, "attempts": attempts}, indent=2, ensure_ascii=False) + "\n"


# ── the breaker ────────────────────────────────────────────────────


def trailing_failures(attempts: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """The run of `failure` attempts at the end of the ledger; any other outcome ends it."""
    start = len(attempts)
    while start > 0 and attempts[start - 1].outcome == "failure":
        start -= 1
    return attempts[start:]


def _similar_run(run: tuple[Attempt, ...], threshold: float, key: Any) -> int:
    """Walk back from the last attempt, counting those whose key text is similar to the LAST one's
    (never the neighbour's), until the first miss. Texts are computed only as the walk reaches them."""
    last = key(run[-1])
    count = 0
    for attempt in reversed(run):
        if similarity(key(attempt), last) >= threshold:
            count += 1
        else:
            break
    return count


def check_breaker(ledger: Ledger, config: BreakerConfig = BreakerConfig()) -> Verdict:
    """loop-context's checkCircuitBreaker: the first rule that fires wins, most actionable first."""
    iterations = len(ledger.attempts)
    tokens = ledger.tokens_used

    def escalate(trigger: str, reason: str) -> Verdict:
        return Verdict(iterations, tokens, False, True, trigger, reason)

    fail_run = trailing_failures(ledger.attempts)
    if fail_run and len(fail_run) >= config.stagnation:
        same = _similar_run(fail_run, config.similarity_threshold, lambda a: error_signature(a.error or ""))
        if same >= config.stagnation:
            last_sig = error_signature(fail_run[-1].error or "")
            return escalate(
                "stagnation",
                f'Same error repeated {same}× in a row (threshold {config.stagnation}): "{last_sig}". '
                "Escalating instead of retrying.",
            )
    if fail_run and len(fail_run) >= config.frustration:
        same = _similar_run(fail_run, config.similarity_threshold, lambda a: a.action)
        if same >= config.frustration:
            return escalate(
                "frustration",
                "Semantic looping detected: agent repeated highly similar action "
                f'{same}× in a row (threshold {config.frustration}): "{fail_run[-1].action}". Escalating.',
            )
    if len(fail_run) >= config.no_progress:
        return escalate(
            "no-progress",
            f"{len(fail_run)} consecutive failures with no progress (threshold {config.no_progress}). Escalating.",
        )
    if config.token_budget is not None and tokens >= config.token_budget:
        return escalate(
            "token-budget",
            f"Token budget reached ({tokens} ≥ {config.token_budget}). Escalating to avoid cost blowup.",
        )
    if iterations >= config.max_iterations:
        return escalate("max-iterations", f"Iteration cap reached ({iterations} ≥ {config.max_iterations}). Escalating.")
    return Verdict(iterations, tokens, True, False, "ok", "Within limits — cleared to continue.")


# ── output ─────────────────────────────────────────────────────────

_SURROGATE = re.compile("[\ud800-\udfff]")


def _js_string(text: str) -> str:
    """Join split surrogate pairs as a JavaScript string would hold them (lone halves stay lone)."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def printable(text: str) -> str:
    """What `console.log` writes: lone surrogates become U+FFFD."""
    return _SURROGATE.sub("\ufffd", _js_string(text))


def to_json(value: Any, indent: int | None = 2) -> str:
    """JSON.stringify(value, null, indent): non-ASCII kept, lone surrogates escaped."""
    if indent is None:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", _js_string(text))


def human_line(decision: Verdict) -> str:
    word = "ESCALATE" if decision.escalate else "CONTINUE"
    return printable(f"{word} [{decision.trigger}] — {decision.reason}")


# ── budgets from a pattern ─────────────────────────────────────────


def _known_pattern(pattern: str) -> dict[str, int]:
    if pattern not in PATTERN_BUDGETS:
        raise LedgerError(f"Unknown pattern: {pattern}. Use --list for ids.")
    return PATTERN_BUDGETS[pattern]


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise LedgerError(f"Invalid level: {level}. Valid: {', '.join(LEVELS)}")
    return level


def token_budget_for(pattern: str, level: str) -> int:
    """loop-cost's realistic tokens per run for a pattern at a readiness level."""
    return _known_pattern(pattern)[check_level(level)]


def daily_cap_for(pattern: str) -> int:
    """loop-cost's suggested daily token cap for a pattern (the same at every level)."""
    return _known_pattern(pattern)["daily"]


def pattern_table() -> str:
    """The `--list` output: one pattern a line with its budgets."""
    lines = ["pattern\tL1\tL2\tL3\tdaily cap"]
    for name, b in PATTERN_BUDGETS.items():
        lines.append(f"{name}\t{b['L1']}\t{b['L2']}\t{b['L3']}\t{b['daily']}")
    return "\n".join(lines)


# ── daily budget ───────────────────────────────────────────────────

MAX_COUNTED_LEDGERS = 500


@dataclass(frozen=True)
class CountedLedger:
    """A ledger already counted today: how many of its attempts, and the hash of that prefix."""

    attempts: int
    hash: str


@dataclass(frozen=True)
class DailyState:
    """`.loop-context/daily-spend.<key>.json`: loop-context's two keys plus which ledgers we counted."""

    date: str
    tokens_used_today: int
    counted: tuple[CountedLedger, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "tokensUsedToday": self.tokens_used_today,
            "countedLedgers": [{"attempts": c.attempts, "hash": c.hash} for c in self.counted],
        }


def daily_state_from_json(raw: Any) -> DailyState:
    """Read a state file's object. loop-context's own files (no countedLedgers) are accepted."""
    if not isinstance(raw, dict):
        raise LedgerError(f"expected an object, got {_json_type(raw)}")
    date = raw.get("date")
    spent = raw.get("tokensUsedToday")
    if not isinstance(date, str):
        raise LedgerError("date must be a string")
    if (
        isinstance(spent, bool)
        or not isinstance(spent, (int, float))
        or not math.isfinite(spent)
        or spent < 0
        or spent != int(spent)
    ):
        raise LedgerError("tokensUsedToday must be a non-negative integer")
    counted_raw = raw.get("countedLedgers", [])
    if not isinstance(counted_raw, list):
        raise LedgerError("countedLedgers must be an array")
    counted = []
    for i, c in enumerate(counted_raw):
        if (
            not isinstance(c, dict)
            or isinstance(c.get("attempts"), bool)
            or not isinstance(c.get("attempts"), int)
            or not isinstance(c.get("hash"), str)
        ):
            raise LedgerError(f"countedLedgers[{i}] must be {{attempts: integer, hash: string}}")
        counted.append(CountedLedger(c["attempts"], c["hash"]))
    return DailyState(date, int(spent), tuple(counted))


def prefix_hashes(ledger: Ledger) -> list[str]:
    """hashes[i] identifies the ledger's first i attempts (a hash chain seeded by the goal)."""
    import hashlib  # only the daily budget needs it: keep `check`'s start-up short

    h = hashlib.sha256(("goal\0" + ledger.goal).encode("utf-8", "surrogatepass")).hexdigest()
    out = [h]
    for a in ledger.attempts:
        canon = json.dumps(
            [a.iteration, a.action, a.outcome, a.error, a.tokens_used], ensure_ascii=True, sort_keys=True
        )
        h = hashlib.sha256((h + canon).encode("ascii")).hexdigest()
        out.append(h)
    return out


def record_daily_spend(state: DailyState | None, ledger: Ledger, today: str) -> tuple[DailyState, int]:
    """Add the tokens of the attempts not counted yet today; returns the new state and the tokens added.

    A ledger already seen (same prefix of attempts) adds only its new attempts, so checking an unchanged
    ledger twice adds nothing. A ledger whose earlier attempts changed is a different run and counts whole.
    """
    if state is None or state.date != today:
        state = DailyState(today, 0, ())
    hashes = prefix_hashes(ledger)
    n = len(ledger.attempts)
    best: CountedLedger | None = None
    for c in state.counted:
        if 0 <= c.attempts <= n and hashes[c.attempts] == c.hash and (best is None or c.attempts > best.attempts):
            best = c
    already = best.attempts if best is not None else 0
    added = sum(a.tokens_used for a in ledger.attempts[already:])
    kept = tuple(c for c in state.counted if c is not best)
    counted = (kept + (CountedLedger(n, hashes[n]),))[-MAX_COUNTED_LEDGERS:]
    return DailyState(today, state.tokens_used_today + added, counted), added


def apply_daily_budget(decision: Verdict, spent_today: int, cap: int, pattern: str | None) -> Verdict:
    """Escalate on the daily cap, but only when no per-run rule already did (loop-context's order)."""
    if decision.escalate or spent_today < cap:
        return decision
    what = f'Daily token spend for pattern "{pattern}"' if pattern else "Daily token spend"
    return Verdict(
        decision.iterations,
        decision.tokens_used,
        False,
        True,
        "daily-budget",
        f"{what} reached {spent_today} (cap {cap}). Escalating to avoid cost blowup.",
    )


# ── --inject ───────────────────────────────────────────────────────


def prune_stack_trace(trace: str, max_lines: int) -> str:
    """Keep a trace's head, noting how much was dropped."""
    lines = trace.split("\n")
    if len(lines) <= max_lines:
        return js_trim(trace)
    kept = "\n".join(lines[:max_lines]).rstrip(JS_WHITESPACE)
    omitted = len(lines) - max_lines
    return f"{kept}\n  … ({omitted} more line{'' if omitted == 1 else 's'} pruned)"


@dataclass(frozen=True)
class _Pruned:
    outcome: str
    error: str | None
    repeated: int = 1


def prune_recent(ledger: Ledger, config: PruneConfig = PruneConfig()) -> list[_Pruned]:
    """The last `window` attempts, traces trimmed, consecutive similar failures collapsed into the first."""
    collapsed: list[_Pruned] = []
    recent = ledger.attempts[-config.window :] if config.window > 0 else ()
    for a in recent:
        err = prune_stack_trace(a.error, config.max_trace_lines) if a.error is not None else None
        prev = collapsed[-1] if collapsed else None
        if (
            prev is not None
            and prev.outcome == "failure"
            and a.outcome == "failure"
            and similarity(error_signature(prev.error or ""), error_signature(err or "")) >= config.similarity_threshold
        ):
            collapsed[-1] = _Pruned(prev.outcome, prev.error, prev.repeated + 1)
        else:
            collapsed.append(_Pruned(a.outcome, err))
    return collapsed


@dataclass(frozen=True)
class ErrorGroup:
    signature: str
    count: int
    sample: str


def failure_patterns(ledger: Ledger, threshold: float) -> list[ErrorGroup]:
    """Failures grouped by similarity to each group's FIRST signature (the first group that matches wins),
    most frequent first, as loop-context's summarizeAttempts groups them.

    loop-context compares every failure with every group: quadratic when errors are all different. We get
    the same groups with a prefix filter: two trigram sets with Jaccard >= t must share a trigram among the
    first |x| - ceil(t|x|) + 1 of each (in one fixed order, rarest first), so only groups sharing such a
    trigram are compared at all. A signature seen before goes straight to the group it went to then."""
    failing = [a.error for a in ledger.attempts if a.outcome == "failure" and a.error]
    sigs = [error_signature(e) for e in failing]
    freq: dict[bytes, int] = {}
    for sig in dict.fromkeys(sigs):
        for tok in trigrams(sig):
            freq[tok] = freq.get(tok, 0) + 1

    def prefix(sig: str) -> list[bytes]:
        toks = sorted(trigrams(sig), key=lambda tok: (freq[tok], tok))
        overlap = math.ceil(threshold * len(toks) - 1e-9)  # the least overlap a match needs (rounded safely down)
        return toks[: len(toks) - overlap + 1]

    index: dict[bytes, list[int]] = {}
    seen: dict[str, int] = {}
    groups: list[list[Any]] = []  # [signature, count, sample]
    for error, sig in zip(failing, sigs):
        g = seen.get(sig)
        if g is None:
            if threshold <= 0:  # everything is similar to the first group: no filter can help
                candidates: list[int] = [0] if groups else []
            else:
                candidates = sorted({c for tok in prefix(sig) for c in index.get(tok, ())})
            g = next((c for c in candidates if similarity(groups[c][0], sig) >= threshold), None)
            if g is None:
                g = len(groups)
                groups.append([sig, 0, js_trim(error.split("\n")[0])])
                for tok in prefix(sig) if threshold > 0 else ():
                    index.setdefault(tok, []).append(g)
            seen[sig] = g
        groups[g][1] += 1
    return sorted((ErrorGroup(s, c, m) for s, c, m in groups), key=lambda grp: -grp.count)


def build_injection(
    ledger: Ledger, breaker: BreakerConfig = BreakerConfig(), prune: PruneConfig = PruneConfig()
) -> str:
    """loop-context's buildContextInjection: the compact Markdown block for the next prompt."""
    decision = check_breaker(ledger, breaker)
    successes = sum(1 for a in ledger.attempts if a.outcome == "success")
    noops = sum(1 for a in ledger.attempts if a.outcome == "noop")
    failures = len(ledger.attempts) - successes - noops
    tokens = ledger.tokens_used
    lines = ["## Loop Context (managed)", "", f"**Goal:** {ledger.goal}"]
    progress = f"**Progress:** iteration {len(ledger.attempts)} · {successes} ok · {failures} failed"
    lines.append(progress + (f" · {tokens} tokens" if tokens else ""))
    lines.append("")
    actions = list(dict.fromkeys(a.action for a in ledger.attempts))
    if actions:
        lines.append("**Already tried (do NOT repeat):**")
        lines.extend(f"- {action}" for action in actions)
        lines.append("")
    groups = failure_patterns(ledger, breaker.similarity_threshold)
    if groups:
        lines.append("**Failure patterns:**")
        lines.extend(f"- ({g.count}×) {g.sample}" for g in groups)
        lines.append("")
    last_fail = next((p for p in reversed(prune_recent(ledger, prune)) if p.outcome == "failure"), None)
    if last_fail is not None and last_fail.error:
        lines += ["**Most recent error (pruned):**", "```", last_fail.error, "```", ""]
    if decision.escalate:
        lines.append(f"> STOP — circuit breaker tripped ({decision.trigger}). {decision.reason}")
    else:
        lines.append(f"> Circuit breaker: OK ({decision.iterations}/{breaker.max_iterations} iterations used).")
    return printable("\n".join(lines))

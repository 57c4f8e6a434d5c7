"""`check --inject`: loop-context's Markdown context block for the next prompt, the recent attempts pruned and
the failures grouped into patterns.

Imported only by `--inject`, so a plain check does not pay for dataclasses.

    >>> print(build_injection(parse_ledger(text), BreakerConfig(), PruneConfig()))   # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ralph_supervisor.ledger import BreakerConfig, Ledger, check_breaker, printable
from ralph_supervisor.signature import JS_WHITESPACE, error_signature, js_trim, similarity, trigrams


@dataclass(frozen=True)
class PruneConfig:
    """loop-context's DEFAULT_PRUNE: what `--inject` keeps of the recent attempts."""

    max_trace_lines: int = 8
    window: int = 5
    similarity_threshold: float = 0.85



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

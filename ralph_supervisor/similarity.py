"""How alike two error sets or two replies are: the text measures the breaker's rules rely on.

A leaf module (it imports only `signature`, itself a leaf), so the pure breaker and the evidence
sources share these functions without depending on each other.

- **Same error** (Ralph's designed multi-line rule, made robust to line numbers, paths and ports):
  `repeats(current, previous)` is True when every signature of the current error set is similar
  (loop-context's trigram similarity >= a threshold) to one in each previous set.
- **Paraphrase** (goal-circuit-breaker): a reply becomes the set of its content words (`word_set`);
  three rewordings of one blocker give (nearly) the same set, different work gives different sets, and
  `mean_pairwise_jaccard` of the last replies' sets says which.

    >>> mean_pairwise_jaccard([word_set("deploy blocked: owner attestation gate unsigned")] * 3)
    1.0
    >>> repeats(frozenset({"Error: connect ECONNREFUSED #.#.#.#"}), [frozenset({"Error: connect ECONNREFUSED #.#.#.#"})])
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import combinations

from ralph_supervisor.signature import similarity

STOPWORDS: frozenset[str] = frozenset(
    (
        "transcript evidence shows condition demands assistant message final however remain remains still "
        "state operate system entire unexecuted unsatisfied unfixed these there which would their with that this"
    ).split()
)
"""Boilerplate words that appear in every restatement and say nothing about what is blocked."""

_WORD = re.compile(r"[a-z]{4,}")


def word_set(text: str) -> frozenset[str]:
    """Lower-cased runs of 4 or more ASCII letters, minus the stoplist."""
    return frozenset(_WORD.findall(text.lower())) - STOPWORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b|; an empty set scores 0 against anything (so short "ok" replies never look stalled)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def mean_pairwise_jaccard(sets: Sequence[frozenset[str]]) -> float:
    """The mean Jaccard index over all pairs; 0.0 when there is no pair."""
    pairs = list(combinations(sets, 2))
    if not pairs:
        return 0.0
    return sum(jaccard(a, b) for a, b in pairs) / len(pairs)


def repeats(current: frozenset[str], previous: Sequence[frozenset[str]], threshold: float = 0.85) -> bool:
    """True when `current` is non-empty and every one of its signatures is similar (>= threshold) to at
    least one signature in EACH of the previous sets. Any empty previous set, or no previous set at all,
    means no repeat: different errors (or none) in between are progress, not stagnation."""
    if not current or not previous:
        return False
    for earlier in previous:
        if not earlier:
            return False
        for sig in current:
            if sig in earlier:
                continue
            if not any(similarity(sig, other) >= threshold for other in earlier):
                return False
    return True

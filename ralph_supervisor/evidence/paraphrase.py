"""The paraphrase stall (goal-circuit-breaker, REFERENCE section 4).

A loop that keeps restating the same blockers in new words makes no progress even though every reply is
different text. Reducing each reply to the set of its content words makes rewordings collide: three
rewordings of one blocker give (nearly) the same set, genuinely different work gives different sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import combinations

__all__ = ["STOPWORDS", "WINDOW", "is_paraphrase_stall", "jaccard", "mean_pairwise_jaccard", "word_set"]

WINDOW = 3
"""The stall is judged over this many most recent replies."""

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


def is_paraphrase_stall(replies: Sequence[str], ratio: float = 0.82) -> bool:
    """True when the last 3 replies' word sets have mean pairwise Jaccard >= `ratio`.

    Fewer than 3 replies is never a stall; a ratio of 0 (or less) turns the rule off, as `--paraphrase 0` says.
    """
    if ratio <= 0 or len(replies) < WINDOW:
        return False
    sets = [word_set(reply) for reply in replies[-WINDOW:]]
    return mean_pairwise_jaccard(sets) >= ratio

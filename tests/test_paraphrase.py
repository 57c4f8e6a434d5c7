"""The paraphrase stall: word sets and their mean pairwise Jaccard (REFERENCE section 4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.paraphrase import (
    STOPWORDS,
    is_paraphrase_stall,
    jaccard,
    mean_pairwise_jaccard,
    word_set,
)

REWORDINGS = [
    "Owner attestation gate unsigned, deploy blocked.",
    "The deploy is still blocked: the owner attestation gate remains unsigned.",
    "However, the gate for owner attestation is unsigned, so deploy remains blocked.",
]
DIFFERENT_WORK = ["tests failing in auth module", "tests failing in billing module", "lint errors in docs folder"]


def test_word_set_keeps_runs_of_four_or_more_ascii_letters_lower_cased() -> None:
    assert word_set("Deploy BLOCKED: the gate (v2) is off; migrations2run") == {"deploy", "blocked", "gate", "migrations"}


def test_word_set_splits_on_non_ascii_letters() -> None:
    # "résumé" is the runs "r", "sum": neither has 4 letters; "naïve" gives "na" and "ve".
    assert word_set("résumé naïve") == frozenset()
    assert word_set("Straße Bauarbeiten") == {"stra", "bauarbeiten"}


def test_word_set_drops_the_stoplist() -> None:
    assert word_set(" ".join(sorted(STOPWORDS))) == frozenset()
    assert word_set("This state remains unfixed, however the system shows evidence") == frozenset()


def test_three_rewordings_of_one_blocker_have_mean_one_and_stall() -> None:
    sets = [word_set(r) for r in REWORDINGS]
    assert sets[0] == {"owner", "attestation", "gate", "unsigned", "deploy", "blocked"}
    assert sets[0] == sets[1] == sets[2]
    assert mean_pairwise_jaccard(sets) == 1.0
    assert is_paraphrase_stall(REWORDINGS)


def test_different_work_has_mean_point_two_and_does_not_stall() -> None:
    sets = [word_set(r) for r in DIFFERENT_WORK]
    assert mean_pairwise_jaccard(sets) == pytest.approx(0.2)
    assert not is_paraphrase_stall(DIFFERENT_WORK)


def test_fewer_than_three_replies_never_stall() -> None:
    assert not is_paraphrase_stall(REWORDINGS[:2])
    assert not is_paraphrase_stall([])


def test_only_the_last_three_replies_count() -> None:
    assert is_paraphrase_stall(DIFFERENT_WORK + REWORDINGS)
    assert not is_paraphrase_stall(REWORDINGS + DIFFERENT_WORK)


def test_short_ok_replies_never_look_stalled() -> None:
    assert word_set("ok") == frozenset()
    assert not is_paraphrase_stall(["ok", "ok", "ok"])
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_ratio_threshold_is_inclusive_and_zero_turns_it_off() -> None:
    replies = ["alpha beta gamma delta", "alpha beta gamma delta", "alpha beta gamma epsilon"]
    mean = mean_pairwise_jaccard([word_set(r) for r in replies])
    assert mean == pytest.approx((1.0 + 0.6 + 0.6) / 3)
    assert is_paraphrase_stall(replies, ratio=mean)
    assert not is_paraphrase_stall(replies, ratio=mean + 1e-9)
    assert not is_paraphrase_stall(REWORDINGS, ratio=0)


word_sets = st.frozensets(st.text(alphabet="abcdefgh", min_size=4, max_size=6), max_size=8)


@settings(max_examples=300, deadline=None)
@given(word_sets, word_sets)
def test_jaccard_is_symmetric_and_within_zero_and_one(a: frozenset[str], b: frozenset[str]) -> None:
    assert jaccard(a, b) == jaccard(b, a)
    assert 0.0 <= jaccard(a, b) <= 1.0
    if a:
        assert jaccard(a, a) == 1.0


@settings(max_examples=300, deadline=None)
@given(st.lists(word_sets, max_size=5))
def test_mean_pairwise_jaccard_is_within_zero_and_one_and_order_free(sets: list[frozenset[str]]) -> None:
    mean = mean_pairwise_jaccard(sets)
    assert 0.0 <= mean <= 1.0
    assert mean == pytest.approx(mean_pairwise_jaccard(list(reversed(sets))))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_word_set_holds_only_lower_case_ascii_words_of_four_letters_or_more(text: str) -> None:
    words = word_set(text)
    assert all(len(w) >= 4 and w.isascii() and w.isalpha() and w.islower() for w in words)
    assert not words & STOPWORDS
    if text.isascii():
        assert word_set(text.upper()) == words

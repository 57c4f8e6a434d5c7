"""The text measures of the same-error and paraphrase rules: error-set repeats, word sets and their mean
pairwise Jaccard (goal-circuit-breaker's paraphrase stall)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.errors import error_set
from ralph_supervisor.similarity import STOPWORDS, jaccard, mean_pairwise_jaccard, repeats, word_set

STALL = 0.82
"""The default `--paraphrase` ratio."""

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
    assert mean_pairwise_jaccard(sets) == 1.0 >= STALL


def test_different_work_has_mean_point_two_and_does_not_stall() -> None:
    sets = [word_set(r) for r in DIFFERENT_WORK]
    assert mean_pairwise_jaccard(sets) == pytest.approx(0.2)
    assert mean_pairwise_jaccard(sets) < STALL


def test_short_ok_replies_never_look_stalled() -> None:
    assert word_set("ok") == frozenset()
    assert mean_pairwise_jaccard([word_set("ok")] * 3) == 0.0
    assert jaccard(frozenset(), frozenset()) == 0.0


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


def test_same_error_with_different_ports_and_lines_repeats() -> None:
    a = error_set(["Error: connect ECONNREFUSED 127.0.0.1:5432", "Error: Failed to compile src/main.ts"])
    b = error_set(["Error: connect ECONNREFUSED 10.0.0.7:5433", "Error: Failed to compile src/main.ts:42:7"])
    assert repeats(a, [b, b])
    assert repeats(a, [b])


def test_different_errors_do_not_repeat() -> None:
    a = error_set(["Error: Failed to compile src/main.ts"])
    b = error_set(["Error: Failed to compile src/main.ts"])
    c = error_set(["Fatal: Segmentation fault in module X"])
    assert not repeats(a, [b, c])
    assert repeats(a, [b])


def test_repeat_needs_every_current_signature_in_every_previous_set() -> None:
    a = error_set(["Error: Failed to compile src/main.ts", "ERROR: Database connection failed"])
    b = error_set(["Error: Failed to compile src/main.ts"])
    assert not repeats(a, [b])
    assert repeats(b, [a])  # b's only error is in a


def test_empty_sets_never_repeat() -> None:
    a = error_set(["Error: x"])
    assert not repeats(frozenset(), [a])
    assert not repeats(a, [])
    assert not repeats(a, [a, frozenset()])


@settings(max_examples=200, deadline=None)
@given(st.frozensets(st.text(max_size=30), max_size=5), st.lists(st.frozensets(st.text(max_size=30), max_size=5), max_size=3))
def test_repeats_never_fires_on_empty_current_and_always_on_itself(
    current: frozenset[str], previous: list[frozenset[str]]
) -> None:
    assert not repeats(frozenset(), previous)
    if current:
        assert repeats(current, [current, current])
        assert not repeats(current, [*previous, frozenset()])

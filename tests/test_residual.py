"""What is left: a blocker only a human can clear, or work the agent may still fix."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.residual import needs_a_human, states_blocker


@pytest.mark.parametrize("reply", [
    "I am still blocked on the missing database migration for the users table.",
    "Cannot proceed until someone provides the staging credentials.",
    "This needs a human decision: which of the two schemas should win?",
    "Waiting for approval of the deploy.",
])
def test_replies_that_state_a_blocker(reply: str) -> None:
    assert states_blocker(reply, {})


@pytest.mark.parametrize("reply", [
    "Done, all tests pass.",
    "Fixed the authentication bug; the login tests pass now.",
    "Unblocked the deploy by pinning the base image.",
    "The migration is no longer blocked: it ran.",
])
def test_replies_that_do_not(reply: str) -> None:
    assert not states_blocker(reply, {})


def test_the_status_block_says_blocked_whatever_the_words() -> None:
    assert states_blocker("Reviewed the plan.", {"STATUS": "blocked"})
    assert not states_blocker(None, {"STATUS": "IN_PROGRESS"})


def test_an_error_only_a_person_can_clear_is_not_a_code_error() -> None:
    assert needs_a_human("Error: Invalid API key · Please run /login")
    assert not needs_a_human("TypeError: cannot read property 'token' of undefined")


@given(st.text(), st.dictionaries(st.text(max_size=8), st.text(max_size=8)))
def test_the_classification_never_raises(text: str, status: dict[str, str]) -> None:
    assert states_blocker(text, status) in (True, False)
    assert needs_a_human(text) in (True, False)

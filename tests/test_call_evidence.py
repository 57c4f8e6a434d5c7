"""A call's evidence keeps the tail of its output per chunk (cheap on the event loop) yet returns whole lines."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence import iterations
from ralph_supervisor.evidence.iterations import CallEvidence, OutputResult

LINE = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=12)


def result(lines: list[str] | None, errors: tuple[str, ...] = ()) -> OutputResult:
    text = None if lines is None else "\n".join(lines)
    return OutputResult("stdout", len(text or "") + 1, 1, 0.0, text, errors)


def tail_by_line(chunks: list[list[str] | None], cap: int) -> str:
    """The reference: the longest run of last whole lines whose sizes (each with its newline) fit the cap."""
    lines = [line for chunk in chunks if chunk is not None for line in chunk]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) + 1 > cap:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(reversed(kept))


@given(st.lists(st.none() | st.lists(LINE, min_size=1, max_size=6), max_size=25), st.integers(1, 40))
@settings(max_examples=400, deadline=None)
def test_the_kept_text_is_the_last_whole_lines_that_fit(chunks: list[list[str] | None], cap: int) -> None:
    with mock.patch.object(iterations, "MAX_TEXT_BYTES", cap):
        call = CallEvidence(1, 0.0, 0.0)
        for chunk in chunks:
            call.add(result(chunk))
        assert call.output_text() == tail_by_line(chunks, cap)
        # Bounded: at most the cap plus one chunk's text is held.
        assert call.text_bytes <= cap + max((len("\n".join(c)) + 1 for c in chunks if c is not None), default=0)


def test_bytes_sources_and_errors_are_counted_per_chunk_up_to_the_error_cap() -> None:
    call = CallEvidence(1, 0.0, 0.0)
    for n in range(iterations.MAX_ERROR_LINES + 5):
        call.add(result([f"line {n}"], errors=(f"Error: {n}",)))
    call.add(result(None))
    assert call.output_bytes == sum(len(f"line {n}") + 1 for n in range(iterations.MAX_ERROR_LINES + 5)) + 1
    assert call.error_lines == [f"Error: {n}" for n in range(iterations.MAX_ERROR_LINES)]
    assert call.sources == {"stdout"}


def test_the_waits_ralphs_loop_announces_are_read_with_their_length() -> None:
    from ralph_supervisor.evidence.iterations import announced_wait

    assert announced_wait("\x1b[0;34m[2026-12-01 10:12:03] [INFO] Sleeping for 2877 seconds until next hour...\x1b[0m") == 2877
    assert announced_wait("[2026-12-01 10:12:03] [INFO] Waiting 60 minutes before retrying...") == 3600
    assert announced_wait("Time until reset: 00:47:56") is None
    assert announced_wait("I was sleeping for 3 seconds") is None  # not the loop's words


_WAIT_WORDS = st.sampled_from(["Sleeping for ", " seconds", "Waiting ", " minutes", " minute", " before retrying",
                               "1", "60", "2877", " ", "\n", "x", "Sleeping", "before"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_WAIT_WORDS, st.text(max_size=8)), max_size=30))
def test_the_quick_test_before_the_expression_never_changes_what_a_wait_reads(pieces: list[str]) -> None:
    """`announced_wait` skips the expression when its fixed words are absent: the answer is the expression's."""
    from ralph_supervisor.evidence import iterations

    text = "".join(pieces)
    found = None
    for match in iterations._ANNOUNCED_WAIT.finditer(text):
        found = float(match.group(1)) if match.group(1) else float(match.group(2)) * 60.0
    assert iterations.announced_wait(text) == found

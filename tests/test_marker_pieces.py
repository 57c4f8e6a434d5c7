"""Marker mode cuts each block of output before every marker line, on the analysis thread (pure)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.iterations import marker_pieces

MARKER = re.compile(r"^=== ")
LINE = st.sampled_from([b"=== 1", b"=== two", b"work", b"Error: x", b"", b"\xff\xfe bad utf-8", b" === not"])


@given(st.lists(LINE, min_size=1, max_size=30))
@settings(max_examples=300, deadline=None)
def test_pieces_rejoin_to_the_block_and_each_marker_line_starts_one(lines: list[bytes]) -> None:
    block = b"\n".join(lines)
    text = block.decode("utf-8", "replace")
    pieces = marker_pieces(block, text, MARKER)
    assert b"\n".join(raw for raw, _, _ in pieces) == block
    assert "\n".join(piece for _, piece, _ in pieces) == text
    for raw, piece, starts in pieces:
        assert piece == raw.decode("utf-8", "replace")
        first, *rest = piece.split("\n")
        assert starts == bool(MARKER.search(first))
        assert not any(MARKER.search(line) for line in rest), "a marker line always begins its piece"


def test_a_block_without_a_marker_is_one_piece_that_starts_nothing() -> None:
    assert marker_pieces(b"a\nb", "a\nb", MARKER) == [(b"a\nb", "a\nb", False)]


def test_output_before_the_first_marker_belongs_to_the_call_in_progress() -> None:
    block = b"tail of 1\n=== 2\nwork\n=== 3"
    pieces = marker_pieces(block, block.decode(), MARKER)
    assert [(raw, starts) for raw, _, starts in pieces] == [(b"tail of 1", False), (b"=== 2\nwork", True),
                                                           (b"=== 3", True)]

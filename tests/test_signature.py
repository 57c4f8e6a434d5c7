"""Error signatures and trigram similarity agree with loop-context 1.5.0 (JavaScript) exactly.

The expected values below were produced by running loop-context 1.5.0's own `errorSignature` and
`calculateSimilarity` under Node 20 on these inputs, and recorded here so the tests need no Node.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.signature import JS_WHITESPACE, error_signature, js_trim, similarity, trigrams

# (raw error text, loop-context's signature)
SIGNATURES = [
    ('Error: connect ECONNREFUSED 127.0.0.1:5432', 'Error: connect ECONNREFUSED #.#.#.#'),
    ('TypeError: cannot read x at /home/u/app/foo.js:12:5', 'TypeError: cannot read x at foo.js'),
    ('', ''),
    ('   \n\t\n', ''),
    ('\n\n  Error: second line wins  \nthird', 'Error: second line wins'),
    ('Error at 2024-01-02T03:04:05.123Z in job 42', 'Error at <ts> in job #'),
    ('Error at 2024-01-02 03:04:05 in job 42', 'Error at <ts> in job #'),
    ('segfault at 0xDEADbeef near 0x7fff0000', 'segfault at <addr> near <addr>'),
    ('C:\\Users\\bob\\proj\\main.ts:10:2 failed', 'main.ts failed'),
    ('see \\\\server\\share\\file.txt', 'see \\file.txt'),
    ('import failed: /usr/lib/python3.11/site-packages/x.py:99', 'import failed: x.py'),
    ('value ü2 and ٣٤ and 12ü and ²', 'value ü# and ٣٤ and #ü and ²'),
    ('Fehler: Straße 5 nicht gefunden', 'Fehler: Straße # nicht gefunden'),
    ('エラー: ファイル /tmp/データ.txt が見つかりません 3', 'エラー: ファイル データ.txt が見つかりません #'),
    ('boom 😀 123 😀', 'boom 😀 # 😀'),
    ('a\xa0\xa0b\u2028c\ufeffd', 'a b c d'),
    ('keep\x85this\x1cand\rthis 7', 'keep\x85this\x1cand this #'),
    ('\ufeff  Error: bom-led  \ufeff', 'Error: bom-led'),
    ('x_1 and 1_x and a1 and 1a', 'x_1 and 1_x and a1 and 1a'),
    ('port :8080 and :1:2:3', 'port and'),
    ('https://example.com/api/v1/users/17 returned 500', 'http17 returned #'),
    ('ratio 3.14159 and -7 and +8', 'ratio #.# and -# and +#'),
    ('line\r\nnext', 'line'),
    ('\r\n\r\nError: CRLF file\r\n', 'Error: CRLF file'),
    ('0x', '0x'),
    ('/', '/'),
    ('::', '::'),
]

# (a, b, loop-context's calculateSimilarity(a, b))
SIMILARITIES = [
    ('try 1', 'try 5', 0.4),
    ('run tests', 'run tests again', 0.5555555555555556),
    ('patch schema', 'patch schema v2', 0.7222222222222222),
    ('', '', 1.0),
    ('', 'a', 0.0),
    ('Straße', 'STRASSE', 0.4166666666666667),
    ('Straße', 'strasse', 0.4166666666666667),
    ('ABC', 'abc', 1.0),
    ('😀 emoji', '😀 emojj', 0.5384615384615384),
    ('İstanbul', 'istanbul', 0.6153846153846154),
    ('ΟΔΟΣ', 'οδος', 1.0),
    ('a', 'b', 0.0),
    ('  ', '   ', 1.0),
    ('x', 'x ', 0.75),
    ('Error: connect ECONNREFUSED #.#.#.#', 'Error: connect ECONNREFUSED #.#.#.#:#', 0.8857142857142857),
]


@pytest.mark.parametrize(("text", "expected"), SIGNATURES)
def test_signature_matches_loop_context(text: str, expected: str) -> None:
    assert error_signature(text) == expected


@pytest.mark.parametrize(("a", "b", "expected"), SIMILARITIES)
def test_similarity_matches_loop_context(a: str, b: str, expected: float) -> None:
    assert similarity(a, b) == expected
    assert similarity(b, a) == expected


def test_reference_similarities_to_four_places() -> None:
    assert f"{similarity('try 1', 'try 5'):.4f}" == "0.4000"
    assert f"{similarity('run tests', 'run tests again'):.4f}" == "0.5556"
    assert f"{similarity('patch schema', 'patch schema v2'):.4f}" == "0.7222"


def test_digits_and_word_boundaries_are_ascii_only() -> None:
    assert error_signature("code ü2") == "code ü#"  # ü is not a word character in JS: \b before 2
    assert error_signature("code ٣") == "code ٣"  # Arabic-Indic digit is not \d
    assert error_signature("codeü2x") == "codeü2x"


def test_js_whitespace_is_not_pythons() -> None:
    assert "\ufeff" in JS_WHITESPACE and "\u00a0" in JS_WHITESPACE and "\u2028" in JS_WHITESPACE
    assert "\x85" not in JS_WHITESPACE and "\x1c" not in JS_WHITESPACE
    assert js_trim("\ufeff x \u00a0") == "x"
    assert js_trim("\x85x\x1f") == "\x85x\x1f"


def test_lines_split_on_newline_only() -> None:
    assert error_signature("first\x85second") == "first\x85second"
    assert error_signature("first\rsecond") == "first second"  # \r does not end the line; it is whitespace
    assert error_signature("first\u2028second") == "first second"  # one line, but \u2028 is JS whitespace


def test_blank_error_has_empty_signature_and_blank_errors_are_alike() -> None:
    assert error_signature("") == ""
    assert error_signature(" \n\t\n ") == ""
    assert similarity(error_signature(""), error_signature("  ")) == 1.0


def test_case_folding_is_lower_not_casefold() -> None:
    assert similarity("Straße", "STRASSE") < 1.0
    assert similarity("ABC", "abc") == 1.0


def test_trigrams_count_utf16_code_units_like_javascript() -> None:
    # An astral character is two UTF-16 code units, so "  😀  " (6 units) has 4 trigrams in JavaScript, not 3.
    assert len(trigrams("😀")) == 4


def test_trigrams_are_a_set_of_the_padded_string() -> None:
    # padded "  aaaa  " has 6 trigrams, "aaa" twice: 5 distinct; "aaaaa" has exactly the same set
    assert len(trigrams("aaaa")) == 5
    assert similarity("aaaa", "aaaaa") == 1.0


text_st = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)


@given(text_st, text_st)
def test_similarity_is_symmetric_and_bounded(a: str, b: str) -> None:
    s = similarity(a, b)
    assert 0.0 <= s <= 1.0
    assert s == similarity(b, a)


@given(text_st)
def test_similarity_to_itself_is_one(a: str) -> None:
    assert similarity(a, a) == 1.0


@given(text_st)
def test_signature_is_one_trimmed_line(text: str) -> None:
    sig = error_signature(text)
    assert "\n" not in sig
    assert sig == js_trim(sig)
    assert not any(ch in sig for ch in JS_WHITESPACE if ch != " ")
    assert "  " not in sig


@given(st.text(alphabet="abcXYZ _-.,;!?()[]<>#", max_size=40))
def test_signature_is_idempotent_on_text_without_digits_paths_or_colons(text: str) -> None:
    once = error_signature(text)
    assert error_signature(once) == once


def test_long_texts_give_the_same_answers_uncached() -> None:
    long_error = "Error: big " + "x" * 5000 + " 42\nsecond line"
    assert error_signature(long_error) == "Error: big " + "x" * 5000 + " #"
    long_a, long_b = "a" * 3000 + "b", "a" * 3000 + "c"
    # {"  a", " aa", "aaa"} shared; "aab", "ab ", "b  " vs "aac", "ac ", "c  " not: 3 of 9
    assert similarity(long_a, long_b) == 3 / 9
    assert trigrams("x" * 2001) == trigrams("x" * 2000)

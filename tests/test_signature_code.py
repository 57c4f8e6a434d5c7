"""The signature's saved engine code is what `re` compiles, here and now; anything else goes to `re`.

When a pattern in signature.py changes, the first test fails and prints the new table for signature_code.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from re import _compiler, _parser  # type: ignore[attr-defined]

import _sre
import pytest

from ralph_supervisor import signature, signature_code
from ralph_supervisor.signature_code import ASCII, CODE, compiled
from tests.helpers import REPO


def engine_code(pattern: str, flags: int) -> tuple[int, tuple[int, ...]]:
    """What this interpreter's `re` makes of a pattern: its flags and its engine code."""
    parsed = _parser.parse(pattern, flags)
    return int(flags | parsed.state.flags), tuple(int(c) for c in _compiler._code(parsed, flags))


def table(patterns: list[tuple[str, int]]) -> str:
    """signature_code.CODE's text for these patterns."""
    out = ["CODE: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {"]
    for pattern, flags in patterns:
        final, code = engine_code(pattern, flags)
        out.append(f"    ({pattern!r}, {flags}): ({final}, (")
        out += textwrap.wrap(", ".join(map(str, code)) + ",", 110, initial_indent=" " * 8, subsequent_indent=" " * 8)
        out.append("    )),")
    return "\n".join([*out, "}"])


def used_patterns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The (pattern, flags) the signature compiles, in order."""
    asked: list[tuple[str, int]] = []

    def record(pattern: str, flags: int = 0) -> re.Pattern[str]:
        asked.append((pattern, flags))
        return re.compile(pattern, flags)

    monkeypatch.setattr(signature_code, "compiled", record)
    signature._Patterns()
    return asked


def test_the_saved_code_is_what_re_compiles_for_every_pattern_the_signature_uses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    used = used_patterns(monkeypatch)
    fresh = table(used)
    assert list(CODE) == used, f"signature.py's patterns changed: put this in signature_code.py\n{fresh}"
    assert all(CODE[key] == engine_code(*key) for key in used), f"re compiles them otherwise now:\n{fresh}"
    assert _sre.MAGIC in signature_code.ENGINES and sys.byteorder == "little"  # where the suite runs
    for pattern, flags in used:
        assert compiled(pattern, flags) == re.compile(pattern, flags)  # a Pattern equals one with the same code


def test_a_check_that_needs_signatures_imports_no_re() -> None:
    probe = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from ralph_supervisor.signature import error_signature; "
        "print(error_signature('TypeError: x at /home/u/app/foo.js:12:5 on 2024-01-02T03:04:05Z, 0xfF  7')); "
        "print('re' in sys.modules, 'enum' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["TypeError: x at foo.js on <ts>, <addr> #", "False False"], done.stderr


def test_another_pattern_or_engine_or_unreadable_code_goes_to_re(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled(r"\d+x", ASCII) == re.compile(r"\d+x", re.ASCII)  # not saved
    number = r"\b\d+\b"
    assert compiled(number) == re.compile(number)  # saved with other flags only
    monkeypatch.setattr(signature_code, "ENGINES", frozenset())
    assert compiled(number, ASCII) == re.compile(number, re.ASCII)
    monkeypatch.setattr(signature_code, "ENGINES", frozenset({_sre.MAGIC}))
    monkeypatch.setitem(signature_code.CODE, (number, ASCII), (ASCII, (14, 4, 0, 1, 2**32 - 1, 99, 1)))
    assert compiled(number, ASCII) == re.compile(number, re.ASCII)
    assert compiled(number, ASCII).sub("#", "port 8080, x1") == "port #, x1"

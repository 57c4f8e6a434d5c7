"""Error signatures and trigram similarity, exactly as loop-context 1.5.0 computes them.

Why exact: a loop that swaps `npx @cobusgreyling/loop-context --check` for `ralph-supervise check` must get the
same answer on the same ledger, so every regex here follows JavaScript's semantics rather than Python's:
ASCII-only ``\\d``/``\\b``, JavaScript's whitespace set for ``\\s`` and ``trim()``, lines split on ``"\\n"``
only, ``toLowerCase()`` as ``str.lower()``, and trigrams over UTF-16 code units (JavaScript string indices).
"""

from __future__ import annotations

import re
from functools import lru_cache

# JavaScript's WhiteSpace + LineTerminator set: what `\s` matches and `String.prototype.trim()` strips.
# Not Python's `str.isspace()` (which adds U+001C-U+001F and U+0085 and lacks U+FEFF).
JS_WHITESPACE: str = (
    "\t\n\v\f\r \u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)

_WS_CLASS = "".join(f"\\u{ord(c):04x}" for c in JS_WHITESPACE)

_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ][\d:.]+Z?\b", re.ASCII)
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(rf"[A-Za-z]:[\\/][^{_WS_CLASS}:]+|(?:[\\/][^{_WS_CLASS}:/\\]+)+")
_PATH_SPLIT = re.compile(r"[\\/]")
_LINE_COL = re.compile(r":\d+(?::\d+)?", re.ASCII)
_NUMBER = re.compile(r"\b\d+\b", re.ASCII)
_WS_RUN = re.compile(f"[{_WS_CLASS}]+")


def js_trim(s: str) -> str:
    """`String.prototype.trim()`: strips JavaScript's whitespace set, nothing else."""
    return s.strip(JS_WHITESPACE)


def _basename(match: re.Match[str]) -> str:
    path = match.group(0)
    return _PATH_SPLIT.split(path)[-1] or path


_CACHE_MAX_CHARS = 2000  # cache short texts only: 4096 cached megabyte tracebacks would be gigabytes


def error_signature(text: str) -> str:
    """Reduce an error to a stable signature so that "the same error" is recognised across attempts
    even when volatile details (timestamps, addresses, paths, line numbers, ports) differ."""
    return _signature_cached(text) if len(text) <= _CACHE_MAX_CHARS else _signature(text)


def _signature(text: str) -> str:
    first = next((line for line in text.split("\n") if js_trim(line)), "")
    sig = js_trim(first)
    sig = _TIMESTAMP.sub("<ts>", sig)
    sig = _HEX.sub("<addr>", sig)
    sig = _PATH.sub(_basename, sig)
    sig = _LINE_COL.sub("", sig)
    sig = _NUMBER.sub("#", sig)
    sig = _WS_RUN.sub(" ", sig)
    return js_trim(sig)


_signature_cached = lru_cache(maxsize=4096)(_signature)


def trigrams(s: str) -> frozenset[bytes]:
    """The set of trigrams of `"  " + lower(s) + "  "`, indexed like JavaScript strings (UTF-16 code units),
    so that text outside the BMP (emoji) compares as loop-context compares it."""
    return _trigrams_cached(s) if len(s) <= _CACHE_MAX_CHARS else _trigrams(s)


def _trigrams(s: str) -> frozenset[bytes]:
    padded = ("  " + s.lower() + "  ").encode("utf-16-le", "surrogatepass")
    return frozenset(padded[i : i + 6] for i in range(0, len(padded) - 4, 2))


_trigrams_cached = lru_cache(maxsize=4096)(_trigrams)


def similarity(a: str, b: str) -> float:
    """1.0 for identical strings, else the Jaccard index of the two trigram sets."""
    if a == b:
        return 1.0
    set_a = trigrams(a)
    set_b = trigrams(b)
    inter = len(set_a & set_b)
    return inter / (len(set_a) + len(set_b) - inter)

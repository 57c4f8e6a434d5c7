"""Error signatures and trigram similarity, exactly as loop-context 1.5.0 computes them.

Why exact: a loop that swaps `npx @cobusgreyling/loop-context --check` for `ralph-supervise check` must get the
same answer on the same ledger, so every regex here follows JavaScript's semantics rather than Python's:
ASCII-only ``\\d``/``\\b``, JavaScript's whitespace set for ``\\s`` and ``trim()``, lines split on ``"\\n"``
only, ``toLowerCase()`` as ``str.lower()``, and trigrams over UTF-16 code units (JavaScript string indices).
"""

from __future__ import annotations

# JavaScript's WhiteSpace + LineTerminator set: what `\s` matches and `String.prototype.trim()` strips.
# Not Python's `str.isspace()` (which adds U+001C-U+001F and U+0085 and lacks U+FEFF).
JS_WHITESPACE: str = (
    "\t\n\v\f\r \u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


class _Patterns:
    """The signature's regular expressions, compiled at the first signature: `check` on a ledger that ends
    without a run of failures needs none. They come from saved engine code where it fits (signature_code.py):
    importing `re` and compiling them would be a third of a check that needs them."""

    def __init__(self) -> None:
        from ralph_supervisor.signature_code import ASCII, compiled

        ws = "".join(f"\\u{ord(c):04x}" for c in JS_WHITESPACE)
        self.timestamp = compiled(r"\b\d{4}-\d{2}-\d{2}[T ][\d:.]+Z?\b", ASCII)
        self.hex = compiled(r"0x[0-9a-fA-F]+")
        self.path = compiled(rf"[A-Za-z]:[\\/][^{ws}:]+|(?:[\\/][^{ws}:/\\]+)+")
        self.path_split = compiled(r"[\\/]")
        self.line_col = compiled(r":\d+(?::\d+)?", ASCII)
        self.number = compiled(r"\b\d+\b", ASCII)
        self.ws_run = compiled(f"[{ws}]+")


_patterns: _Patterns | None = None


def js_trim(s: str) -> str:
    """`String.prototype.trim()`: strips JavaScript's whitespace set, nothing else."""
    return s.strip(JS_WHITESPACE)


_CACHE_MAX_CHARS = 2000  # cache short texts only: 4096 cached megabyte tracebacks would be gigabytes
_CACHE_ENTRIES = 4096
_signatures: dict[str, str] = {}
_trigram_sets: dict[str, frozenset[bytes]] = {}


def _remember(cache: dict, text: str, value: object) -> None:
    """Keep a short text's result; a full cache starts over (a ledger's texts repeat, or they do not)."""
    if len(text) <= _CACHE_MAX_CHARS:
        if len(cache) >= _CACHE_ENTRIES:
            cache.clear()
        cache[text] = value


def error_signature(text: str) -> str:
    """Reduce an error to a stable signature so that "the same error" is recognised across attempts
    even when volatile details (timestamps, addresses, paths, line numbers, ports) differ."""
    sig = _signatures.get(text)
    if sig is None:
        sig = _signature(text)
        _remember(_signatures, text, sig)
    return sig


def _signature(text: str) -> str:
    global _patterns
    p = _patterns or _Patterns()
    _patterns = p
    first = next((line for line in text.split("\n") if js_trim(line)), "")
    sig = js_trim(first)
    sig = p.timestamp.sub("<ts>", sig)
    sig = p.hex.sub("<addr>", sig)
    sig = p.path.sub(lambda match: p.path_split.split(match.group(0))[-1] or match.group(0), sig)
    sig = p.line_col.sub("", sig)
    sig = p.number.sub("#", sig)
    sig = p.ws_run.sub(" ", sig)
    return js_trim(sig)


def trigrams(s: str) -> frozenset[bytes]:
    """The set of trigrams of `"  " + lower(s) + "  "`, indexed like JavaScript strings (UTF-16 code units),
    so that text outside the BMP (emoji) compares as loop-context compares it."""
    grams = _trigram_sets.get(s)
    if grams is None:
        padded = ("  " + s.lower() + "  ").encode("utf-16-le", "surrogatepass")
        grams = frozenset(padded[i : i + 6] for i in range(0, len(padded) - 4, 2))
        _remember(_trigram_sets, s, grams)
    return grams


def similarity(a: str, b: str) -> float:
    """1.0 for identical strings, else the Jaccard index of the two trigram sets."""
    if a == b:
        return 1.0
    set_a = trigrams(a)
    set_b = trigrams(b)
    inter = len(set_a & set_b)
    return inter / (len(set_a) + len(set_b) - inter)

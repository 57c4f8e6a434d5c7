"""The loop-context ledger: parse, validate, decide. Pure functions, no I/O.

A loop that keeps a ledger `{"goal", "attempts": [{iteration, action, outcome, error, tokensUsed}]}` asks
before each iteration whether it may go on. The rules, their order and the reason texts follow
`@cobusgreyling/loop-context` 1.5.0 exactly, so either tool gives the same answer on a well-formed ledger;
where loop-context crashes or misreads malformed input, `parse_ledger` refuses it with one line naming the
attempt and the field. The Markdown summary (`--inject`) is ledger_inject.py's, the daily budget
ledger_daily.py's.

This module is on `check`'s start-up path, and a loop runs `check` before every iteration, so start-up is most
of its time: it imports neither json, re, typing nor dataclasses (each costs more than the whole decision on a
1,000-attempt ledger). Its values are small tuple classes (`Record`), the JSON is read by json's own C scanner
and the verdict written by hand.

    >>> check_breaker(parse_ledger('{"goal": "g", "attempts": [{"action": "a", "outcome": "success"}]}')).trigger
    'ok'
"""

from __future__ import annotations

from itertools import chain, repeat, takewhile

try:  # operator.py re-exports _operator's functions: importing it would cost a check a fifth of a millisecond
    from _operator import attrgetter, itemgetter
except ImportError:
    from operator import attrgetter, itemgetter

from ralph_supervisor.signature import error_signature, js_trim, similarity

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a check's start-up more than its decision
    from collections.abc import Iterable, Iterator
    from typing import Any

OUTCOMES = ("success", "failure", "noop")
TRIGGERS = ("ok", "stagnation", "frustration", "no-progress", "token-budget", "max-iterations", "daily-budget")
MAX_SAFE_INTEGER = 2**53 - 1  # beyond this JavaScript's numbers (and so loop-context's sums) are inexact
FRUSTRATION_THRESHOLD = 3  # fixed in loop-context: no flag changes it

# loop-cost 1.x registry: realistic tokens per run by readiness level, and the suggested daily cap.
PATTERN_BUDGETS: dict[str, dict[str, int]] = {
    "pr-babysitter": {"L1": 10700, "L2": 23050, "L3": 91700, "daily": 2000000},
    "daily-triage": {"L1": 23000, "L2": 57500, "L3": 69500, "daily": 100000},
    "ci-sweeper": {"L1": 9500, "L2": 19250, "L3": 69500, "daily": 1000000},
    "post-merge-cleanup": {"L1": 19000, "L2": 44500, "L3": 53500, "daily": 200000},
    "dependency-sweeper": {"L1": 10500, "L2": 25250, "L3": 98000, "daily": 500000},
    "changelog-drafter": {"L1": 17000, "L2": 29000, "L3": 34250, "daily": 100000},
    "issue-triage": {"L1": 13800, "L2": 22500, "L3": 26700, "daily": 80000},
}
LEVELS = ("L1", "L2", "L3")


class LedgerError(ValueError):
    """A ledger (or a flag about it) that we refuse; the message is one line naming the thing."""


# ── values ─────────────────────────────────────────────────────────


class Record(tuple):
    """An immutable value with named fields, as typing.NamedTuple makes one (equal, hashable, shown with its
    names), without typing's import. A subclass annotates its fields in order and builds itself in `__new__`.

        >>> BreakerConfig(stagnation=2).stagnation
        2
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        cls._fields = tuple(cls.__dict__.get("__annotations__", ()))
        for index, name in enumerate(cls._fields):
            setattr(cls, name, property(itemgetter(index)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in zip(self._fields, self))})"


class Attempt(Record):
    """One iteration of the loop. `iteration` is kept as given: loop-context never reads it."""

    action: str
    outcome: str
    error: str | None
    tokens_used: int
    iteration: Any

    def __new__(cls, action: str, outcome: str, error: str | None = None, tokens_used: int = 0,
                iteration: Any = None) -> Attempt:
        return tuple.__new__(cls, (action, outcome, error, tokens_used, iteration))


_tokens_of = attrgetter("tokens_used")  # read at C speed over a long ledger
_outcome_of = attrgetter("outcome")


class Ledger(Record):
    """The goal and the attempts: a tuple of Attempt values; for a long ledger the LazyAttempts that stand for
    that tuple (ledger_lazy.py); for a big ledger read by msgspec, a tuple of its structs with the same fields
    (ledger_big.py; in plain ASCII all but `iteration`, which no rule and no output reads)."""

    goal: str
    attempts: tuple[Attempt, ...]

    def __new__(cls, goal: str, attempts: tuple[Attempt, ...] = ()) -> Ledger:
        return tuple.__new__(cls, (goal, attempts))

    @property
    def tokens_used(self) -> int:
        total = getattr(self.attempts, "tokens_used", None)  # LazyAttempts keeps the sum the checks made
        if total is not None:
            return total
        return sum(map(_tokens_of, self.attempts))


class BreakerConfig(Record):
    """loop-context's DEFAULT_BREAKER; `token_budget=None` means no budget."""

    max_iterations: int
    stagnation: int
    no_progress: int
    similarity_threshold: float
    token_budget: int | None
    frustration: int

    def __new__(cls, max_iterations: int = 10, stagnation: int = 3, no_progress: int = 5,
                similarity_threshold: float = 0.85, token_budget: int | None = None,
                frustration: int = FRUSTRATION_THRESHOLD) -> BreakerConfig:
        return tuple.__new__(cls, (max_iterations, stagnation, no_progress, similarity_threshold, token_budget,
                                   frustration))


class Verdict(Record):
    """What `check` decides about a ledger, as loop-context prints it (not the breaker's `Decision`)."""

    iterations: int
    tokens_used: int
    should_continue: bool
    escalate: bool
    trigger: str
    reason: str

    def __new__(cls, iterations: int, tokens_used: int, should_continue: bool, escalate: bool, trigger: str,
                reason: str) -> Verdict:
        return tuple.__new__(cls, (iterations, tokens_used, should_continue, escalate, trigger, reason))

    def as_dict(self) -> dict[str, Any]:
        """The JSON object, keys in loop-context's order."""
        return {
            "iterations": self.iterations,
            "tokensUsed": self.tokens_used,
            "shouldContinue": self.should_continue,
            "escalate": self.escalate,
            "trigger": self.trigger,
            "reason": self.reason,
        }


# ── parsing ────────────────────────────────────────────────────────


def _reject_constant(name: str) -> Any:
    raise LedgerError(f"{name} is not JSON")


def _show(value: Any) -> str:
    """A short one-line rendering of a bad value for an error message."""
    import json

    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


class _ScanRules:
    """What json's C scanner asks of its decoder: json.loads' own settings, NaN and Infinity refused."""

    def __init__(self) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _reject_constant
        self.memo: dict[str, str] = {}


_scanners: list[Any] = []


def _scanner() -> Any:
    """json's C scanner with json.loads' settings, made the first time a ledger is read by it: a check of a ledger
    that jiter or msgspec reads does not load it (a fifth of a millisecond). None without json's accelerator
    (json.loads then reads every ledger)."""
    if not _scanners:
        try:
            from _json import make_scanner
        except ImportError:
            _scanners.append(None)
        else:
            _scanners.append(make_scanner(_ScanRules()))
    return _scanners[0]


_JSON_SPACE = " \t\n\r"


def _quick_json(text: str) -> Any:
    """The value of a JSON document, read by the same C scanner json.loads uses, with the same settings, but
    without importing the json package (whose regular expressions cost a check's start-up more than reading
    a 1,000-attempt ledger). Raises (anything) where json.loads would have something to say."""
    scan_value = _scanner()
    if scan_value is None:
        raise ValueError("no C scanner")
    start = 0
    while start < len(text) and text[start] in _JSON_SPACE:
        start += 1
    value, end = scan_value(text, start)
    if text[end:].strip(_JSON_SPACE):
        raise ValueError("extra data")
    return value


MID_LEDGER_BYTES = 256_000
"""From this size a ledger's bytes are read by jiter where it is installed: quicker than json's scanner by more than
its import (half a millisecond) costs."""

BIG_LEDGER_CHARS = 6_000_000
"""From this size (characters or bytes) on a ledger is read by msgspec where it is installed (ledger_big.py): quicker
than jiter and the checks here by more than msgspec's import (about 17 ms) costs. Measured whole (read, parse,
decide): at 4 MB jiter's reading took 23.5 ms and msgspec's 30.7, at 6 MB both about 35, at 8 MB 46 and 44."""


def parse_ledger(data: str | bytes, source: str = "ledger") -> Ledger:
    """Parse and validate a ledger's JSON (text, or UTF-8 bytes as read). Raises LedgerError with one line
    naming the attempt and field."""
    if len(data) >= BIG_LEDGER_CHARS:
        big = _read_big(data)
        if big is not None:
            return big
    if len(data) >= MID_LEDGER_BYTES and isinstance(data, bytes):
        raw = _read_mid(data)
        if raw is not _REFUSED:
            return ledger_from_json(raw, source)
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LedgerError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    else:
        text = data
    if not js_trim(text[:1000]) and not js_trim(text):
        raise LedgerError("No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.")
    try:
        raw = _quick_json(text)
    except Exception:  # json.loads reads it again and says what is wrong, in its own words
        raw = _careful_json(text, source)
    return ledger_from_json(raw, source)


def load_big_reader() -> bool:
    """Import what reads a big ledger (ledger_big.py, msgspec); False where msgspec is not installed."""
    try:
        import ralph_supervisor.ledger_big  # noqa: F401
    except ImportError:
        return False
    return True


def _read_big(data: str | bytes) -> Ledger | None:
    """The ledger as msgspec reads it; None without msgspec, or when it refuses the data."""
    if not load_big_reader():
        return None
    from ralph_supervisor.ledger_big import decode

    return decode(data)


_REFUSED = object()


def _read_mid(data: bytes) -> Any:
    """The JSON value of `data` as jiter reads it (dicts and lists, as json.loads makes them, in about half the
    time); `_REFUSED` without jiter or where it refuses the data. It is stricter than json.loads (a lone surrogate
    escape, NaN, nesting deeper than a few hundred levels, bad UTF-8 or JSON): json reads those again and takes
    them or says what is wrong."""
    try:
        from jiter import from_json
    except ImportError:
        return _REFUSED
    try:
        return from_json(data, allow_inf_nan=False)
    except ValueError:
        return _REFUSED


def _careful_json(text: str, source: str) -> Any:
    import json

    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{source}: bad JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except LedgerError as exc:
        raise LedgerError(f"{source}: bad JSON: {exc}") from None
    except RecursionError:
        raise LedgerError(f"{source}: bad JSON: nested too deeply") from None
    except ValueError:  # Python refuses integers of more than 4300 digits (sys.get_int_max_str_digits)
        raise LedgerError(f"{source}: bad JSON: a number too long to read") from None


def ledger_from_json(raw: Any, source: str = "ledger") -> Ledger:
    """Validate an already-decoded ledger object."""
    if not isinstance(raw, dict):
        raise LedgerError(f"{source}: expected an object {{goal, attempts}}, got {json_type(raw)}")
    if "goal" not in raw:
        raise LedgerError(f"{source}: goal is missing")
    if not isinstance(raw["goal"], str):
        raise LedgerError(f"{source}: goal must be a string, got {json_type(raw['goal'])}")
    if "attempts" not in raw:
        raise LedgerError(f"{source}: attempts is missing")
    if not isinstance(raw["attempts"], list):
        raise LedgerError(f"{source}: attempts must be an array, got {json_type(raw['attempts'])}")
    return Ledger(raw["goal"], _attempts(raw["attempts"], source))


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


_OUTCOME_SET = frozenset(OUTCOMES)
_STRINGS, _INTS, _STRINGS_OR_NULL = frozenset({str}), frozenset({int}), frozenset({str, type(None)})

LAZY_FROM = 1_000
"""From this many attempts a ledger that passes the quick checks keeps its attempts as the objects they were read as
(ledger_lazy.py, an Attempt built when one is read): building them all costs more than that module's import
(0.16 ms; even at about 600 attempts)."""


def _attempts(items: list[Any], source: str) -> tuple[Attempt, ...]:
    """Every attempt, validated. A well-formed ledger (one may hold 100,000 attempts) is checked a field at a time
    over all attempts, each pass in C; where any attempt is not plainly well formed, each goes through
    `_attempt`'s careful checks, which accept it or name what is wrong."""
    try:
        total = _checked_total(items)
    except TypeError:  # an attempt that is not an object, an outcome that is an array or an object (unhashable)
        total = None
    if total is None:
        return tuple(_attempt(item, index, source) for index, item in enumerate(items))
    if len(items) >= LAZY_FROM:
        from ralph_supervisor.ledger_lazy import LazyAttempts

        return LazyAttempts(items, total)  # type: ignore[return-value]  # read as the tuple it stands for
    return tuple(built_attempts(items))


def _checked_total(items: list[Any]) -> int | None:
    """The attempts' tokens summed, where every attempt is plainly well formed; None where one is not. TypeError
    where an attempt is not an object (dict.get refuses it) or an outcome is unhashable. Each field is checked over
    all attempts in one pass in C, the tokens kept in a list (the minimum and the sum read it)."""
    get = dict.get
    tokens = list(map(get, items, repeat("tokensUsed"), repeat(0)))  # null goes the careful way
    if not (
        _STRINGS.issuperset(map(type, map(get, items, repeat("action"))))
        and _OUTCOME_SET.issuperset(map(get, items, repeat("outcome")))
        and _STRINGS_OR_NULL.issuperset(map(type, map(get, items, repeat("error"))))
        and _INTS.issuperset(map(type, tokens))
        and (not tokens or min(tokens) >= 0)
    ):
        return None
    total = sum(tokens)
    # each is at least 0, so a sum within the limit holds each within it; only a larger sum needs the maximum
    if total > MAX_SAFE_INTEGER and max(tokens) > MAX_SAFE_INTEGER:
        return None
    return total


ATTEMPT_KEYS = (("action", None), ("outcome", None), ("error", None), ("tokensUsed", 0), ("iteration", None))
"""Each Attempt field's JSON key and the value a well-formed attempt that leaves it out has."""


def built_attempts(items: list[dict[str, Any]]) -> Iterator[Attempt]:
    """An Attempt for each plainly well-formed attempt object (`_checked_total`), built at C speed."""
    fields = [map(dict.get, items, repeat(key), repeat(default)) for key, default in ATTEMPT_KEYS]
    return map(tuple.__new__, repeat(Attempt), zip(*fields))


def _attempt(item: Any, index: int, source: str) -> Attempt:
    import math

    where = f"{source}: attempts[{index}]"
    if not isinstance(item, dict):
        raise LedgerError(f"{where} must be an object, got {json_type(item)}")
    action = item.get("action")
    if "action" not in item:
        raise LedgerError(f"{where}.action is missing")
    if not isinstance(action, str):
        raise LedgerError(f"{where}.action must be a string, got {json_type(action)}")
    if "outcome" not in item:
        raise LedgerError(f"{where}.outcome is missing")
    outcome = item["outcome"]
    if outcome not in OUTCOMES or not isinstance(outcome, str):
        raise LedgerError(f"{where}.outcome must be one of success, failure, noop; got {_show(outcome)}")
    error = item.get("error")
    if error is not None and not isinstance(error, str):
        raise LedgerError(f"{where}.error must be a string, got {json_type(error)}")
    tokens = item.get("tokensUsed")
    if tokens is None:
        tokens = 0
    elif isinstance(tokens, bool) or not isinstance(tokens, (int, float)):
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {json_type(tokens)} {_show(tokens)}")
    elif isinstance(tokens, float) and (not math.isfinite(tokens) or tokens != int(tokens)):
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {_show(tokens)}")
    tokens = int(tokens)
    if tokens < 0:
        raise LedgerError(f"{where}.tokensUsed must be a non-negative integer, got {tokens}")
    if tokens > MAX_SAFE_INTEGER:
        raise LedgerError(f"{where}.tokensUsed is larger than {MAX_SAFE_INTEGER}")
    return Attempt(action=action, outcome=outcome, error=error, tokens_used=tokens, iteration=item.get("iteration"))


# ── writing (the supervisor's own ledger.json) ─────────────────────


def attempt_dict(iteration: int, action: str, outcome: str, error: str | None, tokens: int) -> dict[str, Any]:
    """One attempt as the supervisor writes it. `error` is left out when there is none, because
    loop-context's --inject crashes on `"error": null`."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}; got {outcome!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a non-negative integer; got {tokens!r}")
    out: dict[str, Any] = {"iteration": iteration, "action": action, "outcome": outcome}
    if error is not None:
        out["error"] = error
    out["tokensUsed"] = tokens
    return out


def dump_ledger(goal: str, attempts: list[dict[str, Any]]) -> str:
    """The ledger file's text: 2-space indented JSON, non-ASCII kept, with a final newline."""
    import json

    return json.dumps({"goal": goal, "attempts": attempts}, indent=2, ensure_ascii=False) + "\n"


# ── the breaker ────────────────────────────────────────────────────


_is_failure = frozenset({"failure"}).__contains__


def trailing_failures(attempts: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """The run of `failure` attempts at the end of the ledger; any other outcome ends it."""
    run = len(list(takewhile(_is_failure, _from_last(attempts, "outcome"))))
    return attempts[len(attempts) - run:]


def _from_last(attempts: tuple[Attempt, ...], field: str) -> Iterator[Any]:
    """One field of each attempt, last first, read at C speed (LazyAttempts reads it from the JSON objects)."""
    lazy = getattr(attempts, "from_last", None)
    return lazy(field) if lazy is not None else map(attrgetter(field), reversed(attempts))


def _similar_run(texts_from_last: Iterable[str], threshold: float) -> int:
    """Walk back from the last attempt's text, counting the texts similar to the LAST one (never the
    neighbour's), until the first miss. `texts_from_last` is lazy: a text is computed only as the walk reaches it."""
    texts = iter(texts_from_last)
    last = next(texts)
    count = 0
    for text in chain((last,), texts):
        if similarity(text, last) >= threshold:
            count += 1
        else:
            break
    return count


def _signature(error: str | None) -> str:
    return error_signature(error or "")


def check_breaker(ledger: Ledger, config: BreakerConfig = BreakerConfig()) -> Verdict:
    """loop-context's checkCircuitBreaker: the first rule that fires wins, most actionable first."""
    iterations = len(ledger.attempts)
    tokens = ledger.tokens_used

    def escalate(trigger: str, reason: str) -> Verdict:
        return Verdict(iterations, tokens, False, True, trigger, reason)

    fail_run = trailing_failures(ledger.attempts)
    if fail_run and len(fail_run) >= config.stagnation:
        same = _similar_run(map(_signature, _from_last(fail_run, "error")), config.similarity_threshold)
        if same >= config.stagnation:
            last_sig = error_signature(fail_run[-1].error or "")
            return escalate(
                "stagnation",
                f'Same error repeated {same}× in a row (threshold {config.stagnation}): "{last_sig}". '
                "Escalating instead of retrying.",
            )
    if fail_run and len(fail_run) >= config.frustration:
        same = _similar_run(_from_last(fail_run, "action"), config.similarity_threshold)
        if same >= config.frustration:
            return escalate(
                "frustration",
                "Semantic looping detected: agent repeated highly similar action "
                f'{same}× in a row (threshold {config.frustration}): "{fail_run[-1].action}". Escalating.',
            )
    if len(fail_run) >= config.no_progress:
        return escalate(
            "no-progress",
            f"{len(fail_run)} consecutive failures with no progress (threshold {config.no_progress}). Escalating.",
        )
    if config.token_budget is not None and tokens >= config.token_budget:
        return escalate(
            "token-budget",
            f"Token budget reached ({tokens} ≥ {config.token_budget}). Escalating to avoid cost blowup.",
        )
    if iterations >= config.max_iterations:
        return escalate("max-iterations", f"Iteration cap reached ({iterations} ≥ {config.max_iterations}). Escalating.")
    return Verdict(iterations, tokens, True, False, "ok", "Within limits — cleared to continue.")


# ── output ─────────────────────────────────────────────────────────


def _has_surrogates(text: str) -> bool:
    """Whether `text` holds surrogate code points (which UTF-8 cannot encode): rare, and costly to handle."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _join_pairs(text: str) -> str:
    """Join split surrogate pairs as a JavaScript string would hold them (lone halves stay lone)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _lone_surrogates(text: str, replace: Any) -> str:
    import re

    return re.sub("[\ud800-\udfff]", replace, _join_pairs(text))


def printable(text: str) -> str:
    """What `console.log` writes: lone surrogates become U+FFFD."""
    return _lone_surrogates(text, "\ufffd") if _has_surrogates(text) else text


_JSON_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(32)}, 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r",
                 34: '\\"', 92: "\\\\"}


def _json_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is str:
        return '"' + value.translate(_JSON_ESCAPES) + '"'
    raise TypeError(f"to_json writes strings, integers, booleans and null, not {value!r}")


def to_json(value: dict[str, Any], indent: int | None = 2) -> str:
    """JSON.stringify(value, null, indent) of a flat object such as the verdict's (strings, integers, booleans,
    null): non-ASCII kept, lone surrogates escaped. Byte for byte what json.dumps writes with the same indent
    (and no spaces without one), written here because json's import costs a check's start-up more."""
    items = [f"{_json_scalar(key)}{':' if indent is None else ': '}{_json_scalar(item)}" for key, item in value.items()]
    if not items:
        text = "{}"
    elif indent is None:
        text = "{" + ",".join(items) + "}"
    else:
        pad = "\n" + " " * indent
        text = "{" + pad + ("," + pad).join(items) + "\n}"
    if _has_surrogates(text):
        text = _lone_surrogates(text, lambda m: f"\\u{ord(m.group(0)):04x}")
    return text


def human_line(decision: Verdict) -> str:
    word = "ESCALATE" if decision.escalate else "CONTINUE"
    return printable(f"{word} [{decision.trigger}] — {decision.reason}")


# ── budgets from a pattern ─────────────────────────────────────────


def _known_pattern(pattern: str) -> dict[str, int]:
    if pattern not in PATTERN_BUDGETS:
        raise LedgerError(f"Unknown pattern: {pattern}. Use --list for ids.")
    return PATTERN_BUDGETS[pattern]


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise LedgerError(f"Invalid level: {level}. Valid: {', '.join(LEVELS)}")
    return level


def token_budget_for(pattern: str, level: str) -> int:
    """loop-cost's realistic tokens per run for a pattern at a readiness level."""
    return _known_pattern(pattern)[check_level(level)]


def daily_cap_for(pattern: str) -> int:
    """loop-cost's suggested daily token cap for a pattern (the same at every level)."""
    return _known_pattern(pattern)["daily"]


def pattern_table() -> str:
    """The `--list` output: one pattern a line with its budgets."""
    lines = ["pattern\tL1\tL2\tL3\tdaily cap"]
    for name, b in PATTERN_BUDGETS.items():
        lines.append(f"{name}\t{b['L1']}\t{b['L2']}\t{b['L3']}\t{b['daily']}")
    return "\n".join(lines)

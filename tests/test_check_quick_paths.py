"""`check`'s quick readings say exactly what the careful ones say.

A loop runs `check` before every iteration, so its start-up is most of its time, and check takes short cuts:
its common flags read by hand instead of by argparse, the ledger read by json's C scanner without the json
package, the verdict's JSON written by hand, and a big ledger decoded and validated by msgspec. Each short cut
either gives what the careful reading gives, or steps aside for it: these properties hold them to that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor import check, ledger, ledger_big
from ralph_supervisor.ledger import LedgerError, dump_ledger, ledger_from_json, parse_ledger, to_json
from ralph_supervisor.ledger_lazy import LazyAttempts
from tests.helpers.fuzzing import CHEAP, MEDIUM, json_values
from tests.test_check_properties import ATTEMPT, LEDGER_DOCUMENTS, LEDGER_KEYS, VALID_LEDGER

# ── flags ──────────────────────────────────────────────────────────

FLAG_WORDS = [name for names, _, _ in check.FLAGS for name in names]
ARGV_WORDS = st.sampled_from(FLAG_WORDS) | st.sampled_from(
    ["5", "", "-3", "-x", "x y", "-", "--", "-h", "--help", "--ledger=a.json", "-fa.json", "--max-iter", "0.5",
     "L2", "ci-sweeper", "--json=1", "-5 x", " -1"]
) | st.text(max_size=6)


def argparse_reading(argv: list[str]) -> dict[str, Any] | str:
    """What argparse makes of argv: its values, or its error."""
    try:
        return vars(check._parser().parse_args(argv))
    except LedgerError as exc:
        return f"error: {exc}"


WELL_FORMED_ARGV = st.lists(
    st.tuples(st.sampled_from([n for n in FLAG_WORDS if n not in check._SWITCHES]), st.text(max_size=5))
    | st.tuples(st.sampled_from(sorted(check._SWITCHES))),
    max_size=5,
).map(lambda pairs: [word for pair in pairs for word in pair])


@CHEAP
@given(argv=st.lists(ARGV_WORDS, max_size=6) | WELL_FORMED_ARGV)
@example(argv=["--ledger", "-5"])
@example(argv=["-f", "a", "--json", "-f", "b"])
@example(argv=["--window", ""])
def test_the_quick_flag_reading_is_argparses_or_steps_aside(argv: list[str]) -> None:
    quick = check.read_flags(argv)
    assert quick is None or quick == argparse_reading(argv)


def test_the_common_forms_are_read_quickly_and_the_rest_by_argparse() -> None:
    assert check.read_flags(["-f", "l.json", "--json", "--stagnation", "4", "--check"]) is not None
    for argv in (["--help"], ["--ledger=l.json"], ["--max-iterations", "-1"], ["stray"], ["--max-iterations"]):
        assert check.read_flags(argv) is None, argv


# ── the ledger's JSON ──────────────────────────────────────────────


def json_loads(text: str) -> Any:
    return json.loads(text, parse_constant=ledger._reject_constant)


VALID_TEXT = VALID_LEDGER.map(lambda ledger: dump_ledger(*ledger))
SPACE = st.text(" \t\n\r\f\u00a0", max_size=3)


@MEDIUM
@given(text=LEDGER_DOCUMENTS | VALID_TEXT | json_values(LEDGER_KEYS).map(json.dumps), before=SPACE, after=SPACE)
@example(text="{}", before="\ufeff", after="")
@example(text='{"a": NaN}', before="", after="")
@example(text='{"a": 1e999}', before="", after="")
@example(text='{"a": 1, "a": 2}', before="", after="")
@example(text='"\\ud800"', before="", after="")
@example(text="[" * 50_000, before="", after="")
@example(text="1" * 5000, before="", after="")
@example(text="{} x", before="", after="")
def test_the_c_scanner_reads_json_as_json_loads_does(text: str, before: str, after: str) -> None:
    document = before + text + after
    try:
        expected = json_loads(document)
    except (ValueError, RecursionError):
        with pytest.raises(Exception):
            ledger._quick_json(document)
        return
    assert ledger._quick_json(document) == expected


SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20) | st.sampled_from(
    ["\ud83d\ude00", "\ud800", "a\udc00b", "\ud83d", "\x00\x1f\x7f", '"\\/\b\f\n\r\t', "\u2028é😀"]
)


def json_dumps_like_loop_context(value: dict[str, Any], indent: int | None) -> str:
    """What to_json wrote when it was json.dumps, split surrogate pairs joined and lone ones escaped."""
    import re

    separators = (",", ":") if indent is None else None
    text = json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group(0)):04x}", text)


@CHEAP
@given(value=st.dictionaries(st.text(max_size=8) | st.sampled_from(["\ud800", "k\n"]), SCALARS, max_size=6),
       indent=st.sampled_from([None, 0, 2, 4]))
def test_to_json_writes_what_json_dumps_writes(value: dict[str, Any], indent: int | None) -> None:
    assert to_json(value, indent) == json_dumps_like_loop_context(value, indent)


def test_to_json_refuses_what_a_verdict_never_holds() -> None:
    with pytest.raises(TypeError, match="to_json writes strings, integers, booleans and null"):
        to_json({"a": 1.5})


# ── a middling ledger, read by jiter ───────────────────────────────

NUMBER_TEXT = st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)


@MEDIUM
@given(text=LEDGER_DOCUMENTS | VALID_TEXT | json_values(LEDGER_KEYS).map(json.dumps)
       | st.lists(NUMBER_TEXT, max_size=4).map(lambda numbers: "[" + ", ".join(numbers) + "]"))
@example(text='"\\ud800"')
@example(text='{"a": NaN}')
@example(text='{"a": 1, "b": 2, "a": 3}')
@example(text="[1e23, 5e-324, 2.2250738585072011e-308, 9007199254740993.0, -0.0, 1e400, 1" + "0" * 30 + "]")
@example(text="1" * 4301)
@example(text="[" * 300 + "]" * 300)
@example(text="\ufeff{}")
@example(text='{"goal": "\ud800", "attempts": []}')
def test_jiter_reads_json_as_json_loads_does_or_steps_aside(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    read = ledger._read_mid(data)
    if read is ledger._REFUSED:
        return
    assert repr(read) == repr(json_loads(data.decode("utf-8")))  # repr: -0.0 is not 0.0, key order counts


def test_a_middling_ledger_is_read_by_jiter_and_decided_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = [{"iteration": i, "action": f"try {i % 3}", "outcome": "failure", "error": f"Error: port {i}",
                 "tokensUsed": i} for i in range(200)]
    text = dump_ledger("g", attempts)
    small = parse_ledger(text.encode())
    monkeypatch.setattr(ledger, "MID_LEDGER_BYTES", 0)
    read: list[Any] = []
    monkeypatch.setattr(ledger, "ledger_from_json", lambda raw, source="ledger": read.append(raw) or small)
    assert parse_ledger(text.encode()) is small and read == [json.loads(text)]
    monkeypatch.undo()
    monkeypatch.setattr(ledger, "MID_LEDGER_BYTES", 0)
    assert fields(parse_ledger(text.encode())) == fields(small)
    bad = text.replace('"tokensUsed": 7\n', '"tokensUsed": "7"\n')
    with pytest.raises(LedgerError, match=r"attempts\[7\]\.tokensUsed must be a non-negative integer"):
        parse_ledger(bad.encode())
    with pytest.raises(LedgerError, match="not UTF-8 text"):
        parse_ledger(b'{"goal": "\xff", "attempts": []}')
    with pytest.raises(LedgerError, match="bad JSON: NaN is not JSON"):
        parse_ledger(b'{"goal": NaN, "attempts": []}')


def test_without_jiter_a_middling_ledger_is_read_by_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger, "MID_LEDGER_BYTES", 0)
    monkeypatch.setitem(sys.modules, "jiter", None)  # `import` raises ImportError
    assert ledger._read_mid(b"[]") is ledger._REFUSED
    read = parse_ledger(b'{"goal": "g", "attempts": [{"action": "a", "outcome": "noop"}]}')
    assert fields(read) == ("g", [("a", "noop", None, 0, None)])


# ── a big ledger, read by msgspec ──────────────────────────────────


def fields(read: ledger.Ledger, iteration: bool = True) -> tuple[Any, ...]:
    """What a reading made of a ledger (`iteration`: with each attempt's; msgspec's lean reading of plain ASCII
    leaves it unread)."""
    return read.goal, [(a.action, a.outcome, a.error, a.tokens_used) + ((a.iteration,) if iteration else ())
                       for a in read.attempts]


@MEDIUM
@given(text=LEDGER_DOCUMENTS | VALID_TEXT, as_bytes=st.booleans())
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "tokensUsed": 5.0}]}', as_bytes=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "tokensUsed": null}]}', as_bytes=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "note": [[[1]]]}]}', as_bytes=False)
@example(text='{"goal": "g", "attempts": [], "x": ' + "[" * 5000 + "]" * 5000 + "}", as_bytes=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "iteration": 1' + "0" * 4300 + "}]}",
         as_bytes=False)
@example(text='{"goal": "\\ud800", "attempts": []}', as_bytes=True)
@example(text='{"goal": "g", "goal": "h", "attempts": [{"action": "a", "action": 5, "outcome": "noop"}]}',
         as_bytes=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "iteration": {"deep": [1, "x"]}}], '
              '"extra": null}', as_bytes=True)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "iteration": "\\ud800"}]}', as_bytes=True)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "iteration": NaN}]}', as_bytes=True)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "noop", "iteration": "\\x"}]}', as_bytes=True)
@example(text='{"goal": "g", "attempts": [], "x": -1' + "0" * 4300 + "}", as_bytes=True)
@example(text='{"goal": "g", "attempts": [{"action": "' + "9" * 5000 + '", "outcome": "noop"}]}', as_bytes=True)
def test_msgspec_reads_a_ledger_as_ledger_py_does_or_steps_aside(text: str, as_bytes: bool) -> None:
    try:
        careful: ledger.Ledger | None = ledger_from_json(json_loads(text))
    except (ValueError, RecursionError):  # LedgerError, or no JSON json.loads reads
        careful = None
    big = ledger_big.decode(text.encode("utf-8", "surrogatepass") if as_bytes else text)
    if big is None:
        return
    assert careful is not None, "msgspec takes only what ledger.py takes"
    lean = text.isascii() and not ledger_big._may_hold_long_number(text.encode("ascii"))
    assert all(type(a) is (ledger_big.LeanAttempt if lean else ledger_big.BigAttempt) for a in big.attempts)
    assert fields(big, iteration=not lean) == fields(careful, iteration=not lean)


@given(st.lists(st.tuples(st.integers(0, 9000), st.integers(1, 3000)), max_size=6), st.integers(0, 3000))
@example([(4300, 1)], 0)
@example([(4301, 1)], 0)
@example([(4301, 1)], 2149)
@example([(4301, 1)], 2150)
@example([(4300, 1), (4301, 5)], 1)
def test_a_long_number_is_told_from_the_strided_look_exactly_as_from_every_byte(runs: list[tuple[int, int]],
                                                                               lead: int) -> None:
    data = b"x" * lead + b"".join(b"7" * digits + b"," * gap for digits, gap in runs)
    longest = max((len(run) for run in data.replace(b",", b"x").split(b"x")), default=0)
    assert ledger_big._may_hold_long_number(data) is (longest > ledger_big.LONGEST_NUMBER)


def test_a_big_ledger_is_read_by_msgspec_and_decided_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = [{"iteration": i, "action": f"try {i % 3}", "outcome": "failure", "error": f"Error: port {i}",
                 "tokensUsed": i} for i in range(200)]
    text = dump_ledger("g", attempts)
    small = parse_ledger(text)
    monkeypatch.setattr(ledger, "BIG_LEDGER_CHARS", 0)
    big = parse_ledger(text.encode())
    assert type(big.attempts[0]) is ledger_big.LeanAttempt and fields(big, iteration=False) == fields(small, iteration=False)
    assert ledger.check_breaker(big) == ledger.check_breaker(small)
    accented = text.replace('"goal": "g"', '"goal": "gé"')  # not plain ASCII: every key and value checked
    assert type(parse_ledger(accented.encode()).attempts[0]) is ledger_big.BigAttempt
    assert fields(parse_ledger(accented.encode())) == fields(parse_ledger(accented))
    bad = text.replace('"tokensUsed": 7\n', '"tokensUsed": "7"\n')
    with pytest.raises(LedgerError, match=r"attempts\[7\]\.tokensUsed must be a non-negative integer"):
        parse_ledger(bad.encode())
    with pytest.raises(LedgerError, match="not UTF-8 text"):
        parse_ledger(b'{"goal": "\xff", "attempts": []}')


def test_without_msgspec_a_big_ledger_is_read_by_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger, "BIG_LEDGER_CHARS", 0)
    monkeypatch.setitem(sys.modules, "ralph_supervisor.ledger_big", None)  # `import` raises ImportError
    read = parse_ledger(b'{"goal": "g", "attempts": [{"action": "a", "outcome": "noop"}]}')
    assert type(read.attempts[0]) is ledger.Attempt and fields(read) == ("g", [("a", "noop", None, 0, None)])


def test_a_big_ledger_file_is_read_while_msgspec_loads_and_decided_as_the_careful_reading_decides(
        tmp_path: Path) -> None:
    attempts = [{"iteration": i, "action": f"step {i % 40} " + "x" * 60, "outcome": "failure" if i % 3 else "success",
                 "error": f"Error: port {i % 5}" if i % 3 else None, "tokensUsed": i % 900} for i in range(40_000)]
    path = tmp_path / "ledger.json"
    path.write_text(dump_ledger("g", attempts))
    assert path.stat().st_size >= ledger.BIG_LEDGER_CHARS
    data, source = check.read_ledger(str(path))
    assert data == path.read_bytes() and source == str(path)
    careful = ledger.check_breaker(ledger_from_json(json.loads(data)), ledger.BreakerConfig(max_iterations=50_000))
    done = subprocess.run([sys.executable, "-m", "ralph_supervisor", "check", "--ledger", str(path), "--json",
                           "--max-iterations", "50000"], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (2 if careful.escalate else 0, b"")
    assert json.loads(done.stdout) == careful.as_dict()


def test_a_big_ledger_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path) -> None:
    class Failing:
        def read(self) -> bytes:
            raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        check.read_while_loading(Failing())  # type: ignore[arg-type]
    path = tmp_path / "ledger.json"
    path.write_bytes(b" " * ledger.BIG_LEDGER_CHARS)
    path.chmod(0o000)
    if os.access(path, os.R_OK):  # root reads it anyway: a folder named like a ledger cannot be read by anyone
        path.chmod(0o644)
        path.unlink()
        path.mkdir()
    with pytest.raises(LedgerError, match=rf"^ledger {path}: cannot read: "):
        check.read_ledger(str(path))


# ── a long ledger, kept as read ────────────────────────────────────


def as_lazy(items: list[dict[str, Any]]) -> LazyAttempts:
    """The attempts as the quick checks keep a long ledger's."""
    total = ledger._checked_total(items)
    assert total is not None
    return LazyAttempts(items, total)


def one_by_one(items: list[dict[str, Any]]) -> tuple[ledger.Attempt, ...]:
    """The attempts as the careful checks read them, an Attempt each."""
    return tuple(ledger._attempt(item, index, "ledger") for index, item in enumerate(items))


def reshaped(item: dict[str, Any], iteration: Any, tokens_left_out: bool) -> dict[str, Any]:
    """The attempt with its iteration left out (`...`) or replaced by any JSON value (it is kept as given), and
    perhaps its tokensUsed left out (0 then)."""
    left_out = {"iteration", "tokensUsed"} if tokens_left_out else {"iteration"}
    item = {key: value for key, value in item.items() if key not in left_out}
    return item if iteration is ... else {**item, "iteration": iteration}


def hashed(value: Any) -> int | str:
    """The value's hash, or that it has none (an iteration kept as an array or object)."""
    try:
        return hash(value)
    except TypeError:
        return "unhashable"


ITEMS = st.lists(st.builds(reshaped, ATTEMPT, st.just(0) | st.just(...) | json_values(LEDGER_KEYS, 3), st.booleans()),
                 max_size=12)
BOUND = st.none() | st.integers(-15, 15)


@CHEAP
@given(items=ITEMS, bounds=st.lists(st.tuples(BOUND, BOUND, st.none() | st.integers(-4, 4).filter(bool)), max_size=6))
def test_lazy_attempts_read_exactly_as_the_tuple_of_attempts_they_stand_for(
        items: list[dict[str, Any]], bounds: list[tuple[int | None, int | None, int | None]]) -> None:
    lazy, attempts = as_lazy(items), one_by_one(items)
    assert len(lazy) == len(attempts) and bool(lazy) == bool(attempts)
    assert lazy == attempts and attempts == lazy and not lazy != attempts
    assert hashed(lazy) == hashed(attempts) and repr(lazy) == repr(attempts)
    assert lazy.tokens_used == sum(a.tokens_used for a in attempts)
    built = [*lazy, *reversed(lazy)]
    assert built == [*attempts, *reversed(attempts)] and {type(a) for a in built} <= {ledger.Attempt}
    for index in range(-len(attempts) - 2, len(attempts) + 2):
        if -len(attempts) <= index < len(attempts):
            assert lazy[index] == attempts[index] and type(lazy[index]) is ledger.Attempt
        else:
            with pytest.raises(IndexError):
                lazy[index]
    for start, stop, step in bounds:
        part, expected = lazy[start:stop:step], attempts[start:stop:step]
        assert part == expected and list(reversed(part)) == list(reversed(expected)) and len(part) == len(expected)
        assert part.tokens_used == sum(a.tokens_used for a in expected)
    for field in ledger.Attempt._fields:
        assert list(lazy.from_last(field)) == [getattr(a, field) for a in reversed(attempts)]
    for attempt in attempts:
        assert attempt in lazy
        assert (lazy.index(attempt), lazy.count(attempt)) == (attempts.index(attempt), attempts.count(attempt))
    other = ledger.Attempt("not", "noop")
    assert other not in lazy and lazy != attempts + (other,) and lazy != list(attempts)
    turned = attempts[1:] + attempts[:1]
    assert (lazy == turned) == (attempts == turned) == (lazy == as_lazy(items[1:] + items[:1]))


def long_ledger(n: int, failing: bool) -> str:
    attempts = [{"iteration": i, "action": f"try {i % 3}",
                 "outcome": "failure" if failing or i % 4 else ("success", "noop")[i % 8 // 4],
                 "error": f"Error: port {i}" if failing or i % 4 else None, "tokensUsed": i} for i in range(n)]
    return dump_ledger("g", attempts)


@pytest.mark.parametrize("failing", [False, True])
@pytest.mark.parametrize("read", ["text", "jiter"])
def test_a_long_ledger_is_kept_as_read_and_decided_shown_and_counted_as_its_attempts_are(
        monkeypatch: pytest.MonkeyPatch, failing: bool, read: str) -> None:
    from ralph_supervisor.ledger_daily import record_daily_spend
    from ralph_supervisor.ledger_inject import PruneConfig, build_injection

    text = long_ledger(ledger.LAZY_FROM + 7, failing)
    if read == "jiter":
        monkeypatch.setattr(ledger, "MID_LEDGER_BYTES", 0)
    long = parse_ledger(text.encode() if read == "jiter" else text)
    assert type(long.attempts) is LazyAttempts
    one_each = ledger.Ledger("g", one_by_one(json.loads(text)["attempts"]))
    assert long == one_each and hash(long) == hash(one_each) and repr(long) == repr(one_each)
    assert long.tokens_used == one_each.tokens_used == sum(range(ledger.LAZY_FROM + 7))
    for config in (ledger.BreakerConfig(), ledger.BreakerConfig(max_iterations=10**6, stagnation=10**6),
                   ledger.BreakerConfig(max_iterations=10**6, stagnation=10**6, frustration=10**6),
                   ledger.BreakerConfig(max_iterations=10**6, stagnation=10**6, frustration=10**6, no_progress=10**6,
                                        token_budget=10)):
        decided = ledger.check_breaker(long, config)
        assert decided == ledger.check_breaker(one_each, config)
    assert ledger.check_breaker(long).trigger == ("stagnation" if failing else "max-iterations")
    config, prune = ledger.BreakerConfig(), PruneConfig()
    assert build_injection(long, config, prune) == build_injection(one_each, config, prune)
    assert record_daily_spend(None, long, "2026-01-02") == record_daily_spend(None, one_each, "2026-01-02")


def test_a_short_ledger_keeps_a_tuple_and_a_long_malformed_one_is_named_as_before() -> None:
    assert type(parse_ledger(long_ledger(ledger.LAZY_FROM - 1, False)).attempts) is tuple
    last = ledger.LAZY_FROM + 6
    text = long_ledger(last + 1, False)
    for good, bad, error in (
        (f'"tokensUsed": {last}\n', '"tokensUsed": -1\n', f"attempts[{last}].tokensUsed must be a non-negative integer, got -1"),
        ('"action": "try 0"', '"action": 0', "attempts[0].action must be a string, got a number"),
        ('    {\n      "iteration": 2,', '    [],\n    {\n      "iteration": 2,', "attempts[2] must be an object, got an array"),
    ):
        assert good in text
        with pytest.raises(LedgerError) as refused:
            parse_ledger(text.replace(good, bad, 1))
        assert str(refused.value) == f"ledger: {error}"


@pytest.mark.parametrize("many", [1, ledger.LAZY_FROM])
def test_the_quick_checks_hold_each_token_count_not_their_sum_to_javascripts_safe_integers(many: int) -> None:
    limit = ledger.MAX_SAFE_INTEGER
    attempts = [{"action": "a", "outcome": "noop", "tokensUsed": limit}] * (many + 2)
    assert parse_ledger(json.dumps({"goal": "g", "attempts": attempts})).tokens_used == (many + 2) * limit
    attempts[1] = {"action": "a", "outcome": "noop", "tokensUsed": limit + 1}
    with pytest.raises(LedgerError, match=rf"^ledger: attempts\[1\]\.tokensUsed is larger than {limit}$"):
        parse_ledger(json.dumps({"goal": "g", "attempts": attempts}))


# ── what the lean path loads ───────────────────────────────────────


def test_a_check_with_no_failure_run_imports_no_json_re_argparse_typing_or_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(dump_ledger("g", [{"iteration": 1, "action": "a", "outcome": "success", "tokensUsed": 3}]))
    root = str(Path(__file__).resolve().parents[1])
    probe = (
        f"import sys; sys.path.insert(0, {root!r}); from ralph_supervisor.entry import main; "
        "main(['check', '-f', sys.argv[1], '--json']); sys.stdout.flush(); print(*sorted(sys.modules), file=sys.stderr)"
    )
    # -S: no site, so an editable install's import hook (which loads more) is not counted
    done = subprocess.run([sys.executable, "-S", "-c", probe, str(path)], capture_output=True, timeout=30)
    assert json.loads(done.stdout)["trigger"] == "ok", done.stderr
    loaded = set(done.stderr.decode().split())
    heavy = {"json", "re", "argparse", "typing", "dataclasses", "collections", "functools", "enum", "msgspec",
             "pathlib", "ralph_supervisor.ledger_inject", "ralph_supervisor.ledger_daily", "ralph_supervisor.ledger_big"}
    assert heavy & loaded == set()
    assert {"ralph_supervisor.check", "ralph_supervisor.ledger"} <= loaded


def test_a_ledger_read_by_jiter_leaves_jsons_scanner_unloaded(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(long_ledger(3 * ledger.LAZY_FROM, False))
    assert ledger.MID_LEDGER_BYTES <= path.stat().st_size < ledger.BIG_LEDGER_CHARS
    root = str(Path(__file__).resolve().parents[1])
    probe = (
        f"import sys; sys.path.insert(0, {root!r}); from ralph_supervisor.entry import main; "
        "main(['check', '-f', sys.argv[1], '--json']); sys.stdout.flush(); print(*sorted(sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, timeout=30)
    assert json.loads(done.stdout)["iterations"] == 3 * ledger.LAZY_FROM, done.stderr
    loaded = set(done.stderr.decode().split())
    assert {"jiter", "ralph_supervisor.ledger_lazy"} <= loaded and "_json" not in loaded

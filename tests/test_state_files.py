"""The state folder's files read from any bytes: state.json (the supervisor, `status`, `reset`), the daily
spend, the history tail. A bad file is moved aside or reported in one line, never a crash.

Inputs that fuzzing found to break a parser are kept as explicit `@example`s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor import status, store
from ralph_supervisor.breaker import Breaker, State
from ralph_supervisor.files import daily_spend_json, history_jsonl, state_json
from ralph_supervisor.settings import Settings, load_settings
from ralph_supervisor.runtime.keeping import load_breaker
from ralph_supervisor.triggers import TRIGGERS
from tests.helpers.fuzzing import (
    CHEAP,
    FAST,
    JSON_SCALARS,
    JSONL_LINES,
    STATE_DOCS,
    STATE_FILE_BYTES,
    budget,
    empty,
    fresh,
    one_line,
)


@CHEAP
@given(raw=STATE_FILE_BYTES)
@example(raw=b"")
@example(raw=b"\xef\xbb\xbf{}")
@example(raw=b"[]")
@example(raw=b"NaN")
def test_reading_a_state_file_gives_an_object_or_moves_it_aside(here: Path, raw: bytes) -> None:
    path = fresh(here, "state.json")
    path.write_bytes(raw)
    try:
        data = store.read_json_object(path)
    except store.CorruptFile as exc:
        assert one_line(str(exc)) and str(exc).startswith(str(path))
        assert not path.exists() and exc.moved_to is not None and exc.moved_to.read_bytes() == raw
    else:
        assert isinstance(data, dict) and path.read_bytes() == raw


@CHEAP
@given(raw=STATE_FILE_BYTES | st.fixed_dictionaries(
    {"date": st.sampled_from(["2026-11-30", "1970-01-01"]) | st.text(max_size=4)},
    optional={"tokens": st.integers(-3, 2**62) | JSON_SCALARS}).map(lambda v: json.dumps(v).encode()))
@example(raw=b'{"date": "1970-01-01", "tokens": 5}')
@example(raw=b'{"date": "1970-01-01", "tokens": true}')
def test_loading_the_daily_spend_never_raises(here: Path, raw: bytes) -> None:
    path = fresh(here, daily_spend_json.NAME)
    path.write_bytes(raw)
    spend, warning = daily_spend_json.load(here, now=3600.0)
    assert spend.date == "1970-01-01" and isinstance(spend.tokens, int) and spend.tokens >= 0
    if warning is None:
        assert path.read_bytes() == raw
    else:
        assert one_line(warning) and not path.exists()


@FAST
@given(spent=st.lists(st.integers(-5, 10**9), max_size=5))
def test_the_daily_spend_round_trips(here: Path, spent: list[int]) -> None:
    fresh(here, daily_spend_json.NAME)
    for tokens in spent:
        daily_spend_json.add(here, tokens, 0.0, now=3600.0)
    spend, warning = daily_spend_json.load(here, now=3600.0)
    assert warning is None and spend.tokens == sum(max(0, t) for t in spent)


STATUS_TYPES = {"state": str, "trigger": str, "reason": str, "iteration": int, "consecutive_no_progress": int,
                "consecutive_same_error": int, "consecutive_failures": int, "total_opens": int, "tokens_used": int}


@CHEAP
@given(raw=STATE_FILE_BYTES)
@example(raw=b'{"state": true, "iteration": 1.5, "tokens_used": null}')
def test_status_reads_any_state_json_into_the_contract_shape(here: Path, raw: bytes) -> None:
    state_dir = empty(here)
    (state_dir / state_json.NAME).write_bytes(raw)
    report = status.collect(state_dir)
    for key, kind in STATUS_TYPES.items():
        assert type(report[key]) is kind, (key, report[key])
    assert report["supervisor"] == {"pid": None, "running": False} and report["child"] is None
    assert "warning" not in report or one_line(report["warning"])
    assert (state_dir / state_json.NAME).read_bytes() == raw  # status only reads
    assert isinstance(status.tmux_line(report), str) and isinstance(status.human(report), str)


def supervisor_settings(state_dir: Path) -> Settings:
    return load_settings(workspace=str(state_dir), state_dir=str(state_dir), env={})


@CHEAP
@given(raw=STATE_FILE_BYTES | STATE_DOCS.map(lambda v: json.dumps({"breaker": v}).encode()))
@example(raw=b'{"breaker": {"state": "OPEN", "trigger": "stall"}}')
@example(raw=b'{"breaker": 5}')
def test_the_supervisor_starts_from_any_state_json(here: Path, raw: bytes) -> None:
    """A corrupt state.json is moved aside with a warning; the supervisor never refuses to start."""
    state_dir = empty(here)
    path = state_dir / state_json.NAME
    path.write_bytes(raw)
    breaker, warning = load_breaker(supervisor_settings(state_dir))
    assert isinstance(breaker, Breaker)
    if warning is None:
        assert path.read_bytes() == raw
    else:
        assert one_line(warning) and str(path) in warning and not path.exists()
        assert breaker.state is State.CLOSED


@budget(15)
@given(raw=st.sampled_from([b"[" * 100_000, b'{"a": ' + b"[" * 50_000, b'{"tokens": ' + b"1" * 4301 + b"}",
                            b'{"cooldown_s": 1' + b"0" * 400 + b"}"]),
       reader=st.sampled_from(["read_json_object", "load_daily_spend", "status", "reset", "load_breaker"]))
@example(raw=b"[" * 100_000, reader="read_json_object")
@example(raw=b'{"cooldown_s": 1' + b"0" * 400 + b"}", reader="load_breaker")
def test_a_deeply_nested_or_huge_number_state_file_never_crashes_a_reader(here: Path, raw: bytes, reader: str) -> None:
    state_dir = empty(here)
    path = state_dir / (daily_spend_json.NAME if reader == "load_daily_spend" else state_json.NAME)
    path.write_bytes(raw)
    if reader == "read_json_object":
        try:
            assert isinstance(store.read_json_object(path), dict)
        except store.CorruptFile:
            pass
    elif reader == "load_daily_spend":
        assert daily_spend_json.load(state_dir, now=0.0)[0].tokens == 0
    elif reader == "status":
        assert status.collect(state_dir)["state"] == "CLOSED"
    elif reader == "reset":
        assert "CLOSED" in status.reset(state_dir)
    else:
        breaker, warning = load_breaker(supervisor_settings(state_dir))
        assert breaker.state is State.CLOSED and warning


@budget(20)
@given(doc=st.fixed_dictionaries({}, optional={"state": st.text(max_size=6), "trigger": st.text(max_size=6),
                                               "iteration": st.integers(-5, 5)}))
@example(doc={"state": "banana"})
def test_status_shows_only_contract_values_from_a_garbage_state_json(here: Path, doc: dict[str, Any]) -> None:
    state_dir = empty(here)
    (state_dir / state_json.NAME).write_text(json.dumps(doc))
    report = status.collect(state_dir)
    assert report["state"] in ("CLOSED", "HALF_OPEN", "OPEN")
    assert report["trigger"] == "none" or report["trigger"] in TRIGGERS
    assert report["iteration"] >= 0


@FAST
@given(lines=JSONL_LINES)
def test_the_escalation_reads_any_history_tail(here: Path, lines: list[bytes]) -> None:
    path = fresh(here, history_jsonl.NAME)
    path.write_bytes(b"\n".join(lines))
    entries = history_jsonl.tail(here, 20)
    assert all(isinstance(e, dict) for e in entries) and len(entries) <= 20


def test_a_deeply_nested_history_line_is_skipped(here: Path) -> None:
    path = fresh(here, history_jsonl.NAME)
    path.write_bytes(b'{"to": "OPEN"}\n' + b"[" * 50_000 + b"\n")
    assert history_jsonl.tail(here, 20) == [{"to": "OPEN"}]

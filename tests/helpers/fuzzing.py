"""What the property tests share: hypothesis budgets, a scratch folder per test, and strategies for
JSON, state files and history lines.

The `scratch` and `here` fixtures are registered for every test module by `tests/conftest.py`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ralph_supervisor.breaker import Snapshot, State, Thresholds
from ralph_supervisor.triggers import TRIGGERS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


AGENT_TEXTS: tuple[str, ...] = tuple(
    p.read_text(encoding="utf-8") for p in sorted((FIXTURES / "agent").rglob("*")) if p.is_file() and p.suffix != ".md"
)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """One folder for the whole module."""
    with tempfile.TemporaryDirectory(prefix="ralph-fuzz-") as folder:
        yield Path(folder)


@pytest.fixture
def here(scratch: Path, request: pytest.FixtureRequest) -> Path:
    """This test's folder, shared by its examples and emptied before each one (`empty`, `fresh`): creating a
    folder per example costs milliseconds on a loaded disk, and hypothesis runs hundreds of examples."""
    folder = scratch / request.node.name
    folder.mkdir()
    return folder


def empty(folder: Path) -> Path:
    """`folder` with nothing left in it from the previous example."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return folder


def fresh(folder: Path, name: str) -> Path:
    """The path `name` in an emptied `folder`."""
    return empty(folder) / name


def budget(examples: int) -> Any:
    """Hypothesis settings for `examples` examples. The function-scoped `here` folder is shared on purpose."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# Example budgets: the whole file stays near a minute on a loaded 2-core machine.
FAST = budget(30)


MEDIUM = budget(60)


CHEAP = budget(100)


def one_line(message: str) -> bool:
    return "\n" not in message and "\r" not in message and message.strip() != ""


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)


def json_values(keys: st.SearchStrategy[str] = st.text(max_size=10), max_leaves: int = 25) -> st.SearchStrategy[Any]:
    return st.recursive(
        JSON_SCALARS,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=6),
        max_leaves=max_leaves,
    )


NO_SURROGATES = st.characters(blacklist_categories=("Cs",))


REPLY_KEYS = st.sampled_from(
    ["type", "subtype", "result", "is_error", "usage", "input_tokens", "output_tokens", "cache_read_input_tokens",
     "cache_creation_input_tokens", "session_id", "message", "content", "text", "id", "error", "api_error_status",
     "permission_denials", "rate_limit_info", "status", "error_status", "isApiErrorMessage", "model"]
) | st.text(max_size=8)


EVENT_TYPES = st.sampled_from(["result", "assistant", "user", "system", "stream_event", "rate_limit_event", "other"])


REPLY_JSON = json_values(REPLY_KEYS)


EVENT = st.fixed_dictionaries(
    {"type": EVENT_TYPES | JSON_SCALARS | st.lists(JSON_SCALARS, max_size=2)
     | st.dictionaries(REPLY_KEYS, JSON_SCALARS, max_size=2)},
    optional={
        "subtype": st.sampled_from(["success", "error_max_turns", "api_retry", "init"]) | JSON_SCALARS,
        "result": st.text(max_size=200) | REPLY_JSON,
        "is_error": st.booleans() | JSON_SCALARS,
        "usage": st.dictionaries(REPLY_KEYS, st.integers(-10, 2**62) | st.floats() | JSON_SCALARS,
                                 max_size=4) | REPLY_JSON,
        "message": REPLY_JSON,
        "error": REPLY_JSON,
        "api_error_status": st.sampled_from([401, 402, 403, 429, 529, 500]) | JSON_SCALARS,
        "error_status": st.sampled_from([401, 429, 529]) | JSON_SCALARS,
        "rate_limit_info": REPLY_JSON | st.just({"status": "rejected", "rateLimitType": "five_hour"}),
        "session_id": JSON_SCALARS,
        "permission_denials": REPLY_JSON,
    },
)


def _mutate_json(value: Any, draw: st.DrawFn, depth: int = 0) -> Any:
    """Replace, drop or add one field somewhere inside a decoded event."""
    if isinstance(value, dict) and value and depth < 4 and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate_json(value[key], draw, depth + 1)}
    if isinstance(value, list) and value and depth < 4 and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        return value[:i] + [_mutate_json(value[i], draw, depth + 1)] + value[i + 1:]
    if isinstance(value, dict) and draw(st.booleans()):
        if value and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(value)))
            return {k: v for k, v in value.items() if k != key}
        return {**value, draw(REPLY_KEYS): draw(REPLY_JSON)}
    return draw(REPLY_JSON)


@st.composite
def mutated_agent_output(draw: st.DrawFn) -> str:
    """A realistic agent output (tests/fixtures/agent) with a few lines cut, dropped, repeated, added or edited."""
    lines = draw(st.sampled_from(AGENT_TEXTS)).split("\n")
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["json", "json", "cut", "insert", "dup", "drop"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "json":
            try:
                decoded = json.loads(lines[i])
            except ValueError:
                continue
            lines[i] = json.dumps(_mutate_json(decoded, draw))
        elif kind == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif kind == "insert":
            lines.insert(i, draw(st.text(max_size=60) | EVENT.map(json.dumps)))
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif len(lines) > 1:
            del lines[i]
    return "\n".join(lines)


HUGE = st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "Error: x\n", "\n", "{", '"result":', "é"]),
                 st.integers(10_000, 200_000))


AGENT_OUTPUTS = (
    st.text(max_size=300)
    | REPLY_JSON.map(json.dumps)
    | st.lists(EVENT.map(json.dumps) | st.text(max_size=40), max_size=6).map("\n".join)
    | EVENT.map(lambda e: json.dumps(e, indent=2))
    | mutated_agent_output()
)


SNAPSHOT_KEYS = ["state", "trigger", "reason", "iteration", "consecutive_no_progress", "consecutive_same_error",
                 "consecutive_failures", "failure_error", "opened_at", "total_opens", "cooldown_s", "tokens_used",
                 "cost_used", "final",
                 "changed_at",
                 "trial_after", "trial_iteration", "trial_started_at", "recent_error_sets", "recent_reply_words",
                 "recent_reply_blockers",
                 "recent_output_bytes"]


STATE_KEYS = st.sampled_from(SNAPSHOT_KEYS) | st.text(max_size=8)


STATE_VALUES = (
    json_values(STATE_KEYS, 8)
    | st.sampled_from(["CLOSED", "OPEN", "HALF_OPEN", "none", "no-progress", "manual", "blocked"])
    | st.lists(st.lists(st.text(max_size=5), max_size=3), max_size=3)
    | st.lists(st.integers(-3, 10**6), max_size=4)
)


STATE_DOCS = (
    st.dictionaries(STATE_KEYS, STATE_VALUES, max_size=8)
    | st.fixed_dictionaries(
        {"state": st.sampled_from(["CLOSED", "OPEN", "HALF_OPEN"]), "trigger": st.sampled_from(["none", *TRIGGERS])},
        optional={key: STATE_VALUES for key in SNAPSHOT_KEYS[2:]},
    )
    | json_values(STATE_KEYS)
)


FINITE = st.floats(0, 1e12)


_REPLIES = st.lists(st.tuples(st.frozensets(st.text(max_size=8), max_size=3), st.booleans()), max_size=3)

SNAPSHOTS = st.builds(
    lambda replies, **fields: Snapshot(recent_reply_words=tuple(w for w, _ in replies),
                                       recent_reply_blockers=tuple(b for _, b in replies), **fields),
    replies=_REPLIES,
    state=st.sampled_from(list(State)),
    trigger=st.sampled_from(TRIGGERS),
    reason=st.text(max_size=30),
    iteration=st.integers(0, 10**6),
    consecutive_no_progress=st.integers(0, 100),
    consecutive_same_error=st.integers(0, 100),
    consecutive_failures=st.integers(0, 100),
    failure_error=st.text(max_size=30),
    opened_at=FINITE,
    total_opens=st.integers(0, 100),
    cooldown_s=FINITE,
    tokens_used=st.integers(0, 2**50),
    cost_used=st.floats(0, 1e6).map(lambda v: round(v, 6)),
    final=st.booleans(),
    changed_at=st.none() | FINITE,
    trial_after=st.integers(0, 10**6),
    trial_iteration=st.none() | st.integers(0, 10**6),
    trial_started_at=st.none() | st.floats(-1e9, 1e12),
    recent_error_sets=st.lists(st.frozensets(st.text(max_size=8), max_size=3), max_size=3).map(tuple),
    recent_output_bytes=st.lists(st.integers(0, 10**9), max_size=3).map(tuple),
)


# -- the breaker's inputs ---------------------------------------------------------------------------

_ERROR_LINES = ["Error: Failed to compile main.ts", "FAILED tests/test_auth.py::test_login", "Fatal: out of memory"]
_REPLY_TEXTS = [
    "Still blocked: the owner attestation gate is unsigned, deploy blocked.",
    "Owner attestation gate unsigned; deploy blocked.",
    "Implemented the login form and its tests.",
    "ok",
]

BREAKER_THRESHOLDS = st.builds(  # small values, so that every rule and the last allowed open are reached
    Thresholds,
    no_progress=st.integers(0, 4),
    same_error=st.integers(0, 4),
    output_decline=st.sampled_from([0.0, 50.0, 70.0]),
    max_failures=st.integers(0, 4),
    stall_s=st.sampled_from([0.0, 50.0]),
    paraphrase=st.sampled_from([0.0, 0.82]),
    max_iterations=st.sampled_from([0, 5, 12]),
    token_budget=st.sampled_from([0, 3000]),
    daily_token_budget=st.sampled_from([0, 5000]),
    cooldown_s=st.sampled_from([10.0, 100.0]),
    max_opens=st.integers(0, 4),
    trial_timeout_s=st.sampled_from([None, 30.0]),
)

REPORT_FIELDS = st.fixed_dictionaries(  # an IterationReport's fields but its number and times
    {
        "files_changed": st.sampled_from([0, 0, 1, 3]),
        "commits": st.sampled_from([0, 0, 0, 1]),
        "output_bytes": st.integers(0, 2000),
        "error_signatures": st.frozensets(st.sampled_from(_ERROR_LINES), max_size=2),
        "reply": st.none() | st.sampled_from(_REPLY_TEXTS),
        "tokens": st.integers(0, 400),
        "failed": st.sampled_from([False, False, False, True]),
        "timed_out": st.booleans(),
        "usage_limited": st.sampled_from([False, False, False, True]),
        "cut_short": st.sampled_from([False, False, False, True]),
        "blocked": st.sampled_from([False] * 15 + [True]),
        "completed": st.sampled_from([False, False, False, True]),
    }
)


STATE_FILE_BYTES = (
    st.binary(max_size=200)
    | json_values(STATE_KEYS).map(lambda v: json.dumps(v).encode())
    | STATE_DOCS.map(lambda v: json.dumps(v).encode())
    | st.tuples(STATE_DOCS.map(json.dumps), st.integers(0, 400)).map(lambda t: t[0][: t[1]].encode())
)


JSONL_LINES = st.lists(
    st.binary(max_size=60) | json_values(max_leaves=8).map(lambda v: json.dumps(v).encode())
    | st.dictionaries(st.sampled_from(["ts", "from", "to", "trigger", "reason", "event", "iteration"]), JSON_SCALARS,
                      max_size=5).map(lambda v: json.dumps(v).encode()),
    max_size=8,
)

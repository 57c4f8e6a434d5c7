"""The two-stage error filter, error sets and same-error evidence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ralph_supervisor.agents.base import parse_status_block, strip_status_block
from ralph_supervisor.evidence.errors import (
    MAX_ERROR_LINE,
    error_lines,
    error_lines_in_chunk,
    error_set,
    is_error_line,
)
from tests.helpers.agents import classify_line
from tests.helpers.fuzzing import (
    AGENT_OUTPUTS,
    CHEAP,
    EVENT,
    REPLY_JSON,
    mutated_agent_output,
)

FIXTURES = Path(__file__).parent / "fixtures" / "agent" / "claude"

# Ralph's own pipeline, in Python, for comparing verdicts line by line.
RALPH_STAGE1 = re.compile(r'"[^"]*error[^"]*":')
RALPH_STAGE2 = re.compile(
    r"(^Error:|^ERROR:|^error:|\]: error|Link: error|Error occurred|failed with error|[Ee]xception|Fatal|FATAL)"
)


def ralph_has_errors(text: str) -> bool:
    return any(not RALPH_STAGE1.search(line) and RALPH_STAGE2.search(line) for line in text.split("\n"))


def ours_has_errors(text: str) -> bool:
    return bool(error_lines_in_chunk(text.encode()))


# Ralph's vectors (tests/test_error_detection.sh), file by file, with Ralph's verdicts.
RALPH_VECTORS: list[tuple[str, str, bool]] = [
    ("is_error false", '{\n  "status": "success",\n  "is_error": false,\n  "message": "Operation completed successfully"\n}\n', False),
    ("error null", '{\n  "status": "ok",\n  "error": null,\n  "error_count": 0,\n  "has_error": false\n}\n', False),
    ("compile error", "Running build process...\nError: Failed to compile src/main.ts\n  Type error on line 42\n", True),
    (
        "exception in log",
        "[2025-12-31 10:30:00] INFO: Starting process\n[2025-12-31 10:30:05] ERROR: Unhandled exception in handler\n"
        "Exception: NullPointerException at line 123\n",
        True,
    ),
    ("json and fatal", '{\n  "is_error": false,\n  "status": "running"\n}\nProcessing files...\nFatal: Segmentation fault in module X\n', True),
    ("normal output", "Build successful\nAll tests passed\nDeployment complete\n", False),
    ("link error", "[BUILD] Compiling...\n[BUILD] Link: error: undefined reference to 'main'\n[BUILD] Failed\n", True),
    (
        "many error fields",
        '{\n  "error_message": "",\n  "is_error": false,\n  "error_code": 0,\n  "has_errors": false,\n  "error_list": []\n}\n',
        False,
    ),
    ("uppercase ERROR", "SYSTEM LOG:\nERROR: Database connection failed\nRetrying...\n", True),
    ("cannot/unable", "Build process started\nError: unable to access file system\ncannot proceed with deployment\n", True),
    (
        "docs heading",
        "# Error Handling Guide\n\nThis document describes how to handle errors in the application.\n"
        "When an error occurs, the system will log it and continue.\n",
        False,
    ),
    (
        "diff adding ErrorHandler",
        "diff --git a/src/error.ts b/src/error.ts\n+export class ErrorHandler {\n+  handleError(error: Error) {\n"
        "+    console.log(error);\n",
        False,
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), RALPH_VECTORS, ids=[v[0] for v in RALPH_VECTORS])
def test_ralph_vectors_keep_their_verdicts(name: str, text: str, expected: bool) -> None:
    assert ralph_has_errors(text) is expected  # the vector is Ralph's verdict
    assert ours_has_errors(text) is expected


@pytest.mark.parametrize(("name", "text", "expected"), RALPH_VECTORS, ids=[v[0] for v in RALPH_VECTORS])
def test_ralph_vectors_agree_with_ralph_line_by_line(name: str, text: str, expected: bool) -> None:
    for line in text.split("\n"):
        ralph = bool(not RALPH_STAGE1.search(line) and RALPH_STAGE2.search(line))
        assert bool(error_lines(line)) is ralph, line


def test_plain_error_line_yields_itself() -> None:
    assert error_lines("Error: Failed to compile src/main.ts") == ["Error: Failed to compile src/main.ts"]
    assert error_lines("Fatal: Segmentation fault in module X\r") == ["Fatal: Segmentation fault in module X"]


def test_claude_json_reply_with_compile_error_yields_that_error() -> None:
    line = (FIXTURES / "json_compile_error.log").read_text().splitlines()[0]
    assert '"is_error":false' in line  # Ralph's stage 1 throws this whole line away
    assert not ralph_has_errors(line)
    assert error_lines(line) == ["Error: Failed to compile src/main.ts"]


def test_json_line_with_only_falsy_error_fields_yields_nothing() -> None:
    line = json.dumps({"is_error": False, "error": None, "error_count": 0, "error_message": "", "errors": [], "err": {}})
    assert error_lines(line) == []


def test_truthy_error_field_text_is_checked() -> None:
    line = json.dumps({"type": "x", "error": "Fatal: disk full\nretrying"})
    assert error_lines(line) == ["Fatal: disk full"]


def test_tool_result_error_inside_stream_json_is_found() -> None:
    lines = (FIXTURES / "stream_tests_failing.jsonl").read_text().splitlines()
    found = [e for line in lines for e in error_lines(line)]
    assert found == ["Error: expected 42 to be 41"]


def test_tool_use_input_is_not_output() -> None:
    # The agent writing a file that mentions exceptions is not an error.
    event = {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "name": "Write", "input": {"content": "Fatal: x\nclass FooException {}"}}]},
    }
    assert error_lines(json.dumps(event)) == []


def test_failed_result_object_counts_its_message_as_an_error() -> None:
    line = (FIXTURES / "json_api_error.log").read_text().splitlines()[0]
    assert error_lines(line) == [json.loads(line)["result"]]
    no_text = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True})
    assert error_lines(no_text) == ["error_max_turns"]


def test_truncated_json_line_still_yields_errors_from_its_escaped_text() -> None:
    full = json.dumps({"type": "result", "is_error": False, "result": "Ran it.\nError: Failed to compile src/main.ts\n" + "x" * 100})
    assert error_lines(full[:120]) == ["Error: Failed to compile src/main.ts"]


def test_truncated_json_line_reports_the_right_sub_line_after_an_error_field_with_escapes() -> None:
    full = json.dumps({"error": "first\nsecond", "is_error": False, "result": "a\nError: Failed to compile src/main.ts\nb" + "x" * 50})
    assert error_lines(full[:-20]) == ["Error: Failed to compile src/main.ts"]


def test_non_decodable_line_drops_falsy_error_fields_not_the_whole_line() -> None:
    assert error_lines('  "is_error": false, "status": "done"') == []
    # Ralph drops this whole line; the error after the falsy field is still an error.
    line = '  "is_error": false, "detail": "Exception: NullPointerException"'
    assert error_lines(line) == [line]


def test_non_decodable_line_with_an_error_field_text_checks_that_text() -> None:
    assert error_lines('  "error": "Fatal: out of memory",') == ["Fatal: out of memory"]
    assert error_lines('  "error": "connection reset",') == []


def test_stream_json_with_2_mb_lines() -> None:
    big_text = ("lorem ipsum dolor sit amet " * 80_000)[:2_000_000]
    tool = {"type": "user", "message": {"content": [{"type": "tool_result", "content": big_text + "\nError: Failed to compile src/main.ts\n" + big_text}]}}
    plain = {"type": "assistant", "message": {"content": [{"type": "text", "text": big_text}]}, "is_error": False}
    data = (json.dumps(tool) + "\n" + json.dumps(plain) + "\n").encode()
    assert len(data) > 6_000_000
    assert error_lines_in_chunk(data) == ["Error: Failed to compile src/main.ts"]


def test_chunk_scan_matches_line_by_line_on_fixtures() -> None:
    for path in sorted(p for p in FIXTURES.parent.rglob("*") if p.is_file()):  # every agent's outputs
        data = path.read_bytes()
        per_line = [e for line in data.split(b"\n") for e in error_lines(line.decode("utf-8", "replace"))]
        assert error_lines_in_chunk(data) == per_line, path.name


def test_chunk_scan_finds_is_error_true_in_any_json_spacing_and_crlf_lines() -> None:
    spaced = json.dumps({"type": "result", "is_error": True, "result": "API Error: 500 Internal server error"})
    compact = json.dumps({"type": "result", "is_error": True, "subtype": "error_during_execution"}, separators=(",", ":"))
    data = f"ok\r\n{spaced}\r\nError: Failed to compile src/main.ts\r\n{compact}\n".encode()
    assert error_lines_in_chunk(data) == [
        "API Error: 500 Internal server error",
        "Error: Failed to compile src/main.ts",
        "error_during_execution",
    ]


def test_error_set_holds_signatures() -> None:
    lines = ["Error: connect ECONNREFUSED 127.0.0.1:5432", "TypeError: cannot read x at /home/u/app/foo.js:12:5"]
    assert error_set(lines) == {"Error: connect ECONNREFUSED #.#.#.#", "TypeError: cannot read x at foo.js"}


# --- properties ----------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
error_keys = st.sampled_from(["is_error", "error", "error_count", "error_message", "has_errors", "errors", "lastError"])
falsy = st.sampled_from([False, None, 0, 0.0, "", [], {}])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_filter_never_raises_on_text(text: str) -> None:
    for line in text.split("\n"):
        assert isinstance(error_lines(line), list)
    assert isinstance(error_lines_in_chunk(text.encode("utf-8", "surrogatepass")), list)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_filter_never_raises_on_json(value: object) -> None:
    line = json.dumps(value)
    assert error_lines_in_chunk(line.encode()) == error_lines(line)
    assert error_lines_in_chunk(line[: len(line) // 2].encode()) == error_lines(line[: len(line) // 2])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(error_keys, falsy, min_size=1), st.booleans())
def test_json_with_only_falsy_error_fields_never_yields_errors(fields: dict[str, object], compact: bool) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    assert error_lines(json.dumps(fields, separators=separators)) == []
    # Pretty-printed over several lines (Ralph's vectors' shape): each line on its own.
    for line in json.dumps(fields, indent=2).split("\n"):
        assert error_lines(line) == []


plain_lines = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=80)
error_samples = st.sampled_from(
    [
        "Error: Failed to compile src/main.ts",
        "[ts] ERROR: boom",
        "Exception: NullPointerException at line 123",
        "Fatal: Segmentation fault in module X",
        "[BUILD] Link: error: undefined reference to 'main'",
        json.dumps({"type": "result", "is_error": False, "result": "ok\nError: Failed to compile src/main.ts"}),
        '{"is_error":true,"type":"result","result":"API Error: 500"}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(plain_lines, error_samples), max_size=12), plain_lines, st.integers(min_value=0, max_value=12))
def test_adding_an_unrelated_non_error_line_does_not_change_the_error_set(
    lines: list[str], extra: str, where: int
) -> None:
    if error_lines(extra):
        return  # only lines the filter itself says are not errors are "unrelated non-error lines"
    before = error_set(e for line in lines for e in error_lines(line))
    grown = lines[:where] + [extra] + lines[where:]
    after = error_set(e for line in grown for e in error_lines(line))
    assert after == before
    chunk = "\n".join(grown).encode()
    assert error_set(error_lines_in_chunk(chunk)) == after


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(plain_lines, error_samples, json_values.map(json.dumps)), max_size=8))
def test_chunk_scan_equals_line_by_line(lines: list[str]) -> None:
    data = "\n".join(lines).encode()
    expected = [e for raw in data.split(b"\n") for e in error_lines(raw.decode("utf-8", "replace"))]
    assert error_lines_in_chunk(data) == expected


@CHEAP
@given(line=st.text(max_size=200) | REPLY_JSON.map(json.dumps) | EVENT.map(json.dumps) | mutated_agent_output())
@example(line='{"is_error": true, "error": "Error: x"}')
@example(line='{"a": "' + "Exception " * 50_000 + '"}')
@example(line='{"error": "Fatal\\nFatal\\nFatal"}')
@example(line='{"x": "' + "\\u" + '"}')
def test_error_lines_never_raise_and_are_single_bounded_lines(line: str) -> None:
    found = error_lines(line)
    assert isinstance(found, list)
    for item in found:
        assert isinstance(item, str) and "\n" not in item and len(item) <= MAX_ERROR_LINE
    assert is_error_line(line) == bool(found)
    assert classify_line(line) in (None, "usage-limit", "blocked")
    fields = parse_status_block(line)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    assert isinstance(strip_status_block(line), str)


@CHEAP
@given(chunk=st.binary(max_size=400) | AGENT_OUTPUTS.map(lambda t: t.encode("utf-8", "surrogatepass")))
@example(chunk=b'{"is_error" :  true}\r\nError: x\n\xff\xfeFATAL')
@example(chunk=b"\n" * 1000 + b"Exception")
def test_error_lines_in_a_chunk_never_raise_and_match_the_line_by_line_filter(chunk: bytes) -> None:
    found = error_lines_in_chunk(chunk)
    assert all(isinstance(item, str) and "\n" not in item and len(item) <= MAX_ERROR_LINE for item in found)
    if b"\\u" not in chunk:  # the one documented difference: \u-escaped ASCII letters inside JSON strings
        expected = [e for raw in chunk.split(b"\n") for e in error_lines(raw.decode("utf-8", "replace"))]
        assert found == expected


# --- the candidate scan: Hyperscan and Python's own give the same lines ------------------------------------

from ralph_supervisor.evidence import candidates  # noqa: E402

SCAN_PIECES = st.sampled_from([
    "Error:", "error:", "ERROR:", "rror", "RROR", "]: error", "Link: error", "Error occurred", "failed with error",
    "Exception", "exception", "xceptio", "Fatal", "FATAL", "fatal", '"is_error":true', '"is_error": \ttrue',
    '"is_error":\ntrue', '"is_error":false', "\n", "\n", "\r\n", " ", "x" * 40, "é", "{", '"',
])


def test_the_scan_engine_is_hyperscan_where_its_wheel_exists() -> None:
    import platform

    if platform.machine() in ("x86_64", "aarch64"):
        assert candidates.scan_engine() == "hyperscan"  # a dependency there: no silent fall back to the slow scan
    else:
        assert candidates.scan_engine() in ("hyperscan", "python")


@settings(max_examples=300, deadline=None)
@given(st.lists(SCAN_PIECES, max_size=40).map("".join))
def test_hyperscan_and_the_python_scan_find_the_same_candidate_lines(text: str) -> None:
    data = text.encode()
    fast = candidates._HYPERSCAN.candidate_lines(data, wait=True)
    if fast is None:
        pytest.skip("hyperscan is not installed on this platform: only the Python scan runs")
    starts, masks = fast
    assert starts == candidates.python_line_starts(data)
    for start, mask in zip(starts, masks):  # each line's mask names every literal the line holds
        line = data[start:].split(b"\n", 1)[0]
        held = {lit for lit in candidates.CANDIDATE_BYTES[:-1] if lit in line}
        if re.search(rb'"is_error"[ \t\r\f\x0b]*:[ \t\r\f\x0b]*true', line):
            held.add(b'"is_error"')
        assert set(candidates.literals(mask)) == held


def test_candidate_scans_agree_on_the_recorded_agent_outputs() -> None:
    for path in sorted(p for p in FIXTURES.parent.rglob("*") if p.is_file()):
        data = path.read_bytes()
        fast = candidates._HYPERSCAN.candidate_lines(data, wait=True)
        assert fast is None or fast[0] == candidates.python_line_starts(data), path.name

"""The control socket: a real server in a real event loop, real clients on a real AF_UNIX socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor import control
from ralph_supervisor.control import (
    ControlError,
    ControlServer,
    NoSupervisor,
    decode_response,
    parse_request,
    request,
)
import threading

from hypothesis import HealthCheck
from hypothesis import example

from ralph_supervisor.control import COMMANDS

from tests.helpers.fuzzing import CHEAP
from tests.helpers.fuzzing import JSON_SCALARS
from tests.helpers.fuzzing import budget
from tests.helpers.fuzzing import json_values
from tests.helpers.fuzzing import one_line


class Recorder:
    """A handler that answers like a supervisor would and remembers what it was asked."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, req: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(req)
        if req["cmd"] == "status":
            return {"state": "CLOSED", "iteration": 7, "supervisor": {"pid": os.getpid(), "running": True}}
        if req["cmd"] == "reset" and req.get("fail"):
            raise ControlError("cannot reset:\nthe breaker is busy")
        if req["cmd"] == "reset" and req.get("crash"):
            raise RuntimeError("boom")
        if req["cmd"] == "stop" and req.get("slow"):
            await asyncio.sleep(float(req["slow"]))
        return {"done": req["cmd"]}


@contextlib.asynccontextmanager
async def serving(path: Path, handler: control.Handler, **kwargs: Any) -> AsyncIterator[ControlServer]:
    server = ControlServer(path, handler, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def call(state_dir: Path, cmd: str, **fields: Any) -> dict[str, Any]:
    """The sync CLI client, run off the loop so the server can answer."""
    return await asyncio.to_thread(request, state_dir, cmd, **fields)


def raw_exchange(path: Path, payload: bytes, *, timeout: float = 5.0) -> dict[str, Any] | None:
    """Send raw bytes, read one answer line (None when the server closes without one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
        data = b""
        while not data.endswith(b"\n"):
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    return json.loads(data) if data else None


def test_request_round_trip_returns_handler_result_and_passes_fields(tmp_path: Path) -> None:
    handler = Recorder()

    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", handler):
            status = await call(tmp_path, "status")
            paused = await call(tmp_path, "pause", reason="lunch")
        assert status["state"] == "CLOSED" and status["iteration"] == 7
        assert status["supervisor"]["pid"] == os.getpid()
        assert paused == {"done": "pause"}

    asyncio.run(scenario())
    assert handler.requests == [{"cmd": "status"}, {"cmd": "pause", "reason": "lunch"}]


def test_socket_is_mode_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    async def scenario() -> None:
        old = os.umask(0)
        try:
            async with serving(tmp_path / "control.sock", Recorder()):
                mode = os.stat(tmp_path / "control.sock").st_mode
        finally:
            os.umask(old)
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600

    asyncio.run(scenario())


def test_close_removes_the_socket_file_and_then_nobody_answers(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", Recorder()):
            assert (tmp_path / "control.sock").exists()
        assert not (tmp_path / "control.sock").exists()
        with pytest.raises(NoSupervisor):
            await call(tmp_path, "status")

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"not json at all\n", "not valid JSON"),
        (b"[1, 2, 3]\n", "must be a JSON object"),
        (b'"status"\n', "must be a JSON object"),
        (b'{"cmd": 5}\n', "no string field 'cmd'"),
        (b'{"command": "status"}\n', "no string field 'cmd'"),
        (b'{"cmd": "explode"}\n', "unknown command 'explode'"),
        (b"\xff\xfe\xfd\n", "not valid UTF-8"),
        (b"   \n", "empty request"),
        (b"[" * 100000 + b"\n", "longer than"),
        (b'{"cmd": "status"}', None),  # no newline but EOF: still a request
    ],
)
def test_malformed_requests_get_a_one_line_error_and_the_server_keeps_answering(
    tmp_path: Path, payload: bytes, expected: str | None
) -> None:
    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder()):
            answer = await asyncio.to_thread(raw_exchange_eof, path, payload)
            assert answer is not None
            if expected is None:
                assert answer["ok"] is True and answer["result"]["state"] == "CLOSED"
            else:
                assert answer["ok"] is False
                assert expected in answer["error"]
                assert "\n" not in answer["error"]
            assert (await call(tmp_path, "status"))["iteration"] == 7

    asyncio.run(scenario())


def raw_exchange_eof(path: Path, payload: bytes) -> dict[str, Any] | None:
    """Like raw_exchange, but shuts down the writing side after the payload (a client may)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        sock.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data) if data else None


def test_a_one_megabyte_line_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder()):
            answer = await asyncio.to_thread(raw_exchange, path, b"x" * (1024 * 1024) + b"\n")
            assert answer == {"ok": False, "error": f"request longer than {control.MAX_LINE} bytes"}
            # A valid command padded past the cap is refused too: the cap is on the line, not the JSON.
            padded = json.dumps({"cmd": "stop", "pad": "y" * (70 * 1024)}).encode() + b"\n"
            answer = await asyncio.to_thread(raw_exchange, path, padded)
            assert answer is not None and answer["ok"] is False
            assert (await call(tmp_path, "status"))["state"] == "CLOSED"

    handler = Recorder()
    asyncio.run(scenario())
    assert all(r["cmd"] != "stop" for r in handler.requests)


def test_two_hundred_rapid_garbage_connections_leave_the_server_answering(tmp_path: Path) -> None:
    garbage = [b"", b"\n", b"{", b"\x00" * 300, b'{"cmd":"nope"}\n', b"[]\n", os.urandom(5000), b"x" * 70000]

    def flood(path: Path) -> int:
        answered = 0
        socks = []
        for i in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5.0)
            for _ in range(500):  # a full listen backlog answers EAGAIN at once: that is the kernel, retry
                try:
                    s.connect(str(path))
                    break
                except BlockingIOError:
                    time.sleep(0.01)
            with contextlib.suppress(OSError):
                s.sendall(garbage[i % len(garbage)])
            socks.append(s)
            if i % 3 == 0:  # some leave at once, some linger while others arrive
                s.close()
        for s in socks:
            if s.fileno() < 0:
                continue
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_WR)
                if s.recv(65536):
                    answered += 1
            s.close()
        return answered

    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder()) as server:
            answered = await asyncio.to_thread(flood, path)
            assert answered > 0
            assert (await call(tmp_path, "status"))["iteration"] == 7
            for _ in range(100):
                if server.active_connections == 0:
                    break
                await asyncio.sleep(0.02)
            assert server.active_connections == 0

    asyncio.run(scenario())


def test_connections_beyond_the_bound_are_told_busy_and_served_again_once_freed(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder(), max_connections=4) as server:
            idle = []
            for _ in range(4):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(path))
                idle.append(s)
            for _ in range(100):
                if server.active_connections == 4:
                    break
                await asyncio.sleep(0.01)
            assert server.active_connections == 4
            with pytest.raises(ControlError, match="busy"):
                await call(tmp_path, "status")
            for s in idle:
                s.close()
            for _ in range(100):
                if server.active_connections == 0:
                    break
                await asyncio.sleep(0.01)
            assert (await call(tmp_path, "status"))["state"] == "CLOSED"

    asyncio.run(scenario())


def test_a_silent_client_is_dropped_after_the_timeout_without_blocking_others(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder(), client_timeout=0.3):
            silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            silent.settimeout(5.0)
            silent.connect(str(path))
            silent.sendall(b'{"cmd": "sta')  # half a request, then nothing
            assert (await call(tmp_path, "status"))["iteration"] == 7
            data = await asyncio.to_thread(silent.recv, 65536)
            silent.close()
            answer = json.loads(data)
            assert answer["ok"] is False and "no complete request within 0.3 s" in answer["error"]

    asyncio.run(scenario())


def test_no_supervisor_when_there_is_no_socket(tmp_path: Path) -> None:
    with pytest.raises(NoSupervisor, match="no supervisor is running"):
        request(tmp_path, "status")
    with pytest.raises(NoSupervisor):
        request(tmp_path / "missing-folder", "status")


def test_no_supervisor_when_the_socket_file_is_stale(tmp_path: Path) -> None:
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(tmp_path / "control.sock"))
    leftover.close()  # the file stays, nobody listens: a supervisor that died by SIGKILL
    assert stat.S_ISSOCK(os.lstat(tmp_path / "control.sock").st_mode)
    with pytest.raises(NoSupervisor):
        request(tmp_path, "stop")


def test_start_replaces_a_stale_socket_file(tmp_path: Path) -> None:
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(tmp_path / "control.sock"))
    leftover.close()

    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", Recorder()):
            assert (await call(tmp_path, "status"))["state"] == "CLOSED"

    asyncio.run(scenario())


def test_start_never_steals_the_socket_of_a_live_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "control.sock"
        async with serving(path, Recorder()):
            second = ControlServer(path, Recorder())
            with pytest.raises(ControlError, match="another supervisor answers"):
                await second.start()
            assert (await call(tmp_path, "status"))["iteration"] == 7

    asyncio.run(scenario())


def test_handler_control_error_becomes_ok_false_with_one_line(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", Recorder()):
            with pytest.raises(ControlError) as err:
                await call(tmp_path, "reset", fail=True)
            assert str(err.value) == "cannot reset: the breaker is busy"
            assert (await call(tmp_path, "reset")) == {"done": "reset"}

    asyncio.run(scenario())


def test_a_crashing_handler_is_an_internal_error_and_the_server_survives(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", Recorder()):
            with pytest.raises(ControlError, match="internal error during reset: RuntimeError: boom"):
                await call(tmp_path, "reset", crash=True)
            assert (await call(tmp_path, "status"))["state"] == "CLOSED"

    asyncio.run(scenario())


def test_a_handler_returning_a_non_object_is_reported_not_sent(tmp_path: Path) -> None:
    async def bad(req: dict[str, Any]) -> Any:
        return ["not", "a", "dict"]

    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", bad):
            with pytest.raises(ControlError, match="handler returned list"):
                await call(tmp_path, "status")

    asyncio.run(scenario())


def test_client_gives_up_after_its_timeout_on_a_slow_handler(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "control.sock", Recorder()):
            with pytest.raises(ControlError, match="no answer from supervisor to 'stop' within 0.2 s"):
                await asyncio.to_thread(request, tmp_path, "stop", timeout=0.2, slow=0.6)

    asyncio.run(scenario())


def test_close_lets_an_answer_in_flight_reach_its_client(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = ControlServer(tmp_path / "control.sock", Recorder())
        await server.start()
        pending = asyncio.ensure_future(call(tmp_path, "stop", slow=0.3))
        for _ in range(200):
            if server.active_connections:
                break
            await asyncio.sleep(0.01)
        await server.close()
        assert await pending == {"done": "stop"}
        assert not (tmp_path / "control.sock").exists()

    asyncio.run(scenario())


def test_a_state_dir_deeper_than_the_socket_address_limit_still_works(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / ".ralph-supervise"
    assert len(str(deep / "control.sock")) > 108

    async def scenario() -> None:
        async with serving(deep / "control.sock", Recorder()):
            assert stat.S_IMODE(os.stat(deep / "control.sock").st_mode) == 0o600
            assert (await call(deep, "status"))["iteration"] == 7
        assert not (deep / "control.sock").exists()

    asyncio.run(scenario())


# --- other users ---------------------------------------------------------------------------------

NOBODY = 65534
CLIENT_AS_NOBODY = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.errno}))
    sys.exit(0)
try:
    s.sendall(b'{"cmd": "stop"}\n')
except (BrokenPipeError, ConnectionResetError):
    pass  # refused before the request was read: the answer is still waiting to be read
print(s.recv(65536).decode().strip())
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another user needs root")


@contextlib.contextmanager
def shared_dir() -> Any:
    """A folder other users may traverse (pytest's tmp_path is 0700 and would hide the socket anyway)."""
    path = Path(tempfile.mkdtemp(prefix="ralph-control-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def python_for_nobody() -> str | None:
    """An interpreter the other user may execute (ours may live in a 0700 home)."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([candidate, "-c", "pass"], user=NOBODY, group=NOBODY, extra_groups=[],
                                  capture_output=True, timeout=30)
            if done.returncode == 0:
                return candidate
    return None


def run_as_nobody(sock_path: Path) -> dict[str, Any]:
    python = python_for_nobody()
    if python is None:
        pytest.skip("no python interpreter the user nobody may execute")
    done = subprocess.run(
        [python, "-c", CLIENT_AS_NOBODY, str(sock_path)],
        user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_root
def test_another_user_cannot_even_connect_to_the_0600_socket() -> None:
    handler = Recorder()

    async def scenario(folder: Path) -> None:
        async with serving(folder / "control.sock", handler):
            result = await asyncio.to_thread(run_as_nobody, folder / "control.sock")
        assert result == {"connect_error": 13}  # EACCES

    with shared_dir() as folder:
        asyncio.run(scenario(folder))
    assert handler.requests == []


@needs_root
def test_peer_credentials_refuse_another_user_even_when_the_socket_mode_is_relaxed() -> None:
    """chmod 0666 opens the file door; SO_PEERCRED still keeps the other user out."""
    handler = Recorder()

    async def scenario(folder: Path) -> None:
        async with serving(folder / "control.sock", handler):
            os.chmod(folder / "control.sock", 0o666)
            result = await asyncio.to_thread(run_as_nobody, folder / "control.sock")
            assert result["ok"] is False and "another user" in result["error"]
            assert (await call(folder, "status"))["state"] == "CLOSED"  # root (our own user) still may

    with shared_dir() as folder:
        asyncio.run(scenario(folder))
    assert [r["cmd"] for r in handler.requests] == ["status"]


def test_peer_rule_allows_only_the_same_user_and_root() -> None:
    assert control.peer_allowed(1000, 1000)
    assert control.peer_allowed(0, 1000)
    assert not control.peer_allowed(1001, 1000)
    assert not control.peer_allowed(65534, 0)


# --- the pure protocol -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parsing_any_bytes_yields_a_request_or_one_line_control_error(line: bytes) -> None:
    try:
        req = parse_request(line)
    except ControlError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)  # one line, never empty
    else:
        assert req["cmd"] in control.COMMANDS


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20))
def test_decoding_any_json_answer_yields_its_result_or_one_line_control_error(value: Any) -> None:
    answered = isinstance(value, dict) and value.get("ok") is True
    readable = answered and (value.get("result") is None or isinstance(value.get("result"), dict))
    try:
        result = decode_response(json.dumps(value).encode())
    except ControlError as exc:
        message = str(exc)
        assert not readable, value
        assert message and "\n" not in message, repr(message)
    else:
        assert readable, value
        assert result == (value.get("result") or {})


def test_error_answers_are_always_one_line() -> None:
    line = control.encode_error("first\nsecond\r\nthird")
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert json.loads(line) == {"ok": False, "error": "first second third"}


REQUEST_KEYS = st.sampled_from(["cmd", "fields", "reason"]) | st.text(max_size=6)


REQUEST_LINES = (
    st.binary(max_size=300)
    | json_values(REQUEST_KEYS).map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries({"cmd": st.sampled_from(sorted(COMMANDS)) | JSON_SCALARS},
                            optional={"x": JSON_SCALARS}).map(lambda v: json.dumps(v).encode())
    | st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass"))
)


@CHEAP
@given(line=REQUEST_LINES)
@example(line=b'{"cmd": "status"}')
@example(line=b'{"cmd": "status\\nstop"}')
@example(line=b'{"cmd": NaN}')
@example(line=b"[" * 100_000)
@example(line=b'"\\ud800"')
def test_any_request_line_is_a_request_or_one_line_control_error(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ControlError as exc:
        assert one_line(str(exc)), str(exc)
    else:
        assert isinstance(request, dict) and request["cmd"] in COMMANDS


@budget(5)
@given(digits=st.integers(4301, 60_000))
@example(digits=4301)
def test_a_request_with_a_huge_integer_is_a_control_error(digits: int) -> None:
    with pytest.raises(ControlError):
        parse_request(b'{"cmd": "status", "n": ' + b"1" * digits + b"}")


class LoopThread:
    """An asyncio loop in a thread, so a synchronous hypothesis test can talk to a real server."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def exchange(path: Path, payload: bytes, timeout: float = 10.0) -> bytes:
    """Send the payload, shut our side (so a line without a newline still ends), read until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data


def test_the_control_server_answers_any_bytes_with_one_json_line_or_closes() -> None:
    asked: list[str] = []

    async def handler(req: dict[str, Any]) -> dict[str, Any]:
        asked.append(req["cmd"])
        return {"state": "CLOSED", "cmd": req["cmd"]}

    folder = Path(tempfile.mkdtemp(prefix="rf-", dir="/tmp"))  # short: AF_UNIX paths hold 107 bytes
    path = folder / "control.sock"
    runner = LoopThread()
    server = ControlServer(path, handler, client_timeout=2.0)
    try:
        runner.run(server.start())

        @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(payload=REQUEST_LINES | st.tuples(REQUEST_LINES, st.binary(max_size=50)).map(lambda t: t[0] + b"\n" + t[1]))
        @example(payload=b"")
        @example(payload=b'{"cmd": "stop"}\n{"cmd": "status"}\n')
        @example(payload=b"x" * 70_000)
        @example(payload=b"\n")
        @example(payload=b'{"cmd": "status"')
        def hit(payload: bytes) -> None:
            answer = exchange(path, payload)
            if answer:
                assert answer.endswith(b"\n") and answer.count(b"\n") == 1, answer[:200]
                decoded = json.loads(answer)
                assert isinstance(decoded, dict) and isinstance(decoded["ok"], bool)
                if decoded["ok"]:
                    assert decoded["result"]["cmd"] in COMMANDS
                else:
                    assert one_line(decoded["error"])
            else:
                assert payload == b"", "only a client that sends nothing is closed without an answer"
            status_answer = json.loads(exchange(path, b'{"cmd": "status"}\n'))
            assert status_answer == {"ok": True, "result": {"state": "CLOSED", "cmd": "status"}}

        hit()
        assert server.active_connections == 0 or _settles(server)
    finally:
        runner.run(server.close())
        runner.stop()
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    assert "status" in asked


def _settles(server: ControlServer, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.active_connections == 0:
            return True
        time.sleep(0.01)
    return False

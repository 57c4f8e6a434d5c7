"""The control socket: how `pause`, `resume`, `stop`, `reset` and `status` reach a running supervisor.

Protocol (one request per connection, JSON lines):

    client -> {"cmd": "status" | "pause" | "resume" | "stop" | "reset", ...optional fields}\\n
    server -> {"ok": true, "result": {...}}\\n   or   {"ok": false, "error": "one line"}\\n

The socket is `STATE_DIR/control.sock`, mode 0600, and the server also checks the peer's
credentials (SO_PEERCRED), so a permissive umask, a chmod or a shared folder still never lets
another user steer someone else's loop. Every kind of bad client (garbage, endless lines,
silence, thousands of connections) is answered or dropped inside its own connection task:
nothing a client does can raise into the supervisor's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor.text import one_line

log = structlog.get_logger(__name__)

SOCKET_NAME = "control.sock"
COMMANDS: frozenset[str] = frozenset({"status", "pause", "resume", "stop", "reset"})
MAX_LINE = 64 * 1024
"""Longest request line the server reads; longer ones are refused (a real request is ~50 bytes)."""
MAX_RESPONSE = 16 * 1024 * 1024
"""Longest response line the client accepts (a status with a big process tree stays far below)."""
CHUNK = 4096
CLIENT_TIMEOUT = 5.0
"""Seconds a client gets to send its request and to take the answer; slow clients are dropped."""
MAX_CONNECTIONS = 16
"""Connections served at once; extra ones get a one-line `busy` answer and are closed."""
CLOSE_GRACE = 2.0
"""Seconds `close()` lets in-flight requests finish writing their answers before cancelling them."""
_SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Gets the request object (with a valid `cmd`), returns the `result` object."""


class ControlError(Exception):
    """A request failed: raised by handlers (becomes `ok: false`) and by the client on such an answer."""


class NoSupervisor(Exception):
    """Nobody answers on the control socket: none there, connection refused, or a stale file."""


def socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / SOCKET_NAME


# ---------------------------------------------------------------------------------------------
# Pure protocol: parse a request line, encode answers.


def parse_request(line: bytes, commands: frozenset[str] = COMMANDS) -> dict[str, Any]:
    """The request object of one line, or ControlError naming what is wrong with it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ControlError("request is not valid UTF-8") from None
    if not text.strip():
        raise ControlError("empty request: expected a JSON object like {\"cmd\": \"status\"}")
    try:
        request = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is one; huge ints raise plain ValueError
        raise ControlError(f"request is not valid JSON: {one_line(str(exc), 120)}") from None
    if not isinstance(request, dict):
        raise ControlError(f"request must be a JSON object, got {type(request).__name__}")
    cmd = request.get("cmd")
    if not isinstance(cmd, str):
        raise ControlError("request has no string field 'cmd'")
    if cmd not in commands:
        expected = ", ".join(sorted(commands))
        raise ControlError(f"unknown command {one_line(cmd, 60)!r} (expected one of: {expected})")
    return request


def encode_result(result: dict[str, Any]) -> bytes:
    return _encode({"ok": True, "result": result})


def encode_error(message: str) -> bytes:
    return _encode({"ok": False, "error": one_line(message, 500)})


def _encode(obj: dict[str, Any]) -> bytes:
    # default=str: a handler returning a Path or a datetime must not turn into a dropped answer.
    return (json.dumps(obj, default=str, separators=(",", ":")) + "\n").encode("utf-8")


def decode_response(line: bytes) -> dict[str, Any]:
    """The `result` of an answer line; ControlError for `ok: false` or an answer we cannot read."""
    try:
        answer = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ControlError(f"unreadable answer from supervisor: {one_line(repr(line[:200]), 200)}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise ControlError(f"unexpected answer from supervisor: {one_line(repr(answer)[:200], 200)}")
    if not answer["ok"]:
        raise ControlError(one_line(str(answer.get("error") or "supervisor refused the request"), 500))
    result = answer.get("result")
    if result is None:
        return {}
    if not isinstance(result, dict):
        raise ControlError(f"unexpected result from supervisor: {one_line(repr(result)[:200], 200)}")
    return result


def peer_allowed(peer_uid: int, own_uid: int) -> bool:
    """Only our own user (and root, who could read our files anyway) may steer the supervisor."""
    return peer_uid == own_uid or peer_uid == 0


# ---------------------------------------------------------------------------------------------
# Long socket paths: sun_path holds 107 bytes; deep workspaces exceed it. On Linux the folder can be
# reached through /proc/self/fd/N of an O_PATH descriptor, which keeps the address short.


@contextlib.contextmanager
def _short_address(path: Path) -> Iterator[str]:
    raw = os.fsencode(path)
    if len(raw) <= _SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        short = f"/proc/self/fd/{fd}/{path.name}"
        if len(os.fsencode(short)) > _SUN_PATH_MAX:
            raise ControlError(f"control socket name too long: {path}")
        yield short
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Server


class ControlServer:
    """Serves the control socket inside the supervisor's event loop.

    `handler` decides; this class only guards the door: socket mode, peer user, request syntax,
    sizes, time limits and the number of connections served at once.
    """

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        commands: frozenset[str] = COMMANDS,
        max_connections: int = MAX_CONNECTIONS,
        client_timeout: float = CLIENT_TIMEOUT,
    ) -> None:
        self.path = Path(path)
        self._handler = handler
        self._commands = commands
        self._max_connections = max_connections
        self._client_timeout = client_timeout
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._own_uid = os.geteuid()
        self._inode: tuple[int, int] | None = None
        self._busy_refusals = 0
        self._busy_logged_at = float("-inf")

    @property
    def active_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        """Bind `path` (mode 0600 before anyone can connect) and start accepting."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _short_address(self.path) as address:
                sock.bind(address)
            # Connecting needs listen(), so chmod between bind and listen leaves no window.
            os.chmod(self.path, 0o600)
            st = os.stat(self.path)
            self._inode = (st.st_dev, st.st_ino)
            sock.listen(64)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock)
        except BaseException:
            sock.close()
            self._unlink_own()
            raise
        log.info("control_socket_listening", path=str(self.path))

    def lost(self) -> bool:
        """The socket file we listen on was deleted or replaced (no client can reach us through it)."""
        if self._server is None or self._inode is None:
            return False
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != self._inode

    async def rebind(self) -> None:
        """Listen on a new socket file at the path; connections in flight on the old one finish there."""
        old, self._server = self._server, None
        if old is not None:
            old.close()
        await self.start()

    async def close(self) -> None:
        """Stop accepting, remove the socket file, let answers in flight finish (bounded)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._unlink_own()
        current = asyncio.current_task()
        pending = {t for t in self._connections if t is not current}
        if pending:
            _done, still = await asyncio.wait(pending, timeout=CLOSE_GRACE)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=1.0)

    def _unlink_own(self) -> None:
        """Remove the socket file, but only if it is still ours (never someone else's newer one)."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if self._inode is not None and (st.st_dev, st.st_ino) != self._inode:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: never raises (except cancellation), always closes the transport."""
        task = asyncio.current_task()
        busy = len(self._connections) >= self._max_connections
        if task is not None and not busy:
            self._connections.add(task)
        try:
            if busy:
                # No read, no drain: a flood must not grow into a flood of waiting tasks. The
                # short answer fits the socket buffer, so it still reaches a client that reads.
                self._note_busy()
                writer.write(encode_error("supervisor busy: too many control connections"))
                return
            await self._serve_one(reader, writer)
        except asyncio.CancelledError:
            # Only close() cancels a connection. Ending quietly (not re-raising) keeps asyncio's
            # stream callback from logging the cancellation as an unhandled error (Python 3.11).
            pass
        except Exception as exc:  # the door must never fall in: log and drop the client
            log.warning("control_connection_failed", error=one_line(f"{type(exc).__name__}: {exc}", 500))
        finally:
            if task is not None:
                self._connections.discard(task)
            await _close_quietly(writer)

    def _note_busy(self) -> None:
        """Log refused connections at most once a second: a flood must not flood the event log too."""
        self._busy_refusals += 1
        now = time.monotonic()
        if now - self._busy_logged_at >= 1.0:
            log.warning("control_connection_refused", reason="busy", refused=self._busy_refusals,
                        active=len(self._connections))
            self._busy_refusals, self._busy_logged_at = 0, now

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_credentials(writer)
        if peer is None or not peer_allowed(peer[1], self._own_uid):
            log.warning("control_peer_refused", peer_pid=peer and peer[0], peer_uid=peer and peer[1])
            await self._answer(writer, encode_error("permission denied: the supervisor belongs to another user"))
            return
        try:
            async with asyncio.timeout(self._client_timeout):
                line = await read_line(reader, MAX_LINE)
        except TimeoutError:
            log.info("control_client_timeout", peer_pid=peer[0])
            await self._answer(writer, encode_error(f"no complete request within {self._client_timeout:g} s"))
            return
        except LineTooLong:
            await self._answer(writer, encode_error(f"request longer than {MAX_LINE} bytes"))
            return
        if line is None:
            return  # connected and left without a word (a liveness probe, say)
        try:
            request = parse_request(line, self._commands)
        except ControlError as exc:
            await self._answer(writer, encode_error(str(exc)))
            return
        await self._answer(writer, await self._call(request, peer[0]))

    async def _call(self, request: dict[str, Any], peer_pid: int) -> bytes:
        cmd = request["cmd"]
        started = time.monotonic()
        try:
            result = await self._handler(request)
        except asyncio.CancelledError:
            raise
        except ControlError as exc:
            log.info("control_request_failed", cmd=cmd, error=one_line(str(exc), 500))
            return encode_error(str(exc) or f"{cmd} failed")
        except Exception as exc:
            log.exception("control_handler_crashed", cmd=cmd)
            return encode_error(f"internal error during {cmd}: {type(exc).__name__}: {exc}")
        if result is None:
            result = {}
        if not isinstance(result, dict):
            log.error("control_handler_bad_result", cmd=cmd, type=type(result).__name__)
            return encode_error(f"internal error during {cmd}: handler returned {type(result).__name__}")
        log.debug("control_request", cmd=cmd, peer_pid=peer_pid, duration_ms=round((time.monotonic() - started) * 1000))
        try:
            return encode_result(result)
        except (TypeError, ValueError) as exc:
            return encode_error(f"internal error during {cmd}: unencodable result: {exc}")

    async def _answer(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        """Write one answer; a client that does not take it in time is dropped."""
        try:
            writer.write(data)
            async with asyncio.timeout(self._client_timeout):
                await writer.drain()
        except (TimeoutError, ConnectionError, OSError):
            pass


class LineTooLong(Exception):
    pass


async def read_line(reader: asyncio.StreamReader, limit: int) -> bytes | None:
    """Read up to the first newline in chunks, never holding more than `limit` bytes.

    EOF after some bytes counts as the line (a client may shut down its side instead of sending
    a newline); EOF before any byte is None.
    """
    buf = bytearray()
    while True:
        chunk = await reader.read(CHUNK)
        if not chunk:
            return bytes(buf) if buf else None
        newline = chunk.find(b"\n")
        if newline >= 0:
            buf += chunk[:newline]
            if len(buf) > limit:
                raise LineTooLong
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise LineTooLong


def _peer_credentials(writer: asyncio.StreamWriter) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the connecting process, or None when the kernel will not say."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


async def _close_quietly(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
        async with asyncio.timeout(1.0):
            await writer.wait_closed()


def _remove_stale(path: Path) -> None:
    """Unlink a leftover socket file. The single-instance lock guarantees nobody live owns it; we
    still check, so a bug elsewhere cannot make us steal a live supervisor's socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise ControlError(f"cannot create control socket: {path} is a directory")
    if stat.S_ISSOCK(st.st_mode) and _answers(path):
        raise ControlError(f"another supervisor answers on {path}")
    os.unlink(path)
    log.info("control_socket_stale_removed", path=str(path))


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        with _short_address(path) as address:
            probe.connect(address)
        return True
    except OSError:
        return False
    finally:
        probe.close()


# ---------------------------------------------------------------------------------------------
# Client (synchronous: the CLI has no event loop)


def request(state_dir: Path, cmd: str, *, timeout: float = 5.0, **fields: Any) -> dict[str, Any]:
    """Send one request to the supervisor of `state_dir` and return its `result`.

    Raises NoSupervisor when nobody listens (no socket, refused, stale file) and ControlError when
    the supervisor refuses, fails, or does not answer within `timeout` seconds.
    """
    path = socket_path(state_dir)
    message = _encode({**fields, "cmd": cmd})
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(timeout, 0.001))
        try:
            _connect(sock, path, deadline)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise NoSupervisor(f"no supervisor is running for {state_dir}") from None
        except PermissionError:
            raise ControlError(f"permission denied on {path}: the supervisor belongs to another user") from None
        except TimeoutError:
            raise ControlError(f"supervisor did not accept the connection within {timeout:g} s") from None
        except OSError as exc:
            if not path.exists():
                raise NoSupervisor(f"no supervisor is running for {state_dir}") from None
            raise ControlError(f"cannot connect to {path}: {exc.strerror or exc}") from None
        try:
            try:
                sock.sendall(message)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may have answered (busy, refused) and closed before reading: read it
            line = _recv_line(sock, deadline)
        except TimeoutError:
            raise ControlError(f"no answer from supervisor to {cmd!r} within {timeout:g} s") from None
        except OSError as exc:
            raise ControlError(f"control connection failed during {cmd!r}: {exc.strerror or exc}") from None
        if line is None:
            raise ControlError(f"supervisor closed the connection without answering {cmd!r}")
        return decode_response(line)
    finally:
        sock.close()


def _connect(sock: socket.socket, path: Path, deadline: float) -> None:
    """Connect, waiting (until the deadline) while the listen backlog is full: Linux answers EAGAIN
    at once on a full AF_UNIX backlog instead of blocking, which means busy, not gone."""
    with _short_address(path) as address:
        while True:
            try:
                sock.connect(address)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError from None
                time.sleep(0.01)


def _recv_line(sock: socket.socket, deadline: float) -> bytes | None:
    buf = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            return bytes(buf) if buf else None
        newline = chunk.find(b"\n")
        if newline >= 0:
            buf += chunk[:newline]
            return bytes(buf)
        buf += chunk
        if len(buf) > MAX_RESPONSE:
            raise ControlError(f"answer from supervisor longer than {MAX_RESPONSE} bytes")

"""The terminal never holds up supervision, and is left as it was found (ralph_supervisor/terminal/).

Real terminals throughout: pty pairs whose reader stops, or reads at 1 KB/s, or is stopped by XOFF
(Ctrl-S written to the master, as a keyboard would); an interactive bash with `stty tostop` that runs the
supervisor as a background job and brings it back with `fg`; and a tmux pane sent Ctrl-S with
`tmux send-keys`.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from ralph_supervisor import control
from ralph_supervisor.terminal import Outlet
from ralph_supervisor.terminal.modes import ScreenModes
from tests.helpers import state_dir_of
from tests.helpers.debian import installed
from tests.helpers.supervise import REPO, events, wait_for

NOTICE = re.compile(rb"ralph-supervise: (\d+) bytes not shown on the terminal; child.log has everything\n")


# --- pure parts ------------------------------------------------------------------------------------


def test_screen_modes_are_put_back_and_switched_again_for_a_resume() -> None:
    modes = ScreenModes()
    modes.feed(b"hello \x1b[?1049h\x1b[?25l\x1b[?1000;1006h\x1b=" + b"x" * 100)
    modes.feed(b"\x1b[?1000l more")  # mouse reporting switched off again by the program itself
    back, again = modes.put_back()
    assert back == b"\x1b[?25h\x1b[?1006l\x1b>\x1b[?1049l"  # the main screen comes back last
    assert again == b"\x1b[?1049h\x1b[?25l\x1b[?1006h\x1b="
    assert modes.put_back() == (b"", b"")  # nothing is switched any more


def test_modes_in_their_usual_state_and_unknown_modes_need_nothing() -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[?25h\x1b[?7h\x1b[?9999h\x1b[1;31mred\x1b[0m\x1b>")
    assert modes.put_back() == (b"", b"")


pieces = st.lists(st.sampled_from([b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?25l", b"\x1b[?25h", b"\x1b[?2004h",
                                   b"\x1b[?1;1000h", b"\x1b=", b"\x1b>", b"\x1b[31m", b"text\n", b"\x1b", b"["]),
                  max_size=30)


@given(pieces, st.lists(st.integers(min_value=0, max_value=400), max_size=8))
@settings(max_examples=200, deadline=None)
def test_screen_modes_read_the_same_however_the_bytes_are_cut(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    whole = ScreenModes()
    whole.feed(data)
    cut = ScreenModes()
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for start, end in zip(points, points[1:]):
        cut.feed(data[start:end])
    assert cut.put_back() == whole.put_back()


# --- one outlet on a real pipe or pty ------------------------------------------------------------------


class Reader:
    """Reads the master side of a pty (or a pipe) on a thread: at full speed, at `rate` bytes/s, or not."""

    def __init__(self, fd: int, rate: float | None = None) -> None:
        self.fd = fd
        self.rate = rate
        self.data = bytearray()
        self.reading = threading.Event()
        self.reading.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.reading.wait(0.05):
                continue
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 65536 if self.rate is None else max(1, int(self.rate / 10)))
            except OSError:
                return
            if not chunk:
                return
            self.data.extend(chunk)
            if self.rate is not None:
                time.sleep(len(chunk) / self.rate)

    def drain(self, quiet: float = 0.5, timeout: float = 30.0) -> bytes:
        """Read at full speed until nothing came for `quiet` seconds (or the other side closed)."""
        self.rate = None
        self.reading.set()
        deadline = time.monotonic() + timeout
        seen, since = len(self.data), time.monotonic()
        while time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)
            if len(self.data) != seen:
                seen, since = len(self.data), time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
        return bytes(self.data)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def raw_pty() -> tuple[int, int]:
    """A pty whose slave passes bytes unchanged (no \\n -> \\r\\n), keeping IXON (Ctrl-S, Ctrl-Q)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave


@contextlib.contextmanager
def outlet_on_a_pty(**options: Any) -> Iterator[tuple[Outlet, Reader, int]]:
    """An outlet writing to a raw pty, a Reader on the pty's master (and the master, to type on)."""
    master, slave = raw_pty()
    reader = Reader(master)
    outlet = Outlet(slave, **options)
    try:
        yield outlet, reader, master
    finally:
        outlet.close(1.0)
        reader.stop()
        for fd in (master, slave):
            with contextlib.suppress(OSError):
                os.close(fd)


def numbered(start: int, count: int) -> bytes:
    return b"".join(b"line %07d of the loop's output\n" % i for i in range(start, start + count))


def test_an_outlet_never_blocks_on_a_terminal_that_stops_reading_and_says_exactly_what_it_dropped() -> None:
    seen: list[tuple[str, dict]] = []
    with outlet_on_a_pty(on_event=lambda name, **fields: seen.append((name, fields))) as (outlet, reader, _):
        reader.reading.clear()  # the reader stops
        first = [numbered(i * 1000, 1000) for i in range(150)]  # 5 MB: more than we keep for any terminal
        for chunk in first:
            outlet.echo(chunk)  # returns at once: nothing here waits for the terminal
        outlet.line(b"a line of ours, due while the terminal took nothing\n")
        time.sleep(0.3)
        reader.reading.set()
        wait_for(lambda: NOTICE.search(reader.data), what="the dropped-bytes line")
        second = numbered(90_000, 100)
        outlet.echo(second)
        wait_for(lambda: reader.data.endswith(second), what="the echo after catching up")
    data = bytes(reader.data)
    found = NOTICE.findall(data)
    assert len(found) == 1  # said once
    dropped = int(found[0])
    stream = b"".join(first)
    line = b"a line of ours, due while the terminal took nothing\n"
    assert data.count(line) == 1
    shown = NOTICE.sub(b"", data.replace(line, b""))
    # What was shown is the stream up to the cut, then (after the line) what came after catching up.
    assert shown == stream[:len(stream) - dropped] + second
    assert outlet.shown_bytes + outlet.dropped_bytes == len(stream) + len(second)
    assert outlet.dropped_bytes == dropped and [f["bytes"] for n, f in seen if n == "echo_dropped"] == [dropped]
    # Our line waited only for what the terminal already held, not for the echo queued behind it.
    assert data.index(line) < len(stream) - dropped


def test_our_lines_go_first_when_the_terminal_is_stopped_by_xoff_and_flow_again_after_xon() -> None:
    with outlet_on_a_pty() as (outlet, reader, master):
        outlet.echo(numbered(0, 10))
        wait_for(lambda: len(reader.data) >= len(numbered(0, 10)), what="the first echo")
        os.write(master, b"\x13")  # Ctrl-S: the line discipline stops the slave's output
        time.sleep(0.2)
        outlet.echo(numbered(10, 3000))  # about 100 KB: more than the pty holds
        outlet.line(b"breaker opened while you held Ctrl-S\n")
        time.sleep(0.5)
        before = len(reader.data)
        os.write(master, b"\x11")  # Ctrl-Q
        wait_for(lambda: reader.data.endswith(numbered(3009, 1)), what="the whole echo after Ctrl-Q")
    data = bytes(reader.data)
    assert before == len(numbered(0, 10))  # nothing got through while stopped
    line_at = data.index(b"breaker opened while you held Ctrl-S\n")
    echo = data.replace(b"breaker opened while you held Ctrl-S\n", b"")
    assert echo == numbered(0, 3010)  # the terminal kept up after Ctrl-Q: nothing dropped, in order
    assert line_at < len(data) - 64 * 1024  # ours came before the echo that waited in our queue


def test_close_gives_up_on_a_stuck_terminal_within_its_timeout_and_counts_what_was_left() -> None:
    with outlet_on_a_pty() as (outlet, reader, master):
        os.write(master, b"\x13")
        for i in range(20):
            outlet.echo(numbered(i * 1000, 1000))
        started = time.monotonic()
        left = outlet.settle(0.5)
        outlet.close(0.5)
        took = time.monotonic() - started
    assert took < 5  # bounded by the timeout (generously, on a loaded machine); it never hangs
    assert left > 0 and outlet.shown_bytes + outlet.dropped_bytes == 20 * len(numbered(0, 1000))


def test_when_our_own_lines_overflow_a_stopped_terminal_the_oldest_go_and_that_is_said() -> None:
    with outlet_on_a_pty() as (outlet, reader, master):
        os.write(master, b"\x13")
        lines = [b"our line %05d %s\n" % (i, b"." * 100) for i in range(5000)]  # 600 KB: beyond what we keep
        for line in lines:
            outlet.line(line)
        os.write(master, b"\x11")
        wait_for(lambda: reader.data.endswith(lines[-1]), what="the last line")
    data = bytes(reader.data)
    said = re.findall(rb"ralph-supervise: (\d+) of our lines not shown on the terminal; events.jsonl has them\n",
                      data)
    shown = [line for line in lines if line in data]
    assert said and len(shown) + sum(int(n) for n in said) == len(lines)
    # The oldest went, the newest stayed (and the one being written when the terminal stopped, if any).
    assert shown[1:] == lines[len(lines) - len(shown) + 1:] and lines.index(shown[0]) <= len(lines) - len(shown)


def test_a_terminal_that_goes_away_is_let_go_and_the_echo_still_never_blocks() -> None:
    seen: list[str] = []
    with outlet_on_a_pty(on_event=lambda name, **fields: seen.append(name)) as (outlet, reader, master):
        reader.stop()
        os.close(master)  # the terminal hangs up: writes to the slave fail with EIO
        outlet.line(b"anyone there?\n")
        wait_for(lambda: "terminal_lost" in seen, what="the lost terminal noticed")
        for i in range(200):
            outlet.echo(numbered(i * 100, 100))  # still returns at once, memory stays bounded
        assert outlet.settle(0.5) > 0


# --- the supervisor on real terminals ------------------------------------------------------------------

ITERATION = 3000
"""Lines the loop prints per iteration (about 100 KB): several iterations overflow a stopped terminal."""
LOOP = f"""
import os, sys, time
start = 0
for it in range(1, 10**6):
    os.write(1, b"=== iteration %d\\n" % it + b"\\x1b[?1049h\\x1b[?25l")  # a full-screen program's modes
    block = b"".join(b"line %07d of the loop's output\\n" % i for i in range(start, start + {ITERATION}))
    os.write(1, block)
    start += {ITERATION}
    if it == 1 and os.environ.get("TTY_PATH"):
        os.system("stty -icanon -echo < " + os.environ["TTY_PATH"])  # a tree program changes the terminal
    if it == int(os.environ.get("LAST", "0")):
        sys.exit(3)
    time.sleep(0.3)
"""


def expected_stream(length: int) -> bytes:
    """What LOOP writes, to `length` bytes."""
    parts, it, start, size = [], 1, 0, 0
    while size < length:
        block = b"=== iteration %d\n\x1b[?1049h\x1b[?25l" % it + numbered(start, ITERATION)
        parts.append(block)
        size += len(block)
        it, start = it + 1, start + ITERATION
    return b"".join(parts)[:length]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The supervised folder, apart from the test's own files (the supervisor's stderr, scripts, sockets):
    a file written there would be the loop's progress."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


def supervisor_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


def run_argv(workspace: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "ralph_supervisor", "run", "-w", str(workspace), "--grace", "1",
            "--iteration-marker", "^=== iteration", "--paraphrase", "0", *flags, "--", sys.executable, "-c", LOOP]


PUT_BACK = b"\x1b[?25h\x1b[?1049l"
"""What the supervisor writes to put the terminal back after LOOP's full-screen modes."""


def read_echo(data: bytes, stream: bytes) -> tuple[int, int, int]:
    """Follow what a terminal showed through the stream the loop wrote.

    Between the notices, the terminal shows consecutive stretches of the stream (plus our PUT_BACK, and
    a line break before a notice when the cut fell inside a line); each notice says how many bytes were
    skipped. Returns (bytes shown, bytes said to be dropped, where in the stream the terminal got to);
    fails on any byte out of place. A notice or PUT_BACK cut off at the very end (the supervisor gave up
    on the terminal while writing it) is allowed.
    """
    position = shown = said = 0
    parts = NOTICE.split(data)  # text, count, text, count, ..., text
    for index in range(0, len(parts), 2):
        text = parts[index].replace(PUT_BACK, b"")
        last = index == len(parts) - 1
        if last:
            for control in (b"\n" + NOTICE.pattern[:17], PUT_BACK):  # b"ralph-supervise: " and ours
                for size in range(len(control) - 1, 0, -1):
                    if text.endswith(control[:size]) and not stream.startswith(text, position):
                        text = text[:-size]
                        break
        if not stream.startswith(text, position):
            assert text.endswith(b"\n") and stream.startswith(text[:-1], position), (
                f"shown bytes out of place at stream offset {position}: {text[:80]!r}")
            text = text[:-1]  # the line break written before the notice
        position += len(text)
        shown += len(text)
        if not last:
            skipped = int(parts[index + 1])
            position += skipped
            said += skipped
    return shown, said, position


@contextlib.contextmanager
def supervisor_on_a_pty(workspace: Path, errors: Path, *flags: str, rate: float | None = None,
                        tree_changes_the_terminal: bool = False, **env: str,
                        ) -> Iterator[tuple[subprocess.Popen[bytes], Reader, int]]:
    """`ralph-supervise run --echo FLAGS -- LOOP` with stdout on a raw pty read by a Reader, stderr to
    `errors`. With `tree_changes_the_terminal`, the loop runs `stty` on the pty's device in iteration 1."""
    master, slave = raw_pty()
    reader = Reader(master, rate=rate)
    if tree_changes_the_terminal:
        env["TTY_PATH"] = os.ttyname(slave)
    with open(errors, "wb") as err:
        proc = subprocess.Popen(run_argv(workspace, "--echo", "--log-format", "json", *flags),
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=err, cwd=workspace,
                                env=supervisor_env(**env))
    try:
        yield proc, reader, slave
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.stop()
        os.close(slave)
        os.close(master)


@pytest.mark.slow
def test_a_terminal_that_stops_reading_holds_up_nothing_and_is_put_back_when_the_tree_is_paused(
        tmp_path: Path, workspace: Path) -> None:
    state = state_dir_of(workspace)
    with supervisor_on_a_pty(workspace, tmp_path / "stderr.log", "--no-progress", "3", "--on-open", "pause",
                             tree_changes_the_terminal=True) as (proc, reader, slave):
        found = termios.tcgetattr(slave)
        wait_for(lambda: b"=== iteration 1" in reader.data, what="the first echo")
        reader.reading.clear()  # the terminal stops reading
        # While it stays stopped: status answers, the stuck loop is caught and its tree frozen.
        for _ in range(3):
            assert control.request(state, "status", timeout=10)["supervisor"]["running"]
            time.sleep(0.3)
        wait_for(lambda: events(state, "tree_paused"), timeout=30, what="the stuck loop paused")
        # The freeze may still be settling on a busy machine (the pause waits 0.5 s for `frozen 1`, then
        # says so): status says paused once every process is held, and no sooner.
        wait_for(lambda: control.request(state, "status", timeout=10)["child"]["paused"], timeout=10,
                 what="status saying the tree is held")
        status = control.request(state, "status", timeout=10)
        assert status["state"] == "OPEN" and status["child"]["paused"] is True
        assert status["tap"]["echo_dropped_bytes"] > 0
        assert b"ralph-supervise:" not in reader.data  # still nothing read since the stop
        reader.reading.set()
        wait_for(lambda: NOTICE.search(reader.data), what="the dropped-bytes line after catching up")
        control.request(state, "stop", timeout=30)
        assert proc.wait(30) == 0
        data = reader.drain()
        now = termios.tcgetattr(slave)
    log = (state / "child.log").read_bytes()
    assert len(log) > 3 * ITERATION * 30 and log == expected_stream(len(log))  # byte-exact, nothing lost
    shown, said, reached = read_echo(data, log)
    dropped = [e["bytes"] for e in events(state, "echo_dropped")]
    assert said == sum(dropped) > 0  # every cut was said on the terminal, with the right count
    assert reached == len(log) and shown + said == len(log)  # and the rest was shown, in order
    # Pausing the tree put the terminal back: the screen modes its full-screen program switched on, and
    # the terminal modes that one of its processes changed with stty.
    restored = events(state, "terminal_restored")
    assert restored and restored[0]["after"] == "tree paused" and restored[0]["termios"] == "as found at start"
    assert PUT_BACK in data
    assert now[3] == found[3]  # the tree's `stty -icanon -echo` was undone when it was paused


@pytest.mark.slow
def test_a_terminal_read_at_one_kilobyte_a_second_slows_nothing_and_the_count_adds_up(
        tmp_path: Path, workspace: Path) -> None:
    state = state_dir_of(workspace)
    with supervisor_on_a_pty(workspace, tmp_path / "stderr.log", rate=1000, LAST="4") as (proc, reader, _):
        wait_for(lambda: (state / "control.sock").exists(), what="the control socket")
        assert control.request(state, "status", timeout=10)["supervisor"]["running"]
        code = proc.wait(60)  # the loop's 4 iterations take about 1.2 s; the terminal needs minutes
        data = reader.drain()
    assert code == 3  # the loop's own exit code, as soon as it ended, whatever the terminal does
    log = (state / "child.log").read_bytes()
    assert log == expected_stream(len(log)) and log.endswith(numbered(4 * ITERATION - 1, 1))
    shown, said, reached = read_echo(data, log)
    dropped = events(state, "echo_dropped")
    at_exit = sum(e["bytes"] for e in dropped if e.get("at_exit"))
    assert said == sum(e["bytes"] for e in dropped if not e.get("at_exit"))  # each said with its count
    assert shown > 0 and at_exit > 0  # the terminal had taken a little of it when the loop ended
    assert reached + at_exit == len(log)  # shown + dropped is everything, to the byte
    last = events(state, "supervisor_stopped")[-1]
    assert last["echo_shown_bytes"] == shown and last["echo_dropped_bytes"] == said + at_exit


TICKS = "import time\nfor i in range(1, 10**6):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.1)\n"


class Shell:
    """An interactive bash on a pty of its own (its controlling terminal): job control as a user has it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # the child: become the shell
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.reader = Reader(self.master)

    def run(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def close(self) -> None:
        try:
            os.write(self.master, b"exit\n")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and os.waitpid(self.pid, os.WNOHANG)[0] == 0:
                time.sleep(0.05)
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        self.reader.stop()
        os.close(self.master)


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[0].decode()


@pytest.mark.slow
def test_in_the_background_of_a_tostop_terminal_it_supervises_on_and_echoes_again_in_the_foreground(
        tmp_path: Path, workspace: Path) -> None:
    state = state_dir_of(workspace)
    (tmp_path / "ticks.py").write_text(TICKS)
    shell = Shell(supervisor_env(PS1="$ ", HISTFILE="/dev/null"))
    supervisor = None
    try:
        shell.run("stty tostop")
        shell.run(f"{sys.executable} -m ralph_supervisor run --log-format json --grace 1 -w {workspace} "
                  f"-- {sys.executable} {tmp_path / 'ticks.py'} &")
        wait_for(lambda: events(state, "child_started"), what="the supervisor started in the background")
        supervisor = control.request(state, "status", timeout=10)["supervisor"]["pid"]
        stopped = wait_for(lambda: events(state, "echo_stopped"), what="the echo stopped in the background")
        assert "tostop" in stopped[0]["reason"]
        first = control.request(state, "status", timeout=10)["tap"]["bytes_read"]
        wait_for(lambda: control.request(state, "status", timeout=10)["tap"]["bytes_read"] > first + 20,
                 what="supervision going on in the background")
        # the echo drops what comes in the background at its next look (a loaded machine can come to the
        # foreground before it looked at all: then nothing was dropped, and nothing is to be said)
        wait_for(lambda: control.request(state, "status", timeout=10)["tap"]["echo_dropped_bytes"] > 0,
                 what="the echo dropping in the background")
        assert process_state(supervisor) != "T"  # not stopped by SIGTTOU
        assert len(events(state, "echo_stopped")) == 1  # said once
        seen = len(shell.reader.data)
        assert not re.search(rb"tick \d+", shell.reader.data)  # nothing of the loop's on the terminal
        shell.run("fg")
        wait_for(lambda: events(state, "echo_resumed"), what="the echo resumed in the foreground")
        wait_for(lambda: re.search(rb"tick \d+\r\n", bytes(shell.reader.data[seen:])), what="ticks on the terminal")
        # what was not shown while in the background is said (it may come a moment after the first ticks)
        try:
            wait_for(lambda: NOTICE.pattern[:17] in bytes(shell.reader.data[seen:]),
                     what="the notice of what was not shown")
        except AssertionError as exc:
            echo_events = [e for e in events(state) if str(e.get("event", "")).startswith("echo_")]
            raise AssertionError(f"{exc}; echo events {echo_events}; "
                                 f"terminal since fg {bytes(shell.reader.data[seen:])[-600:]!r}") from None
        os.write(shell.master, b"\x03")  # Ctrl-C: the foreground job is the supervisor again
        wait_for(lambda: events(state, "supervisor_stopped"), what="the supervisor to stop on Ctrl-C")
        assert events(state, "supervisor_stopped")[0]["code"] == 130
    finally:
        if supervisor is not None:
            stop_and_wait(state, supervisor)
        shell.close()


def gone(pid: int) -> bool:
    try:
        return process_state(pid) == "Z"
    except OSError:
        return True


def stop_and_wait(state: Path, pid: int) -> None:
    """The supervisor `pid` is gone when this returns (asked to stop if still there, killed at worst)."""
    if not gone(pid):
        try:
            control.request(state, "stop", timeout=30)
        except (control.ControlError, control.NoSupervisor, OSError):
            pass
    try:
        wait_for(lambda: gone(pid), timeout=30, what="the supervisor to exit")
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def tmux_binary() -> str:
    """tmux, installed with apt-get when it is missing and we may (root); else skip, saying why."""
    found, why = installed("tmux", "tmux")
    if found is None:
        pytest.skip(why)
    return found


STATUS_WHILE_XOFF_S = 2.0
"""A status answer while the pane is stopped: milliseconds when nothing waits on the pane; the bound leaves
room for a loaded machine and is still far below the 10 s a request would wait on a held event loop."""


@pytest.mark.slow
@pytest.mark.timeout(900)  # time for `apt-get install tmux` where it is missing
def test_ctrl_s_in_a_tmux_pane_holds_up_nothing_and_ctrl_q_shows_our_lines_that_were_due(tmp_path: Path, workspace: Path) -> None:
    tmux = tmux_binary()
    state = state_dir_of(workspace)
    socket_path = tmp_path / "tmux.sock"

    def run_tmux(*args: str) -> str:
        return subprocess.run([tmux, "-S", str(socket_path), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout

    loop = "while :; do echo '=== iteration'; seq 1 20000; sleep 0.5; done"  # the loop, with markers
    command = (f"{sys.executable} -m ralph_supervisor run --grace 1 --iteration-marker '^=== iteration' "
               f"--paraphrase 0 --no-progress 3 --on-open pause -w {workspace} -- bash -c \"{loop}\"")
    config = tmp_path / "tmux.conf"
    config.write_text("set -g history-limit 200000\n")  # every line the pane got, for capture-pane -S -
    subprocess.run([tmux, "-S", str(socket_path), "-f", str(config), "new-session", "-d", "-x", "160", "-y", "50",
                    command], env=supervisor_env(), check=True, timeout=30)
    supervisor = None
    try:
        wait_for(lambda: events(state, "iteration_started"), what="the loop under supervision")
        supervisor = control.request(state, "status", timeout=10)["supervisor"]["pid"]
        run_tmux("send-keys", "C-s")  # XOFF: the pane's terminal stops taking output
        time.sleep(0.3)
        screen = run_tmux("capture-pane", "-p")
        assert "paused the tree" not in screen  # (the loop is caught at its 4th iteration, 1.5 s in at the earliest)
        took = []
        for _ in range(3):
            started = time.monotonic()
            assert control.request(state, "status", timeout=10)["supervisor"]["running"]
            took.append(time.monotonic() - started)
        # Answered at once, as with nothing stopped: a write that waited on the stopped pane would hold the
        # event loop, and the answer, for as long as the pane stays stopped (here until the test's own timeout).
        assert max(took) < STATUS_WHILE_XOFF_S, took
        wait_for(lambda: events(state, "tree_paused"), timeout=30, what="the stuck loop caught while XOFF")
        assert control.request(state, "status", timeout=10)["child"]["paused"] is True
        assert run_tmux("capture-pane", "-p") == screen  # the pane showed nothing new meanwhile
        run_tmux("send-keys", "C-q")
        shown = wait_for(lambda: (lambda text: "bytes not shown" in text and text)(
            run_tmux("capture-pane", "-p", "-S", "-", "-E", "-")), what="our due lines in the pane after Ctrl-Q")
        assert "paused the tree" in shown  # the console's words for tree_paused and breaker_transition
        assert "OPEN no-progress: " in shown and "bytes not shown on the terminal" in shown
    finally:
        if supervisor is not None:
            stop_and_wait(state, supervisor)
        subprocess.run([tmux, "-S", str(socket_path), "kill-server"], capture_output=True, timeout=30)

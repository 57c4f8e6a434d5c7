"""The terminal's queues as values (ralph_supervisor/terminal/echo_budget.py, our_lines.py): every byte of the
echo is waiting, shown or counted, whatever the terminal takes and whenever the echo is settled; our lines
are bounded and what they drop is said. The time is an argument: no sleeps, no threads, no terminal."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.terminal.echo_budget import ECHO_MAX, ECHO_MIN, PIECE, Control, EchoBudget, Gap
from ralph_supervisor.terminal.modes import Mark
from ralph_supervisor.terminal.our_lines import LINES_MAX, OurLines, StatusLine
from tests.helpers.fuzzing import MEDIUM

NOTICE = re.compile(rb"ralph-supervise: (\d+) bytes not shown on the terminal; child.log has everything\n")


def numbered(start: int, count: int) -> bytes:
    return b"".join(b"line %07d of the loop's output\n" % i for i in range(start, start + count))


class Terminal:
    """Plays a terminal against a budget: takes pieces as the outlet's writer would, and keeps what it got."""

    def __init__(self, budget: EchoBudget) -> None:
        self.budget = budget
        self.echo = bytearray()
        self.ours = bytearray()
        self.said: list[tuple[str, dict[str, Any]]] = []
        self.mid_line = False

    def piece(self) -> tuple[bytes, int, int, str] | Mark | None:
        return self.budget.next_piece(False, self.mid_line, self.said)

    def wrote(self, piece: tuple[bytes, int, int, str], taken: int) -> None:
        data, start, _, kind = piece
        if taken:
            (self.echo if kind == "echo" else self.ours).extend(data[start:start + taken])
            self.mid_line = kind == "echo" and data[start + taken - 1] != 10
        self.budget.wrote(data, taken, kind)

    def take(self, share: float) -> None:
        """Offer the next piece; the terminal takes `share` of it (a Mark is put back with a few bytes)."""
        piece = self.piece()
        if isinstance(piece, Mark):
            self.budget.take(piece, b"\x1b[?25h")
        elif piece is not None:
            self.wrote(piece, int((piece[2] - piece[1]) * share))


OPS = st.lists(st.one_of(
    st.tuples(st.just("accept"), st.integers(1, 5000)),
    st.tuples(st.just("take"), st.sampled_from([0.0, 0.3, 1.0, 1.0])),
    st.tuples(st.just("behind"), st.floats(0.0, 2.0)),
    st.tuples(st.just("mark"), st.sampled_from(["paused", "resumed", "stopped"])),
    st.tuples(st.just("hold")),
    st.tuples(st.just("end")),
    st.tuples(st.just("drop-in-flight"), st.sampled_from([0.0, 0.5, 1.0])),
), max_size=80)


@MEDIUM
@given(ops=OPS)
def test_every_byte_of_the_echo_is_waiting_shown_or_counted_and_what_is_shown_is_in_order(
        ops: list[tuple[Any, ...]]) -> None:
    budget = EchoBudget()
    terminal = Terminal(budget)
    stream = bytearray()
    accepted = left = after_the_end = line_no = 0
    now = 0.0
    for op in ops:
        kind = op[0]
        if kind == "accept":
            chunk = numbered(line_no, op[1])
            line_no += op[1]
            if budget.settled:
                after_the_end += len(chunk)
            else:
                stream += chunk
            accepted += len(chunk)
            budget.accept(chunk)
        elif kind == "take":
            terminal.take(op[1])
        elif kind == "behind":
            now += op[1]
            budget.fell_behind(now)
        elif kind == "mark":
            budget.add(Mark(op[1]))
        elif kind == "hold":
            budget.cut(None)
        elif kind == "end":
            budget.end()
        else:  # the echo is settled while the writer has a piece in flight (written outside the lock)
            piece = terminal.piece()
            left += budget.drop_rest()
            if piece is not None and not isinstance(piece, Mark):
                terminal.wrote(piece, int((piece[2] - piece[1]) * op[1]))
        assert accepted == budget.waiting_bytes + budget.shown_bytes + budget.not_shown_bytes
        assert budget.shown_bytes <= len(terminal.echo)  # a piece taken after it was dropped is not shown twice
    said = sum(fields["bytes"] for name, fields in terminal.said if name == "echo_dropped")
    waiting_gaps = sum(item.nbytes for item in budget.items if isinstance(item, Gap))
    assert said + left + after_the_end + waiting_gaps == budget.not_shown_bytes  # every drop is said or counted
    # The echo the terminal got is the stream's bytes in their order, with stretches left out.
    position = 0
    for start in range(0, len(terminal.echo), 97):
        part = bytes(terminal.echo[start:start + 97])
        found = stream.find(part, position)
        assert found >= 0, f"echo byte {start} is not in the stream's order"
        position = found + len(part)
    notices = [int(n) for n in NOTICE.findall(bytes(terminal.ours))]
    assert sum(notices) <= said and all(n > 0 for n in notices)


def test_a_terminal_that_falls_behind_keeps_about_a_second_of_what_it_takes_and_the_rest_is_one_gap() -> None:
    budget = EchoBudget()
    chunks = [numbered(i * 100, 100) for i in range(400)]  # 1.3 MB in pipe-sized chunks: within ECHO_MAX
    for chunk in chunks:
        budget.accept(chunk)
    assert budget.waiting_bytes == len(b"".join(chunks)) and budget.bound == ECHO_MAX  # all kept so far
    said: list[tuple[str, dict[str, Any]]] = []
    budget.fell_behind(0.0)  # the first short write starts the measure
    for _ in range(4):  # 4 x 3.2 KB in a second: about 13 KB/s
        data, start, end, kind = budget.next_piece(False, False, said)  # type: ignore[misc]
        budget.wrote(data, end - start, kind)
    budget.fell_behind(1.0)
    assert budget.bound == ECHO_MIN  # 13 KB/s for a second is below the floor
    gap = budget.items[-1]
    assert isinstance(gap, Gap) and 0 < budget.waiting_bytes <= ECHO_MIN
    assert budget.waiting_bytes + budget.shown_bytes + gap.nbytes == len(b"".join(chunks))
    budget.accept(b"more while behind\n")  # goes into the gap: nothing new is shown before the notice
    assert budget.items[-1] is gap and budget.waiting_bytes + budget.shown_bytes + gap.nbytes == \
        len(b"".join(chunks)) + len(b"more while behind\n")


def test_a_gap_reached_is_said_once_after_a_line_break_and_then_the_echo_goes_on() -> None:
    budget = EchoBudget()
    budget.bound = 100
    budget.accept(b"abc")  # a line not ended yet
    budget.accept(b"x" * 200)  # no line of it fits: all of it is the gap
    budget.accept(b"next\n")  # the terminal has not caught up: into the same gap
    said: list[tuple[str, dict[str, Any]]] = []
    data, start, end, kind = budget.next_piece(False, False, said)  # type: ignore[misc]
    assert (data[start:end], kind) == (b"abc", "echo")
    budget.wrote(data, end - start, kind)
    data, start, end, kind = budget.next_piece(False, True, said)  # type: ignore[misc]
    assert kind == "control" and data == b"\nralph-supervise: 205 bytes not shown on the terminal; " \
                                        b"child.log has everything\n"
    assert said == [("echo_dropped", {"bytes": 205, "total_bytes": 205})] and budget.gap is None
    budget.wrote(data, end - start, kind)
    assert budget.bound == ECHO_MAX  # caught up: the whole budget again
    budget.accept(b"again\n")
    assert budget.next_piece(False, False, said)[:3] == (b"again\n", 0, 6)  # type: ignore[index]
    assert len(said) == 1


def test_a_mark_waits_in_the_echo_s_order_and_its_bytes_go_next() -> None:
    budget = EchoBudget()
    budget.accept(b"before\n")
    paused = Mark("paused")
    budget.add(paused)
    budget.accept(b"after\n")
    said: list[tuple[str, dict[str, Any]]] = []
    data, start, end, kind = budget.next_piece(False, False, said)  # type: ignore[misc]
    budget.wrote(data, end - start, kind)
    assert budget.next_piece(False, False, said) is paused
    budget.take(paused, b"\x1b[?1049l")
    assert budget.items[0] == Control(b"\x1b[?1049l") and budget.items[1] == b"after\n"


@MEDIUM
@given(sizes=st.lists(st.integers(1, 40_000), min_size=1, max_size=60), every=st.integers(1, 10))
def test_our_lines_stay_bounded_and_every_line_is_written_whole_or_said_dropped(sizes: list[int], every: int) -> None:
    lines = OurLines()
    sent = [b"%05d " % i + b"." * size + b"\n" for i, size in enumerate(sizes)]
    out = bytearray()
    for index, line in enumerate(sent):
        lines.add(line)
        if index % every == 0 and lines:  # the terminal takes one piece now and then
            data, start, end = lines.next_piece(mid_line=False)
            out += data[start:end]
            lines.wrote(end - start)
        assert lines.waiting_bytes <= LINES_MAX + 2 * (max(sizes) + 200)  # the bound, the line begun and the newest
    while lines:
        data, start, end = lines.next_piece(mid_line=False)
        out += data[start:end]
        lines.wrote(end - start)
    said = sum(int(n) for n in re.findall(rb"ralph-supervise: (\d+) of our lines not shown", bytes(out)))
    shown = [line for line in sent if line in out]
    assert len(shown) + said == len(sent) and shown[-1] == sent[-1]


def test_the_status_line_is_erased_before_anything_else_and_drawn_again_when_all_is_out() -> None:
    status = StatusLine()
    status.want = b"LIMIT wait: 2:59 left"
    assert status.first(others_wait=False) is None
    data, start, end = status.last(mid_line=True)  # type: ignore[misc]
    assert data[start:end] == b"\n\r\x1b[2KLIMIT wait: 2:59 left"
    status.wrote(end - start)
    assert not status.due()
    data, start, end = status.first(others_wait=True)  # type: ignore[misc]
    assert data[start:end] == b"\r\x1b[2K" and status.writing
    status.wrote(2)  # half of it: finished before anything else
    assert status.first(others_wait=True) == (b"\r\x1b[2K", 2, 5)
    status.wrote(3)
    assert status.due() and status.last(mid_line=False) == (b"\r\x1b[2KLIMIT wait: 2:59 left", 0, 26)

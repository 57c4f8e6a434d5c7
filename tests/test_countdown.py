"""A countdown for every wait: the words and the timing (pure), and the in-place line on a real pty."""

from __future__ import annotations

import doctest
import time

from rich.cells import cell_len

from ralph_supervisor import countdown
from ralph_supervisor.breaker import Breaker, Thresholds
from ralph_supervisor.countdown import Countdown, Wait, bar, text, waits_now
from ralph_supervisor.format import duration
from ralph_supervisor.iteration import IterationReport
from tests.test_terminal import outlet_on_a_pty

NOW = 1_800_000_000.0
ERASE = b"\r\x1b[2K"


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(countdown).failed == 0


def test_time_left_rounds_up_and_the_bar_fills() -> None:
    def left(seconds: float) -> str:
        return duration(seconds, "left")

    assert [left(0), left(0.2), left(59.5), left(3 * 3600 - 48), left(2 * 86400 + 5)] == [
        "0:00:00", "0:00:01", "0:01:00", "2:59:12", "2d 0:00:05"]
    wait = Wait("limit", "LIMIT wait", NOW, NOW + 100)
    assert bar(wait, NOW, 10) == "╺─────────" and bar(wait, NOW + 50, 10) == "━━━━━╺────"
    assert bar(wait, NOW + 500, 10) == "━" * 10


def test_a_countdown_line_fits_the_terminal_however_narrow() -> None:
    wait = Wait("cooldown", "OPEN no-progress, cooldown", NOW, NOW + 1800, "then a trial; resume starts it now")
    for width in (20, 40, 80, 200):
        line = text(wait, NOW + 60, width=width)
        assert cell_len(line) <= width - 1 and "\n" not in line
    assert "0:29:00 left" in text(wait, NOW + 60, width=200)


def test_the_waits_that_are_on_a_limit_and_a_cooldown() -> None:
    breaker = Breaker(Thresholds(no_progress=1, cooldown_s=600))
    assert waits_now(limit_until=None, breaker=breaker, now=NOW) == []
    breaker.observe(IterationReport(1, NOW - 10, NOW - 1), NOW)
    waits = waits_now(limit_until=NOW + 3600, breaker=breaker, now=NOW + 100)
    assert [w.kind for w in waits] == ["limit", "cooldown"]
    assert waits[1].label == "OPEN no-progress, cooldown" and waits[1].until == NOW + 600
    manual = Breaker(Thresholds())
    manual.manual_open("by hand", NOW)
    assert waits_now(limit_until=None, breaker=manual, now=NOW) == []  # a pause by hand ends by no countdown


def test_a_ceiling_freeze_and_an_outage_back_off_count_down_under_their_own_words() -> None:
    breaker = Breaker(Thresholds())
    (ceiling,) = waits_now(limit_until=NOW + 600, breaker=breaker, now=NOW, limit_kind="ceiling")
    assert (ceiling.kind, ceiling.label, ceiling.until) == ("ceiling", "CEILING wait", NOW + 600)
    (outage,) = waits_now(limit_until=NOW + 300, breaker=breaker, now=NOW, limit_kind="outage")
    assert (outage.kind, outage.label) == ("outage", "OUTAGE wait")
    today = time.time()  # (a day's name before the time, for a wait that ends on another day, may cut the hint)
    for kind in ("ceiling", "outage"):  # the whole line fits 100 columns, bar and hint included
        (wait,) = waits_now(limit_until=today + 300, breaker=breaker, now=today, limit_kind=kind)
        assert "…" not in text(wait, today + 60, width=100)
    assert text(outage, NOW + 60, width=100, with_bar=False).startswith("⧗ OUTAGE wait: 0:04:00 left")
    (unknown,) = waits_now(limit_until=NOW + 300, breaker=breaker, now=NOW, limit_kind="something else")
    assert unknown.label == "LIMIT wait"


def test_without_a_terminal_a_plain_line_every_so_often_and_none_once_the_wait_is_over() -> None:
    said: list[str] = []
    clock = Countdown(status=None, line=said.append, every_s=60)
    wait = Wait("limit", "LIMIT wait", None, NOW + 300)
    for t in range(0, 200, 5):
        clock.update([wait], NOW + t)
    assert len(said) == 3 and all("LIMIT wait: " in line and "left" in line for line in said)  # at 60, 120, 180
    assert ["0:04:00" in said[0], "0:03:00" in said[1], "0:02:00" in said[2]] == [True, True, True]
    clock.update([], NOW + 250)
    clock.update([Wait("limit", "LIMIT wait", None, NOW + 900)], NOW + 260)  # a new wait starts its own clock
    assert len(said) == 3


def test_on_a_terminal_the_line_changes_only_when_its_text_does() -> None:
    shown: list[str | None] = []
    clock = Countdown(status=shown.append, line=lambda _: None, width=lambda: 100)
    wait = Wait("limit", "LIMIT wait", None, NOW + 3600)  # a bar cell is 3 minutes: only the seconds move
    for t in (0.0, 0.1, 0.5, 1.0, 1.2, 2.0):
        clock.update([wait], NOW + t)
    assert len(shown) == 3 and shown[0] is not None and "1:00:00 left" in shown[0]
    assert shown[2] is not None and "0:59:58 left" in shown[2]
    clock.update([], NOW + 3)
    clock.close()
    assert shown[-1] is None and shown.count(None) == 1


def test_the_status_line_is_erased_before_our_line_and_the_echo_and_drawn_again_after() -> None:
    with outlet_on_a_pty() as (outlet, reader, _):
        outlet.status("⧗ LIMIT wait: 0:00:05 left")
        time.sleep(0.3)
        outlet.echo(b"partial echo")  # no newline: the line drawn after it starts a line of its own
        outlet.line(b"02:00:00  a line of ours\n")
        time.sleep(0.3)
        outlet.status("⧗ LIMIT wait: 0:00:04 left")
        time.sleep(0.3)
        outlet.close(1.0)
        data = reader.drain()
    drawn = ERASE + "⧗ LIMIT wait: 0:00:05 left".encode()
    assert data.startswith(drawn)
    rest = data[len(drawn):]
    assert rest == (ERASE + b"02:00:00  a line of ours\npartial echo\n" + drawn  # drawn again after, on a line
                    + ERASE + "⧗ LIMIT wait: 0:00:04 left".encode() + ERASE)  # of its own; erased at close


def test_a_pipe_gets_no_status_line() -> None:
    import os

    read, write = os.pipe()
    from ralph_supervisor.terminal import Outlet

    outlet = Outlet(write)
    try:
        outlet.status("⧗ LIMIT wait")
        outlet.line(b"ours\n")
        outlet.close(1.0)
        os.close(write)
        assert os.read(read, 4096) == b"ours\n"
    finally:
        os.close(read)

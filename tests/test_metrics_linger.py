"""After a final stop, /metrics stays up for one more scrape: the final state reaches Prometheus however the
supervisor's exit falls between two scrapes. Real HTTP on 127.0.0.1, short scrape intervals."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.metrics import LINGER_CAP_SECONDS, Metrics, linger_seconds

WS = "/srv/stuck"
SHUTDOWN = 0.6
"""What closing the endpoint itself takes: its serve_forever() notices a shutdown within 0.5 s."""


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def final_value(text: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith("ralph_supervise_breaker_final{"))
    return float(line.rsplit(" ", 1)[1])


def serving(final: bool) -> tuple[Metrics, int]:
    metrics = Metrics(WS)
    state: dict[str, Any] = {"state": "OPEN", "final": final, "iteration": 4}
    metrics.follow(lambda: state)
    return metrics, metrics.serve(0)


def close_in_thread(metrics: Metrics) -> tuple[threading.Thread, list[float]]:
    """Start `metrics.close()` in a thread; the list gets the monotonic time it returned."""
    returned: list[float] = []

    def close() -> None:
        metrics.close()
        returned.append(time.monotonic())

    thread = threading.Thread(target=close)
    thread.start()
    return thread, returned


def test_linger_is_one_scrape_interval_and_a_half_and_nothing_without_an_interval():
    assert linger_seconds([]) == 0
    assert linger_seconds([100.0]) == 0  # one scrape: no interval to go by
    assert linger_seconds([100.0, 100.0]) == 0
    assert linger_seconds([90.0, 100.0, 115.0]) == pytest.approx(15 * 1.5 + 0.5)  # the last gap counts
    assert linger_seconds([0.0, 300.0]) == LINGER_CAP_SECONDS
    assert linger_seconds([0.0, 300.0], cap=5) == 5


@given(st.lists(st.floats(min_value=0, max_value=1e6), max_size=6).map(sorted),
       st.floats(min_value=0.1, max_value=600))
def test_linger_is_never_negative_never_above_the_cap_and_covers_the_last_interval(times: list[float], cap: float):
    wait = linger_seconds(times, cap=cap)
    assert 0 <= wait <= cap
    if len(times) >= 2 and times[-1] > times[-2]:
        assert wait >= min(cap, times[-1] - times[-2])


def test_after_a_final_stop_the_endpoint_waits_for_the_next_scrape_and_serves_the_final_state():
    metrics, port = serving(final=True)
    scrape(port)
    time.sleep(1.0)
    scrape(port)  # a scraper every second: at most 2 s of waiting
    started = time.monotonic()
    thread, returned = close_in_thread(metrics)
    time.sleep(0.2)
    assert thread.is_alive() and not returned  # still serving, waiting for the scrape
    scraped_at = time.monotonic()
    text = scrape(port)
    thread.join(timeout=5)
    assert final_value(text) == 1.0
    assert returned and returned[0] - scraped_at < 0.3 + SHUTDOWN and returned[0] - started < 1.5
    with pytest.raises(OSError):  # then the port is closed
        scrape(port)


def test_a_scrape_that_never_comes_holds_the_exit_one_interval_and_a_half_at_most():
    metrics, port = serving(final=True)
    scrape(port)
    time.sleep(0.3)
    scrape(port)  # 0.3 s apart: 0.95 s of waiting
    started = time.monotonic()
    metrics.close()
    assert 0.9 <= time.monotonic() - started < 1.5 + SHUTDOWN


@pytest.mark.parametrize("final, scrapes", [(False, 2), (True, 0), (True, 1)])
def test_no_final_stop_or_no_scraper_to_wait_for_closes_at_once(final: bool, scrapes: int):
    metrics, port = serving(final=final)
    for _ in range(scrapes):
        scrape(port)
        time.sleep(1.0)  # two scrapes would mean 2 s of waiting after a final stop
    started = time.monotonic()
    metrics.close()
    assert time.monotonic() - started < 0.3 + SHUTDOWN


def test_a_signal_ends_the_wait_at_once():
    metrics, port = serving(final=True)
    scrape(port)
    time.sleep(1.0)
    scrape(port)  # 2 s of waiting, unless told otherwise
    thread, returned = close_in_thread(metrics)
    time.sleep(0.2)
    told = time.monotonic()
    metrics.stop_lingering()
    thread.join(timeout=5)
    assert returned and returned[0] - told < 0.3 + SHUTDOWN

"""Prometheus metrics for fleets of loops: an HTTP endpoint on loopback, or a node-exporter textfile.

Why Prometheus and nothing home-made: many boxes run many loops, and a Prometheus server scraping
each supervisor (or node-exporter reading our textfiles) is the scale-out path. Every metric carries a
`workspace` and a `name` label, so one dashboard and one set of alert rules (`deploy/`) serve every
loop. A private registry keeps two supervisors in one process (tests, embedding) from colliding, and
keeps Python's default process metrics out.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    make_wsgi_app,
    write_to_textfile,
)

from ralph_supervisor.registry import loop_name
from ralph_supervisor.triggers import TRIGGERS

log = structlog.get_logger(__name__)

# No `*_created` series: they would double every counter's series in a fleet, and no rule or dashboard
# reads them (a process-wide switch of prometheus_client; this module is imported only when metrics are on).
disable_created_metrics()

__all__ = ["BREAKER_STATE_VALUES", "KNOWN_TRIGGERS", "Metrics", "breaker_state_value", "linger_seconds"]

BREAKER_STATE_VALUES: dict[str, int] = {"CLOSED": 0, "HALF_OPEN": 1, "OPEN": 2}

# Opens are pre-set to 0 for every trigger, so `increase()` works from the first open on.
KNOWN_TRIGGERS: tuple[str, ...] = TRIGGERS
BUDGET_KINDS: tuple[str, ...] = ("token", "cost", "daily_token", "daily_cost")
"""The `kind` label of `ralph_supervise_budget`."""


LINGER_CAP_SECONDS = 60.0
"""The longest a final stop keeps /metrics up waiting for one more scrape (scrape intervals above it are rare)."""


def linger_seconds(scrapes: Sequence[float], cap: float = LINGER_CAP_SECONDS) -> float:
    """How long to keep serving after a final stop so that one more scrape sees it: one scrape interval (the
    last gap between scrapes, `scrapes` being their monotonic times, oldest first) and half of it again for
    jitter, at most `cap`; 0 when fewer than two scrapes were seen (no scraper to wait for, or no interval
    to go by).
    """
    if len(scrapes) < 2:
        return 0.0
    gap = scrapes[-1] - scrapes[-2]
    if not gap > 0:
        return 0.0
    return min(cap, gap * 1.5 + 0.5)


TEST_OUTCOMES = ("passed", "failed", "errors", "skipped")
"""The `outcome` label of `ralph_supervise_tests`."""


def breaker_state_value(state: str) -> int:
    """0 closed, 1 half-open, 2 open; an unknown name raises (a programming error, not user input)."""
    try:
        return BREAKER_STATE_VALUES[state.upper().replace("-", "_")]
    except KeyError:
        raise ValueError(f"unknown breaker state {state!r}") from None


class Metrics:
    """The supervisor's counters and gauges for one loop, labelled `workspace` and `name`.

    `name` is `--name`, or the workspace's folder name: always present, so every file and every target
    of a fleet has the same label names (node-exporter merges many textfiles into one family).
    """

    def __init__(self, workspace: str, name: str | None = None) -> None:
        self.workspace = workspace
        self.name = loop_name(Path(workspace), name)
        self.registry = CollectorRegistry(auto_describe=True)
        ws = ["workspace", "name"]
        r = self.registry
        self._iterations = Counter("ralph_supervise_iterations", "Iterations finished.", ws, registry=r)
        self._opens = Counter("ralph_supervise_breaker_opens", "Breaker opens, by trigger.",
                              [*ws, "trigger"], registry=r)
        self._state = Gauge("ralph_supervise_breaker_state", "Breaker state: 0 closed, 1 half-open, 2 open.",
                            ws, registry=r)
        self._final = Gauge("ralph_supervise_breaker_final",
                            "1 once the breaker opened for good (the loop is stopped; a human decides).", ws, registry=r)
        self._iteration = Gauge("ralph_supervise_iteration",
                                "Number of the latest iteration that started (kept across runs).", ws, registry=r)
        self._output = Counter("ralph_supervise_output_bytes", "Bytes the loop printed (pipes and tailed files).",
                               ws, registry=r)
        self._files = Counter("ralph_supervise_files_changed", "Files changed in the workspace, summed per iteration.",
                              ws, registry=r)
        self._tree = Gauge("ralph_supervise_tree_processes", "Processes in the supervised tree.", ws, registry=r)
        self._tokens = Counter("ralph_supervise_tokens", "Tokens the agent reported using.", ws, registry=r)
        self._stops = Counter("ralph_supervise_tree_stops", "Times the whole tree was stopped.", ws, registry=r)
        self._survivors = Counter("ralph_supervise_tree_survivors",
                                  "Processes still alive after a tree stop (should stay 0).", ws, registry=r)
        self._running = Gauge("ralph_supervise_child_running", "1 while the supervised command runs.", ws,
                              registry=r)
        self._started = Gauge("ralph_supervise_iteration_started_timestamp_seconds",
                              "Unix time the current iteration started (0 before the first).", ws, registry=r)
        self._cost = Counter("ralph_supervise_cost_usd", "Dollars the agent reported spending.", ws, registry=r)
        self._limit = Gauge("ralph_supervise_limit_wait_until_timestamp_seconds",
                            "While the tree is frozen for a usage limit: until when (Unix time); else 0.", ws,
                            registry=r)
        self._budget = Gauge("ralph_supervise_budget",
                             "The budgets (0 = off): kind token and cost for this run, daily_token and daily_cost "
                             "per UTC day; tokens or dollars.", [*ws, "kind"], registry=r)
        self._daily = Gauge("ralph_supervise_daily_spend",
                            "Spent this UTC day across the folder's runs, as the daily budgets count it: kind "
                            "token (tokens) or cost (dollars).", [*ws, "kind"], registry=r)
        for kind in BUDGET_KINDS:
            self._budget.labels(workspace, self.name, kind)
        for kind in ("token", "cost"):
            self._daily.labels(workspace, self.name, kind)
        heartbeat = Gauge("ralph_supervise_heartbeat_timestamp_seconds",
                          "Unix time these metrics were served or written: a stale textfile means a dead supervisor.",
                          ws, registry=r)
        heartbeat.labels(workspace, self.name).set_function(time.time)
        self._snapshots = Gauge("ralph_supervise_snapshots", "Workspace snapshots kept in the store.", ws,
                                registry=r)
        self._snapshot_bytes = Gauge("ralph_supervise_snapshot_bytes", "Bytes the snapshot store takes on disk.",
                                     ws, registry=r)
        self._tests = Gauge("ralph_supervise_tests", "Tests of the last verified verify (--verify), by outcome.",
                            [*ws, "outcome"], registry=r)
        for outcome in TEST_OUTCOMES:
            self._tests.labels(workspace, self.name, outcome)
        self._verify_seconds = Gauge("ralph_supervise_verify_seconds", "Seconds the last verify took.", ws,
                                     registry=r)
        self._verifies = Counter("ralph_supervise_verifies", "Verifies run, by result: passed, failed, unverified.",
                                 [*ws, "result"], registry=r)
        for result in ("passed", "failed", "unverified"):
            self._verifies.labels(workspace, self.name, result)
        self._outage = Gauge("ralph_supervise_outage_since_timestamp_seconds",
                             "While the agent cannot reach its API (an outage): since when (Unix time); else 0.", ws,
                             registry=r)
        self._usage = Gauge("ralph_supervise_usage_window_percent",
                            "How full the agent last said a usage window is (percent), by window (five_hour, "
                            "seven_day, ...).", [*ws, "window"], registry=r)
        for metric in (self._iterations, self._state, self._final, self._iteration, self._output, self._files,
                       self._tree, self._tokens, self._cost, self._stops, self._survivors, self._running,
                       self._started, self._limit, self._snapshots, self._snapshot_bytes, self._verify_seconds,
                       self._outage):
            metric.labels(workspace, self.name)  # present (as 0) from the first scrape
        for trigger in KNOWN_TRIGGERS:
            self._opens.labels(workspace, self.name, trigger)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._textfile_failed = False
        self._scrapes: deque[float] = deque(maxlen=4)  # monotonic times of the last scrapes of the endpoint
        self._scraped = threading.Condition()
        self._final_of: Callable[[], bool] = lambda: False  # set by follow()
        self._lingering = True

    def _of(self, metric: Counter | Gauge) -> Any:
        return metric.labels(self.workspace, self.name)

    # -- what the supervisor reports ------------------------------------------------------------

    def iteration_started(self, *, now: float) -> None:
        """`now`: Unix time (wall clock), so dashboards can show the iteration's age."""
        self._of(self._started).set(now)

    def iteration_finished(self, *, files_changed: int, output_bytes: int, tokens: int) -> None:
        """Counts one iteration; `output_bytes` is only for callers that do not stream `add_output_bytes`."""
        self._of(self._iterations).inc()
        self._of(self._files).inc(max(0, files_changed))
        self._of(self._output).inc(max(0, output_bytes))
        self._of(self._tokens).inc(max(0, tokens))

    def add_cost(self, usd: float) -> None:
        if usd == usd and 0 < usd < 1e9:  # NaN and nonsense are not spend
            self._of(self._cost).inc(usd)

    def budgets(self, *, token: float, cost: float, daily_token: float, daily_cost: float) -> None:
        for kind, value in zip(BUDGET_KINDS, (token, cost, daily_token, daily_cost)):
            self._budget.labels(self.workspace, self.name, kind).set(max(0.0, value))

    def daily_spend(self, *, tokens: int, cost_usd: float) -> None:
        self._daily.labels(self.workspace, self.name, "token").set(max(0, tokens))
        self._daily.labels(self.workspace, self.name, "cost").set(max(0.0, cost_usd))

    def limit_wait(self, until: float | None) -> None:
        self._of(self._limit).set(until or 0)

    def outage(self, since: float | None) -> None:
        self._of(self._outage).set(since or 0)

    def usage_window(self, window: str, percent: float) -> None:
        self._usage.labels(self.workspace, self.name, window[:40]).set(percent)

    def add_output_bytes(self, n: int) -> None:
        if n > 0:
            self._of(self._output).inc(n)

    def breaker_state(self, state: str) -> None:
        self._of(self._state).set(breaker_state_value(state))

    def breaker_opened(self, trigger: str) -> None:
        self._opens.labels(self.workspace, self.name, trigger or "none").inc()

    def tree_size(self, n: int) -> None:
        self._of(self._tree).set(max(0, n))

    def tree_stopped(self, survivors: int) -> None:
        self._of(self._stops).inc()
        self._of(self._survivors).inc(max(0, survivors))

    def snapshots(self, *, count: int, store_bytes: int) -> None:
        self._of(self._snapshots).set(max(0, count))
        self._of(self._snapshot_bytes).set(max(0, store_bytes))

    def verified(self, *, seconds: float, counts: Mapping[str, int] | None) -> None:
        """A verify finished: its time, and (when it proved something) its tests by outcome."""
        self._of(self._verify_seconds).set(max(0.0, seconds))
        if counts is None:
            self._verifies.labels(self.workspace, self.name, "unverified").inc()
            return
        for outcome in TEST_OUTCOMES:
            self._tests.labels(self.workspace, self.name, outcome).set(max(0, counts.get(outcome, 0)))
        bad = counts.get("failed", 0) + counts.get("errors", 0)
        self._verifies.labels(self.workspace, self.name, "failed" if bad else "passed").inc()

    def child_running(self, running: bool) -> None:
        self._of(self._running).set(1 if running else 0)

    def follow(self, source: Callable[[], Mapping[str, Any]]) -> None:
        """Read the breaker's state, its final flag and the iteration from `source` whenever the metrics are
        exposed (a scrape, a textfile write), instead of being told each change.

        `source` gives a `state.json`-shaped mapping (the supervisor passes its breaker's snapshot). It is
        called from the metrics server's thread too, so it must only read. After this, `breaker_state()`
        is the source's business and a call to it changes nothing.
        """
        def read(key: str) -> Any:
            try:
                return source().get(key)
            except Exception:  # noqa: BLE001 - a scrape must never fail on our bookkeeping
                return None

        def state() -> float:
            value = read("state")
            try:
                return float(breaker_state_value(value)) if isinstance(value, str) else 0.0
            except ValueError:
                return 0.0

        def iteration() -> float:
            value = read("iteration")
            return float(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0.0

        self._of(self._state).set_function(state)
        self._final_of = lambda: read("final") is True
        self._of(self._final).set_function(lambda: 1.0 if self._final_of() else 0.0)
        self._of(self._iteration).set_function(iteration)

    def follow_cgroup(self, figures: Callable[[], Any]) -> None:
        """The loop's cgroup figures (`process/cgroup.py`), read at each exposition only (a scrape, a textfile
        write): nothing is read per tick. `figures` returns a `Figures` or None (no cgroup: the gauges say 0)."""
        labels = (self.workspace, self.name)
        cpu = Gauge("ralph_supervise_cgroup_cpu_seconds", "CPU seconds of every process the loop's cgroup held.",
                    ["workspace", "name"], registry=self.registry)
        memory = Gauge("ralph_supervise_cgroup_memory_bytes",
                       "Memory of the loop's cgroup now (0 where the unified hierarchy has no memory controller).",
                       ["workspace", "name"], registry=self.registry)
        tasks = Gauge("ralph_supervise_cgroup_tasks", "Processes in the loop's cgroup now.", ["workspace", "name"],
                      registry=self.registry)

        def read(field: str) -> float:
            try:
                value = getattr(figures(), field, None)
            except Exception:  # noqa: BLE001 - a scrape must never fail on our bookkeeping
                return 0.0
            return float(value) if isinstance(value, (int, float)) else 0.0

        cpu.labels(*labels).set_function(lambda: read("cpu_s"))
        memory.labels(*labels).set_function(lambda: read("memory_bytes"))
        tasks.labels(*labels).set_function(lambda: read("tasks"))

    # -- exposition ----------------------------------------------------------------------------

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on host:port (loopback unless told otherwise); returns the bound port (port 0 picks one).

        Raises OSError when the port cannot be bound: the caller reports it as a configuration error.
        """
        if self._server is not None:
            raise RuntimeError("metrics endpoint already serving")
        app = make_wsgi_app(self.registry)

        def counted(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            return _Sent(app(environ, start_response), self._served)

        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("_MetricsServer", (_ThreadingWSGIServer,), {"address_family": family})
        server = make_server(host, port, counted, server_class, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        bound = int(server.server_address[1])
        log.info("metrics_serving", host=host, port=bound)
        return bound

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) the endpoint is bound to, None when not serving."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def write_textfile(self, path: Path) -> bool:
        """Write the node-exporter textfile atomically (temp file, rename); False (logged once) on failure.

        node-exporter's textfile collector only reads files named `*.prom`.
        """
        try:
            write_to_textfile(str(path), self.registry)
        except OSError as exc:
            if not self._textfile_failed:
                self._textfile_failed = True
                log.warning("metrics_textfile_failed", path=str(path), error=str(exc))
            return False
        self._textfile_failed = False
        return True

    def _served(self) -> None:
        """A response of the endpoint was sent whole: a scrape."""
        with self._scraped:
            self._scrapes.append(time.monotonic())
            self._scraped.notify_all()

    def stop_lingering(self) -> None:
        """Make `close()` return at once (a signal arrived: nobody waits for a last scrape then)."""
        with self._scraped:
            self._lingering = False
            self._scraped.notify_all()

    def close(self) -> None:
        """Stop the endpoint (if any) and free its port.

        After a final stop the endpoint first stays up until one more scrape has read it, at most one
        scrape interval and a half (`linger_seconds`): the supervisor exits right after a final stop, and
        without this the final state would reach Prometheus only if a scrape happened to fall between the
        open and the exit (the RalphFinalStop alert would depend on luck).
        """
        if self._server is not None and self._final_of():
            self._linger()
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

    def _linger(self) -> None:
        with self._scraped:
            wait = linger_seconds(self._scrapes)
            if wait <= 0 or not self._lingering:
                return
            seen = self._scrapes[-1]  # linger_seconds > 0: two scrapes at least
            log.info("metrics_lingering", seconds=round(wait, 2), why="final stop: one more scrape")
            deadline = time.monotonic() + wait
            while self._lingering and self._scrapes[-1] == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.info("metrics_linger_ended", scraped=False)
                    return
                self._scraped.wait(left)
            log.info("metrics_linger_ended", scraped=self._scrapes[-1] != seen)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per scrape (a slow scraper never holds up another), as prometheus_client's own server."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (the supervisor's stderr is the user's terminal)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Sent:
    """A WSGI response body that calls `done` once the server has sent it all (WSGI calls close() then)."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self._body, self._done = body, done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()
        self._done()

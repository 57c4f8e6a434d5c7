"""Prometheus metrics for fleets of loops: an HTTP endpoint on loopback, or a node-exporter textfile.

Why Prometheus and nothing home-made: many boxes run many loops, and a Prometheus server scraping
each supervisor (or node-exporter reading our textfile) is the scale-out path. Every metric carries a
`workspace` label, so one dashboard shows every loop. A private registry keeps two supervisors in one
process (tests, embedding) from colliding, and keeps Python's default process metrics out.
"""

from __future__ import annotations

import threading
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server, write_to_textfile

from ralph_supervisor.triggers import TRIGGERS

log = structlog.get_logger(__name__)

__all__ = ["BREAKER_STATE_VALUES", "KNOWN_TRIGGERS", "Metrics", "breaker_state_value"]

BREAKER_STATE_VALUES: dict[str, int] = {"CLOSED": 0, "HALF_OPEN": 1, "OPEN": 2}

# Opens are pre-set to 0 for every trigger, so `increase()` works from the first open on.
KNOWN_TRIGGERS: tuple[str, ...] = TRIGGERS


def breaker_state_value(state: str) -> int:
    """0 closed, 1 half-open, 2 open; an unknown name raises (a programming error, not user input)."""
    try:
        return BREAKER_STATE_VALUES[state.upper().replace("-", "_")]
    except KeyError:
        raise ValueError(f"unknown breaker state {state!r}") from None


class Metrics:
    """The supervisor's counters and gauges for one workspace."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self.registry = CollectorRegistry(auto_describe=True)
        ws = ["workspace"]
        r = self.registry
        self._iterations = Counter("ralph_supervise_iterations", "Iterations finished.", ws, registry=r)
        self._opens = Counter("ralph_supervise_breaker_opens", "Breaker opens, by trigger.",
                              ["workspace", "trigger"], registry=r)
        self._state = Gauge("ralph_supervise_breaker_state", "Breaker state: 0 closed, 1 half-open, 2 open.",
                            ws, registry=r)
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
        for metric in (self._iterations, self._state, self._output, self._files, self._tree, self._tokens,
                       self._stops, self._survivors, self._running, self._started, self._cost, self._limit):
            metric.labels(workspace)  # present (as 0) from the first scrape
        for trigger in KNOWN_TRIGGERS:
            self._opens.labels(workspace, trigger)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._textfile_failed = False

    # -- what the supervisor reports ------------------------------------------------------------

    def iteration_started(self, *, now: float) -> None:
        """`now`: Unix time (wall clock), so dashboards can show the iteration's age."""
        self._started.labels(self.workspace).set(now)

    def iteration_finished(self, *, files_changed: int, output_bytes: int, tokens: int) -> None:
        """Counts one iteration; `output_bytes` is only for callers that do not stream `add_output_bytes`."""
        ws = self.workspace
        self._iterations.labels(ws).inc()
        self._files.labels(ws).inc(max(0, files_changed))
        self._output.labels(ws).inc(max(0, output_bytes))
        self._tokens.labels(ws).inc(max(0, tokens))

    def add_cost(self, usd: float) -> None:
        if usd > 0:
            self._cost.labels(self.workspace).inc(usd)

    def limit_wait(self, until: float | None) -> None:
        self._limit.labels(self.workspace).set(until or 0)

    def add_output_bytes(self, n: int) -> None:
        if n > 0:
            self._output.labels(self.workspace).inc(n)

    def breaker_state(self, state: str) -> None:
        self._state.labels(self.workspace).set(breaker_state_value(state))

    def breaker_opened(self, trigger: str) -> None:
        self._opens.labels(self.workspace, trigger or "none").inc()

    def tree_size(self, n: int) -> None:
        self._tree.labels(self.workspace).set(max(0, n))

    def tree_stopped(self, survivors: int) -> None:
        self._stops.labels(self.workspace).inc()
        self._survivors.labels(self.workspace).inc(max(0, survivors))

    def child_running(self, running: bool) -> None:
        self._running.labels(self.workspace).set(1 if running else 0)

    # -- exposition ----------------------------------------------------------------------------

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on host:port (loopback unless told otherwise); returns the bound port (port 0 picks one).

        Raises OSError when the port cannot be bound: the caller reports it as a configuration error.
        """
        if self._server is not None:
            raise RuntimeError("metrics endpoint already serving")
        server, thread = start_http_server(port, addr=host, registry=self.registry)
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

    def close(self) -> None:
        """Stop the endpoint (if any) and free its port."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

"""The events' schema: the names of the structured log's events that anyone reads back, and the reader.

`events.jsonl` (written through structlog, see `logging.py`; the file is `files/events_jsonl.py`'s) is read
back by the report, `watch`, the web page and the console renderer. A reader that looks for a name nobody
writes finds nothing and says nothing (the report once waited for `limit_wait_over`, never written), so
every event that is written in one module and read in another is named here once, and both sides use the
constant. An event only one module writes and nobody reads keeps its literal in that module.
`tests/test_events_schema.py` checks both rules on the package's source.

The fields of the events that more than one module reads (`iteration_finished`, `supervisor_started` and its
budgets, `supervisor_stopped`, `child_exited`, `tree_stopped`, `limit_wait_started`, `outage_started`/`_ended`,
`usage_high`) are read in one place too, `event_fields.py`: one frozen value per event
(`IterationFinished.of(record)`), so no reader names their keys or converts them on its own.

    >>> import structlog
    >>> structlog.get_logger().info(LIMIT_WAIT_STARTED, until="2026-12-02T05:00:00.000Z")   # doctest: +SKIP
    >>> records, warnings = read(Path("/tmp/ralph-example"), frozenset({ITERATION_FINISHED}))
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ralph_supervisor.files import events_jsonl

# -- a supervisor run ------------------------------------------------------------------------------
ORPHANS_SWEPT = "orphans_swept"
"""The first line of a run (`count`): what a crashed predecessor left behind, stopped."""
SUPERVISOR_STARTED = "supervisor_started"
"""`pid`, `workspace`, `state_dir`, `command`, `budgets`, ...: the run's settings."""
SUPERVISOR_STOPPED = "supervisor_stopped"
"""`code`: the run's last line."""
CHILD_STARTED = "child_started"
CHILD_EXITED = "child_exited"
"""`code`, `iteration`."""

# -- iterations ------------------------------------------------------------------------------------
ITERATION_STARTED = "iteration_started"
ITERATION_FINISHED = "iteration_finished"
"""`files_changed`, `commits`, `output_bytes`, `errors`, `tokens`, `outcome`, and the report's fields."""
VERIFY_FINISHED = "verify_finished"

# -- the breaker and the tree ----------------------------------------------------------------------
BREAKER_TRANSITION = "breaker_transition"
"""`from`, `to`, `trigger`, `reason`, `final` (its history line is written first)."""
BREAKER_STILL_OPEN = "breaker_still_open"
BREAKER_FINAL = "breaker_final"
TREE_PAUSED = "tree_paused"
TREE_RESUMED = "tree_resumed"
TREE_STOPPED = "tree_stopped"
"""`reason` (one of the STOP_* below), `survivors`, `survivor_pids`, `duration_ms`."""
LIMIT_WAIT_STARTED = "limit_wait_started"
"""`until` (ISO-8601 UTC), `reason`, `iteration`."""
LIMIT_WAIT_ENDED = "limit_wait_ended"
"""`why`, `iteration`: the only end of a limit wait."""
OUTAGE_STARTED = "outage_started"
"""`message`, `iteration`: the agent says it cannot reach its API (`outage.py`)."""
OUTAGE_ENDED = "outage_ended"
USAGE_HIGH = "usage_high"
"""`window`, `percent`: a usage window at 75 % or more (`usage_headroom.py`)."""
# -- the loop's cgroup -----------------------------------------------------------------------------
CGROUP_FIGURES = "cgroup_figures"
CGROUP_OOM = "cgroup_oom"
CGROUP_UNAVAILABLE = "cgroup_unavailable"
"""`reason`: no cgroup could be made (the signals work alone, or `run` stops when a bound was asked for)."""

# -- warnings written in more than one place -------------------------------------------------------
REPORT_UNWRITABLE = "report_unwritable"
SHIMS_UNAVAILABLE = "shims_unavailable"
CONTROL_SOCKET_UNAVAILABLE = "control_socket_unavailable"
VERIFY_UNFINISHED = "verify_unfinished"

# -- the `reason` of `tree_stopped` ----------------------------------------------------------------
STOP_BREAKER_OPEN = "breaker_open"
"""`--on-open kill`: stopped, started again after the cooldown."""
STOP_BREAKER_FINAL = BREAKER_FINAL
"""The last allowed open: stopped for good."""
STOP_REQUEST = "stop_request"
STOP_SIGNAL = "signal"
STOP_CHILD_EXITED = CHILD_EXITED
"""The loop's command exited: what it left behind is stopped."""


def name(record: Mapping[str, Any]) -> str:
    """The record's event name ("" when it has none)."""
    value = record.get("event")
    return value if isinstance(value, str) else ""


def read(state_dir: Path, names: frozenset[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every event still on disk (rotated files included), oldest first, or only those named in `names`;
    and one warning per damaged file."""
    return events_jsonl.read(state_dir, names)

"""The `status --json` reply, built in one place: by the running supervisor (over its control socket) and by
`status` from the files when none runs, so the two answers never drift apart.

`schema` says which meaning the keys have: it is raised when a key changes meaning (new keys may be added
without raising it), so a script can refuse an answer it does not understand.

    >>> from ralph_supervisor.breaker import Breaker, Thresholds
    >>> reply(Breaker(Thresholds()), limit_until=None, supervisor_pid=None, child=None)["schema"]
    1
"""

from __future__ import annotations

from typing import Any

from ralph_supervisor import store
from ralph_supervisor.breaker import Breaker

SCHEMA = 1


def reply(breaker: Breaker, *, limit_until: float | None, supervisor_pid: int | None,
          child: dict[str, Any] | None, snapshots: Any = None, verify: Any = None,
          waits: dict[str, Any] | None = None, cgroup: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reply's stable part (docs/reference.md, section 3): the breaker, the limit wait, who runs.
    `supervisor_pid`: the running supervisor's (None: none runs); `child`: the loop's command, while it runs;
    `waits`: the outage and the usage windows (`loop_waits.py`), `cgroup`: the loop's cgroup and its figures,
    both only while a supervisor watches the loop."""
    status = breaker.status()
    data: dict[str, Any] = {"state": status.pop("state"), "schema": SCHEMA, **status}
    dump = breaker.to_dict()
    for key in ("final", "opened_at", "cooldown_s"):  # for the live view's countdown
        data[key] = dump.get(key)
    data["limit_until"] = None if limit_until is None else store.iso_utc(limit_until)
    data.update({"outage_since": None, "outage_message": None, "wait_kind": None, "usage": []})
    data.update(waits or {})
    data["cgroup"] = cgroup
    data["supervisor"] = {"pid": supervisor_pid, "running": supervisor_pid is not None}
    data["child"] = child
    data["snapshots"] = snapshots
    data["verify"] = verify
    return data

"""`status` and `reset`: they work whether or not a supervisor runs for the folder.

With a supervisor running, the live answer comes over its control socket; without one, from
`state.json` (all zeros and CLOSED when there is none). The shapes are CONTRACT section 3's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ralph_supervisor import store

STATUS_KEYS = ("state", "trigger", "reason", "iteration", "consecutive_no_progress", "consecutive_same_error",
               "consecutive_failures", "total_opens", "tokens_used")


def _from_state_file(state_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The breaker part of the status from `state.json`, validated like the supervisor reads it.

    Status only reads: a bad file is reported (and the defaults shown), never moved or rewritten.
    """
    from ralph_supervisor.breaker import Breaker, Thresholds

    defaults = Breaker(Thresholds()).status()
    path = state_dir / store.STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return defaults, None
    except (OSError, ValueError, RecursionError) as exc:
        return defaults, f"{path} is unreadable ({str(exc)[:200]}); showing defaults"
    try:
        breaker = Breaker.from_dict(Thresholds(), raw)
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        return defaults, f"{path}: {str(exc)[:200]}; showing defaults"
    data = breaker.status()
    snapshot = breaker.to_dict()
    for key in ("final", "opened_at", "cooldown_s"):
        data[key] = snapshot.get(key)
    return data, None


def collect(state_dir: Path) -> dict[str, Any]:
    """The status of the folder: live when a supervisor answers, else from the files."""
    pid = store.running_supervisor_pid(state_dir)
    if pid is not None:
        from ralph_supervisor.control import ControlError, NoSupervisor, request

        try:
            live = request(state_dir, "status", timeout=5.0)
            if isinstance(live, dict) and "state" in live:
                return live
        except (NoSupervisor, ControlError):
            pass
    data, warning = _from_state_file(state_dir)
    data["supervisor"] = {"pid": pid, "running": pid is not None}
    data["child"] = None
    if warning:
        data["warning"] = warning
    return data


def tmux_line(status: dict[str, Any]) -> str:
    """One short line for tmux's status bar, e.g. `ralph: OPEN(no-progress) it9 paused`."""
    state = status.get("state", "CLOSED")
    label = state if state == "CLOSED" or status.get("trigger") in (None, "none") else f"{state}({status['trigger']})"
    parts = [f"ralph: {label}", f"it{status.get('iteration', 0)}"]
    child = status.get("child")
    if isinstance(child, dict) and child.get("paused"):
        parts.append("paused")
    if not (status.get("supervisor") or {}).get("running"):
        parts.append("(not running)")
    return " ".join(parts)


def human(status: dict[str, Any]) -> str:
    """A readable summary, in the spirit of Ralph's `--circuit-status`."""
    lines = [f"Breaker:        {status.get('state')}" + (
        f" ({status.get('trigger')})" if status.get("trigger") not in (None, "none") else "")]
    if status.get("reason"):
        lines.append(f"Reason:         {status['reason']}")
    lines.append(f"Iteration:      {status.get('iteration', 0)}")
    lines.append(f"No progress:    {status.get('consecutive_no_progress', 0)} in a row")
    lines.append(f"Same error:     {status.get('consecutive_same_error', 0)} in a row")
    lines.append(f"Failed calls:   {status.get('consecutive_failures', 0)} in a row")
    lines.append(f"Total opens:    {status.get('total_opens', 0)}")
    lines.append(f"Tokens used:    {status.get('tokens_used', 0)}")
    sup = status.get("supervisor") or {}
    lines.append("Supervisor:     " + (f"running (pid {sup.get('pid')})" if sup.get("running") else "not running"))
    child = status.get("child")
    if isinstance(child, dict):
        lines.append(f"Child:          pid {child.get('pid')}, {child.get('processes')} processes"
                     + (", paused" if child.get("paused") else ""))
    current = status.get("current")
    if isinstance(current, dict):
        lines.append(f"Current call:   iteration {current.get('iteration')}, running for {current.get('age_s')} s")
    if status.get("warning"):
        lines.append(f"Warning:        {status['warning']}")
    return "\n".join(lines)


def reset(state_dir: Path) -> str:
    """Breaker to CLOSED. A running supervisor does it (and resumes a paused tree); else the file is reset."""
    pid = store.running_supervisor_pid(state_dir)
    if pid is not None:
        from ralph_supervisor.control import ControlError, NoSupervisor, request

        try:
            result = request(state_dir, "reset", timeout=30.0)
            return str(result.get("message", "breaker reset to CLOSED"))
        except (NoSupervisor, ControlError):
            pass
    from ralph_supervisor.breaker import Breaker, Thresholds

    path = state_dir / store.STATE_FILE
    try:
        data = store.read_json_object(path)
    except store.CorruptFile:
        data = None
    breaker = Breaker(Thresholds())
    if data is not None:
        try:
            breaker = Breaker.from_dict(Thresholds(), data)
        except ValueError:
            breaker = Breaker(Thresholds())
    breaker.reset()
    if state_dir.is_dir():
        store.atomic_write_json(path, breaker.to_dict())
        history = state_dir / store.HISTORY_FILE
        entry = {"ts": store.iso_utc(), "iteration": breaker.iteration, "from": (data or {}).get("state", "CLOSED"),
                 "to": "CLOSED", "trigger": "manual", "reason": "reset by ralph-supervise reset"}
        try:
            with open(history, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError:
            pass
    return "breaker reset to CLOSED"

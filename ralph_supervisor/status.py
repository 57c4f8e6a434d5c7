"""`status` and `reset`: they work whether or not a supervisor runs for the folder.

With a supervisor running, the live answer comes over its control socket; without one, from
`state.json` (all zeros and CLOSED when there is none). The shapes are those of `docs/reference.md`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ralph_supervisor import status_json, worktree
from ralph_supervisor.breaker import Breaker, Thresholds
from ralph_supervisor.control import ControlError, NoSupervisor, request
from ralph_supervisor.files import history_jsonl, state_json, verify_jsonl
from ralph_supervisor.files.lock import running_supervisor_pid
from ralph_supervisor.outcomes import breaker_label
from ralph_supervisor.format import dollars, human_size, time_of_day
from ralph_supervisor.values import as_float



def collect(state_dir: Path) -> dict[str, Any]:
    """The status of the folder: live when a supervisor answers, else from the files."""
    pid = running_supervisor_pid(state_dir)
    if pid is not None:
        try:
            live = request(state_dir, "status", timeout=5.0)
            if isinstance(live, dict) and "state" in live:
                return {**live, "state_dir": str(state_dir), "worktree": worktree.read(state_dir)}
        except (NoSupervisor, ControlError):
            pass
    # The breaker from state.json, validated like the supervisor reads it. Status only reads: a bad file is
    # reported (and the defaults shown), never moved or rewritten.
    snapshot, warning = state_json.load(state_dir)
    from ralph_supervisor.snapshots.store import read_summary

    data = status_json.reply(Breaker(Thresholds(), snapshot),
                             limit_until=None,  # a wait lasts only while a supervisor freezes the tree
                             supervisor_pid=pid, child=None, snapshots=read_summary(state_dir),
                             verify=verify_jsonl.status_of(verify_jsonl.last(state_dir)))
    data["state_dir"] = str(state_dir)  # outside the workspace: say where
    data["worktree"] = worktree.read(state_dir)
    if warning:
        data["warning"] = f"{warning}; showing defaults"
    return data


def tmux_line(status: dict[str, Any]) -> str:
    """One short line for tmux's status bar, e.g. `ralph: OPEN(no-progress) it9 paused` or
    `ralph: LIMIT until 15:28 it7`."""
    state = status.get("state", "CLOSED")
    label = state if state == "CLOSED" or status.get("trigger") in (None, "none") else f"{state}({status['trigger']})"
    limit = status.get("limit_until")
    outage = status.get("outage_since")
    if limit:
        label = f"LIMIT until {time_of_day(limit)}"
    if outage:
        label = f"OUTAGE since {time_of_day(outage)}" + (f", frozen until {time_of_day(limit)}" if limit else "")
    parts = [f"ralph: {label}", f"it{status.get('iteration', 0)}"]
    child = status.get("child")
    if isinstance(child, dict) and child.get("paused") and not limit:
        parts.append("paused")
    if not (status.get("supervisor") or {}).get("running"):
        parts.append("(not running)")
    return " ".join(parts)


def human(status: dict[str, Any]) -> str:
    """A readable summary, in the spirit of Ralph's `--circuit-status`."""
    lines = [f"Breaker:        {breaker_label(str(status.get('state')), status.get('trigger'))}"]
    if status.get("reason"):
        lines.append(f"Reason:         {status['reason']}")
    lines.append(f"Iteration:      {status.get('iteration', 0)}")
    lines.append(f"No progress:    {status.get('consecutive_no_progress', 0)} in a row")
    lines.append(f"Same error:     {status.get('consecutive_same_error', 0)} in a row")
    lines.append(f"Failed calls:   {status.get('consecutive_failures', 0)} in a row")
    lines.append(f"Total opens:    {status.get('total_opens', 0)}")
    lines.append(f"Tokens used:    {status.get('tokens_used', 0)}")
    lines.append(f"Cost:           {dollars(as_float(status.get('cost_usd')) or 0.0, 4)}")
    if status.get("limit_until"):
        what = {"ceiling": "Usage ceiling:", "outage": "Outage wait:"}.get(str(status.get("wait_kind")), "Usage limit:")
        lines.append(f"{what:<16}waiting until {time_of_day(status['limit_until'])} "
                     f"({status['limit_until']}); `ralph-supervise resume` ends the wait now")
    if status.get("outage_since"):
        lines.append(f"API outage:     since {time_of_day(status['outage_since'])} ({status['outage_since']}): "
                     f"{status.get('outage_message') or 'the agent cannot reach its API'}; nothing is counted")
    for window in status.get("usage") or []:
        if isinstance(window, dict):
            resets = f", resets {time_of_day(window['resets_at'])}" if window.get("resets_at") else ""
            lines.append(f"Usage window:   {window.get('window')} at {window.get('utilization')} %{resets}")
    sup = status.get("supervisor") or {}
    lines.append("Supervisor:     " + (f"running (pid {sup.get('pid')})" if sup.get("running") else "not running"))
    child = status.get("child")
    if isinstance(child, dict):
        lines.append(f"Child:          pid {child.get('pid')}, {child.get('processes')} processes"
                     + (", paused" if child.get("paused") else ""))
    current = status.get("current")
    if isinstance(current, dict):
        lines.append(f"Current call:   iteration {current.get('iteration')}, running for {current.get('age_s')} s")
    snapshots = status.get("snapshots")
    if isinstance(snapshots, dict):
        latest = snapshots.get("latest") or {}
        text = f"{snapshots.get('count', 0)} kept, {human_size(int(snapshots.get('bytes') or 0))}"
        if latest:
            text += f", the newest of iteration {latest.get('iteration')} ({latest.get('files')} files)"
        if snapshots.get("state") in ("off", "paused"):
            text += f"; {snapshots['state']}: {snapshots.get('problem')}"
        lines.append(f"Snapshots:      {text}")
    if isinstance(status.get("verify"), dict):
        lines.append(f"Last verify:    {verify_jsonl.human(status['verify'])}")
    if isinstance(status.get("worktree"), dict):
        tree = status["worktree"]
        lines.append(f"Worktree:       {tree.get('path')}, branch {tree.get('branch')} of {tree.get('checkout')}")
    for loop in status.get("worktrees") or []:  # loops at work in worktrees of this checkout (--worktree)
        lines.append(f"In a worktree:  branch {loop.get('branch')} at {loop.get('path')} (supervisor pid {loop.get('pid')})")
    if status.get("state_dir"):
        lines.append(f"State folder:   {status['state_dir']}")
    if status.get("warning"):
        lines.append(f"Warning:        {status['warning']}")
    return "\n".join(lines)


def reset(state_dir: Path) -> str:
    """Breaker to CLOSED. A running supervisor does it (and resumes a paused tree); else the file is reset."""
    pid = running_supervisor_pid(state_dir)
    if pid is not None:
        try:
            result = request(state_dir, "reset", timeout=30.0)
            return str(result.get("message", "breaker reset to CLOSED"))
        except (NoSupervisor, ControlError):
            pass
    snapshot, _warning = state_json.load(state_dir, move_bad=True)
    breaker = Breaker(Thresholds(), snapshot)
    decision = breaker.reset()
    if state_dir.is_dir():  # the history line first, then the state (the order `Records` documents)
        if decision.changed:
            history = history_jsonl.History(state_dir)
            history.record(decision)
            history.close()
        state_json.save(state_dir, breaker.snapshot())
    return "breaker reset to CLOSED"

"""The page's buttons: pause, resume, stop and reset, asked of the loop's supervisor over its control socket
exactly as the commands ask it (`control.py`'s client; `status.reset` for reset, which also works with no
supervisor), so the page shows what the supervisor answered, never a guess. One connection per action.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ralph_supervisor import status
from ralph_supervisor.control import ControlError, NoSupervisor, request
from ralph_supervisor.files import state_json

ACTIONS = ("pause", "resume", "stop", "reset")
STOP_TIMEOUT = 10.0 + 60.0
"""As `ralph-supervise stop`: the supervisor answers once the tree is gone (its --grace, then KILL)."""


def ask_supervisor(state_dir: Path, name: str) -> tuple[int, dict[str, Any]]:
    """Ask the loop's supervisor over its control socket, as the commands do; the HTTP status and what the
    supervisor answered (its own message, never a guess)."""
    if name == "reset":
        try:
            return 200, {"ok": True, "message": status.reset(state_dir)}
        except OSError as exc:
            return 500, {"ok": False, "error": f"cannot reset: {exc.strerror or exc}"}
    try:
        result = request(state_dir, name, timeout=STOP_TIMEOUT if name == "stop" else 30.0)
    except NoSupervisor:
        error = "no supervisor is running for this loop"
        state, _note = state_json.shown(state_dir)
        if state is not None and state.final:   # the rule of the commands: a final open needs `reset`
            error += "; its breaker opened for good: reset clears it, then start the loop again"
        return 409, {"ok": False, "error": error}
    except ControlError as exc:
        return 502, {"ok": False, "error": str(exc)}
    answer: dict[str, Any] = {"ok": True, "message": str(result.get("message") or f"{name}: done")}
    if "state" in result:
        answer["state"] = result.get("state")
        child = result.get("child")
        answer["paused"] = bool(child.get("paused")) if isinstance(child, dict) else None
    return 200, answer

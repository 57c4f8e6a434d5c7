"""Agent calls in containers: the front-end is the call, the container is what must be frozen and stopped.

`docker run … IMAGE claude -p …` and `docker exec BOX codex exec …` (podman, nerdctl alike) leave only the
client in the loop's tree. Signals to it do not reach the agent: `docker exec` forwards none, a killed
`docker run` leaves its container running, a stopped client does not pause it. So a pause, resume and stop
act on the container itself through its engine (`pause`, `unpause`, `kill`), named by `--name`, by the id
the engine wrote to `--cidfile`, or by the container `exec` names. A call whose container cannot be named
is observed, not controlled, and that is said once.

    >>> from ralph_supervisor.agents.recognize import Container
    >>> reference(Container("docker", "exec", "box", None), read=lambda path: None)
    'box'
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from ralph_supervisor.agents.recognize import Container
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.process.linux import ProcStat, descendant_stats, read_stat

log = structlog.get_logger(__name__)

ENGINE_TIMEOUT_SECONDS = 10.0
VERBS = {"pause": ("pause",), "unpause": ("unpause",), "term": ("kill", "--signal", "TERM"), "kill": ("kill",)}


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def reference(container: Container, read: Callable[[str], str | None] = _read_text) -> str | None:
    """What to call the container when asking its engine: its name, or the id in its cidfile. None: unknown."""
    if container.target:
        return container.target
    if container.cidfile:
        text = (read(container.cidfile) or "").strip()
        return text or None
    return None


@dataclass(frozen=True)
class ContainerCall:
    """The container an agent call runs in, and how to reach it."""

    engine: str
    ref: str

    def host_pid(self) -> int | None:
        """The container's first process as this machine sees it (`inspect --format {{.State.Pid}}`): its
        processes are the call's for the stall rule's CPU. None when the engine cannot tell."""
        out = self._ask(("inspect", "--format", "{{.State.Pid}}"), "inspect")
        try:
            pid = int((out or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return pid if pid > 0 else None

    def act(self, verb: str) -> bool:
        """Ask the engine to pause, unpause, TERM or kill the container; True when it said yes."""
        done = self._ask(VERBS[verb], verb) is not None
        if done:
            log.info("container_action", engine=self.engine, container=self.ref, action=verb)
        return done

    def _ask(self, args: tuple[str, ...], what: str) -> str | None:
        """Run `ENGINE ARGS REF`; its output, or None (said once per failure) when it fails. The engine's
        client runs as a helper of ours (never a member of the loop's tree, which a stop would kill)."""
        try:
            proc = HELPERS.popen([self.engine, *args, self.ref], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
        except OSError as exc:
            log.warning("container_action_failed", engine=self.engine, container=self.ref, action=what, error=str(exc))
            return None
        try:
            out, err = proc.communicate(timeout=ENGINE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = b"the engine did not answer in time"
        finally:
            HELPERS.done(proc.pid)
        if proc.returncode != 0:
            log.warning("container_action_failed", engine=self.engine, container=self.ref, action=what,
                        error=err.decode(errors="replace").strip()[:300])
            return None
        return out.decode(errors="replace")


def ask_host_pid(current: Callable[[], ContainerCall | None], tries: int = 20, pause: float = 0.25) -> int | None:
    """Off the event loop: the first process of the container `current()` names, asked of its engine until it
    tells (a `--cidfile` is written a moment after the client starts); None once the call is over (`current()`
    None) or the engine never told."""
    for _ in range(tries):
        container = current()
        if container is None:
            return None
        pid = container.host_pid()
        if pid is not None:
            return pid
        time.sleep(pause)
    return None


def processes_of(pid: int) -> list[ProcStat]:
    """A container's first process on this machine and its descendants (outside our tree)."""
    first = read_stat(pid)
    return ([first] if first is not None else []) + (descendant_stats(pid) or [])

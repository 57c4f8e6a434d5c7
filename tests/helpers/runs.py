"""One supervisor run, as the end-to-end and fault tests drive it: started as the user starts it, with a
marker its whole tree inherits (so every process it leaves can be found), stderr kept in files.

Its stderr goes to files, never to a pipe: a test that does not read for a while must never block the
supervisor's logging (a full pipe would freeze its event loop and fake a hang).

    >>> run = Run(tmp_path / "work", marks=tmp_path / "marks")        # doctest: +SKIP
    >>> run.start("--no-progress", "2", "--", "bash", "-c", "sleep 1000")   # doctest: +SKIP
    >>> run.cleanup()                                                       # doctest: +SKIP
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import psutil

from tests.helpers import wait_for, state_dir_of
from tests.helpers.fault_procs import MARK_VAR, json_lines, kill_marked, loop_tree, marked, new_mark
from tests.helpers.supervise import events, start

FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false")
"""Flags every run gets: no terminal echo, JSON on stderr, a short grace, no desktop notices."""


class Run:
    """One supervisor process on a workspace. `marks`: a folder the tree may report into (`$MARKS`); `options`:
    flags every start of it gets (`--cgroup off`, say)."""

    def __init__(self, workspace: Path, state_dir: Path | None = None, *, marks: Path | None = None,
                 options: tuple[str, ...] = ()) -> None:
        self.workspace = workspace
        self.options = options
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir or state_dir_of(workspace)
        self.marks = marks
        if marks is not None:
            marks.mkdir(parents=True, exist_ok=True)
        self.mark = new_mark()
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr_files: list[Path] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`ralph-supervise FAST ARGS` (ARGS hold `-- COMMAND`), in the background."""
        folder = self.marks if self.marks is not None else self.workspace.parent
        path = folder / f"supervisor-{self.mark[:8]}-{len(self._stderr_files)}.stderr"
        self._stderr_files.append(path)
        extra = {"MARKS": str(self.marks)} if self.marks is not None else {}
        with open(path, "wb") as err:
            self.proc = start(self.workspace, *FAST, *self.options, *args, env={MARK_VAR: self.mark, **extra, **(env or {})},
                              stdout=subprocess.DEVNULL, stderr=err)
        return self.proc

    @property
    def stderr(self) -> bytes:
        return b"".join(p.read_bytes() for p in self._stderr_files if p.exists())

    def finish(self, timeout: float) -> int:
        """Wait for the supervisor to exit by itself; kill it (and fail) if it hangs."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the supervisor hung (no exit within {timeout}s); stderr tail: "
                                 f"{self.stderr.decode(errors='replace')[-1500:]}") from None

    def logged(self, name: str | None = None) -> list[dict]:
        """Events the supervisor printed on stderr (they reach it even when events.jsonl cannot be written)."""
        found = json_lines(self.stderr.decode(errors="replace"))
        return [e for e in found if name is None or e.get("event") == name]

    def tree(self) -> list[psutil.Process]:
        """Every live process of the loop's tree: the run's, but the supervisor and its helpers."""
        exclude = frozenset({self.proc.pid}) if self.proc is not None else frozenset()
        return loop_tree(marked(self.mark, exclude))

    def child_pid(self, nth: int = 0) -> int:
        return wait_for(lambda: events(self.state_dir, "child_started"), what="child_started")[nth]["pid"]

    def cleanup(self) -> None:
        """Stop the supervisor if it still runs (TERM, then KILL), and kill whatever of its tree is left."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_marked(self.mark)

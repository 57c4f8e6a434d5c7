"""The verify's own small process: it runs the test command at low priority and keeps its whole tree.

The supervisor is the loop's subreaper, so an orphan of the test command (a server a test forgot, a
daemon it forked) would re-parent to the supervisor and look like part of the loop's tree: frozen by a
pause, counted as the loop's. So the command runs under this process, which is a subreaper of its own:
every descendant of the test command stays below it, the supervisor registers only this one pid as a
helper (outside the loop's tree with all it holds), and when the command ends whatever it left running
is named and killed. SIGTERM (a timeout, the supervisor's stop) kills the whole tree at once.

Priority: nice 19 and the idle I/O class, inherited by everything the command starts.

    python -m ralph_supervisor.verify.box STATUS_FILE -- sh -c 'pytest -q'

Standard library only: it starts for every verify.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
IOPRIO_WHO_PROCESS = 1
IOPRIO_CLASS_IDLE = 3
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314, "ppc64le": 273, "s390x": 282}
LEFT_MAX = 20


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def lower_priority() -> None:
    """nice 19 and the idle I/O class (best effort: where the kernel says no, the verify still runs)."""
    try:
        os.nice(19)
    except OSError:
        pass
    libc, number = _libc(), _IOPRIO_SET.get(platform.machine())
    if libc is not None and number is not None:
        libc.syscall(number, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13)


def become_subreaper() -> bool:
    libc = _libc()
    return libc is not None and libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def descendants(root: int) -> list[tuple[int, str]]:
    """Every live descendant of `root` (pid, name), from /proc (parents before children)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        name = raw[raw.find("(") + 1: raw.rfind(")")]
        fields = raw[raw.rfind(")") + 2:].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), name))
    found: list[tuple[int, str]] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child[0])
    return found


def kill_all(root: int) -> list[tuple[int, str]]:
    """SIGKILL every descendant until none is left (each round re-reads /proc: forks race the first)."""
    killed: dict[int, str] = {}
    for _ in range(50):
        alive = descendants(root)
        if not alive:
            break
        for pid, name in alive:
            killed.setdefault(pid, name)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.01)
    return sorted(killed.items())


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m ralph_supervisor.verify.box STATUS_FILE -- COMMAND...", file=sys.stderr)
        return 2
    status_file, command = argv[0], argv[2:]
    me = os.getpid()
    ended_by: list[str] = []

    def on_term(signum: int, _frame: object) -> None:
        ended_by.append(signal.Signals(signum).name)
        kill_all(me)
        _write(status_file, {"exit": None, "ended_by": ended_by[0], "left": []})
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    subreaper = become_subreaper()
    lower_priority()
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    except OSError as exc:
        _write(status_file, {"exit": 127, "error": f"cannot run {command[0]}: {exc.strerror or exc}", "left": []})
        print(f"ralph-supervise verify: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    code = proc.wait()
    left = kill_all(me)
    _write(status_file, {"exit": code, "left": [f"{name} ({pid})" for pid, name in left[:LEFT_MAX]],
                         "left_count": len(left), "subreaper": subreaper})
    return code if code >= 0 else 128 - code


def _write(path: str, data: dict[str, object]) -> None:
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

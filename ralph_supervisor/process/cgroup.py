"""A cgroup around the loop's tree, where the system lets us make one: what it used, and a kill nothing escapes.

Signals reach the processes the tree walk finds; a cgroup holds every process the loop ever started, however
it left the tree. So, where the supervisor can write to cgroup v2 (as root, or in a subtree delegated to it),
the loop runs in a cgroup of its own, made under the supervisor's own cgroup (from `/proc/self/cgroup`, so it
stays inside whatever limits the supervisor runs under): the child enters it between fork and exec, before it
can start anything. A stop ends with `cgroup.kill` (what the signals left, if anything, dies with it), and
its figures (CPU seconds from `cpu.stat`, memory where the unified hierarchy has the memory controller, the
processes in it) are in `status --json`. The cgroup's path is recorded in the state folder, it is removed
at exit, and a successor sweeps one a crashed supervisor left. Where none can be made, the signals do the
work alone, said once at start (`create` returns the reason).

    cgroup, why = LoopCgroup.create(state_dir)   # None and why, where none can be made
    popen = spawn(..., enter=cgroup.enter)        # the child moves itself in before exec
    cgroup.figures()                              # Figures(cpu_s=..., memory_bytes=..., tasks=...)
    cgroup.kill(); cgroup.remove()                # at the end of a stop; at exit
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RECORD = "cgroup.json"
"""The state folder's record of the loop's cgroup (its path), for the sweep after a crash."""
PREFIX = "ralph-loop-"


@dataclass(frozen=True)
class Figures:
    """What the loop's cgroup has used: CPU seconds in all, memory now and at its peak (None where the
    unified hierarchy has no memory controller), and the processes in it now."""

    cpu_s: float
    memory_bytes: int | None
    memory_peak_bytes: int | None
    tasks: int

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def unified_mount(mountinfo: str) -> Path | None:
    """Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` beside v1 hierarchies)."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            if len(fields) >= 5:
                return Path(fields[4])
    return None


def own_unified_path(proc_cgroup: str) -> str | None:
    """The supervisor's own cgroup in the unified hierarchy (the `0::` line of /proc/self/cgroup)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


class LoopCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, state_dir: Path) -> tuple[LoopCgroup | None, str | None]:
        """Make the loop's cgroup under our own and record it; (None, why) where that cannot be done."""
        try:
            mount = unified_mount(Path("/proc/self/mountinfo").read_text())
            own = own_unified_path(Path("/proc/self/cgroup").read_text())
        except OSError as exc:
            return None, f"cannot read /proc/self: {exc.strerror or exc}"
        if mount is None:
            return None, "no cgroup v2 is mounted (a system with cgroup v1 only, or none)"
        if own is None:
            return None, "the supervisor is in no cgroup v2 (/proc/self/cgroup has no 0:: line)"
        parent = mount / own.lstrip("/")
        path = parent / f"{PREFIX}{os.getpid()}"
        try:
            path.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            return None, (f"cannot make a cgroup in {parent}: {exc.strerror or exc} (run as root, or in a delegated "
                          "subtree: systemd's Delegate=yes, or `systemd-run --user --scope -p Delegate=yes`)")
        if not os.access(path / "cgroup.procs", os.W_OK):
            _rmdir(path)
            return None, f"cannot move processes into {path} (cgroup.procs is not writable)"
        try:
            (state_dir / RECORD).write_text(json.dumps({"path": str(path), "pid": os.getpid()}) + "\n")
        except OSError as exc:
            _rmdir(path)
            return None, f"cannot record the cgroup in {state_dir}: {exc.strerror or exc}"
        return cls(path), None

    def enter(self) -> None:
        """Between fork and exec, in the child: move itself in (plain system calls, no locks, no imports)."""
        try:
            fd = os.open(str(self.path / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass  # the signals still do the work; the figures will say 0 processes

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def figures(self) -> Figures | None:
        """Read at a `status` (a few small files); None once the folder is gone."""
        try:
            stat = dict(line.split(" ", 1) for line in (self.path / "cpu.stat").read_text().splitlines() if " " in line)
        except OSError:
            return None
        return Figures(cpu_s=round(int(stat.get("usage_usec", "0")) / 1e6, 3),
                       memory_bytes=_number(self.path / "memory.current"),
                       memory_peak_bytes=_number(self.path / "memory.peak"), tasks=len(self.pids()))

    def kill(self) -> int:
        """SIGKILL everything in the cgroup at once (`cgroup.kill`; each process where the kernel has none).
        Returns how many processes there were."""
        left = self.pids()
        if not left:
            return 0
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            for pid in left:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        return len(left)

    def remove(self, state_dir: Path, timeout: float = 2.0) -> bool:
        """Kill what is left, remove the folder and its record; False when it would not go."""
        self.kill()
        deadline = time.monotonic() + timeout
        while not _rmdir(self.path) and time.monotonic() < deadline:
            time.sleep(0.02)
        gone = not self.path.exists()
        if gone:
            try:
                (state_dir / RECORD).unlink()
            except OSError:
                pass
        return gone


def sweep(state_dir: Path) -> str | None:
    """A cgroup a crashed supervisor left (its record in the state folder): killed and removed. The path
    removed, or None when there was none."""
    try:
        record = json.loads((state_dir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    path = Path(str(record.get("path", ""))) if isinstance(record, dict) else None
    if path is None or not path.name.startswith(PREFIX) or "cgroup" not in str(path):
        return None
    LoopCgroup(path).remove(state_dir)
    return str(path)


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False

"""A cgroup around the loop's tree, where the system lets us make one: what it used, and a kill nothing escapes.

Signals reach the processes the tree walk finds; a cgroup holds every process the loop ever started, however
it left the tree. So, where the supervisor can write to cgroup v2 (as root, or in a subtree delegated to it),
the loop runs in a cgroup of its own, made under the supervisor's own cgroup (from `/proc/self/cgroup`, so it
stays inside whatever limits the supervisor runs under): the child enters it between fork and exec, before it
can start anything. A pause is its freeze (`cgroup.freeze`: atomic, a process forked meanwhile is born
frozen; `process/frozen.py` says what "held" means on either path), a stop ends with `cgroup.kill` (what the
signals left, if anything, dies with it), and its figures (CPU seconds from `cpu.stat`, memory where the unified
hierarchy has the memory controller, the processes in it) are read at each tick (`look`, a few µs) for
`status --json`, `watch` and the metrics. The cgroup's path is recorded in the state folder, it is removed at
exit, and a successor sweeps one a crashed supervisor left. Where none can be made, the signals do the work
alone, said once at start (`create` returns the reason).

Bounds (`--memory-max`, `--cpu-max`, `--tasks-max`) go through the v2 controllers where the unified hierarchy
has them enabled for our cgroup's children, else through the v1 `memory`, `cpu` and `pids` hierarchies of a
hybrid system (where the unified hierarchy has the kill but not the controllers), each in a cgroup of the same
name under the supervisor's own there. The v1 memory cgroup is made even without a bound, for the figures.
A bound that cannot be set is an error naming what is missing: the run does not start unbounded.

    cgroup, why = LoopCgroup.create(state_dir)   # None and why, where none can be made
    popen = spawn(..., enter=cgroup.enter)        # the child moves itself in before exec
    cgroup.freeze(); cgroup.thaw()                # pause and resume (None, or the problem)
    cgroup.look()                                 # Figures(cpu_s=..., memory_bytes=..., tasks=...), per tick
    cgroup.kill(); cgroup.remove()                # at the end of a stop; at exit
"""

from __future__ import annotations

import json
import os
import secrets
import select
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path

from ralph_supervisor.process.procfs import read_small

RECORD = "cgroup.json"
"""The state folder's record of the loop's cgroup (its path), for the sweep after a crash."""
VERIFY_RECORD = "cgroup-verify.json"
"""The verify's cgroup, a sibling of the loop's with the same bounds (a verify is never frozen with the tree)."""
PREFIX = "ralph-loop-"
CGROUP_OFF = ("--cgroup off: the loop gets no cgroup (signals pause and stop it; --memory-max, --cpu-max and "
              "--tasks-max need one)")
"""Why there is none when the user said so (`create` is not even tried)."""
FREEZE_WAIT = 5.0
"""How long a freeze waits for `frozen 1`: a process is held when it next runs, one in uninterruptible sleep (a
read from a busy disk, an exec) only when it leaves it. A pause runs off the event loop, and says when the bound
passes first (`tree_hold_slow`)."""


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


@dataclass(frozen=True)
class Limits:
    """The bounds asked for (None: none)."""

    memory_max: int | None = None
    """Bytes."""
    cpu_max: float | None = None
    """Percent of one CPU (200: two CPUs' worth)."""
    tasks_max: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.memory_max, self.cpu_max, self.tasks_max))


CPU_PERIOD_US = 100_000


def v1_mounts(mountinfo: str) -> dict[str, Path]:
    """The v1 hierarchies by controller (`memory`, `cpu`, `pids`, ...), from their super options."""
    found: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        parts = right.split()
        if len(parts) >= 3 and parts[0] == "cgroup":
            fields_ = left.split()
            if len(fields_) >= 5:
                for option in parts[2].split(","):
                    found.setdefault(option, Path(fields_[4]))
    return found


def own_v1_paths(proc_cgroup: str) -> dict[str, str]:
    """The supervisor's own cgroup in each v1 hierarchy, by controller (`4:memory:/x` -> {"memory": "/x"})."""
    found: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number != "0" and controllers:
            for controller in controllers.split(","):
                found[controller] = path.strip() or "/"
    return found


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
    def __init__(self, path: Path, v1: dict[str, Path] | None = None, v2_controllers: frozenset[str] = frozenset()
                 ) -> None:
        self.path = path
        self.v1 = dict(v1 or {})
        """The loop's cgroups in the v1 hierarchies, by controller (a hybrid system)."""
        self.v2_controllers = v2_controllers
        """The controllers the unified hierarchy has for the loop's cgroup."""
        self.latest: Figures | None = None
        """The last tick's figures (`look`), read by `status`, `watch` and the metrics' thread (a value, replaced whole)."""
        self.lost: str | None = None
        """Why the folder can no longer be used (gone, or read-only), once that is known."""
        self._files: tuple[str, str, str] | None = None
        """Where the figures are read (CPU, memory now, its peak), found at the first read."""
        self._oom_file: str | None = None
        """Where the OOM kills are counted (v2's memory.events, v1's memory.oom_control), found at the first read."""

    @property
    def paths(self) -> list[Path]:
        return [self.path, *self.v1.values()]

    @classmethod
    def create(cls, state_dir: Path, limits: Limits = Limits(), *, record: str = RECORD,
               role: str = "") -> tuple[LoopCgroup | None, str | None]:
        """Make the loop's cgroup under our own (and, for `limits` and the figures, its v1 siblings), set the
        bounds and record it (`record`: the file in the state folder; `role`: a word in the folder's name, for
        the verify's); (None, why) where that cannot be done."""
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError as exc:
            return None, f"cannot read /proc/self: {exc.strerror or exc}"
        mount, own = unified_mount(mountinfo), own_unified_path(proc_cgroup)
        if mount is None:
            return None, "no cgroup v2 is mounted (a system with cgroup v1 only, or none)"
        if own is None:
            return None, "the supervisor is in no cgroup v2 (/proc/self/cgroup has no 0:: line)"
        parent = mount / own.lstrip("/")
        name = f"{PREFIX}{os.getpid()}-{role + '-' if role else ''}{secrets.token_hex(3)}"
        path = parent / name
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
        cgroup = cls(path, v2_controllers=_enabled(parent))
        problem = cgroup._bound(limits, name, v1_mounts(mountinfo), own_v1_paths(proc_cgroup))
        if problem is None:
            try:
                (state_dir / record).write_text(json.dumps({"path": str(path), "v1": [str(p) for p in cgroup.v1.values()],
                                                            "pid": os.getpid()}) + "\n")
            except OSError as exc:
                problem = f"cannot record the cgroup in {state_dir}: {exc.strerror or exc}"
        if problem is not None:
            for made in cgroup.paths:
                _rmdir(made)
            return None, problem
        return cgroup, None

    def _bound(self, limits: Limits, name: str, mounts: dict[str, Path], own: dict[str, str]) -> str | None:
        """Set each bound through v2 where its controller is there, else through its v1 hierarchy; the v1
        memory cgroup is made for the figures even without a bound. The problem, or None."""
        wanted = {"memory": limits.memory_max, "cpu": limits.cpu_max, "pids": limits.tasks_max}
        flags = {"memory": "--memory-max", "cpu": "--cpu-max", "pids": "--tasks-max"}
        for controller, value in wanted.items():
            if controller in self.v2_controllers:
                if value is not None and not _write(self.path / _V2_FILE[controller], _v2_value(controller, value)):
                    return f"{flags[controller]}: cannot write {self.path / _V2_FILE[controller]}"
                continue
            if value is None and controller != "memory":
                continue
            where = mounts.get(controller)
            if where is None or controller not in own:
                if value is None:
                    continue
                return (f"{flags[controller]}: no {controller} controller, neither in cgroup v2 for {self.path.parent} "
                        f"(its cgroup.subtree_control) nor as a cgroup v1 hierarchy")
            folder = where / own[controller].lstrip("/") / name
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                if value is None:
                    continue
                return f"{flags[controller]}: cannot make {folder}: {exc.strerror or exc}"
            self.v1[controller] = folder
            if value is not None:
                for file, text in _v1_values(controller, value):
                    if not _write(folder / file, text) and file != "memory.memsw.limit_in_bytes":
                        return f"{flags[controller]}: cannot write {folder / file}"
        return None

    def enter(self) -> None:
        """Between fork and exec, in the child: move itself in (plain system calls, no locks, no imports)."""
        for folder in (*self.v1.values(), self.path):
            try:
                fd = os.open(str(folder / "cgroup.procs"), os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError:
                pass  # the signals still do the work; the figures will say 0 processes

    def pids(self) -> list[int]:
        """The processes directly in it."""
        return _pids(self.path)

    def members(self) -> frozenset[int]:
        """The processes in it and in the cgroups below it (a loop may make its own): what its freeze holds."""
        return frozenset(pid for folder in self.folders() for pid in _pids(folder))

    def folders(self) -> list[Path]:
        """It and the cgroups below it, parents first (one scandir where the loop made none)."""
        found, index = [self.path], 0
        while index < len(found):
            try:
                found.extend(Path(e.path) for e in os.scandir(found[index]) if e.is_dir(follow_symlinks=False))
            except OSError:
                pass
            index += 1
        return found

    def figures(self) -> Figures | None:
        """Read now (a few small files); None once the folder is gone."""
        return self._figures(len(_pids(self.path)), peak=True)

    def look(self, members: Collection[int] | None = None) -> Figures | None:
        """The tick's figures, kept in `latest`: CPU and memory now (two small reads); the processes and the
        peak as of `members`, who is in it when the caller has just read that (else as the last look had
        them). None once the folder is gone, and then `lost` says so."""
        latest = self.latest
        if members is None and latest is not None:
            figures = self._figures(latest.tasks, latest.memory_peak_bytes, read_peak=False)
        else:
            figures = self._figures(len(self.members() if members is None else members))
        if figures is None and self.lost is None and not self.path.exists():
            self.lost = f"{self.path} is gone"
        self.latest = figures
        return figures

    def _figures(self, tasks: int, peak: int | None = None, *, read_peak: bool = True) -> Figures | None:
        """`read_peak`: read the memory's peak, else keep `peak`."""
        if self._files is None:
            v1 = self.v1.get("memory")
            memory = (self.path / "memory.current", self.path / "memory.peak") if "memory" in self.v2_controllers or \
                v1 is None else (v1 / "memory.usage_in_bytes", v1 / "memory.max_usage_in_bytes")
            self._files = (str(self.path / "cpu.stat"), str(memory[0]), str(memory[1]))
        cpu_file, memory_file, peak_file = self._files
        stat = read_small(cpu_file)
        if stat is None:
            return None
        usage = next((line.split()[1] for line in stat.splitlines() if line.startswith(b"usage_usec ")), b"0")
        return Figures(cpu_s=round(int(usage) / 1e6, 3), memory_bytes=_number(memory_file),
                       memory_peak_bytes=_number(peak_file) if read_peak else peak, tasks=tasks)

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in the cgroup so far (`oom_kill` of v2's
        memory.events, or of v1's memory.oom_control)."""
        if self._oom_file is None:
            v1 = self.v1.get("memory")
            self._oom_file = str(self.path / "memory.events" if "memory" in self.v2_controllers or v1 is None
                                 else v1 / "memory.oom_control")
        text = read_small(self._oom_file)
        for line in (text or b"").splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    def freeze(self, timeout: float = FREEZE_WAIT) -> str | None:
        """The pause: `cgroup.freeze` 1, atomic (a process forked meanwhile is born frozen), then wait until
        `cgroup.events` says every process in it is held (at most `timeout`: one in uninterruptible sleep is
        held when it leaves it). The problem (the file, and why it cannot be written), or None.

        Each cgroup below is waited for too: the kernel may say `frozen 1` of this one a few ms before a cgroup
        the loop made below it is (seen on 6.18 with a task just moved into a nested cgroup)."""
        problem = _write_problem(self.path / "cgroup.freeze", "1")
        if problem is None:
            deadline = time.monotonic() + timeout
            for folder in self.folders():
                wait_frozen(folder, True, max(0.0, deadline - time.monotonic()))
        else:
            self.lost = self.lost or problem
        return problem

    def thaw(self, timeout: float = FREEZE_WAIT) -> str | None:
        """`cgroup.freeze` 0. Where that cannot be written (the folder became read-only), its processes are
        moved out into the supervisor's own cgroup, which thaws them too: the tree is never left frozen while
        a way out exists. The problem (None when it thawed the plain way)."""
        problem = _write_problem(self.path / "cgroup.freeze", "0")
        if problem is None:
            wait_frozen(self.path, False, timeout)
            return None
        self.lost = self.lost or problem
        if events_frozen(self.path) is not True:
            return problem  # gone, or not frozen: nothing is held
        into = self.path.parent / "cgroup.procs"
        stuck = [pid for pid in self.members() if _write_problem(into, str(pid)) is not None]
        if stuck:
            return f"{problem}; {len(stuck)} of its processes cannot be moved out to {self.path.parent} either"
        return f"{problem}; its processes were moved out to {self.path.parent}, which thaws them"

    def frozen(self) -> bool:
        """Its `cgroup.events`, and those of the cgroups below, say `frozen 1`: every process in them is held."""
        return all(events_frozen(folder) is True for folder in self.folders())

    def kill(self, settle_s: float = 0.3) -> int:
        """SIGKILL everything in the cgroup at once (`cgroup.kill`; each process where the kernel has none).
        Returns how many processes there were."""
        left = self.members()
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
        deadline = time.monotonic() + settle_s  # the dying leave it within milliseconds: count them once
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(left)

    def remove(self, state_dir: Path, timeout: float = 2.0, *, record: str = RECORD) -> bool:
        """Kill what is left, remove the folder (and the cgroups the loop made in it) and its record; False when
        it would not go."""
        self.kill()
        for folder in (*reversed(self.folders()), *self.v1.values()):  # each its own time: one that will not go keeps no other
            deadline = time.monotonic() + timeout
            while not _rmdir(folder) and time.monotonic() < deadline:
                time.sleep(0.02)
        gone = not any(folder.exists() for folder in self.paths)
        if gone:
            try:
                (state_dir / record).unlink()
            except OSError:
                pass
        return gone


def sweep(state_dir: Path, name: str = RECORD) -> str | None:
    """A cgroup a crashed supervisor left (its record `name` in the state folder): killed and removed. The
    path removed, or None when there was none."""
    try:
        record = json.loads((state_dir / name).read_text())
    except (OSError, ValueError):
        return None
    path = Path(str(record.get("path", ""))) if isinstance(record, dict) else None
    if path is None or not path.name.startswith(PREFIX) or "cgroup" not in str(path):
        return None
    v1 = [Path(str(p)) for p in record.get("v1", []) if isinstance(p, str)] if isinstance(record.get("v1"), list) else []
    v1 = [p for p in v1 if p.name == path.name and "cgroup" in str(p)]
    LoopCgroup(path, {str(i): p for i, p in enumerate(v1)}).remove(state_dir, record=name)
    return str(path)


_V2_FILE = {"memory": "memory.max", "cpu": "cpu.max", "pids": "pids.max"}


def _v2_value(controller: str, value: float) -> str:
    if controller == "cpu":
        return f"{max(1000, int(value / 100 * CPU_PERIOD_US))} {CPU_PERIOD_US}"
    return str(int(value))


def _v1_values(controller: str, value: float) -> list[tuple[str, str]]:
    if controller == "memory":  # with swap bounded too, where the kernel accounts it (else it swaps, never OOMs)
        return [("memory.limit_in_bytes", str(int(value))), ("memory.memsw.limit_in_bytes", str(int(value)))]
    if controller == "cpu":
        return [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(max(1000, int(value / 100 * CPU_PERIOD_US))))]
    return [("pids.max", str(int(value)))]


def _enabled(parent: Path) -> frozenset[str]:
    """The controllers the unified hierarchy gives our cgroup's children (its `cgroup.subtree_control`)."""
    try:
        return frozenset((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return frozenset()


def _write(path: Path, text: str) -> bool:
    return _write_problem(path, text) is None


def _write_problem(path: Path, text: str) -> str | None:
    """Write a cgroup file; None, or what went wrong, naming the file."""
    try:
        path.write_text(text)
        return None
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"


def _pids(folder: Path) -> list[int]:
    """The processes directly in a cgroup (`cgroup.procs`); none when it cannot be read."""
    raw = read_small(folder / "cgroup.procs")
    try:
        return [int(part) for part in raw.split()] if raw else []
    except ValueError:
        return []


def events_frozen(folder: Path) -> bool | None:
    """What the cgroup's `cgroup.events` says of `frozen` (None: it cannot be read, or says nothing of it)."""
    raw = read_small(folder / "cgroup.events")
    return _frozen_in(raw) if raw is not None else None


def _frozen_in(raw: bytes) -> bool | None:
    for line in raw.splitlines():
        if line.startswith(b"frozen "):
            return line.endswith(b" 1")
    return None


def wait_frozen(folder: Path, frozen: bool, timeout: float) -> bool:
    """Wait until the cgroup's `cgroup.events` says `frozen` is `frozen` (at most `timeout` seconds); True
    when it does. The kernel wakes a poll on that file when it changes, so this costs no sleeps."""
    try:
        fd = os.open(folder / "cgroup.events", os.O_RDONLY)
    except OSError:
        return False
    deadline = time.monotonic() + timeout
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI)
        while True:
            if _frozen_in(os.pread(fd, 256, 0)) is frozen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not poller.poll(max(1, int(left * 1000))):
                continue
    except OSError:
        return False
    finally:
        os.close(fd)


def _number(path: Path | str) -> int | None:
    raw = read_small(path)
    try:
        return int(raw.strip()) if raw else None
    except ValueError:
        return None


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False

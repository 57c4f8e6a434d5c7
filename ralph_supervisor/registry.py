"""The registry of supervisors on this machine: one small file per supervisor, so `ls` can find them all.

Why files and no daemon: nothing has to run for the registry to work, and a supervisor that dies
cannot take anyone else's entry with it. Each supervisor writes its entry once it holds its state
folder's lock (so two supervisors started for one folder leave one entry) and, when it exits, marks it
ended (its end time and exit code): the loop stays listed in `ls` and `serve`, so whoever looks in the
morning sees the loops that ended in the night, until `ls --prune` removes it. One killed with SIGKILL
cannot mark its entry: `ls` shows it as stale (its pid is gone, or now names another process, or the
machine rebooted since) and `ls --prune` removes it too. A supervisor started again for the same folder
replaces the ended entry with its own.

Where, for this user: `$RALPH_SUPERVISE_REGISTRY` when set; else `$XDG_RUNTIME_DIR/ralph-supervise`
(a tmpfs per user that systemd-logind empties at the last logout); else
`$XDG_STATE_HOME/ralph-supervise`, i.e. `~/.local/state/ralph-supervise`. The entry's name is the
workspace's folder name and a hash of the state folder, so a supervisor that restarts for the same
folder replaces its predecessor's entry instead of adding one.

    entry = register(workspace=ws, state_dir=ws / ".ralph-supervise", name="proj", command=("ralph",))
    ...
    entry.mark_ended(code)             # at exit; entry.remove() takes it away instead
    listing = read_registry()          # every entry, and one line per problem with the folder
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph_supervisor import store
from ralph_supervisor.process import procfs
from ralph_supervisor.text import one_line

REGISTRY_ENV = "RALPH_SUPERVISE_REGISTRY"
FOLDER_NAME = "ralph-supervise"
ENTRY_SUFFIX = ".json"
ENTRY_MAX_BYTES = 64 * 1024
"""An entry is a few hundred bytes; anything bigger is garbage and is not read whole."""
VERSION = 1


def registry_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder this user's supervisors register in (see the module docstring for the order)."""
    env = os.environ if env is None else env
    if env.get(REGISTRY_ENV):
        return Path(env[REGISTRY_ENV]).expanduser()
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / FOLDER_NAME
    state_home = env.get("XDG_STATE_HOME")
    base = Path(state_home) if state_home and os.path.isabs(state_home) else Path.home() / ".local" / "state"
    return base / FOLDER_NAME


def reading_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where `ls` looks: the folder above first, then the other places a supervisor of this user may have
    used (a systemd user service has XDG_RUNTIME_DIR, a `su` shell may not), each once."""
    env = os.environ if env is None else env
    first = registry_dir(env)
    if env.get(REGISTRY_ENV):
        return [first]
    state_home = env.get("XDG_STATE_HOME")
    candidates = [first, Path(f"/run/user/{os.getuid()}") / FOLDER_NAME,
                  (Path(state_home) if state_home and os.path.isabs(state_home)
                   else Path.home() / ".local" / "state") / FOLDER_NAME]
    found: list[Path] = []
    for path in candidates:
        if path not in found and (path == first or path.is_dir()):
            found.append(path)
    return found


def entry_file_name(workspace: Path, state_dir: Path) -> str:
    """`<folder name>-<hash of the state folder>.json`: readable, and one per state folder."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", workspace.name).strip("-.")[:40] or "root"
    digest = hashlib.sha256(str(state_dir).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{slug}-{digest}{ENTRY_SUFFIX}"


# ---------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class Entry:
    """One supervisor as it registered itself."""

    path: Path
    pid: int
    workspace: str
    state_dir: str
    name: str
    started_at: str
    """ISO-8601 UTC, as the supervisor wrote it."""
    start_ticks: int | None = None
    """The supervisor's start time in clock ticks since boot: with the pid, its identity."""
    boot_id: str = ""
    command: tuple[str, ...] = ()
    metrics_port: int | None = None
    metrics_textfile: str | None = None
    ended_at: str | None = None
    """ISO-8601 UTC when the supervisor exited (and marked its entry); None while it runs, or when it died."""
    exit_code: int | None = None
    """The supervisor's exit code, written with `ended_at`."""

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "pid": self.pid, "start_ticks": self.start_ticks, "boot_id": self.boot_id,
                "workspace": self.workspace, "state_dir": self.state_dir, "name": self.name,
                "started_at": self.started_at, "command": list(self.command),
                "metrics_port": self.metrics_port, "metrics_textfile": self.metrics_textfile,
                "ended_at": self.ended_at, "exit_code": self.exit_code}

    def _still_ours(self) -> bool:
        """The file still holds this supervisor's entry (a successor for the same folder may have replaced it)."""
        try:
            current = parse_entry(self.path, self.path.read_bytes())
        except (OSError, ValueError):
            return False
        return current.pid == self.pid and current.start_ticks == self.start_ticks and not current.ended

    def remove(self) -> None:
        """Remove this entry if it is still ours."""
        if self._still_ours():
            try:
                self.path.unlink()
            except OSError:
                pass

    def mark_ended(self, exit_code: int, at: str | None = None) -> Entry | None:
        """Rewrite this entry (atomically, if it is still ours) as ended now with `exit_code`: the loop stays
        listed until `ls --prune`. The entry as written, or None when it could not be (not ours any more,
        or the folder refuses: then `ls` shows it as stale, which is true enough)."""
        if not self._still_ours():
            return None
        ended = dataclasses.replace(self, ended_at=at or store.iso_utc(), exit_code=exit_code)
        try:
            store.atomic_write_bytes(self.path, (json.dumps(ended.to_dict(), indent=1) + "\n").encode(),
                                     mode=0o600)
        except OSError:
            return None
        return ended


@dataclass(frozen=True)
class Listing:
    """What the registry holds: the entries that could be read, and one line per problem."""

    folder: Path
    missing: bool = False
    """The folder does not exist: no supervisor has registered there yet (not a problem by itself)."""
    entries: tuple[Entry, ...] = ()
    garbage: tuple[Path, ...] = ()
    """Files named like entries that are not one (unreadable, not JSON, missing fields)."""
    problems: tuple[str, ...] = field(default=())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_entry(path: Path, raw: bytes) -> Entry:
    """An entry from its file's bytes; ValueError (naming the field) when it is not one."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({one_line(exc, 80)})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    pid = _int(data.get("pid"))
    if pid is None or pid <= 0:
        raise ValueError("no valid pid")
    workspace, state_dir = _str(data.get("workspace")), _str(data.get("state_dir"))
    if not workspace or not state_dir:
        raise ValueError("no workspace or state_dir")
    command = data.get("command")
    port = _int(data.get("metrics_port"))
    return Entry(
        path=path, pid=pid, workspace=workspace, state_dir=state_dir,
        name=_str(data.get("name")) or Path(workspace).name or workspace,
        started_at=_str(data.get("started_at")) or "",
        start_ticks=_int(data.get("start_ticks")),
        boot_id=_str(data.get("boot_id")) or "",
        command=tuple(c for c in command if isinstance(c, str)) if isinstance(command, list) else (),
        metrics_port=port if port is not None and 0 <= port <= 65535 else None,
        metrics_textfile=_str(data.get("metrics_textfile")),
        ended_at=_str(data.get("ended_at")) or None,
        exit_code=_int(data.get("exit_code")) if data.get("ended_at") else None,
    )


def is_alive(entry: Entry, start_ticks_now: int | None, boot_now: str) -> bool:
    """Whether the entry's supervisor still runs: its pid names the process that registered.

    `start_ticks_now` is the start time of whatever process holds the pid now (None: no such process).
    An entry from another boot is stale whatever its pid names now; an ended one is not alive whatever
    runs under its pid now.
    """
    if entry.ended or start_ticks_now is None:
        return False
    if entry.boot_id and boot_now and entry.boot_id != boot_now:
        return False
    return entry.start_ticks is None or entry.start_ticks == start_ticks_now


# ---------------------------------------------------------------------------------------------
# /proc, read through `process/procfs.py` (not `process/linux.py`, which pulls in psutil and structlog, a
# tenth of a second): `ls` must start fast, and these two reads are all it needs.


start_ticks = procfs.read_start_ticks
current_boot_id = procfs.boot_id


# ---------------------------------------------------------------------------------------------
# The supervisor's side


class RegistryError(Exception):
    """The entry could not be written; the supervisor goes on without it (ls will not list it)."""


def register(*, workspace: Path, state_dir: Path, name: str, command: Sequence[str],
             metrics_port: int | None = None, metrics_textfile: Path | None = None,
             folder: Path | None = None) -> Entry:
    """Write this process's entry (atomically); RegistryError when the folder cannot take it."""
    folder = registry_dir() if folder is None else folder
    pid = os.getpid()
    entry = Entry(path=folder / entry_file_name(workspace, state_dir), pid=pid, workspace=str(workspace),
                  state_dir=str(state_dir), name=name, started_at=store.iso_utc(), start_ticks=start_ticks(pid),
                  boot_id=current_boot_id(), command=tuple(command), metrics_port=metrics_port,
                  metrics_textfile=str(metrics_textfile) if metrics_textfile is not None else None)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        store.atomic_write_bytes(entry.path, (json.dumps(entry.to_dict(), indent=1) + "\n").encode(), mode=0o600)
    except OSError as exc:
        raise RegistryError(f"cannot write {entry.path}: {exc.strerror or exc}") from None
    return entry


# ---------------------------------------------------------------------------------------------
# The reader's side


def read_registry(folder: Path | None = None) -> Listing:
    """Every entry in the folder. A missing, unreadable or cluttered folder is a problem line, never an error."""
    folder = registry_dir() if folder is None else folder
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return Listing(folder, missing=True,
                       problems=(f"{folder} does not exist (no supervisor has registered here yet)",))
    except NotADirectoryError:
        return Listing(folder, problems=(f"{folder} is not a folder; set {REGISTRY_ENV} to use another one",))
    except OSError as exc:
        return Listing(folder, problems=(f"cannot read {folder}: {exc.strerror or exc}",))
    entries: list[Entry] = []
    garbage: list[Path] = []
    reasons: list[str] = []
    for file_name in names:
        if file_name.startswith(".") or not file_name.endswith(ENTRY_SUFFIX):
            continue  # temp files of an atomic write in progress, and whatever else lives there
        path = folder / file_name
        try:
            with open(path, "rb") as fh:
                raw = fh.read(ENTRY_MAX_BYTES + 1)
            if len(raw) > ENTRY_MAX_BYTES:
                raise ValueError("too big to be an entry")
            entries.append(parse_entry(path, raw))
        except IsADirectoryError:
            garbage.append(path)
            reasons.append(f"{file_name}: a folder")
        except OSError as exc:
            garbage.append(path)
            reasons.append(f"{file_name}: {exc.strerror or exc}")
        except ValueError as exc:
            garbage.append(path)
            reasons.append(f"{file_name}: {exc}")
    problems: tuple[str, ...] = ()
    if not os.access(folder, os.W_OK):
        problems += (f"{folder} is read-only: supervisors cannot register there, new loops will not be listed",)
    if garbage:
        shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
        problems += (f"{len(garbage)} file(s) in {folder} are not registry entries, skipped ({shown})",)
    return Listing(folder, False, tuple(entries), tuple(garbage), problems)


def _runs_now(path: Path, boot: str) -> bool:
    """The file holds the entry of a running supervisor (one that registered since the caller read it)."""
    try:
        with open(path, "rb") as fh:
            entry = parse_entry(path, fh.read(ENTRY_MAX_BYTES + 1))
    except (OSError, ValueError):
        return False
    return is_alive(entry, start_ticks(entry.pid), boot)


def prune(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Remove these entry files (ended and stale entries, garbage): the paths gone now, and one line per
    failure. A file that holds a running supervisor's entry by now (one started again for the same folder
    since the caller read it) is left alone."""
    gone: list[Path] = []
    failures: list[str] = []
    boot = current_boot_id()
    for path in paths:
        if _runs_now(path, boot):
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # someone else pruned it first
        except OSError as exc:
            failures.append(f"cannot remove {path}: {exc.strerror or exc}")
            continue
        gone.append(path)
    return gone, failures


# ---------------------------------------------------------------------------------------------
# Wiring for the supervisor


def loop_name(workspace: Path, name: str | None) -> str:
    """`--name`, or the workspace's folder name: the short name in `ls`, in metrics and in notices."""
    return name or workspace.name or str(workspace)


def forget_state_dir(state_dir: Path, dirs: Sequence[Path] | None = None) -> list[Path]:
    """Remove the entries (ended or stale: never a running one's) that name this state folder: `forget`
    removed the folder, so nothing is left to list. The paths removed."""
    wanted = os.path.realpath(state_dir)
    doomed = [entry.path for folder in (reading_dirs() if dirs is None else dirs)
              for entry in read_registry(folder).entries if os.path.realpath(entry.state_dir) == wanted]
    return prune(doomed)[0]


def register_supervisor(settings: Any) -> Entry | None:
    """Register the running supervisor (call it holding the state folder's lock); None, with one warning in
    the log, when the registry cannot take the entry: supervision goes on, `ls` just will not list it."""
    try:
        return register(workspace=settings.workspace, state_dir=settings.state_dir,
                        name=loop_name(settings.workspace, settings.name), command=settings.command,
                        metrics_port=settings.metrics_port, metrics_textfile=settings.metrics_textfile)
    except RegistryError as exc:
        import structlog

        structlog.get_logger("ralph_supervisor").warning("registry_unwritable", detail=str(exc))
        return None

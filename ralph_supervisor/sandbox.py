"""The loop in a box of its own (`--sandbox bwrap`): it sees its workspace and nothing it should not.

An agent loop runs with the user's whole account: `~/.ssh`, `~/.aws`, other repositories, the supervisor's
own records, every socket of the session. Under bubblewrap the loop gets the workspace read-write, the system
read-only, a private `/tmp`, a home folder holding only what is named (the agents' own folders, each a folder
of the run's own with the user's settings read-only in it: agent_folders.py; `--sandbox-ro` and
`--sandbox-rw`), no `/run` (the session bus, the docker socket) and an environment that is an allow-list.
The supervisor's state folder is never inside. The shims are bound read-only, with their notice and pending
folders writable, at the same path as outside (so the refusal during a stop, a file in the read-only part,
cannot be deleted from inside, and the notice channel, a FIFO there, can be written but not removed). The box has a PID namespace of its own (`--unshare-pid`: its `/proc` shows
its own processes only, never the environment of the user's others): the tree, the pidfds, pause and stop
see its processes from outside as any others, and a shim's notice, which names the box's PID, is mapped to
ours through `NSpid` (process/namespace.py).

bubblewrap runs with `--die-with-parent` (the box dies with its bwrap), `--new-session` (no terminal to
push input into) and `--cap-drop ALL`: a supervisor run as root would otherwise give the box every capability,
and root in the box could remount its binds writable or read the notice channel. Before the loop starts, the same box runs `true` once: a path it cannot bind, a kernel
without user namespaces for an unprivileged bwrap, is one line naming why, and nothing is spawned.

    box = Box.plan(settings, env, shims=calls.shims)      # pure: what goes in
    problem = box.problem() or box.probe()                # None, or the one line to print
    argv, env = box.wrap(list(settings.command)), box.env
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph_supervisor.files import child_log

if TYPE_CHECKING:
    from ralph_supervisor.agent_folders import AgentFolders

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
"""Read-only in the box when they exist (a symlink, as merged /usr makes /bin, stays a symlink)."""

ENV_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ",
                       "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "SHELL", "RALPH_SUPERVISE"})
"""What the box's environment keeps of the loop's, besides LC_*, the agents' own and what is named."""
ENV_PREFIXES = ("LC_",)
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Bind:
    path: Path
    """Where it is in the box."""
    writable: bool
    what: str
    """Who asked for it (the flag, an agent's name): said when it cannot be bound."""
    source: Path | None = None
    """What is shown there, when not the same path outside (an agent's folder of the run's own)."""
    empty: bool = False
    """A new empty folder of the box's own (tmpfs) instead: writable inside only, gone with the box."""


def keep_variable(name: str, extra: Iterable[str], agent_prefixes: Iterable[str]) -> bool:
    """Is this variable part of the box's environment? Named ones (`NAME`, or `PREFIX_*`) are. Pure."""
    if name in ENV_NAMES or name.startswith(ENV_PREFIXES) or name.startswith(tuple(agent_prefixes)):
        return True
    for wanted in extra:
        if wanted.endswith("*") and name.startswith(wanted[:-1]) or name == wanted:
            return True
    return False


def box_environment(env: Mapping[str, str], *, extra: Iterable[str] = (), agent_prefixes: Iterable[str] = (),
                    keep: Iterable[str] = ()) -> dict[str, str]:
    """The allow-listed environment (`keep`: names the supervisor needs, its tree marker). Pure."""
    extra, prefixes, keep = tuple(extra), tuple(agent_prefixes), frozenset(keep)
    out = {k: v for k, v in env.items() if k in keep or keep_variable(k, extra, prefixes)}
    out["TMPDIR"] = "/tmp"
    return out


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _for_binary(found: Path, system: Sequence[Path]) -> list[Path]:
    """The folders an executable outside the system needs: the folder it was found in (a Node version
    manager's `bin`, with its `node`) and the folder of what it resolves to (the npm package, a native
    build under `~/.local/share`). Pure but for realpath."""
    folders: list[Path] = []
    for candidate in dict.fromkeys((found, Path(os.path.realpath(found)))):
        if not any(_inside(candidate, s) for s in system):
            folders.append(candidate.parent)
    return folders


@dataclass(frozen=True)
class Box:
    """Everything the box holds, decided before anything runs."""

    bwrap: str | None
    workspace: Path
    state_dir: Path
    home: Path
    binds: tuple[Bind, ...]
    network: bool
    env: dict[str, str] = field(default_factory=dict)
    shims: Path | None = None
    shim_writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    """Folders under a bound one that the box must not see (the state folder inside the workspace): empty."""
    folders: AgentFolders | None = None
    """The agents' folders (agent_folders.py): what `probe` makes before the box is tried."""

    @classmethod
    def plan(cls, *, workspace: Path, state_dir: Path, env: Mapping[str, str], ro: Sequence[Path] = (),
             rw: Sequence[Path] = (), network: bool = True, extra_env: Sequence[str] = (),
             keep_env: Iterable[str] = (), agents: Sequence[str] = (), command: Sequence[str] = (),
             shims: Path | None = None, shim_writable: Sequence[Path] = (), bwrap: str | None = None,
             git: Sequence[Bind] = (), run_dir: Path | None = None) -> Box:
        """The box of a loop: the adapters of `agents` (process names) name their folders and variables;
        `run_dir` (the run's private folder) holds the agents' folders of the run's own."""
        from ralph_supervisor.agent_folders import AgentFolders
        from ralph_supervisor.agents import ADAPTERS

        home = Path(env.get("HOME") or os.path.expanduser("~"))
        adapters = [a for a in ADAPTERS.values() if any(n in a.commands for n in agents)]
        prefixes = [prefix for adapter in adapters for prefix in adapter.sandbox_env]
        folders = AgentFolders.plan(adapters, home=home, env=env, run_dir=run_dir)
        binds: list[Bind] = list(folders.binds)
        system = [Path(p) for p in SYSTEM]
        search = ":".join(p for p in env.get("PATH", "").split(":") if p and not (shims and p.startswith(str(shims))))
        for name in dict.fromkeys([*(command[:1]), *agents]):
            found = shutil.which(name, path=search) if "/" not in name else name
            if found:
                for folder in _for_binary(Path(os.path.abspath(found)), system):
                    if folder not in (home, Path("/")):
                        binds.append(Bind(folder, False, f"the executable {name}"))
        if command and os.path.basename(command[0]).startswith("ralph") and (home / ".ralph").is_dir():
            binds.append(Bind(home / ".ralph", False, "Ralph's install"))  # ~/.local/bin/ralph runs ~/.ralph/*.sh
        binds += git
        binds += [Bind(Path(os.path.abspath(p)), False, "--sandbox-ro") for p in ro]
        binds += [Bind(Path(os.path.abspath(p)), True, "--sandbox-rw") for p in rw]
        workspace, state = Path(workspace), Path(state_dir)
        hidden = tuple(b for b in (state,) if _inside(b, workspace))
        boxed_env = box_environment(env, extra=extra_env, agent_prefixes=prefixes, keep=keep_env) | folders.env
        return cls(bwrap=bwrap if bwrap is not None else shutil.which("bwrap"), workspace=workspace,
                   state_dir=state, home=home, binds=tuple(binds), network=network, env=boxed_env,
                   shims=shims, shim_writable=tuple(shim_writable), hidden=hidden, folders=folders)

    def problem(self) -> str | None:
        """Why this box cannot be made (one line), before anything runs; None when it can. Reads the disk."""
        if self.bwrap is None:
            return "--sandbox bwrap: bubblewrap (bwrap) is not installed or not on PATH (Debian: apt install bubblewrap)"
        state = Path(os.path.realpath(self.state_dir))
        for bind in (b for b in self.binds if b.what.startswith("--sandbox")):  # the paths the user named
            if not os.path.lexists(bind.path):
                return f"{bind.what}: {bind.path} does not exist"
            if _inside(state, Path(os.path.realpath(bind.path))):
                return (f"{bind.what}: {bind.path} holds the state folder {self.state_dir}, which is never "
                        "inside the box")
        return None

    def arguments(self) -> list[str]:
        """bubblewrap's options for this box, in mount order (a later mount covers an earlier one). Pure."""
        args = ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network:
            args.append("--unshare-net")
        for entry in SYSTEM:
            if os.path.islink(entry):
                args += ["--symlink", os.readlink(entry), entry]
            elif os.path.isdir(entry):
                args += ["--ro-bind", entry, entry]
        resolv = os.path.realpath("/etc/resolv.conf")
        if not any(_inside(Path(resolv), Path(s)) for s in SYSTEM) and os.path.exists(resolv):
            args += ["--ro-bind", resolv, resolv]  # systemd-resolved's stub in /run: name lookups still work
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", str(self.home)]
        state = Path(os.path.realpath(self.state_dir))
        for bind in sorted(self.binds, key=lambda b: len(b.path.parts)):  # parents before what is inside them
            if bind.empty:
                args += ["--tmpfs", str(bind.path)] + ([] if bind.writable else ["--remount-ro", str(bind.path)])
                continue
            source = bind.source or bind.path
            if _inside(state, Path(os.path.realpath(source))):
                continue  # an agent's folder that would hold the state folder: left out (problem() says so for flags)
            args += ["--bind" if bind.writable else "--ro-bind", str(source), str(bind.path)]
        args += ["--bind", str(self.workspace), str(self.workspace)]
        for folder in self.hidden:
            args += ["--tmpfs", str(folder)]
        if self.shims is not None:
            args += ["--ro-bind", str(self.shims), str(self.shims)]
            for folder in self.shim_writable:
                args += ["--bind", str(folder), str(folder)]
        args += ["--chdir", str(self.workspace)]
        return args

    def wrap(self, command: Sequence[str]) -> list[str]:
        """The argv that runs `command` in the box. Pure."""
        assert self.bwrap is not None
        return [self.bwrap, *self.arguments(), "--", *command]

    def probe(self) -> str | None:
        """Make what the box holds of the run's own (the agents' folders), then run `true` in this very box
        once: None when it works, else the reason in one line."""
        from ralph_supervisor.process.helpers import HELPERS  # a helper of ours, never the loop's tree

        made = self.folders.prepare() if self.folders is not None else None
        if made is not None:
            return made
        try:
            proc = HELPERS.popen(self.wrap(["true"]), env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(self.workspace))
        except OSError as exc:
            return f"--sandbox bwrap: bubblewrap cannot run ({exc.strerror or exc})"
        code, last = HELPERS.wait_briefly(proc, PROBE_TIMEOUT)
        if code is None:
            return f"--sandbox bwrap: bubblewrap did not start the box in {PROBE_TIMEOUT:.0f} s"
        if code == 0:
            return None
        reason = last or f"exit code {code}"
        hint = ""
        if "namespace" in reason.lower() or "operation not permitted" in reason.lower():
            hint = (" (no user namespaces for this user: enable them, kernel.unprivileged_userns_clone=1, or "
                    "install bwrap setuid)")
        return f"--sandbox bwrap: the box cannot be made: {reason}{hint}"


def box_for(settings: Any, env: Mapping[str, str], shims: Any, marker: str, run_dir: Path | None = None) -> Box | None:
    """The box `settings` ask for (None for `--sandbox none`): `env` is the loop's environment (shims first
    on PATH), `shims` the ShimDir or None, `marker` the name of the tree's marker variable (kept), `run_dir`
    the run's private folder (the agents' folders of the run's own are there)."""
    if settings.sandbox != "bwrap":
        return None
    from ralph_supervisor.worktree import git_binds

    return Box.plan(workspace=settings.workspace, state_dir=settings.state_dir, env=env, ro=settings.sandbox_ro,
                    git=git_binds(settings.workspace),
                    rw=settings.sandbox_rw, network=settings.sandbox_network == "on",
                    extra_env=settings.sandbox_env, keep_env=(marker,), agents=settings.iteration_process,
                    command=settings.command, shims=shims.root if shims is not None else None,
                    shim_writable=(shims.calls, shims.pending) if shims is not None else (), run_dir=run_dir)


REFUSED = re.compile(rb"Read-only file system")
"""What a write the box refused says (EROFS, in the C library's words, as shells and tools print it)."""
LOG_TAIL = 8 << 20


def refused_writes(text: bytes) -> int:
    """How many lines of the loop's output say a write was refused by the box's read-only binds. Pure."""
    return sum(1 for line in text.splitlines() if REFUSED.search(line))


def refused_in_log(state_dir: Path) -> int | None:
    """`refused_writes` over the end of `child.log` (its last 8 MB); None when there is no log to read."""
    path = child_log.path(Path(state_dir))
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - LOG_TAIL))
            return refused_writes(fh.read())
    except OSError:
        return None


VERIFY_ENV = frozenset({"VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTEST_ADDOPTS", "CARGO_TARGET_DIR",
                        "CI", "RALPH_SUPERVISE_VERIFYING"})
"""What the verify sets for its command (verify/runner.py): kept in its box."""


@dataclass(frozen=True)
class VerifyBox:
    """What a verify's box takes from the settings: the same kind of box as the loop's, its network off
    unless `--verify-network on`."""

    network: bool
    ro: tuple[Path, ...] = ()
    extra_env: tuple[str, ...] = ()
    bwrap: str | None = None

    @classmethod
    def of(cls, settings: Any) -> VerifyBox | None:
        if getattr(settings, "sandbox", "none") != "bwrap":
            return None
        return cls(network=settings.verify_network == "on", ro=(*settings.sandbox_ro, *settings.sandbox_rw),
                   extra_env=tuple(settings.sandbox_env), bwrap=shutil.which("bwrap"))

    def box(self, *, tree: Path, state_dir: Path, workspace: Path, env: Mapping[str, str], command: str,
            writable: Sequence[Path] = (), borrowed: Sequence[Path] = ()) -> Box:
        """The box of one verify: the snapshot's tree read-write (its cwd), `writable` files and folders of the
        verify's own (the JUnit file, the build cache), the borrowed dependencies and the interpreter of a
        borrowed virtual environment read-only, the command's executable; no home but what is named."""
        import shlex

        binds = [Bind(Path(p), True, "the verify") for p in writable]
        system = [Path(p) for p in SYSTEM]
        for source in borrowed:
            binds.append(Bind(source, False, "a borrowed dependency"))
            cfg = source / "pyvenv.cfg"
            try:
                home = next((line.partition("=")[2].strip() for line in cfg.read_text().splitlines()
                             if line.partition("=")[0].strip() == "home"), "")
            except OSError:
                home = ""
            if home and os.path.isdir(home) and not any(_inside(Path(home), s) for s in system):
                base = Path(os.path.realpath(home))
                binds.append(Bind(base.parent if base.name == "bin" else base, False, "a borrowed interpreter"))
        try:
            first = shlex.split(command)[:1]
        except ValueError:
            first = []
        search = env.get("PATH", "")
        for name in first:
            found = shutil.which(name, path=search) if "/" not in name else name
            if found and not _inside(Path(os.path.abspath(found)), tree):
                binds += [Bind(f, False, "the verify command") for f in _for_binary(Path(os.path.abspath(found)), system)]
        binds += [Bind(Path(os.path.abspath(p)), False, "--sandbox-ro") for p in self.ro]
        keep = tuple(VERIFY_ENV)
        return Box(bwrap=self.bwrap, workspace=tree, state_dir=state_dir,
                   home=Path(env.get("HOME") or os.path.expanduser("~")), binds=tuple(binds), network=self.network,
                   env=box_environment(env, extra=self.extra_env, keep=keep))


__all__ = ["Bind", "Box", "VerifyBox", "box_environment", "box_for", "keep_variable", "refused_in_log",
           "refused_writes"]

"""The agents' folders in a `--sandbox` box: their settings read-only, what they write kept with the run.

An agent that could write its CLI's settings from inside the box could plant a hook, an MCP server, a
`.env` or a permission that runs outside the box the next time the user starts that CLI. Binding the
CLI's folder read-write with its settings read-only on top is not enough: a settings file that does not
exist yet (`~/.claude/settings.local.json`, `~/.codex/hooks.json`) could still be created. So in the box
each agent's folder is a folder of the run's own (in the supervisor's private run folder, never the
workspace or the state folder), and only what the adapter names of the user's folder is bound into it:
the settings read-only, the sessions and the login read-write. A file the box creates there stays in the
run's folder, which the user's CLI never reads, and is gone when the run ends. What a CLI rewrites by
rename (Claude's configuration) is a copy in the run's folder, made at the first start (agents/base.py's
`RUN`, `RO`, `RW`, `COPY`).

    folders = AgentFolders.plan(adapters, home=home, env=env, run_dir=run_dir)   # reads the disk
    folders.binds, folders.env        # for the box: parents first; CLAUDE_CONFIG_DIR and the like
    folders.prepare()                 # before a start: None, or the one line saying what could not be made
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ralph_supervisor.agents.base import COPY, RO, RUN, RW

if TYPE_CHECKING:
    from ralph_supervisor.agents.base import Adapter
    from ralph_supervisor.sandbox import Bind

RUN_FOLDER = "agents"
"""Where the run's own agent folders are, in the run folder (`agents/<the path in the box>`)."""


class Place(NamedTuple):
    """One entry of an adapter's `sandbox_home`, placed."""

    path: Path
    """Where it is in the box."""
    how: str
    source: Path
    """The user's path it shows (for a `COPY`, the file copied)."""
    folder: bool = False
    """Written `name/`: a folder (made where missing)."""


def places(adapter: Adapter, home: Path, env: Mapping[str, str]) -> list[Place]:
    """Each of the adapter's `sandbox_home` entries placed, its folder moved where its variable says
    (`CLAUDE_CONFIG_DIR=/x`: `.claude/settings.json` is `/x/settings.json`). Pure.

    >>> from ralph_supervisor.agents import ADAPTERS
    >>> [str(p.path) for p in places(ADAPTERS["claude"], Path("/h"), {}) if p.how == "run"]
    ['/h/.claude']
    """
    variable, folder = adapter.sandbox_folder
    moved = env.get(variable, "") if variable else ""
    base = Path(moved) if moved and os.path.isabs(moved) else None
    found = []
    for entry, how in adapter.sandbox_home:
        relative = entry.rstrip("/")
        inside = folder == "" or relative == folder or relative.startswith(folder + "/")
        if base is not None and inside:
            place = source = Path(base, relative[len(folder):].lstrip("/"))
        else:
            place, source = home / relative, home / adapter.sandbox_copied_from.get(relative, relative)
        found.append(Place(place, how, source, entry.endswith("/")))
    return found


def folder_variable(adapter: Adapter, home: Path, env: Mapping[str, str]) -> tuple[str, Path] | None:
    """The variable naming the adapter's folder and where that folder is (the user's value, else its default
    under home), or None. Pure."""
    variable, folder = adapter.sandbox_folder
    if not variable:
        return None
    moved = env.get(variable, "")
    return variable, Path(moved) if moved and os.path.isabs(moved) else home / folder


@dataclass(frozen=True)
class AgentFolders:
    """The agents' folders of one box, decided before anything runs; `prepare` makes what they need."""

    binds: tuple[Bind, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    run_folders: tuple[Path, ...] = ()
    """The run's own folders (each bound in place of an agent's folder), made by `prepare`."""
    copies: tuple[tuple[Path, Path], ...] = ()
    """(the user's file, its copy in a run's folder): copied by `prepare` when the copy is not there yet."""
    shared: tuple[Path, ...] = ()
    """The user's folders bound read-write that `prepare` makes where they are missing (outside the box)."""

    @classmethod
    def plan(cls, adapters: Iterable[Adapter], *, home: Path, env: Mapping[str, str],
             run_dir: Path | None) -> AgentFolders:
        """The folders of `adapters` for a box whose run folder is `run_dir` (None: the run's folders are
        empty tmpfs mounts of the box, and nothing is copied). Reads the disk (what exists)."""
        from ralph_supervisor.sandbox import Bind

        binds: list[Bind] = []
        variables: dict[str, Path] = {}
        runs: dict[Path, tuple[Path, Path | None, str]] = {}  # place: (the user's folder, the run's, who)
        copies: list[tuple[Path, Path]] = []
        shared: list[Path] = []
        for adapter in adapters:
            what = f"the {adapter.name} adapter"
            named = folder_variable(adapter, home, env)
            if named is not None:
                variables[named[0]] = named[1]
            for place, how, source, folder in places(adapter, home, env):
                if how == RUN:
                    runs[place] = (source, run_dir / RUN_FOLDER / str(place).lstrip("/") if run_dir else None, what)
                elif how == COPY:
                    into = runs.get(place.parent, (None, None, ""))[1]
                    if into is not None and source.is_file():
                        copies.append((source, into / place.name))
                elif how == RO and source.name == "*":
                    binds += [Bind(place.parent / path.name, False, what, source=path)
                              for path in _entries(source.parent) if os.path.exists(path)]
                elif how == RO and os.path.exists(source):
                    binds.append(Bind(place, False, what, source=source))
                elif how == RW and (os.path.exists(source) or (folder and source.parent.is_dir())):
                    binds.append(Bind(place, True, what, source=source))
                    if not os.path.exists(source):
                        shared.append(source)
        # A run's folder where the user has that folder, or where something goes into it; elsewhere the box's
        # home holds nothing of it (what the CLI writes there is in the box's own tmpfs, gone with the box).
        used = {b.path.parent for b in binds} | {copy.parent for _, copy in copies}
        kept = {place: (mine, what) for place, (source, mine, what) in runs.items()
                if os.path.isdir(source) or place in used or mine in used}
        binds += [Bind(place, True, what, source=mine, empty=mine is None) for place, (mine, what) in kept.items()]
        # Named where the folder is in the box (Claude keeps its configuration there, not in ~/.claude.json);
        # elsewhere not: Codex refuses a CODEX_HOME that does not exist.
        named = {variable: str(path) for variable, path in variables.items()
                 if any(place == path or path in place.parents for place in kept)}
        return cls(binds=tuple(binds), env=named,
                   run_folders=tuple(mine for mine, _ in kept.values() if mine is not None),
                   copies=tuple(copies), shared=tuple(shared))

    def prepare(self) -> str | None:
        """Make the run's folders, the copies (once a run: Claude's own updates to its copy stay for the
        next start) and the missing shared folders. None, or one line naming what could not be made."""
        for path in (*self.run_folders, *self.shared):
            try:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                return f"--sandbox bwrap: cannot make {path}: {exc.strerror or exc}"
        for source, copy in self.copies:
            if os.path.lexists(copy):
                continue
            try:
                shutil.copyfile(source, copy)
                os.chmod(copy, 0o600)
            except OSError as exc:
                return f"--sandbox bwrap: cannot copy {source} into the box: {exc.strerror or exc}"
        return None


def _entries(folder: Path) -> list[Path]:
    """The entries of `folder` but the hidden ones, sorted; [] where it cannot be read."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except OSError:
        return []


__all__ = ["AgentFolders", "Place", "RUN_FOLDER", "folder_variable", "places"]

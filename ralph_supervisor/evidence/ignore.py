"""Which workspace paths are never progress: the pure rules behind the workspace watcher.

Progress is what the agent did to the project. The loop's bookkeeping (`.ralph/`), our own state
folder, git's internals, dependency trees, virtual environments, tool caches and whatever the
project itself gitignores are activity, not progress, so they are ignored here. The rules are a
frozen value built from text (the `.gitignore` files' contents), so they are testable without a
filesystem; `load_ignore_rules` is the small I/O edge that reads those files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec
import structlog

log = structlog.get_logger(__name__)

BUILTIN_IGNORED_NAMES: frozenset[str] = frozenset(
    {
        ".git",  # git internals: commits are read from HEAD and refs directly, never from events
        ".ralph",  # the Ralph loop's own bookkeeping
        ".ralph-supervise",  # the state folder earlier versions kept here (a --state-dir inside: state_prefix)
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".pytest_cache",  # running tests is activity, not progress
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
    }
)
"""A path with any component of these names is ignored, at any depth."""

VENV_MARKER = "pyvenv.cfg"
"""A directory holding this file is a virtual environment, whatever its name."""


def _gitignore(lines: list[str]) -> pathspec.PathSpec:
    # pathspec's own matcher: with hyperscan installed (the error filter's) pathspec would pick its hyperscan
    # backend, whose one scratch space per database raises ScratchInUseError when two threads match at once
    # (the watcher's and the priming thread do)
    return pathspec.GitIgnoreSpec.from_lines(lines, backend="simple")


def _spec(lines: Iterable[str]) -> pathspec.PathSpec | None:
    cleaned = [line.rstrip("\r\n") for line in lines]
    if not any(line.strip() and not line.lstrip().startswith("#") for line in cleaned):
        return None
    try:
        return _gitignore(cleaned)
    except Exception:  # noqa: BLE001 - pathspec raises its own errors and re.error: keep what git would keep
        kept = []
        for line in cleaned:
            try:
                _gitignore([line])
            except Exception:  # noqa: BLE001
                log.warning("ignore_pattern_invalid", pattern=line[:200])
                continue
            kept.append(line)
        return _gitignore(kept) if kept else None


@dataclass(frozen=True)
class IgnoreRules:
    """Pure decision: is a workspace-relative POSIX path (file or directory) ignored?

    `gitignores` maps a directory (relative, `""` for the root) to the spec of the `.gitignore` in it;
    `exclude` (`.git/info/exclude`) comes first. Deeper files win over shallower ones, and within one file
    the last matching pattern wins (negations included), as in git. `extra` holds the user's
    `--ignore` patterns (gitignore syntax, relative to the root); they always win.
    """

    gitignores: Mapping[str, pathspec.PathSpec] = field(default_factory=dict)
    extra: pathspec.PathSpec | None = None
    exclude: pathspec.PathSpec | None = None
    """`.git/info/exclude`: below every `.gitignore` in precedence."""
    prefixes: tuple[str, ...] = ()
    """Relative directories ignored with everything below them (the state folder, found venvs)."""
    names: frozenset[str] = BUILTIN_IGNORED_NAMES

    def with_prefix(self, prefix: str) -> IgnoreRules:
        prefix = prefix.strip("/")
        if not prefix or prefix in self.prefixes:
            return self
        return IgnoreRules(self.gitignores, self.extra, self.exclude, (*self.prefixes, prefix), self.names)

    def with_gitignore(self, directory: str, text: str | None) -> IgnoreRules:
        """The rules after the `.gitignore` in `directory` changed to `text` (None: removed)."""
        specs = dict(self.gitignores)
        spec = _spec(text.splitlines()) if text is not None else None
        if spec is None:
            specs.pop(directory, None)
        else:
            specs[directory] = spec
        return IgnoreRules(specs, self.extra, self.exclude, self.prefixes, self.names)

    def is_ignored(self, rel: str, *, is_dir: bool) -> bool:
        """True when `rel` or any directory above it is ignored."""
        rel = rel.strip("/")
        if not rel:
            return False
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            if self._ignored_here(parts, i, is_dir=is_dir or i < len(parts)):
                return True
        return False

    def is_ignored_entry(self, parent: str, name: str, *, is_dir: bool) -> bool:
        """`is_ignored` for a direct child of a directory already known not to be ignored (cheaper)."""
        parts = (parent.split("/") if parent else []) + [name]
        return self._ignored_here(parts, len(parts), is_dir=is_dir)

    def _ignored_here(self, parts: Sequence[str], n: int, *, is_dir: bool) -> bool:
        """Is the path made of the first n parts ignored by itself (its parents not considered)?"""
        if parts[n - 1] in self.names:
            return True
        rel = "/".join(parts[:n])
        if rel in self.prefixes:
            return True
        probe = rel + "/" if is_dir else rel
        if self.extra is not None and self.extra.match_file(probe):
            return True
        verdict: bool | None = None
        if self.exclude is not None:
            verdict = self.exclude.check_file(probe).include
        for depth in range(n):  # the root's file first, the deepest last: the deepest decisive one wins
            directory = "/".join(parts[:depth])
            spec = self.gitignores.get(directory)
            if spec is None:
                continue
            sub = "/".join(parts[depth:n]) + ("/" if is_dir else "")
            result = spec.check_file(sub).include
            if result is not None:
                verdict = result
        return bool(verdict)


def relative_inside(root: Path, path: Path) -> str | None:
    """`path` relative to `root` as POSIX text, or None when it lies outside."""
    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return None
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return "" if rel == "." else None
    return Path(rel).as_posix()


def read_text(path: Path) -> str | None:
    """A small text file's content, or None when it cannot be read (never raises)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def load_ignore_rules(root: Path, *, state_dir: Path | None, extra: Sequence[str] = ()) -> IgnoreRules:
    """The rules for a workspace: the root's `.gitignore` and `.git/info/exclude`, the user's patterns
    and the state folder. Nested `.gitignore` files are added by the directory walk as it finds them
    (`IgnoreRules.with_gitignore`), so this never walks the tree itself.
    """
    exclude_text = read_text(root / ".git" / "info" / "exclude")
    exclude = _spec(exclude_text.splitlines()) if exclude_text is not None else None
    top = read_text(root / ".gitignore")
    specs: dict[str, pathspec.PathSpec] = {}
    spec = _spec(top.splitlines()) if top is not None else None
    if spec is not None:
        specs[""] = spec
    extra_spec: pathspec.PathSpec | None = None
    try:
        extra_spec = _spec(extra)
    except Exception as exc:  # a bad user pattern must not crash the supervisor
        log.warning("ignore_pattern_invalid", patterns=list(extra), error=str(exc))
    rules = IgnoreRules(specs, extra_spec, exclude)
    if state_dir is not None:
        rel = relative_inside(root, state_dir)
        if rel:
            rules = rules.with_prefix(rel)
    return rules

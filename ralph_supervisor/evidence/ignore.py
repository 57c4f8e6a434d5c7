"""Which workspace paths are never progress: the pure rules behind the workspace watcher and the snapshots.

Progress is what the agent did to the project. The loop's bookkeeping (`.ralph/`), our own state
folder, git's internals, dependency trees, virtual environments, tool caches and whatever the
project itself gitignores are activity, not progress, so they are ignored here. The rules are a
frozen value built from text (the `.gitignore` files' contents), so they are testable without a
filesystem; `load_ignore_rules` is the small I/O edge that reads those files.

This is the one place that says what is ignored: the snapshot store's git reads the same rules, written as
gitignore lines (`IgnoreRules.as_gitignore`), so a rule added here holds for both.

    rules = load_ignore_rules(root, state_dir=state_dir, extra=["*.tmp"])
    rules.is_ignored("build/out.o", is_dir=False)   # the watcher
    rules.as_gitignore()                             # the snapshot store's info/exclude
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec
import structlog

log = structlog.get_logger(__name__)

BOOKKEEPING_NAMES: frozenset[str] = frozenset(
    {
        ".git",  # git internals: commits are read from HEAD and refs directly, never from events
        ".ralph",  # the Ralph loop's own bookkeeping
        ".ralph-supervise",  # the state folder earlier versions kept here (a --state-dir inside: state_prefix)
    }
)
"""Folders that are never the project's files: not progress, and never stored in a snapshot, ignored or not."""

BUILTIN_IGNORED_NAMES: frozenset[str] = BOOKKEEPING_NAMES | frozenset(
    {
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


def _lines(spec: pathspec.PathSpec | None) -> list[str]:
    """The patterns a spec was made of, as written (blank lines left out)."""
    if spec is None:
        return []
    return [p.pattern for p in spec.patterns if isinstance(p.pattern, str) and p.pattern.strip()]


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

    def as_gitignore(self) -> list[str]:
        """These rules as gitignore lines, for a git that must skip what the watcher skips (the snapshot store's
        `info/exclude`). The `.gitignore` files are left out: git reads those itself in the work tree. Pure."""
        lines = ["# written by ralph-supervise: what the workspace watcher ignores"]
        lines += sorted(self.names)
        lines += [f"/{p}/" for p in self.prefixes]
        lines += _lines(self.exclude)
        lines += _lines(self.extra)  # last: the user's --ignore patterns win, as in the watcher
        return lines

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


def ignore_rules(*, gitignore: str | None = None, exclude: str | None = None, extra: Sequence[str] = (),
                 prefixes: Sequence[str] = ()) -> IgnoreRules:
    """The rules from their texts: the root's `.gitignore`, `.git/info/exclude`, the user's `--ignore` patterns,
    and folders ignored with everything below them. Pure (a bad pattern is logged and left out).

    >>> ignore_rules(extra=["*.tmp"], prefixes=["state"]).as_gitignore()[-2:]
    ['/state/', '*.tmp']
    """
    specs: dict[str, pathspec.PathSpec] = {}
    spec = _spec(gitignore.splitlines()) if gitignore is not None else None
    if spec is not None:
        specs[""] = spec
    extra_spec: pathspec.PathSpec | None = None
    try:
        extra_spec = _spec(extra)
    except Exception as exc:  # a bad user pattern must not crash the supervisor
        log.warning("ignore_pattern_invalid", patterns=list(extra), error=str(exc))
    rules = IgnoreRules(specs, extra_spec, _spec(exclude.splitlines()) if exclude is not None else None)
    for prefix in prefixes:
        rules = rules.with_prefix(prefix)
    return rules


def load_ignore_rules(root: Path, *, state_dir: Path | None, extra: Sequence[str] = ()) -> IgnoreRules:
    """The rules for a workspace: the root's `.gitignore` and `.git/info/exclude`, the user's patterns
    and the state folder. Nested `.gitignore` files are added by the directory walk as it finds them
    (`IgnoreRules.with_gitignore`), so this never walks the tree itself.
    """
    inside = relative_inside(root, state_dir) if state_dir is not None else None
    return ignore_rules(gitignore=read_text(root / ".gitignore"), exclude=read_text(root / ".git" / "info" / "exclude"),
                        extra=extra, prefixes=[inside] if inside else [])

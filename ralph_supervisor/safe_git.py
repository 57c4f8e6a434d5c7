"""Git commands on the workspace that run nothing the workspace's repository names.

A repository's config can make git execute programs: `core.fsmonitor` (run by `status` and `diff`),
hooks (`reference-transaction` runs on every ref update), external diff drivers and textconv filters,
and the clean/smudge filters that a `.gitattributes` line names and the config defines. The agent
writes the workspace, so it writes `.git/config` and `.gitattributes` too: every git command the
supervisor runs on the workspace or its repository is built here, with all of those turned off, so the
supervisor never runs the agent's commands (outside a sandbox, with the user's whole account).

    argv = command("git", ["-C", "/ws", "status", "--porcelain"], filters=("lfs",))
    # ['git', '--no-pager', '-c', 'core.fsmonitor=', '-c', 'core.hooksPath=/dev/null', ...,
    #  '-C', '/ws', 'status', '--porcelain']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

HARDENING = (
    "-c", "core.fsmonitor=",  # empty: off (git reads "" as false)
    "-c", "core.hooksPath=/dev/null",
)
"""Config that overrides what the repository's own config sets (command-line config wins over all)."""

DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv")
"""Given right after a subcommand that can show a diff (they are options of the subcommand, not of git)."""

SHOWS_DIFFS = frozenset({"diff", "log", "show", "diff-tree", "diff-index", "diff-files", "format-patch",
                         "whatchanged"})

_TAKES_VALUE = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--exec-path",
                          "--config-env"})
FILTER_KEY = re.compile(r"^filter\.(.+)\.(clean|smudge|process|required)$", re.IGNORECASE)


def subcommand_at(args: Sequence[str]) -> int:
    """The index of the subcommand in git's arguments (after its global options); len(args) when none. Pure."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _TAKES_VALUE:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return i
    return len(args)


def filter_overrides(names: Iterable[str]) -> list[str]:
    """`-c` pairs that empty each named filter driver (an empty command is no command to git). Pure."""
    out: list[str] = []
    for name in sorted(set(names)):
        out += ["-c", f"filter.{name}.clean=", "-c", f"filter.{name}.smudge=", "-c", f"filter.{name}.process=",
                "-c", f"filter.{name}.required=false"]
    return out


def command(git: str, args: Sequence[str], *, filters: Iterable[str] = ()) -> list[str]:
    """The argv of one hardened git command: `git` then `args` (global options, subcommand, its options),
    with the hardening config first and the diff options after a subcommand that shows diffs. Pure."""
    args = list(args)
    at = subcommand_at(args)
    if at < len(args) and args[at] in SHOWS_DIFFS:
        args[at + 1:at + 1] = list(DIFF_OPTIONS)
    return [git, "--no-pager", *HARDENING, *filter_overrides(filters), *args]


def filter_names(config_listing: str) -> set[str]:
    """The filter drivers named in `git config -z --name-only --get-regexp '^filter\\.'` output. Pure."""
    names: set[str] = set()
    for key in config_listing.replace("\n", "\0").split("\0"):
        match = FILTER_KEY.match(key.strip())
        if match:
            names.add(match.group(1))
    return names


FILTER_LISTING = ["config", "-z", "--name-only", "--get-regexp", r"^filter\."]
"""The git arguments that list the filter keys every config in effect defines (`git config` runs nothing)."""


__all__ = ["DIFF_OPTIONS", "FILTER_LISTING", "HARDENING", "command", "filter_names", "filter_overrides",
           "subcommand_at"]

"""Every git command the supervisor runs on the workspace runs nothing the workspace's repository names.

The traps are real: a `core.fsmonitor`, a filter driver a `.gitattributes` line names, a textconv and an
external diff, hooks. Each test first shows plain git runs the trap (so the trap is live), then that
ours do not.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ralph_supervisor.snapshots import kept_commits
from ralph_supervisor.evidence.git_refs import _read_refs_with_git
from ralph_supervisor.report.sources import read_git
from ralph_supervisor.safe_git import DIFF_OPTIONS, HARDENING, command, filter_names, subcommand_at
from ralph_supervisor.evidence.ignore import IgnoreRules
from ralph_supervisor.snapshots.restore import select, write_files
from ralph_supervisor.snapshots.store import SnapshotStore

RULES = IgnoreRules().as_gitignore()
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def test_the_hardening_comes_first_and_the_diff_options_follow_a_subcommand_that_shows_diffs() -> None:
    argv = command("git", ["-C", "/ws", "diff", "--stat", "a", "b"])
    assert argv[:2] == ["git", "--no-pager"] and argv[2:2 + len(HARDENING)] == list(HARDENING)
    at = argv.index("diff")
    assert argv[at + 1:at + 3] == list(DIFF_OPTIONS) and argv[-3:] == ["--stat", "a", "b"]
    assert "--no-ext-diff" not in command("git", ["-c", "x.y=1", "status"]), "status takes no diff options"
    assert subcommand_at(["-c", "a=b", "-C", "/x", "--bare", "log", "-1"]) == 5
    assert subcommand_at(["--version"]) == 1
    argv = command("git", ["status"], filters={"lfs"})
    assert "filter.lfs.clean=" in argv and "filter.lfs.process=" in argv and "filter.lfs.required=false" in argv
    assert filter_names("filter.lfs.clean\0filter.lfs.process\0Filter.My.Tool.smudge\0core.x\0") == {"lfs", "My.Tool"}
    assert filter_names("") == set()


def _trapped_repository(ws: Path, marker: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True, env=ENV)

    ws.mkdir()
    git("init", "-q", "-b", "main")
    (ws / "a.txt").write_text("one\n")
    (ws / ".gitattributes").write_text("* filter=evil diff=evil\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    trap = ws.parent / "trap.sh"
    trap.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    trap.chmod(0o755)
    for key, value in [("core.fsmonitor", str(trap)), ("filter.evil.clean", str(trap)),
                       ("filter.evil.smudge", str(trap)), ("diff.evil.textconv", str(trap)),
                       ("diff.external", str(trap))]:
        git("config", key, value)
    for hook in ("reference-transaction", "post-checkout", "post-commit", "pre-auto-gc"):
        (ws / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        (ws / ".git" / "hooks" / hook).chmod(0o755)
    (ws / "a.txt").write_text("two\n")  # stat-dirty: status must run the clean filter to compare


def test_a_trap_in_the_workspaces_git_config_runs_for_plain_git_and_never_for_the_report(tmp_path: Path) -> None:
    ws, marker = tmp_path / "ws", tmp_path / "ran"
    _trapped_repository(ws, marker)
    subprocess.run(["git", "-C", str(ws), "status", "--porcelain"], capture_output=True, env=ENV, check=False)
    subprocess.run(["git", "-C", str(ws), "diff", "HEAD"], capture_output=True, env=ENV, check=False)
    assert marker.exists(), "the trap is live for plain git"
    marker.unlink()
    facts = read_git(ws, time.time() + 60)
    assert not facts.note, facts.note
    assert facts.uncommitted == "1 changed file(s)"
    assert not marker.exists(), marker.read_text()


def test_snapshots_kept_commits_and_the_refs_fallback_run_no_trap_of_the_workspace(tmp_path: Path) -> None:
    ws, marker = tmp_path / "ws", tmp_path / "ran"
    _trapped_repository(ws, marker)
    store = SnapshotStore(ws, tmp_path / "state")
    store.open()
    info = store.take(1, "iteration", None, now=time.time(), exclude=RULES)
    assert info is not None and info.files >= 2
    assert kept_commits.keep(store) == 1
    commit = kept_commits.kept(store)[0].commit
    assert kept_commits.bring_back(store, commit, "rescued") == commit  # a ref update in the user's repository
    out = tmp_path / "restored"
    write_files(store, info, out, select(store, info, []))
    assert (out / "a.txt").read_text() == "two\n"
    refs = _read_refs_with_git(ws)
    assert refs.head == commit
    assert not marker.exists(), marker.read_text()


def test_the_hook_trap_is_live_for_plain_git(tmp_path: Path) -> None:
    ws, marker = tmp_path / "ws", tmp_path / "ran"
    _trapped_repository(ws, marker)
    subprocess.run(["git", "-C", str(ws), "branch", "other"], capture_output=True, env=ENV, check=True)
    assert "reference-transaction" in marker.read_text()

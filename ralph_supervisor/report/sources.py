"""Everything the report reads, in one place: the state folder's files (named by their owners in `files/`),
the workspace's git, and the fields the supervisor writes into its events for the report.

The report only reads. Every file may be missing, half-written, rotated or damaged: a reader returns what
it could read and one warning line per file that was not whole (never an exception, never a move aside:
that is the supervisor's business when it starts).

    records = read_records(Path("proj/.ralph-supervise"))
    records.events[-1]["event"]   # "supervisor_stopped"
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph_supervisor import events
from ralph_supervisor.files import (
    escalation_md,
    history_jsonl,
    ledger_json,
    state_json,
)
from ralph_supervisor.files.lock import running_supervisor_pid
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.safe_git import FILTER_LISTING, command, filter_names

EVENTS_READ = frozenset({
    events.ORPHANS_SWEPT, events.SUPERVISOR_STARTED, events.CHILD_STARTED, events.CHILD_EXITED,
    events.ITERATION_STARTED, events.ITERATION_FINISHED, events.TREE_PAUSED, events.TREE_RESUMED,
    events.TREE_STOPPED, events.SUPERVISOR_STOPPED, events.LIMIT_WAIT_STARTED, events.LIMIT_WAIT_ENDED,
    events.OUTAGE_STARTED, events.OUTAGE_ENDED, events.USAGE_HIGH, events.CGROUP_FIGURES, events.CGROUP_OOM,
})
"""The `event` names the report uses; other lines of events.jsonl are not even parsed."""


GIT_TIMEOUT = 5.0
GIT_LOG_ROWS = 50
REPLY_CHARS = 500
SIGNATURES_KEPT = 5


# -- what the supervisor writes for the report -----------------------------------------------


def iteration_fields(report: IterationReport) -> dict[str, Any]:
    """Extra fields of the `iteration_finished` event, bounded: what the report shows of an iteration beyond
    what the supervisor logs anyway (cost and returns among that): the reply, its RALPH_STATUS block, the
    error signatures."""
    fields: dict[str, Any] = {
        "error_signatures": sorted(report.error_signatures)[:SIGNATURES_KEPT],
        "first_error": report.first_error[:300],
        "reply": (report.reply or "")[:REPLY_CHARS],
        "status_block": {str(k)[:40]: str(v)[:200] for k, v in list(report.status.items())[:12]},
        "completed": report.completed,
        "states_blocker": report.states_blocker,
    }
    if report.blocked_reason:
        fields["blocked_reason"] = report.blocked_reason[:300]
    if report.outage:
        fields["outage"] = True
        fields["outage_message"] = report.outage_message[:300]
    return fields


def started_fields(settings: Any) -> dict[str, Any]:
    """Extra fields of the `supervisor_started` event: the budgets and caps the report measures a run
    against, and the loop's name (none of them is in the state folder otherwise)."""
    names = ("token_budget", "daily_token_budget", "cost_budget", "daily_cost_budget", "max_iterations",
             "max_opens", "on_open", "cooldown", "name", "sandbox")
    return {"budgets": {name: getattr(settings, name, None) for name in names}}


# -- the files of the state folder -----------------------------------------------------------


@dataclass(frozen=True)
class Records:
    """What the state folder held when it was read: raw records, oldest first, and what was not readable."""

    state_dir: Path
    state: state_json.Recorded | None
    history: list[history_jsonl.Transition]
    events: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    escalation: Path | None
    running_pid: int | None
    warnings: list[str] = field(default_factory=list)
    snapshots: dict[str, Any] | None = None
    """The snapshot store's summary (`snapshots.read_summary`): the newest snapshot to restore; None without one."""

    @property
    def found(self) -> bool:
        """The folder holds supervisor state (what `report` exits 1 without)."""
        return bool(self.state is not None or self.history or self.events or self.ledger)


def read_records(state_dir: Path) -> Records:
    """Read every file the report uses. Missing files are simply empty."""
    warnings: list[str] = []
    state, warning = read_state(state_dir)
    warnings += [warning] if warning else []
    history, more = history_jsonl.read_transitions(state_dir)
    warnings += more
    read_events, more = events.read(state_dir, EVENTS_READ)
    warnings += more
    ledger, warning = ledger_json.read_attempts(state_dir)
    warnings += [warning] if warning else []
    escalation = escalation_md.path(state_dir)
    return Records(
        state_dir=state_dir,
        state=state,
        history=history,
        events=read_events,
        ledger=ledger,
        escalation=escalation if escalation.is_file() else None,
        running_pid=running_supervisor_pid(state_dir) if state_dir.is_dir() else None,
        warnings=warnings,
        snapshots=_snapshots(state_dir),
    )


def _snapshots(state_dir: Path) -> dict[str, Any] | None:
    from ralph_supervisor.snapshots.store import read_summary  # git runs only when a store exists

    try:
        return read_summary(state_dir)
    except OSError:
        return None


def read_state(state_dir: Path) -> tuple[state_json.Recorded | None, str | None]:
    """`state.json` as its owner reads it, checked as the supervisor would (`breaker.Snapshot.from_dict`)."""
    state, note = state_json.read(state_dir)
    return state, (f"{note}: the breaker's state is not shown" if note else None)


# -- the workspace's git ---------------------------------------------------------------------


@dataclass(frozen=True)
class GitFacts:
    """Commits since the run began and the diffstat against where it began; `note` says why not, if not."""

    commits: tuple[tuple[str, str], ...] = ()
    """(short hash, subject), newest first, at most GIT_LOG_ROWS."""
    total_commits: int = 0
    base: str = ""
    """The commit the run started from ("" when the repository had none then)."""
    diffstat: str = ""
    """`git diff --shortstat` from the base to HEAD, e.g. "3 files changed, 40 insertions(+)"."""
    files: tuple[str, ...] = ()
    """`git diff --stat` lines (bounded)."""
    uncommitted: str = ""
    """What `git status` shows beyond HEAD, e.g. "1 changed, 2 untracked file(s)"."""
    note: str = ""


def _git(workspace: Path, args: list[str], deadline: float, filters: frozenset[str] = frozenset(),
         ok: tuple[int, ...] = (0,)) -> str:
    """One read-only git command (a helper process: never part of the loop's tree), hardened (safe_git:
    nothing the workspace's config names runs); raises RuntimeError with a one-line reason."""
    # GIT_OPTIONAL_LOCKS=0: `git diff` and `status` would otherwise refresh and rewrite the index, racing
    # the agent's own git commands (git-config(1), "GIT_OPTIONAL_LOCKS").
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    try:
        proc = HELPERS.popen(command("git", ["-C", str(workspace), *args], filters=filters), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, process_group=0)
    except OSError as exc:
        raise RuntimeError(f"git cannot run ({exc.strerror or exc})") from None
    try:
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError("git took too long") from None
    finally:
        HELPERS.done(proc.pid)
    if proc.returncode not in ok:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(lines[-1][:200] if lines else f"git exited {proc.returncode}")
    return out.decode("utf-8", "replace")


def read_git(workspace: Path, since: float | None, *, timeout: float = GIT_TIMEOUT) -> GitFacts:
    """What git says changed in `workspace` since `since` (epoch seconds): commits and the diffstat.

    The base is the newest commit on HEAD older than `since` (commit dates, as `git rev-list --before`
    reads them)..
    """
    if since is None:
        return GitFacts(note="the run's start time is unknown")
    if not (workspace / ".git").exists():
        return GitFacts(note=f"{workspace} is not a git work tree")
    deadline = time.monotonic() + timeout
    stamp = f"@{int(since)}"
    try:
        head = _git(workspace, ["rev-parse", "--verify", "--quiet", "HEAD"], deadline).strip()
    except RuntimeError:
        return GitFacts(note="the repository has no commit yet")
    try:
        base = _git(workspace, ["rev-list", "-1", f"--before={stamp}", head], deadline).strip()
        span = f"{base}..{head}" if base else head
        log = _git(workspace, ["log", "--no-color", "--format=%h %s", f"-{GIT_LOG_ROWS}", span], deadline)
        count = _git(workspace, ["rev-list", "--count", span], deadline).strip()
        # Against the empty tree when the repository was born during the run.
        against = base or _git(workspace, ["hash-object", "-t", "tree", "/dev/null"], deadline).strip()
        stat = _git(workspace, ["diff", "--no-color", "--stat=100", against, head], deadline)  # its last line: --shortstat
        # `status` runs the clean filter of a file its stat says changed: every filter defined is emptied.
        filters = frozenset(filter_names(_git(workspace, FILTER_LISTING, deadline, ok=(0, 1))))
        dirty = _git(workspace, ["status", "--porcelain=v1", "--untracked-files=normal"], deadline, filters)
    except RuntimeError as exc:
        return GitFacts(note=f"git: {exc}")
    commits = tuple((line.partition(" ")[0], line.partition(" ")[2]) for line in log.splitlines() if line.strip())
    lines = stat.splitlines()
    short = lines[-1] if lines else ""
    files = tuple(line.rstrip() for line in lines[:-1][:GIT_LOG_ROWS])
    return GitFacts(commits=commits, total_commits=int(count) if count.isdigit() else len(commits),
                    base=base[:12], diffstat=short.strip(), files=files, uncommitted=_dirt(dirty))


def _dirt(porcelain: str) -> str:
    """`git status --porcelain` in words: "2 changed, 3 untracked" ("" when the tree is clean)."""
    lines = [line for line in porcelain.splitlines() if line.strip()]
    untracked = sum(1 for line in lines if line.startswith("??"))
    parts = [f"{len(lines) - untracked} changed"] if len(lines) > untracked else []
    parts += [f"{untracked} untracked"] if untracked else []
    return ", ".join(parts) + (" file(s)" if parts else "")

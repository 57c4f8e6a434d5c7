"""`--worktree`: the loop works on a branch of its own in a new worktree; the user's checkout stays as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ralph_supervisor.worktree import Worktree, branch_name, git_binds, note
from tests.helpers.fault_procs import cli, marked
from tests.helpers.runs import Run
from tests.test_sandbox import _box_works

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def test_the_branch_is_named_after_the_loop_and_the_time_and_made_unique() -> None:
    at = 1796190000.0  # 2026-12-02 05:40:00 UTC
    assert branch_name("my loop!", at) == "ralph/my-loop-20261202-054000"
    assert branch_name("x", at, {"ralph/x-20261202-054000"}) == "ralph/x-20261202-054000-2"
    assert branch_name("", at).startswith("ralph/loop-")
    line = note(Worktree(Path("/c"), Path("/w"), "ralph/x-1", "a" * 40, left_behind=3))
    assert "/w on branch ralph/x-1" in line and "3 uncommitted or ignored" in line and "/c is not touched" in line


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull}).stdout


def _checkout(tmp_path: Path, marker: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (repo / "app.py").write_text("x = 2  # uncommitted\n")
    (repo / "draft.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored\n")
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    hook.chmod(0o755)
    return repo


def _files(root: Path) -> dict[str, str]:
    """Every file of the checkout but git's own, and the checkout's HEAD and index, by content hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and (not rel.startswith(".git/") or rel in (".git/HEAD", ".git/index", ".git/refs/heads/main")):
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


LOOP = "echo work > new.txt && git add new.txt && git commit -qm 'the loop s work' && echo committed"


@pytest.mark.slow
@pytest.mark.parametrize("boxed", [False, True])
def test_the_loop_commits_on_its_own_branch_and_the_checkout_stays_byte_for_byte(tmp_path: Path, boxed: bool) -> None:
    if boxed and _box_works() is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {_box_works()}")
    marker = tmp_path / "hook-ran"
    repo = _checkout(tmp_path, marker)
    before = _files(repo)
    run = Run(repo)
    box = ("--sandbox", "bwrap", "--sandbox-env", "GIT_*") if boxed else ()
    try:
        (tmp_path / "canary").write_text("seen\n")
        loop = f"{LOOP}; echo \"canary: $(cat {tmp_path}/canary 2>/dev/null || echo hidden)\""
        run.start("--worktree", "--name", "night", *box, "--", "sh", "-c", loop, env=IDENTITY)
        assert run.finish(60) == 0, run.stderr.decode(errors="replace")[-2000:]
    finally:
        run.cleanup()
    err = run.stderr.decode(errors="replace")
    assert _files(repo) == before, "the checkout is untouched"
    assert not marker.exists(), "the checkout's post-checkout hook never ran"
    branches = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/ralph/").split()
    assert len(branches) == 1 and branches[0].startswith("ralph/night-"), branches
    assert _git(repo, "log", "--format=%s", branches[0]).split("\n")[:2] == ["the loop s work", "base"]
    assert f"on branch {branches[0]}" in err and "3 uncommitted or ignored file(s)" in err, err[-2000:]
    worktree_path = Path(_git(repo, "worktree", "list", "--porcelain").split("worktree ")[2].splitlines()[0])
    assert (worktree_path / "new.txt").read_text() == "work\n" and not (worktree_path / "draft.txt").exists()
    shown = json.loads(cli(worktree_path, "status", "--json").stdout)
    assert shown["worktree"]["branch"] == branches[0] and shown["worktree"]["checkout"] == str(repo.resolve())
    log = (Path(shown["state_dir"]) / "child.log").read_text()
    assert ("canary: hidden" if boxed else "canary: seen") in log, log
    assert marked(run.mark) == []


PACK = (f"{LOOP}; git pack-refs --all; echo \"pack-refs: $?\"; git gc --quiet; echo \"gc: $?\"; "
        "ls \"$(git rev-parse --git-common-dir)/hooks\" | wc -l | sed 's/^/hooks: /'")


@pytest.mark.slow
def test_in_the_box_git_cannot_move_the_refs_into_a_file_the_box_would_lose(tmp_path: Path) -> None:
    """The repository's git folder is read-only in the box: `git pack-refs` (or a `gc`) cannot write a
    `packed-refs` that would live only in the box while it deletes the loose refs outside; it fails with
    the system's error, and every branch is still there. The commit on the loop's branch works."""
    if _box_works() is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {_box_works()}")
    repo = _checkout(tmp_path, tmp_path / "hook-ran")
    assert not (repo / ".git" / "packed-refs").exists(), "a fresh repository: its refs are loose"
    run = Run(repo)
    try:
        run.start("--worktree", "--name", "pack", "--sandbox", "bwrap", "--sandbox-env", "GIT_*", "--",
                  "sh", "-c", PACK, env=IDENTITY)
        assert run.finish(60) == 0, run.stderr.decode(errors="replace")[-2000:]
    finally:
        run.cleanup()
    worktree_path = Path(_git(repo, "worktree", "list", "--porcelain").split("worktree ")[2].splitlines()[0])
    log = (Path(json.loads(cli(worktree_path, "status", "--json").stdout)["state_dir"]) / "child.log").read_text()
    assert "committed" in log and "packed-refs.lock': Read-only file system" in log, log
    assert "pack-refs: 128" in log and "hooks: 0" in log, log
    branches = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    assert "main" in branches and any(b.startswith("ralph/pack-") for b in branches), branches
    assert not (repo / ".git" / "packed-refs").exists()
    assert _git(repo, "log", "--format=%s", "-1", next(b for b in branches if b != "main")).strip() == "the loop s work"
    assert not (tmp_path / "hook-ran").exists()


def test_a_workspace_that_is_no_repository_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    run = Run(plain)
    try:
        run.start("--worktree", "--", "sh", "-c", f"touch {tmp_path}/ran")
        assert run.finish(30) == 1
    finally:
        run.cleanup()
    assert f"ralph-supervise: --worktree: {plain.resolve()} is not in a git repository" in run.stderr.decode()
    assert not (tmp_path / "ran").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_linked_worktree_binds_objects_and_refs_writable_and_never_the_hooks(tmp_path: Path) -> None:
    repo = _checkout(tmp_path, tmp_path / "m")
    _git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    binds = {b.path: b for b in git_binds(tmp_path / "wt")}
    common = repo / ".git"
    assert not binds[common].writable, "the git folder is read-only: nothing is created at its top"
    assert binds[common / "objects"].writable and binds[common / "refs"].writable and binds[common / "logs"].writable
    assert binds[common / "hooks"].empty and not binds[common / "hooks"].writable, "an empty read-only folder"
    assert binds[common / "worktrees" / "wt"].writable
    assert common / "config" not in binds and common / "packed-refs" not in binds, "read-only with the folder"
    assert git_binds(repo) == [], "a checkout's own .git folder is not a linked worktree"


@pytest.mark.slow
def test_the_daily_spend_counts_across_the_worktrees_of_one_repository(tmp_path: Path) -> None:
    from ralph_supervisor.state_folder import default_state_dir
    from tests.helpers import executable
    from tests.helpers.supervise import events

    repo = _checkout(tmp_path, tmp_path / "m")
    agent = executable(tmp_path / "tools", "claude",
                       "#!/bin/sh\necho '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,"
                       "\"result\":\"ok\",\"usage\":{\"input_tokens\":100,\"output_tokens\":23}}'\n")
    tokens = 0
    for _ in range(2):
        run = Run(repo)
        try:
            run.start("--worktree", "--", "sh", "-c", "claude -p go; sleep 0.3",
                      env={"PATH": f"{agent.parent}:{os.environ['PATH']}"})
            assert run.finish(60) == 0, run.stderr.decode(errors="replace")[-2000:]
        finally:
            run.cleanup()
        made = [e for e in run.logged("worktree_made")]
        assert len(made) == 1
        state = default_state_dir(Path(made[0]["path"]))
        tokens += sum(e.get("tokens") or 0 for e in events(state, "iteration_finished"))
        assert not (state / "daily-spend.json").exists(), "counted in the checkout's folder, not the worktree's"
    assert tokens == 246
    shared = json.loads((default_state_dir(repo.resolve()) / "daily-spend.json").read_text())
    assert shared["tokens"] == tokens, shared


@pytest.mark.slow
def test_status_of_the_checkout_finds_the_loops_running_in_its_worktrees(tmp_path: Path) -> None:
    from tests.helpers import wait_for

    repo = _checkout(tmp_path, tmp_path / "m")
    runs = [Run(repo), Run(repo)]
    try:
        for run in runs:
            run.start("--worktree", "--", "sh", "-c", "sleep 30")
            wait_for(lambda: run.logged("child_started"), what="the loop in its worktree")
        shown = json.loads(cli(repo, "status", "--json").stdout)
        branches = sorted(e["branch"] for r in runs for e in r.logged("worktree_made"))
        assert [w["branch"] for w in shown["worktrees"]] == branches and len(set(branches)) == 2
        assert {w["pid"] for w in shown["worktrees"]} == {r.proc.pid for r in runs if r.proc is not None}
        assert len({w["state_dir"] for w in shown["worktrees"]}) == 2, "each loop has its own state folder"
        human = cli(repo, "status").stdout
        assert all(f"In a worktree:  branch {b}" in human for b in branches), human
    finally:
        for run in runs:
            run.cleanup()
    assert all(marked(r.mark) == [] for r in runs)

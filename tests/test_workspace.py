"""Workspace progress with real files, real git and real inotify (watchdog's InotifyFD).

Every behaviour test runs twice: with inotify and with the polling fallback forced, which must give
the same answers. Waits are event-driven: `end_iteration` itself settles queued events (a barrier
file in inotify mode, a scan in polling mode), and the few waits below poll with a 2 s ceiling.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ralph_supervisor.evidence.workspace import Change, Workspace, WorkspaceDelta
from tests.helpers import held, wait_for
from tests.helpers.inotify_limit import needs_unshare, run_limited

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")
GIT_ID = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]


def git(root: Path, *args: str) -> str:
    assert GIT is not None
    done = subprocess.run([GIT, "-C", str(root), *GIT_ID, *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def git_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture(params=["inotify", "polling"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def watch(mode: str) -> Iterator[Callable[..., Workspace]]:
    started: list[Workspace] = []

    def make(root: Path, **kwargs: object) -> Workspace:
        kwargs.setdefault("state_dir", root / ".ralph-supervise")
        ws = Workspace(root, poll_interval=0.05, force_polling=(mode == "polling"), **kwargs)  # type: ignore[arg-type]
        ws.start()
        started.append(ws)
        assert ws.mode == mode
        return ws

    yield make
    for ws in started:
        ws.stop()


def iteration(ws: Workspace, action: Callable[[], object]) -> WorkspaceDelta:
    ws.begin_iteration()
    action()
    return ws.end_iteration()


# ------------------------------------------------------------------------------ files


@needs_git
def test_new_untracked_file_counts_as_progress(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    ws = watch(root)
    delta = iteration(ws, lambda: (root / "notes.txt").write_text("new\n"))
    assert delta.files_changed == 1
    assert delta.paths == ("notes.txt",)
    assert delta.commits == 0


@needs_git
def test_commit_with_clean_tree_counts(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    ws = watch(root)
    head = git(root, "rev-parse", "HEAD")

    def work() -> None:
        (root / "feature.py").write_text("x = 1\n")
        git(root, "add", "feature.py")
        git(root, "commit", "-q", "-m", "feature")

    delta = iteration(ws, work)
    assert git(root, "status", "--porcelain") == ""  # the tree ends clean
    assert delta.commits == 1 and git(root, "rev-parse", "HEAD") != head
    assert delta.paths == ("feature.py",)  # .git internals are not files changed


@needs_git
def test_commit_alone_counts_and_git_internals_are_not_file_changes(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    ws = watch(root)
    delta = iteration(ws, lambda: git(root, "commit", "-q", "--allow-empty", "-m", "empty"))
    assert (delta.files_changed, delta.commits) == (0, 1)


@needs_git
def test_new_branch_and_tag_count_as_moved_refs(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    ws = watch(root)
    delta = iteration(ws, lambda: (git(root, "branch", "topic"), git(root, "tag", "v1")))
    assert delta.commits == 2  # two refs moved; HEAD did not


@needs_git
def test_commit_counts_with_packed_refs(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    git(root, "pack-refs", "--all")
    assert not (root / ".git" / "refs" / "heads" / "main").exists()
    ws = watch(root)
    delta = iteration(ws, lambda: git(root, "commit", "-q", "--allow-empty", "-m", "two"))
    assert delta.commits == 1


@needs_git
def test_commit_in_a_worktree_counts(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    main = git_repo(tmp_path / "repo")
    tree = tmp_path / "tree"
    git(main, "worktree", "add", "-q", "-b", "side", str(tree))
    assert (tree / ".git").is_file()
    ws = watch(tree)

    def work() -> None:
        (tree / "side.txt").write_text("side\n")
        git(tree, "add", "side.txt")
        git(tree, "commit", "-q", "-m", "side")

    delta = iteration(ws, work)
    assert delta.commits == 1  # the worktree's own HEAD, read through gitdir: and commondir
    assert delta.paths == ("side.txt",)


@needs_git
def test_workspace_below_the_repository_top_still_sees_commits(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    repo = git_repo(tmp_path / "repo")
    sub = repo / "packages" / "app"
    sub.mkdir(parents=True)
    ws = watch(sub)

    def work() -> None:
        (sub / "index.ts").write_text("export {}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "app")

    delta = iteration(ws, work)
    assert (delta.paths, delta.commits) == (("index.ts",), 1)


@needs_git
def test_dirty_file_carried_over_does_not_count_again(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    ws = watch(root)
    first = iteration(ws, lambda: (root / "README.md").write_text("hello, edited\n"))
    assert first.files_changed == 1
    assert git(root, "status", "--porcelain")  # the file stays dirty
    idle = iteration(ws, lambda: None)
    assert idle.files_changed == 0
    same = iteration(ws, lambda: (root / "README.md").write_text("hello, edited\n"))
    assert same.files_changed == 0
    again = iteration(ws, lambda: (root / "README.md").write_text("hello, edited twice\n"))
    assert again.paths == ("README.md",)


def test_rewrite_with_same_content_and_touch_do_not_count(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    ws = watch(root)
    target = root / "data.json"
    assert iteration(ws, lambda: target.write_text('{"a": 1}\n')).files_changed == 1

    def rewrite_and_touch() -> None:
        target.write_text('{"a": 1}\n')
        os.utime(target, (time.time() + 5, time.time() + 5))

    assert iteration(ws, rewrite_and_touch).files_changed == 0


@needs_git
def test_existing_file_rewritten_with_same_content_in_the_first_iteration_does_not_count(
    tmp_path: Path, watch: Callable[..., Workspace]
) -> None:
    root = git_repo(tmp_path / "repo")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    time.sleep(0.15)  # older than the priming margin: the background hashing may trust these files
    ws = watch(root)
    assert ws.wait_primed(timeout=5)
    assert ws.primed_files == 2  # README.md and src/app.py; .git is never read

    def formatter_run() -> None:
        (root / "README.md").write_text("hello\n")
        (root / "src" / "app.py").write_text("print('hi')\n")

    assert iteration(ws, formatter_run).files_changed == 0
    assert iteration(ws, lambda: (root / "src" / "app.py").write_text("print('bye')\n")).paths == ("src/app.py",)


def test_priming_never_trusts_a_file_whose_inode_changed_just_before_the_watch(
    tmp_path: Path, watch: Callable[..., Workspace]
) -> None:
    """`mv` keeps the old mtime but sets the ctime: priming must not take that content as the old one."""
    root = tmp_path / "plain"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("from elsewhere\n")
    os.utime(outside, (time.time() - 3600, time.time() - 3600))
    time.sleep(0.15)
    outside.rename(root / "moved.txt")  # just before the watch: its event may still be in flight
    ws = watch(root)
    assert ws.wait_primed(timeout=5)
    assert ws.primed_files == 0
    # its old content is unknown, so a write counts even with identical bytes (documented limit)
    assert iteration(ws, lambda: (root / "moved.txt").write_text("from elsewhere\n")).paths == ("moved.txt",)


def test_edit_then_revert_within_an_iteration_does_not_count(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    seen: list[Change] = []
    ws = watch(root, on_change=seen.append)
    target = root / "a.txt"
    iteration(ws, lambda: target.write_text("one\n"))

    def edit_and_revert() -> None:
        target.write_text("two\n")
        # in polling mode a change is only seen by a scan: let one happen in between
        wait_for(lambda: any(c.path == "a.txt" and c.after == held(b"two\n") for c in seen))
        target.write_text("one\n")
        (root / "tmp.txt").write_text("scratch")
        (root / "tmp.txt").unlink()

    assert iteration(ws, edit_and_revert).files_changed == 0


def test_deleted_and_renamed_files_count(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "old.txt").write_text("old\n")
    (root / "gone.txt").write_text("gone\n")
    ws = watch(root)

    def work() -> None:
        (root / "old.txt").rename(root / "new.txt")
        (root / "gone.txt").unlink()

    delta = iteration(ws, work)
    assert delta.paths == ("gone.txt", "new.txt", "old.txt")


def test_non_git_folder_works(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    (root / "src").mkdir(parents=True)
    ws = watch(root)
    delta = iteration(ws, lambda: (root / "src" / "main.c").write_text("int main(){}\n"))
    assert replace(delta, fingerprint=0) == WorkspaceDelta(files_changed=1, paths=("src/main.c",), commits=0)


# ------------------------------------------------------------------------------ ignored


def test_ralph_bookkeeping_churn_is_ignored(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    (root / ".ralph" / "logs").mkdir(parents=True)
    seen: list[Change] = []
    ws = watch(root, on_change=seen.append)

    def churn() -> None:
        for i in range(20):
            (root / ".ralph" / "logs" / f"claude_output_{i}.log").write_text("x" * i)
            (root / ".ralph" / "status.json").write_text(json.dumps({"loop": i}))
        (root / ".ralph" / "new_dir").mkdir()
        (root / ".ralph" / "new_dir" / "f").write_text("f")

    assert iteration(ws, churn).files_changed == 0
    assert seen == []


@needs_git
def test_gitignored_build_output_is_ignored(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = git_repo(tmp_path / "repo")
    (root / ".gitignore").write_text("build/\n*.o\n!keep.o\n")
    (root / "lib").mkdir()
    (root / "lib" / ".gitignore").write_text("generated.*\n")
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("local-notes.txt\n")
    ws = watch(root)

    def build() -> None:
        (root / "build" / "out").mkdir(parents=True)
        (root / "build" / "out" / "app").write_text("binary")
        (root / "main.o").write_text("obj")
        (root / "lib" / "generated.c").write_text("gen")
        (root / "lib" / "deep").mkdir()
        (root / "lib" / "deep" / "generated.h").write_text("gen")
        (root / "local-notes.txt").write_text("mine")
        (root / "keep.o").write_text("kept on purpose")

    delta = iteration(ws, build)
    assert delta.paths == ("keep.o",)


def test_node_modules_and_virtualenvs_are_ignored_and_not_watched(tmp_path: Path, watch: Callable[..., Workspace], mode: str) -> None:
    root = tmp_path / "plain"
    for i in range(30):
        (root / "node_modules" / f"pkg{i}" / "lib").mkdir(parents=True)
    (root / "env-with-odd-name" / "lib").mkdir(parents=True)
    (root / "env-with-odd-name" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / "src").mkdir()
    ws = watch(root)
    if mode == "inotify":
        assert ws.watched_directories == 2  # the root and src only

    def install() -> None:
        (root / "node_modules" / "pkg1" / "lib" / "index.js").write_text("module.exports = 1")
        (root / "node_modules" / "new-pkg").mkdir()
        (root / "node_modules" / "new-pkg" / "index.js").write_text("x")
        (root / "env-with-odd-name" / "lib" / "site.py").write_text("x")
        (root / ".venv" / "bin" / "python").write_text("x")
        (root / "src" / "__pycache__").mkdir()
        (root / "src" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
        (root / "src" / "m.py").write_text("x = 1\n")

    assert iteration(ws, install).paths == ("src/m.py",)


def test_virtualenv_created_during_the_run_is_ignored(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    ws = watch(root)

    def make_venv() -> None:
        (root / "myenv" / "lib" / "site-packages").mkdir(parents=True)
        (root / "myenv" / "lib" / "site-packages" / "mod.py").write_text("x")
        (root / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (root / "myenv" / "lib" / "site-packages" / "other.py").write_text("y")

    assert iteration(ws, make_venv).files_changed == 0


@pytest.mark.parametrize("state_name", [".ralph-supervise", "custom-state"])
def test_state_folder_is_ignored(tmp_path: Path, watch: Callable[..., Workspace], state_name: str) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    state = root / state_name
    state.mkdir()
    ws = watch(root, state_dir=state)

    def supervisor_writes() -> None:
        for i in range(10):
            (state / "events.jsonl").write_text("{}\n" * i)
            (state / "state.json.tmp").write_text("{}")
            (state / "state.json.tmp").rename(state / "state.json")

    assert iteration(ws, supervisor_writes).files_changed == 0


def test_user_ignore_patterns_are_honoured(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    (root / "logs").mkdir(parents=True)
    ws = watch(root, ignore=["logs/", "*.tmp", "/scratch.txt"])

    def work() -> None:
        (root / "logs" / "a.log").write_text("x")
        (root / "x.tmp").write_text("x")
        (root / "scratch.txt").write_text("x")
        (root / "sub").mkdir()
        (root / "sub" / "scratch.txt").write_text("x")  # anchored pattern: only the root one is ignored

    assert iteration(ws, work).paths == ("sub/scratch.txt",)


def test_gitignore_edited_during_the_run_takes_effect(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    ws = watch(root)
    assert iteration(ws, lambda: (root / ".gitignore").write_text("*.log\n")).paths == (".gitignore",)
    assert iteration(ws, lambda: (root / "run.log").write_text("noise")).files_changed == 0


# ------------------------------------------------------------------------------ directories, live evidence


def test_new_subdirectory_is_watched(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    seen: list[Change] = []
    ws = watch(root, on_change=seen.append)
    ws.begin_iteration()
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("")
    assert wait_for(lambda: len(seen) >= 1)
    # the watch is in place now: a file written later, deeper, is seen too
    (root / "src" / "pkg" / "sub").mkdir()
    (root / "src" / "pkg" / "sub" / "late.py").write_text("late = True\n")
    assert wait_for(lambda: len(seen) >= 2)
    delta = ws.end_iteration()
    assert delta.paths == ("src/pkg/__init__.py", "src/pkg/sub/late.py")


def test_directory_moved_in_from_outside_counts_its_files(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "a.txt").write_text("a")
    (outside / "b.txt").write_text("b")
    ws = watch(root)
    delta = iteration(ws, lambda: outside.rename(root / "vendor"))
    assert delta.paths == ("vendor/b.txt", "vendor/inner/a.txt")
    later = iteration(ws, lambda: (root / "vendor" / "inner" / "c.txt").write_text("c"))
    assert later.paths == ("vendor/inner/c.txt",)


def test_on_change_reports_live_changes_with_their_states(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    seen: list[Change] = []
    ws = watch(root, on_change=seen.append)
    t0 = time.monotonic()
    (root / "a.txt").write_text("a")
    assert wait_for(lambda: len(seen) >= 1)
    assert seen[0].path == "a.txt" and seen[0].at > t0
    assert wait_for(lambda: seen[-1].after == held(b"a"))  # the created file, then its content
    (root / "b.txt").write_text("b")
    assert wait_for(lambda: {c.path for c in seen} == {"a.txt", "b.txt"})
    (root / "a.txt").unlink()
    assert wait_for(lambda: any(c.path == "a.txt" and c.deleted for c in seen))
    assert ws.mode in ("inotify", "polling")


def test_paths_sample_is_bounded_but_count_is_exact(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    ws = watch(root)
    delta = iteration(ws, lambda: [(root / f"f{i:03d}.txt").write_text(str(i)) for i in range(120)])
    assert delta.files_changed == 120
    assert len(delta.paths) == 50 and delta.paths[0] == "f000.txt"


def inotify_descriptors() -> int:
    """This process's open inotify instances."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:  # the descriptor listdir itself used, closed meanwhile
            pass
    return count


def test_stop_releases_the_watcher(tmp_path: Path, watch: Callable[..., Workspace], mode: str) -> None:
    """Its threads end, its inotify instance is closed, and nothing changed later is reported."""
    root = tmp_path / "plain"
    root.mkdir()
    threads_before, inotify_before = set(threading.enumerate()), inotify_descriptors()
    seen: list[Change] = []
    ws = watch(root, on_change=seen.append)
    assert set(threading.enumerate()) - threads_before  # it watches with threads of its own
    assert inotify_descriptors() == inotify_before + (mode == "inotify")
    ws.stop()
    ws.stop()  # idempotent
    assert [t.name for t in set(threading.enumerate()) - threads_before if t.is_alive()] == []
    assert inotify_descriptors() == inotify_before
    assert ws.watched_directories == 0
    (root / "after.txt").write_text("written after the stop")
    time.sleep(ws.poll_interval * 6)  # several polling passes, had one been left running
    assert seen == []


# ------------------------------------------------------------------------------ the real inotify limit

LIMITED_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import structlog
    from ralph_supervisor.evidence.workspace import Workspace

    root = Path(sys.argv[1])
    ws = Workspace(root, state_dir=root / ".ralph-supervise", poll_interval=0.05)
    ws.start()
    mode_at_start = ws.mode
    ws.begin_iteration()
    (root / "new").mkdir()
    (root / "new" / "deeper").mkdir()
    (root / "new" / "deeper" / "file.txt").write_text("hello")
    deadline = time.monotonic() + 3
    while ws.mode != "polling" and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    (root / "a" / "late.txt").write_text("late")
    delta = ws.end_iteration()
    ws.stop()
    print("RESULT " + json.dumps({"mode_at_start": mode_at_start, "mode": ws.mode, "paths": list(delta.paths)}))
    """
)


def run_with_inotify_limit(tmp_path: Path, setting: str, value: int) -> tuple[dict[str, object], str]:
    """Run a small watcher in a new user namespace whose inotify limit is lowered: the limit is per
    user namespace (/proc/sys/user/max_inotify_*), so the machine's own limit is never touched."""
    root = tmp_path / "ws"
    for name in ("a", "b", "c"):
        (root / name).mkdir(parents=True)
    script = tmp_path / "limited.py"
    script.write_text(LIMITED_SCRIPT)
    done = run_limited(script, setting, value, str(root))
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), done.stdout + done.stderr


@needs_unshare
def test_watch_limit_at_start_falls_back_to_polling_with_one_warning(tmp_path: Path) -> None:
    result, output = run_with_inotify_limit(tmp_path, "max_inotify_watches", 2)  # barrier + root only
    assert result == {"mode_at_start": "polling", "mode": "polling", "paths": ["a/late.txt", "new/deeper/file.txt"]}
    assert output.count("watcher_fallback") == 1


@needs_unshare
def test_watch_limit_reached_later_by_new_directories_falls_back_with_one_warning(tmp_path: Path) -> None:
    result, output = run_with_inotify_limit(tmp_path, "max_inotify_watches", 6)  # barrier + 4 dirs + 1 new
    assert result["mode_at_start"] == "inotify"
    assert result["mode"] == "polling"
    assert result["paths"] == ["a/late.txt", "new/deeper/file.txt"]
    assert output.count("watcher_fallback") == 1


@needs_unshare
def test_inotify_instance_limit_falls_back_to_polling(tmp_path: Path) -> None:
    result, output = run_with_inotify_limit(tmp_path, "max_inotify_instances", 0)
    assert result == {"mode_at_start": "polling", "mode": "polling", "paths": ["a/late.txt", "new/deeper/file.txt"]}
    assert output.count("watcher_fallback") == 1


def test_a_failing_on_change_callback_does_not_stop_the_watcher(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    root.mkdir()

    def explode(change: Change) -> None:
        raise RuntimeError("supervisor bug")

    ws = watch(root, on_change=explode)
    assert iteration(ws, lambda: (root / "a.txt").write_text("a")).paths == ("a.txt",)
    assert iteration(ws, lambda: (root / "b.txt").write_text("b")).paths == ("b.txt",)


def test_missing_workspace_folder_does_not_crash(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    ws = watch(tmp_path / "does-not-exist")
    assert replace(iteration(ws, lambda: None), fingerprint=0) == WorkspaceDelta(0, (), 0)


def test_the_fingerprint_names_the_state_so_a_flip_flop_returns_to_it(tmp_path: Path, watch: Callable[..., Workspace]) -> None:
    root = tmp_path / "plain"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 0\n")
    time.sleep(0.15)  # older than the priming margin, so its first content is known (hashed at start)
    ws = watch(root)
    ws.wait_primed(10)
    start = iteration(ws, lambda: None).fingerprint
    one = iteration(ws, lambda: (root / "src" / "a.py").write_text("x = 1\n"))
    two = iteration(ws, lambda: (root / "src" / "a.py").write_text("x = 2\n"))
    back = iteration(ws, lambda: (root / "src" / "a.py").write_text("x = 1\n"))
    assert len({start, one.fingerprint, two.fingerprint}) == 3
    assert back.files_changed == 1 and back.fingerprint == one.fingerprint
    created = iteration(ws, lambda: (root / "new.txt").write_text("n"))
    removed = iteration(ws, lambda: (root / "new.txt").unlink())
    assert created.fingerprint != back.fingerprint and removed.fingerprint == back.fingerprint
    assert iteration(ws, lambda: (root / "src" / "a.py").write_text("x = 0\n")).fingerprint == start

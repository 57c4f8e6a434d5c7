"""End to end: a real loop whose fake agent destroys work, the real supervisor, the real snapshot store.

The agent is `examples/bin/claude` playing one shell script per call (FAKE_CLAUDE_CALLS_DIR): it runs
`git reset --hard`, `git clean -fd`, `rm -rf src`, `git checkout -- .` or a slow mass deletion, as agents
have done to users, and `git stash -u; ...; git stash pop`, which destroys nothing by the call's end.
Each test proves several things with one supervisor run (the suite's time budget).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers import fault_procs, state_dir_of
from tests.helpers.fault_procs import paused
from tests.helpers.supervise import LOOP, events, history, run, start, wait_for

pytestmark = pytest.mark.slow

FAST = ("--no-echo", "--log-format", "json", "--grace", "2")


cli = functools.partial(fault_procs.cli, timeout=60)  # `ralph-supervise ARGS -w workspace`, run to completion


def git(workspace: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def calls(tmp_path: Path, **scripts: str) -> Path:
    """A folder of per-call scripts for the fake agent: calls(tmp, c1="...", c2="...")."""
    folder = tmp_path / "calls"
    folder.mkdir()
    for name, text in scripts.items():
        (folder / f"{name[1:]}.sh").write_text(text)
    return folder


def loop_env(calls_dir: Path, **extra: str) -> dict[str, str]:
    # Calls last long enough for the tree sampler to see each one (a call of a few ms can slip between samples).
    env = {"FAKE_CLAUDE_CALLS_DIR": str(calls_dir), "FAKE_CLAUDE_SCENARIO": "stuck", "RALPH_LOOP_PAUSE": "0.2",
           "FAKE_CLAUDE_DELAY": "0.6"}
    env.update(extra)
    return env


def files_of(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `root` with its bytes and permission bits (links: their target)."""
    found = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".ralph-supervise")]
        for name in names:
            path = Path(dirpath) / name
            st = path.lstat()
            data = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else path.read_bytes()
            found[path.relative_to(root).as_posix()] = (data, stat.S_IMODE(st.st_mode))
    return found


def tree(pid: int) -> list[psutil.Process]:
    """The supervised tree: the supervisor's descendants outside its own session (its git helpers are in it)."""
    own = os.getsid(pid)
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if os.getsid(child.pid) != own:
                found.append(child)
        except OSError:
            continue
    return found


def snapshots(workspace: Path) -> list[dict]:
    listed = cli(workspace, "snapshots", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["snapshots"]


def test_snapshots_never_touch_the_users_repository_and_keep_to_their_budget(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "tracked.txt").write_text("v1\n")
    (ws / ".gitignore").write_text("build/\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "one")
    git(ws, "checkout", "-qb", "feature")
    (ws / "tracked.txt").write_text("v2\n")
    git(ws, "commit", "-qam", "two")
    (ws / "tracked.txt").write_text("stashed\n")
    git(ws, "stash", "-q")
    (ws / "staged.txt").write_text("in the index only\n")
    git(ws, "add", "staged.txt")
    (ws / "untracked.txt").write_text("the user's own\n")
    for ignored in ("node_modules/pkg/index.js", "venv2/lib/site.py", "build/out.o"):
        (ws / ignored).parent.mkdir(parents=True, exist_ok=True)
        (ws / ignored).write_text("not the user's work\n")
    (ws / "venv2" / "pyvenv.cfg").write_text("home = /usr\n")
    dot_git = {p: (ws / ".git" / p).read_bytes() for p in (
        Path(d, f).relative_to(ws / ".git").as_posix() for d, _, fs in os.walk(ws / ".git") for f in fs)}
    status_before = git(ws, "status", "--porcelain", "-uall")
    reflog_before = git(ws, "reflog")
    stash_before = git(ws, "stash", "list")

    # Five calls, each rewriting 300 kB that does not compress, under a 1 MB budget: old versions must go.
    steps = {f"c{n}": "mkdir -p data && head -c 300000 /dev/urandom > data/random.bin\n" for n in range(1, 6)}
    # The supervisor itself runs as if from a git hook: GIT_DIR and GIT_INDEX_FILE point at the user's repo.
    env = loop_env(calls(tmp_path, **steps), RALPH_LOOP_MAX="5", GIT_DIR=str(ws / ".git"),
                   GIT_INDEX_FILE=str(ws / ".git" / "index"), GIT_WORK_TREE=str(ws))
    done = run(ws, *FAST, "--no-progress", "100", "--snapshot-budget", "1MB", "--", str(LOOP), env=env, timeout=90)
    assert done.returncode == 0, done.stderr.decode()[-2000:]

    after = {p: (ws / ".git" / p).read_bytes() for p in (
        Path(d, f).relative_to(ws / ".git").as_posix() for d, _, fs in os.walk(ws / ".git") for f in fs)}
    assert after == dot_git, "the user's .git changed: " + str(set(after) ^ set(dot_git) or
                                                                [p for p in after if after[p] != dot_git.get(p)])
    assert git(ws, "reflog") == reflog_before and git(ws, "stash", "list") == stash_before
    agent = {"?? data/random.bin"}
    assert set(git(ws, "status", "--porcelain", "-uall").splitlines()) == set(status_before.splitlines()) | agent

    listed = snapshots(ws)
    state_dir = state_dir_of(ws)
    store_bytes = json.loads(cli(ws, "snapshots", "--json").stdout)["store_bytes"]
    assert store_bytes <= 1_000_000, store_bytes
    assert listed[-1]["iteration"] == 5 and listed[-1]["files"] == 5  # .gitignore, tracked, staged, untracked, data/random.bin
    assert listed[0]["id"] > 1, "the oldest snapshots were dropped first"
    assert [s["id"] for s in listed] == sorted(s["id"] for s in listed)
    dropped = [e for e in events(state_dir, "snapshots_dropped")]
    assert sum(e["level"] == "warning" for e in dropped) == 1, "the budget is announced once"

    out = tmp_path / "out"
    restored = cli(ws, "restore", "5", "--to", str(out))
    assert restored.returncode == 0, restored.stderr
    assert files_of(out) == {p: v for p, v in files_of(ws).items()
                             if not p.startswith(("node_modules/", "venv2/", "build/"))}


def test_reset_clean_and_a_mass_deletion_are_caught_and_restored_byte_exact(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / "README.md").write_text("# project\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("print('app')\n")
    (ws / ".gitattributes").write_text("* text=auto eol=lf\n")  # git itself would rewrite notes.txt's CRLF
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    (ws / "notes.txt").write_bytes(b"uncommitted\r\nnotes\r\n")
    (ws / "notes.txt").chmod(0o600)
    steps = calls(
        tmp_path,
        # 1: the agent's uncommitted work: an edit, a new executable file. Slow, so restore meets a running tree.
        c1="sleep 2; printf '# project\\nedited by the agent\\n' > README.md\n"
           "printf '#!/bin/sh\\necho step\\n' > src/step_1.sh; chmod 755 src/step_1.sh\n",
        # 2: the disaster users report: all of it gone (3 of 5 files: no trip with the share rule off), then
        # 40 new files.
        c2="git reset -q --hard && git clean -fdq\n"
           "mkdir -p src/gen; i=0; while [ $i -lt 40 ]; do echo \"gen $i\" > src/gen/f$i.py; i=$((i+1)); done\n",
        # 3: a slow mass deletion: judged on its net effect, when the call ends.
        c3="for f in src/gen/*; do rm -f \"$f\"; sleep 0.05; done\n",
    )
    proc = start(ws, *FAST, "--cooldown", "10", "--no-progress", "100", "--destructive-share", "0", "--", str(LOOP),
                 env=loop_env(steps))
    state_dir = state_dir_of(ws)
    try:
        wait_for(lambda: events(state_dir, "iteration_started"), timeout=30, what="the first call")
        refused = cli(ws, "restore", "0")
        assert refused.returncode == 1 and "unpaused tree" in refused.stderr and len(refused.stderr.splitlines()) == 1
        assert (ws / "notes.txt").exists()

        wait_for(lambda: any(h["trigger"] == "destructive" for h in history(state_dir)), timeout=60,
                 what="the destructive trip")
        wait_for(lambda: events(state_dir, "tree_paused"), what="the tree to freeze")
        opened = next(h for h in history(state_dir) if h["to"] == "OPEN")
        assert opened["trigger"] == "destructive" and opened["iteration"] == 3
        assert "the snapshot of iteration 2 holds them" in opened["reason"] and "src/gen/" in opened["reason"]
        assert not list((ws / "src" / "gen").iterdir()), "the call ran to its end before it was judged"
        assert [e["iteration"] for e in events(state_dir, "iteration_finished")][-1] == 3
        assert all(paused(tree(proc.pid)).values()), [(p.name(), p.status()) for p in tree(proc.pid)]
        assert f"ralph-supervise restore 2 -w {ws}" in (state_dir / "escalation.md").read_text()
        live = json.loads(cli(ws, "status", "--json").stdout)
        assert live["trigger"] == "destructive" and live["snapshots"]["state"] == "on"

        listed = snapshots(ws)
        marked = [s["iteration"] for s in listed if s["before_trip"] == "destructive"]
        assert marked == [2]

        # What iteration 1 left (before the reset and the clean), elsewhere, byte for byte, modes kept.
        out = tmp_path / "it1"
        assert cli(ws, "restore", "1", "--to", str(out)).returncode == 0
        assert files_of(out) == {
            ".gitattributes": (b"* text=auto eol=lf\n", 0o644),
            "README.md": (b"# project\nedited by the agent\n", 0o644),
            "notes.txt": (b"uncommitted\r\nnotes\r\n", 0o600),
            "src/app.py": (b"print('app')\n", 0o644),
            "src/step_1.sh": (b"#!/bin/sh\necho step\n", 0o755),
        }
        # Into the workspace while paused: the deleted files, then the work the reset and the clean took.
        back = cli(ws, "restore", "2", "src/gen")
        assert back.returncode == 0, back.stderr
        assert "undoes this" in back.stdout and "still paused" in back.stdout
        assert sorted(p.name for p in (ws / "src" / "gen").iterdir()) == sorted(f"f{i}.py" for i in range(40))
        assert (ws / "src" / "gen" / "f7.py").read_text() == "gen 7\n"
        assert cli(ws, "restore", "1", "README.md", "notes.txt", "src/step_1.sh").returncode == 0
        now = files_of(ws)
        for path in ("README.md", "notes.txt", "src/step_1.sh"):
            assert now[path] == files_of(out)[path]
        assert [s["kind"] for s in snapshots(ws)].count("restore") == 2  # each restore can be undone

        missing = cli(ws, "restore", "1", "src/nope.py")
        assert missing.returncode == 1 and "not in the snapshot of iteration 1" in missing.stderr
        assert cli(ws, "restore", "99").returncode == 1
        assert cli(ws, "stop").returncode == 0
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_rm_rf_in_a_folder_that_is_no_repository_stops_the_run_and_restores(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    steps = calls(
        tmp_path,
        c1="mkdir -p src/pkg; i=0; while [ $i -lt 30 ]; do printf 'line %s\\n' $i > src/pkg/m$i.py; "
           "i=$((i+1)); done; printf '\\001\\002\\377' > src/blob.bin\n",
        c2="rm -rf src\n",
    )
    done = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--", str(LOOP), env=loop_env(steps),
               timeout=60)
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    state_dir = state_dir_of(ws)
    assert [h["trigger"] for h in history(state_dir)] == ["destructive"]
    assert not (ws / "src").exists()
    assert (ws / ".git").exists() is False
    back = cli(ws, "restore", "1")
    assert back.returncode == 0, back.stderr
    assert (ws / "src" / "blob.bin").read_bytes() == b"\x01\x02\xff"
    assert sorted(p.name for p in (ws / "src" / "pkg").iterdir()) == sorted(f"m{i}.py" for i in range(30))
    assert (ws / "src" / "pkg" / "m12.py").read_text() == "line 12\n"


def test_git_clean_x_after_three_calls_of_work_is_undone_with_the_ignored_env_byte_for_byte(tmp_path: Path) -> None:
    """The issue's loop: three calls write ten new files each (untracked, as new work is until committed), the
    fourth runs `git clean -fdxq`. The state folder is out of its reach: the trip names snapshot 3, which holds
    the 30 files and the ignored `.env`; history, events and escalation are all there."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / ".gitignore").write_text(".env\n")
    (ws / "README.md").write_text("# project\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    secret = b"API_KEY=not-a-real-key\nDATABASE_URL=postgres://u:p@localhost/db\n"
    (ws / ".env").write_bytes(secret)
    (ws / ".env").chmod(0o600)

    def work(n: int) -> str:
        return (f"mkdir -p work; i=0; while [ $i -lt 10 ]; do printf 'call {n} file %s\\n' $i > work/c{n}_$i.txt; "
                f"i=$((i+1)); done\n")

    steps = calls(tmp_path, c1=work(1), c2=work(2), c3=work(3), c4="git clean -fdxq\n")
    done = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--", str(LOOP), env=loop_env(steps),
               timeout=120)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    assert not (ws / ".env").exists() and not (ws / "work").exists(), "the clean ran"
    state = state_dir_of(ws)
    opened = [h for h in history(state) if h["to"] == "OPEN"]
    assert [h["trigger"] for h in opened] == ["destructive"] and opened[0]["iteration"] == 4
    assert "the snapshot of iteration 3 holds them" in opened[0]["reason"]
    assert f"ralph-supervise restore 3 -w {ws}" in (state / "escalation.md").read_text()
    finished = events(state, "iteration_finished")
    assert [e["iteration"] for e in finished][:4] == [1, 2, 3, 4]
    assert events(state, "supervisor_stopped") and not events(state, "state_file_lost")

    restored = cli(ws, "restore", "3")
    assert restored.returncode == 0, restored.stderr
    assert (ws / ".env").read_bytes() == secret and stat.S_IMODE((ws / ".env").stat().st_mode) == 0o600
    for n in (1, 2, 3):
        for i in range(10):
            assert (ws / "work" / f"c{n}_{i}.txt").read_bytes() == f"call {n} file {i}\n".encode()
    assert sorted(os.listdir(ws / "work")) == sorted(f"c{n}_{i}.txt" for n in (1, 2, 3) for i in range(10))


def test_commits_the_agent_dropped_and_collected_are_kept_and_put_back_on_a_new_branch(tmp_path: Path) -> None:
    """The agent commits three times, then `git reset --hard HEAD~3`, expires the reflog and collects: the
    commits are gone from the repository, the store kept them, `restore --commit` puts them on a new branch
    and never moves the user's own."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "README.md").write_text("# project\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    start = git(ws, "rev-parse", "HEAD").strip()

    def commit(n: int) -> str:
        return f"echo 'step {n}' > step_{n}.txt && git add -A && git commit -qm 'step {n}'\n"

    steps = calls(tmp_path, c1=commit(1), c2=commit(2), c3=commit(3),
                  c4="git reset -q --hard HEAD~3 && git reflog expire --expire=now --all && git gc -q --prune=now\n")
    identity = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "a@a", "GIT_COMMITTER_NAME": "agent",
                "GIT_COMMITTER_EMAIL": "a@a", "GIT_CONFIG_GLOBAL": os.devnull}
    # The reset deletes 3 of 4 files: a destructive trip would freeze the tree mid-gc; not what this test is about.
    done = run(ws, *FAST, "--max-iterations", "4", "--no-progress", "100", "--destructive-files", "0",
               "--destructive-share", "0", "--", str(LOOP), env=loop_env(steps, **identity), timeout=120)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    assert git(ws, "rev-parse", "HEAD").strip() == start
    assert git(ws, "log", "--all", "--format=%s").split("\n")[0] == "start", "the commits are gone from the repository"

    listed = json.loads(cli(ws, "restore", "--commits", "--json").stdout)
    by_subject = {k["subject"]: k for k in listed}
    assert {"step 1", "step 2", "step 3"} <= set(by_subject)
    assert not by_subject["step 3"]["in_repository"] and by_subject["start"]["in_repository"]
    taken = cli(ws, "restore", "--commit", by_subject["step 3"]["commit"][:10], "--branch", "main")
    assert taken.returncode == 1 and "exists" in taken.stderr, "the user's own branch is never moved"
    back = cli(ws, "restore", "--commit", by_subject["step 3"]["commit"][:10], "--branch", "rescued")
    assert back.returncode == 0, back.stderr
    assert git(ws, "log", "--format=%s", "rescued").splitlines() == ["step 3", "step 2", "step 1", "start"]
    assert git(ws, "rev-parse", "main").strip() == start and git(ws, "status", "--porcelain") == ""


def test_deleting_the_repository_is_a_destructive_trip_and_its_commits_come_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "README.md").write_text("# project\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    steps = calls(tmp_path, c1="echo work > work.txt && git add -A && git commit -qm 'the work'\n",
                  c2="rm -rf .git\n")
    identity = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "a@a", "GIT_COMMITTER_NAME": "agent",
                "GIT_COMMITTER_EMAIL": "a@a", "GIT_CONFIG_GLOBAL": os.devnull}
    done = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--", str(LOOP),
               env=loop_env(steps, **identity), timeout=120)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"]
    assert [h["trigger"] for h in opened] == ["destructive"] and opened[0]["iteration"] == 2
    assert "deleted the repository" in opened[0]["reason"] and f"restore --commits -w {ws}" in opened[0]["reason"]
    listed = {k["subject"]: k for k in json.loads(cli(ws, "restore", "--commits", "--json").stdout)}
    assert not listed["the work"]["in_repository"]
    nowhere = cli(ws, "restore", "--commit", listed["the work"]["commit"], "--branch", "main")
    assert nowhere.returncode == 1 and "not a git repository" in nowhere.stderr
    git(ws, "init", "-q", "-b", "fresh")
    back = cli(ws, "restore", "--commit", listed["the work"]["commit"], "--branch", "main")
    assert back.returncode == 0, back.stderr
    assert git(ws, "log", "--format=%s", "main").splitlines() == ["the work", "start"]


def test_a_stash_popped_within_the_call_is_no_destruction_and_a_checkout_that_drops_the_work_is(tmp_path: Path) -> None:
    """Judged on the net effect over each call: `git stash -u; tests; git stash pop`, work moved away and back,
    and an attempt the agent reverts itself leave the work as it was; `git checkout -- .` over the uncommitted
    edits of an earlier call drops them (30 files back at HEAD: more than 25), and the trip names the snapshot
    that holds them."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    git(ws, "init", "-q", "-b", "main")
    for i in range(40):
        (ws / "src" / f"t{i}.py").write_text(f"committed {i}\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    steps = calls(
        tmp_path,
        c1="mkdir -p work; i=0; while [ $i -lt 30 ]; do echo \"edit $i\" >> src/t$i.py; echo \"new $i\" > work/n$i.txt; "
           "i=$((i+1)); done\n",
        c2="git stash -u -q && sleep 1 && git stash pop -q\n",
        c3="mv work ../away && sleep 0.5 && mv ../away work\n"
           "for i in 30 31 32 33 34 35 36 37 38 39; do echo attempt >> src/t$i.py; done; sleep 0.3\n"
           "git checkout -- src/t3?.py\n",
        c4="git checkout -- .\n",
    )
    done = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--paraphrase", "0", "--", str(LOOP),
               env=loop_env(steps), timeout=120)  # the same fake reply each call, and calls 2 and 3 change nothing
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    state = state_dir_of(ws)
    opened = [h for h in history(state) if h["to"] == "OPEN"]
    assert [(h["trigger"], h["iteration"]) for h in opened] == [("destructive", 4)], opened
    reason = opened[0]["reason"]
    assert "iteration 4 deleted, emptied or reverted 30 files" in reason and "30 back at a committed version" in reason
    assert "the snapshot of iteration 3 holds them" in reason
    assert f"ralph-supervise restore 3 -w {ws}" in (state / "escalation.md").read_text()  # whole, however long the path
    assert [e["iteration"] for e in events(state, "iteration_finished")][:4] == [1, 2, 3, 4]
    assert (ws / "src" / "t5.py").read_text() == "committed 5\n" and (ws / "work" / "n5.txt").exists()

    back = cli(ws, "restore", "3", "src")
    assert back.returncode == 0, back.stderr
    for i in range(40):
        assert (ws / "src" / f"t{i}.py").read_text() == f"committed {i}\n" + (f"edit {i}\n" if i < 30 else "")

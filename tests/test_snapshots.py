"""The snapshot store with real git and real files: exact bytes and modes, the ignore rules, the stat cache,
files that change while read, the budget, a broken store, and the user's repository left alone."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from ralph_supervisor.evidence.ignore import ignore_rules
from ralph_supervisor.snapshots import commit_object
from ralph_supervisor.snapshots import restore as restore_cmd
from ralph_supervisor.snapshots.git import SnapshotError, classify_failure, refused_path
from ralph_supervisor.snapshots.info import SnapshotInfo, restore_command
from ralph_supervisor.snapshots.restore import select, write_files
from ralph_supervisor.snapshots.store import SnapshotStore

RULES = ignore_rules(extra=["*.tmp"], prefixes=[".ralph-supervise"]).as_gitignore()


def files_of(root: Path) -> dict[str, tuple[bytes, int]]:
    found = {}
    for dirpath, dirs, names in os.walk(os.fsencode(root)):
        dirs[:] = [d for d in dirs if d not in (b".git", b".ralph-supervise")]
        for name in names:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISFIFO(st.st_mode):
                continue
            data = os.readlink(path) if stat.S_ISLNK(st.st_mode) else Path(os.fsdecode(path)).read_bytes()
            found[os.fsdecode(os.path.relpath(path, os.fsencode(root)))] = (data, stat.S_IMODE(st.st_mode))
    return found


def take(store: SnapshotStore, iteration: int, changed: list[str] | None = None, **kw: object) -> SnapshotInfo:
    return store.take(iteration, "iteration", changed, now=time.time(), exclude=RULES, **kw)  # type: ignore[arg-type]


def restored(store: SnapshotStore, info: SnapshotInfo, dest: Path) -> dict[str, tuple[bytes, int]]:
    write_files(store, info, dest, select(store, info, []))
    return files_of(dest)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_a_snapshot_brings_back_bytes_modes_links_and_odd_names_exactly(ws: Path, tmp_path: Path) -> None:
    # .gitattributes that would make git rewrite line ends and run a filter, were they honoured.
    (ws / ".gitattributes").write_text("* text=auto eol=crlf\n*.bin filter=lfs diff=lfs merge=lfs\n")
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\n")
    (ws / "data.bin").write_bytes(bytes(range(256)) * 10)
    (ws / "empty").write_bytes(b"")
    (ws / "secret.key").write_text("k\n")
    (ws / "secret.key").chmod(0o600)
    (ws / "tool.sh").write_text("#!/bin/sh\n")
    (ws / "tool.sh").chmod(0o750)
    (ws / "frozen.txt").write_text("read only\n")
    (ws / "frozen.txt").chmod(0o444)
    (ws / "a dir" / "sub").mkdir(parents=True)
    (ws / "a dir" / "sub" / "line\nbreak.txt").write_text("newline in the name\n")
    (ws / "a dir" / "ünïcode.md").write_text("ü\n")
    open(os.fsencode(ws) + b"/latin1-\xe9.txt", "wb").write(b"not UTF-8 in the name\n")
    os.symlink("does/not/exist", ws / "dangling")
    os.symlink("crlf.txt", ws / "link")
    os.mkfifo(ws / "pipe")
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    info = take(store, 0)
    before = files_of(ws)
    assert info.files == len(before) and info.added == len(before)
    assert restored(store, info, tmp_path / "out") == before

    # Change things; the old snapshot still gives the old bytes, the new one the new.
    (ws / "crlf.txt").write_bytes(b"changed\r\n")
    (ws / "secret.key").chmod(0o640)
    os.unlink(ws / "data.bin")
    second = take(store, 1, ["crlf.txt", "secret.key", "data.bin"])
    assert (second.added, second.modified, second.deleted) == (0, 1, 1)
    assert restored(store, second, tmp_path / "out2") == files_of(ws)
    assert restored(store, store.find(0) or info, tmp_path / "out3") == before


def test_an_incremental_snapshot_records_what_a_full_look_finds(ws: Path, tmp_path: Path) -> None:
    (ws / "src").mkdir()
    for i in range(20):
        (ws / "src" / f"m{i}.py").write_text(f"m = {i}\n")
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    take(store, 0)
    (ws / "src" / "m1.py").write_text("changed\n")
    os.unlink(ws / "src" / "m2.py")
    (ws / "src" / "m3.py").chmod(0o755)
    (ws / "new" / "deep").mkdir(parents=True)
    (ws / "new" / "deep" / "n.py").write_text("new\n")
    os.unlink(ws / "src" / "m4.py")
    (ws / "src" / "m4.py").mkdir()  # a file that became a folder
    (ws / "src" / "m4.py" / "inside.py").write_text("inside\n")
    changed = ["src/m1.py", "src/m2.py", "src/m3.py", "new/deep/n.py", "src/m4.py", "src/m4.py/inside.py"]
    quick = take(store, 1, changed)
    full = take(store, 2, None)
    assert (full.added, full.modified, full.deleted) == (0, 0, 0), "the full look found nothing the quick one missed"
    assert (quick.files, quick.bytes) == (full.files, full.bytes)
    assert restored(store, quick, tmp_path / "quick") == restored(store, full, tmp_path / "full") == files_of(ws)


def test_what_the_watcher_ignores_is_not_stored(ws: Path) -> None:
    (ws / ".gitignore").write_text("build/\n*.log\n")
    for path in ("keep.py", "build/out.o", "app.log", "node_modules/p/i.js", "env/lib/x.py", "scratch.tmp",
                 ".ralph-supervise/state.json", "pkg/__pycache__/m.pyc", "excluded-by-user.txt", ".ralph/status"):
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text("x\n")
    (ws / "env" / "pyvenv.cfg").write_text("home = /usr\n")  # a virtual environment, whatever its name
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "info" / "exclude").write_text("excluded-by-user.txt\n")
    user_exclude = (ws / ".git" / "info" / "exclude").read_text()
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    rules = ignore_rules(exclude=user_exclude, extra=["*.tmp"], prefixes=[".ralph-supervise"]).as_gitignore()
    info = store.take(0, "start", None, now=time.time(), exclude=rules)
    assert sorted(store.files_in(info)) == [".gitignore", "keep.py"]


def test_ignored_files_are_stored_but_regenerable_trees_and_our_own_folders(ws: Path, tmp_path: Path) -> None:
    (ws / ".gitignore").write_text("build/\n*.log\n.env\ndata/\nmyenv/\n")
    (ws / ".env").write_bytes(b"API_KEY=sk-not-a-real-key\n")
    for path in ("keep.py", "build/out.o", "app.log", "node_modules/p/i.js", "scratch.tmp", "data/raw/a.csv",
                 "data/cache/__pycache__/m.pyc", "data/node_modules/x.js", ".ralph-supervise/state.json",
                 "pkg/__pycache__/m.pyc", "excluded-by-user.txt", ".ralph/status", "myenv/lib/x.py", "big.log"):
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text("x\n")
    (ws / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (ws / "big.log").write_bytes(b"b" * 5000)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "info" / "exclude").write_text("excluded-by-user.txt\n")
    rules = ignore_rules(exclude="excluded-by-user.txt\n", extra=["*.tmp"], prefixes=[".ralph-supervise"]).as_gitignore()
    store = SnapshotStore(ws, tmp_path / "state", skip=("node_modules", "__pycache__", "build"), max_file=1000)
    info = store.take(0, "start", None, now=time.time(), exclude=rules)
    assert sorted(store.files_in(info)) == [".env", ".gitignore", "app.log", "data/raw/a.csv", "excluded-by-user.txt",
                                            "keep.py", "scratch.tmp"]
    assert info.skipped == ("build", "data/cache/__pycache__", "data/node_modules", "myenv", "node_modules",
                            "pkg/__pycache__")
    assert info.not_stored == ("big.log",), "an ignored file over the limit is listed, not stored"
    assert SnapshotInfo.from_message(info.message(), info.commit).skipped == info.skipped
    assert info.skipped_bytes == {root: 2 for root in info.skipped} | {"myenv": 2 + len("home = /usr\n")}
    assert SnapshotInfo.from_message(info.message(), info.commit).skipped_bytes == info.skipped_bytes
    # `git clean -fdxq` takes every untracked and ignored file: restore brings them back byte for byte
    before = files_of(ws)
    subprocess.run(["git", "-C", str(ws), "clean", "-fdxq"], check=True)
    assert not (ws / ".env").exists()
    write_files(store, info, ws, select(store, info, []))
    after = files_of(ws)
    assert after[".env"] == before[".env"] and after["data/raw/a.csv"] == before["data/raw/a.csv"]
    assert {p for p in before if p not in after} == {
        "build/out.o", "node_modules/p/i.js", "data/node_modules/x.js", "data/cache/__pycache__/m.pyc",
        "pkg/__pycache__/m.pyc", "myenv/lib/x.py", "myenv/pyvenv.cfg", "big.log", ".ralph/status"}
    assert all(after[p] == before[p] for p in after)
    # An incremental snapshot keeps them (the watcher never names ignored paths), with the skipped roots
    (ws / "keep.py").write_text("y\n")
    later = take(store, 1, ["keep.py"])
    assert ".env" in store.files_in(later) and later.skipped == info.skipped
    (ws / "node_modules").mkdir()  # the clean took it: `npm install` brings it back, bigger
    (ws / "node_modules" / "big.js").write_bytes(b"j" * 1000)  # measured again ten minutes on
    soon = store.take(2, "iteration", ["keep.py"], now=time.time() + 60, exclude=rules)
    assert soon.skipped_bytes["node_modules"] == 2
    later = store.take(3, "iteration", ["keep.py"], now=time.time() + 601, exclude=rules)
    assert later.skipped_bytes["node_modules"] == 1000


def test_without_skip_names_ignored_files_stay_out_as_before(ws: Path) -> None:
    (ws / ".gitignore").write_text(".env\n")
    (ws / ".env").write_text("SECRET=1\n")
    (ws / "a.py").write_text("a\n")
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    assert sorted(store.files_in(take(store, 0))) == [".gitignore", "a.py"]


def test_the_store_is_private(ws: Path) -> None:
    (ws / "a.py").write_text("a\n")
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    take(store, 0)
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o700


def test_a_file_over_the_limit_is_listed_not_stored(ws: Path, tmp_path: Path) -> None:
    (ws / "small.txt").write_text("small\n")
    (ws / "grows.bin").write_bytes(b"g" * 100)
    (ws / "huge.bin").write_bytes(b"h" * 5000)
    store = SnapshotStore(ws, ws / ".ralph-supervise", max_file=1000)
    first = take(store, 0)
    assert first.not_stored == ("huge.bin",) and sorted(store.files_in(first)) == ["grows.bin", "small.txt"]
    (ws / "grows.bin").write_bytes(b"g" * 2000)
    second = take(store, 1, ["grows.bin"])
    assert second.not_stored == ("grows.bin", "huge.bin") and store.files_in(second) == ["small.txt"]
    with pytest.raises(SnapshotError, match="over --snapshot-max-file") as caught:
        select(store, second, ["huge.bin"])
    assert caught.value.kind == "missing"
    assert select(store, first, ["grows.bin"]) == ["grows.bin"]


def test_a_file_that_keeps_changing_while_read_is_listed_as_moved(ws: Path) -> None:
    (ws / "quiet.txt").write_text("still\n")
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    take(store, 0)
    # Another process appends without pause (a thread of ours would wait for the GIL while we read).
    writer = subprocess.Popen(["sh", "-c", "while :; do echo x >> busy.log.txt; done"], cwd=ws)
    try:
        time.sleep(0.05)
        seen = []
        deadline = time.monotonic() + 20  # a busy machine may not run the writer during one snapshot's reads
        while not any(info.moved for info in seen) and time.monotonic() < deadline:
            seen.append(take(store, len(seen) + 1, ["busy.log.txt", "quiet.txt"]))
    finally:
        writer.kill()
        writer.wait()
    assert all(info.moved in ((), ("busy.log.txt",)) for info in seen)
    assert seen[-1].moved == ("busy.log.txt",), "read again twice and still moving"
    assert all("busy.log.txt" in store.files_in(info) for info in seen), "stored as last read"


def test_the_budget_drops_the_oldest_snapshots_first_and_keeps_the_newest_three(ws: Path) -> None:
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    for n in range(8):
        (ws / "random.bin").write_bytes(os.urandom(100_000))  # does not compress: each version costs 100 kB
        take(store, n, ["random.bin"] if n else None)
    assert store.keep_within(0) == (0, store.size_on_disk()), "0: no budget to keep"
    dropped, size = store.keep_within(350_000)
    kept = store.list()
    assert dropped == 8 - len(kept) and len(kept) >= 3 and size <= 350_000
    assert [i.iteration for i in kept] == list(range(8 - len(kept), 8)), "oldest first"
    assert store.count() == len(kept)
    (ws / "random.bin").write_bytes(os.urandom(500_000))
    take(store, 8, ["random.bin"])
    store.keep_within(350_000)
    assert [i.iteration for i in store.list()] == [6, 7, 8], "the newest three stay even when they alone are over"


def test_a_broken_store_is_moved_aside_and_a_new_one_started(ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    state = ws / ".ralph-supervise"
    store = SnapshotStore(ws, state)
    take(store, 0)
    (state / "snapshots" / "HEAD").write_text("garbage\n")
    fresh = SnapshotStore(ws, state)
    fresh.open()
    assert fresh.moved_aside is not None and fresh.moved_aside.name.startswith("snapshots.corrupt-")
    assert fresh.list() == []
    assert take(fresh, 1).files == 1


def test_the_users_repository_and_git_config_never_apply(ws: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "file.txt").write_bytes(b"crlf\r\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\tautocrlf = true\n\texcludesfile = ~/.ignore\n")
    (home / ".ignore").write_text("file.txt\n")
    before = {p: p.read_bytes() for p in (ws / ".git").rglob("*") if p.is_file()}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(ws / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(ws / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(ws / ".git" / "objects"))
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    info = take(store, 0)
    assert store.files_in(info) == ["file.txt"]
    assert restored(store, info, tmp_path / "out")["file.txt"] == (b"crlf\r\n", 0o644)
    assert {p: p.read_bytes() for p in (ws / ".git").rglob("*") if p.is_file()} == before


def test_restore_reports_a_missing_iteration_or_path_in_one_line(ws: Path, tmp_path: Path) -> None:
    state = ws / ".ralph-supervise"

    def restore(iteration: int, *paths: str, to: str | None = None) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = restore_cmd.restore(ws, state, iteration, paths, to, out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    code, _, err = restore(1)
    assert code == 1 and err.count("\n") == 1 and "no snapshots of" in err
    (ws / "a.txt").write_text("a\n")
    store = SnapshotStore(ws, state)
    for n in (0, 1, 2, 5):
        take(store, n)
    code, _, err = restore(4)
    assert code == 1 and err.count("\n") == 1 and "iterations 0-2, 5" in err
    code, _, err = restore(2, "nope.txt", to=str(tmp_path / "x"))
    assert code == 1 and err == "ralph-supervise restore: nope.txt is not in the snapshot of iteration 2\n"
    code, _, err = restore(2, "/etc/passwd", to=str(tmp_path / "x"))
    assert code == 1 and "outside the workspace" in err
    assert not (tmp_path / "x").exists(), "nothing is written when a path is wrong"
    code, out, _ = restore(2, str(ws / "a.txt"), to=str(tmp_path / "x"))
    assert code == 0 and (tmp_path / "x" / "a.txt").read_text() == "a\n" and "restored 1 file " in out
    (ws / "a.txt").write_text("changed\n")
    code, out, _ = restore(2)  # into the workspace, no supervisor: a snapshot of the present first
    assert code == 0 and (ws / "a.txt").read_text() == "a\n"
    assert store.list()[-1].kind == "restore" and f"`{restore_command(0, ws)}` undoes" in out


def test_snapshots_lists_them_as_a_table_and_as_json(ws: Path) -> None:
    state = ws / ".ralph-supervise"
    out = io.StringIO()
    assert restore_cmd.list_snapshots(ws, state, as_json=False, out=out) == 0 and "no snapshots" in out.getvalue()
    (ws / "a.txt").write_text("a\n")
    store = SnapshotStore(ws, state)
    first = take(store, 0)
    take(store, 1)
    store.mark_trip(first.id, "destructive", time.time())
    out = io.StringIO()
    restore_cmd.list_snapshots(ws, state, as_json=True, out=out)
    listed = json.loads(out.getvalue())["snapshots"]
    assert [(s["iteration"], s["before_trip"]) for s in listed] == [(0, "destructive"), (1, None)]
    out = io.StringIO()
    restore_cmd.list_snapshots(ws, state, as_json=False, out=out)
    assert "before a trip (destructive)" in out.getvalue() and restore_command(1, ws) in out.getvalue()


def test_a_snapshot_message_round_trips() -> None:
    info = SnapshotInfo(id=3, iteration=7, kind="iteration", at="2026-12-01T00:00:00.000Z", files=2, bytes=9,
                        added=1, not_stored=("big.bin",), not_stored_count=1, moved=("\udce9.txt",),
                        modes={"key": 0o600})
    back = SnapshotInfo.from_message(info.message(), "abc")
    assert back == SnapshotInfo(**{**info.__dict__, "commit": "abc"})
    with pytest.raises(ValueError):
        SnapshotInfo.from_message('{"id": -1}', "abc")


def test_git_failures_are_told_apart() -> None:
    assert classify_failure("fatal: unable to write new index file: No space left on device") == "disk-full"
    assert classify_failure("error: insufficient permission for adding an object to repository database") == "no-access"
    assert classify_failure("fatal: not a git repository: '/x'") == "corrupt"
    assert classify_failure("error: object file .git/objects/ab/cd is empty\nfatal: loose object abcd is corrupt") == "corrupt"
    assert classify_failure("fatal: something else") == "failed"
    assert refused_path("error: d/fifo: unsupported file type\nfatal: Unable to process path d/fifo") == "d/fifo"
    assert refused_path("error: open(\"secret\"): Permission denied\nerror: unable to index file 'secret'") == "secret"
    assert refused_path("fatal: bad") is None


def test_kept_commits_survive_a_reset_and_a_gc_and_come_back_on_a_new_branch_only(ws: Path, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph_supervisor.snapshots import kept_commits

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True, text=True,
                              env=env).stdout

    git("init", "-q", "-b", "main")
    (ws / "a").write_text("a\n")
    git("add", "-A")
    git("commit", "-qm", "A")
    store = SnapshotStore(ws, tmp_path / "state")
    take(store, 0)
    assert kept_commits.keep(store) == 1 and kept_commits.keep(store) == 0, "a tip is kept once"
    for name in "BC":
        (ws / name).write_text(name)
        git("add", "-A")
        git("commit", "-qm", name)
        assert kept_commits.keep(store) == 1
    git("reset", "-q", "--hard", "HEAD~2")
    git("reflog", "expire", "--expire=now", "--all")
    git("gc", "-q", "--prune=now")
    listed = {k.subject: k for k in kept_commits.kept(store)}
    assert set(listed) == {"A", "B", "C"} and listed["A"].in_repository and not listed["C"].in_repository
    with pytest.raises(ValueError, match="exists"):
        kept_commits.bring_back(store, listed["C"].commit, "main")
    with pytest.raises(ValueError, match="no kept commit"):
        kept_commits.bring_back(store, "0000000", "x")
    with pytest.raises(ValueError, match="not a branch name"):
        kept_commits.bring_back(store, listed["C"].commit, "../x")
    assert kept_commits.bring_back(store, listed["C"].commit[:7], "rescued") == listed["C"].commit
    assert git("log", "--format=%s", "rescued").split() == ["C", "B", "A"] and git("rev-parse", "main").strip() == \
        listed["A"].commit
    # A repository too big to copy is not: one error, the store left as it is
    other = tmp_path / "big"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "f").write_text("f\n")
    subprocess.run(["git", "-C", str(other), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(other), "commit", "-qm", "f"], check=True, env=env)
    monkeypatch.setattr(kept_commits, "REPOSITORY_MAX", 10)
    big = SnapshotStore(other, tmp_path / "state-big")
    take(big, 0)
    with pytest.raises(SnapshotError, match="not kept"):
        kept_commits.keep(big)
    assert kept_commits.kept(big) == []


def test_the_refs_read_again_only_where_a_file_was_replaced_see_what_another_process_wrote(ws: Path) -> None:
    """The store remembers each ref file by its inode: a ref rewritten in place by another process (a
    `restore`, git itself), refs packed by git, and refs deleted are all seen at the next read."""
    store = SnapshotStore(ws, ws / ".ralph-supervise")
    (ws / "a.txt").write_text("1")
    first = take(store, 1)
    (ws / "a.txt").write_text("2")
    second = take(store, 2)
    assert [i.commit for i in store.list()] == [first.commit, second.commit]
    ref = store.path / "refs" / "snapshots" / f"{second.id:08d}"
    assert ref.is_file()
    # Another process moves snapshot 2's ref onto snapshot 1's commit the way git does: a new file renamed in.
    (ref.parent / "new").write_text(first.commit + "\n")
    os.rename(ref.parent / "new", ref)
    assert store.count() == 2 and not store.holds(second) and store._refs()[f"{second.id:08d}"] == first.commit
    store.git.run("pack-refs", "--all", "--prune")
    assert not ref.exists() and store.count() == 2
    assert store._refs() == {f"{first.id:08d}": first.commit, f"{second.id:08d}": first.commit}
    store.git.run("update-ref", "-d", f"refs/snapshots/{first.id:08d}")
    assert store._refs() == {f"{second.id:08d}": first.commit}


def test_a_snapshots_commit_is_the_object_git_commit_tree_writes(ws: Path, tmp_path: Path) -> None:
    """The commit is written by hand (commit_object.py): the same bytes under the same id as commit-tree's,
    readable by git, and the store passes `git fsck`."""
    (ws / "a.txt").write_text("one\n")
    store = SnapshotStore(ws, tmp_path / "state")
    first = take(store, 1)
    (ws / "a.txt").write_text("two\n")
    second = take(store, 2, ["a.txt"])
    git = store.git
    for info in (first, second):
        raw = git.run("cat-file", "commit", info.commit)
        tree = raw.split(b"\n", 1)[0].split()[1].decode()
        message = raw.partition(b"\n\n")[2]
        when = int(raw.split(b"\n")[1].split()[-2])
        again = git.run("commit-tree", tree, input=message, now=when).decode().strip()
        assert again == info.commit
        assert SnapshotInfo.from_message(message.decode(), info.commit) == info
    assert store.latest() == second and store.find(1) == first
    git.run("fsck", "--strict", "--no-dangling")
    loose = [p for p in (store.path / "objects").rglob("*") if p.is_file() and len(p.parent.name) == 2]
    assert loose and not [p for p in loose if p.name.endswith(".tmp")]  # written whole, renamed into place
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o444 for p in loose if p.name == second.commit[2:])
    assert commit_object.write_commit(store.path / "objects", "ab" * 32, b"{}", 0.0) is None  # SHA-256: commit-tree



def test_a_snapshot_between_two_others_is_stored_without_git_and_git_takes_over_where_it_must(
        ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few changed files are stored by hand (by_hand.py): no git process for the index, the tree or the diff,
    and the tree is the one git makes of the same changes. Where the parent's trees are packed and not known
    (another supervisor over the same store, after a repack), git's index catches up with the newest snapshot
    and git takes it, counting the same."""
    for name in ("keep.txt", "edit.txt", "gone.txt"):
        (ws / name).write_text(name)
    store = SnapshotStore(ws, tmp_path / "state")
    first = take(store, 1)
    commands: list[str] = []
    run = store.git.run

    def recorded(*args: str, **kw: object) -> bytes:
        commands.append(next(a for a in args if not a.startswith("-") and "=" not in a))
        return run(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store.git, "run", recorded)
    (ws / "edit.txt").write_text("edited, longer")
    (ws / "gone.txt").unlink()
    (ws / "sub").mkdir()
    (ws / "sub" / "new.txt").write_text("new")
    second = take(store, 2, ["edit.txt", "gone.txt", "sub/new.txt"])
    assert {"update-index", "write-tree", "diff-tree", "commit-tree"}.isdisjoint(commands), commands
    assert (second.added, second.modified, second.deleted) == (1, 1, 1)
    assert second.files == 3 and second.bytes == first.bytes + len("edited, longer") - len("edit.txt") + 3 - 8
    index = tmp_path / "git-index"  # what git makes of the same changes, in an index of its own
    whole = ("-c", "core.splitIndex=false")  # a split index of its own would expire the store's shared one
    run(*whole, "read-tree", first.commit, index=index)
    run(*whole, "update-index", "--add", "--remove", "-z", "--stdin", input=b"edit.txt\0gone.txt\0sub/new.txt\0",
        index=index)
    tree = run("rev-parse", f"{second.commit}^{{tree}}").decode().strip()
    assert run(*whole, "write-tree", index=index).decode().strip() == tree
    assert (store.path / "ralph-index-behind").exists(), "git's own index is behind the newest snapshot"
    run("repack", "-adq")
    run("prune-packed")
    again = SnapshotStore(ws, tmp_path / "state")  # knows no tree: the packed ones cannot be opened by hand
    (ws / "keep.txt").write_text("kept, changed")
    third = take(again, 3, ["keep.txt"])
    assert (third.added, third.modified, third.deleted) == (0, 1, 0)
    assert third.bytes == second.bytes + len("kept, changed") - len("keep.txt")
    assert not (store.path / "ralph-index-behind").exists()
    assert sorted(again.files_in(third)) == ["edit.txt", "keep.txt", "sub/new.txt"]
    assert again.git.run("diff-index", "--cached", "--name-only", third.commit) == b"", "the index is the snapshot"

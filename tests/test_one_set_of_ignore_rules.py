"""One set of ignore rules (`evidence/ignore.py`) for the workspace watcher and the snapshot store: whatever rule
the rules hold (a built-in name, a folder ignored whole, the user's `--ignore`, `.git/info/exclude`, the root's
`.gitignore`) the watcher and the store's git decide every path the same way, and a rule added there holds for
both, with the real watcher, the real keeper and real git."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ralph_supervisor.evidence.ignore import IgnoreRules, load_ignore_rules
from ralph_supervisor.evidence.workspace import Workspace
from ralph_supervisor.settings import load_settings
from ralph_supervisor.snapshots.keeper import SnapshotKeeper
from ralph_supervisor.snapshots.store import SnapshotStore
from tests.helpers import state_dir_of

PATHS = (
    "keep.py", "src/app.py", "src/deep/mod.py", "notes.md",
    "node_modules/pkg/index.js", "src/__pycache__/app.pyc", ".ralph/status", ".tox/log.txt", "sub/.venv/lib.py",
    "st/state.json",                   # the state folder, inside the workspace
    "env/lib/site.py", "env/pyvenv.cfg",  # a virtual environment the watcher found (a folder ignored whole)
    "app.log", "src/debug.log",        # the root .gitignore
    "excluded-by-user.txt",            # .git/info/exclude
    "scratch.tmp", "generated/out.c",  # the user's --ignore
    "vendor/lib/x.go",                 # only ignored when a rule is added for it (below)
)
EXTRA = ("*.tmp", "generated/")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for path in PATHS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"{path}\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("*.log\n")
    (root / ".git" / "info" / "exclude").write_text("excluded-by-user.txt\n")
    return root


def stored_by_the_snapshots(ws: Path, tmp_path: Path, rules: IgnoreRules) -> set[str]:
    """What a snapshot that stores no ignored file keeps, its git told the rules as `info/exclude`."""
    store = SnapshotStore(ws, tmp_path / "state")
    info = store.take(0, "start", None, now=time.time(), exclude=rules.as_gitignore())
    return set(store.files_in(info)) - {".gitignore"}


def kept_by_the_watcher(rules: IgnoreRules) -> set[str]:
    return {path for path in PATHS if not rules.is_ignored(path, is_dir=False)}


def added(rules: IgnoreRules, how: str) -> IgnoreRules:
    """`rules` with one more rule that ignores vendor/, of each kind the rules hold."""
    if how == "name":
        return IgnoreRules(rules.gitignores, rules.extra, rules.exclude, rules.prefixes, rules.names | {"vendor"})
    if how == "prefix":
        return rules.with_prefix("vendor")
    return rules


@pytest.mark.parametrize("how", ["none", "name", "prefix"])
def test_the_watcher_and_the_snapshots_ignore_the_same_paths(ws: Path, tmp_path: Path, how: str) -> None:
    rules = added(load_ignore_rules(ws, state_dir=ws / "st", extra=EXTRA).with_prefix("env"), how)
    kept = kept_by_the_watcher(rules)
    assert kept >= {"keep.py", "src/app.py", "src/deep/mod.py", "notes.md"}
    assert not kept & {"node_modules/pkg/index.js", "st/state.json", "env/lib/site.py", "app.log",
                       "excluded-by-user.txt", "scratch.tmp", "generated/out.c"}, "every kind of rule is in play"
    assert ("vendor/lib/x.go" in kept) == (how == "none")
    assert stored_by_the_snapshots(ws, tmp_path, rules) == kept


def test_a_user_ignore_rule_holds_for_the_watcher_and_the_keepers_snapshots(ws: Path, tmp_path: Path) -> None:
    """`--ignore vendor/` given once: the watcher reports no change under it, and the keeper's snapshots treat it
    as ignored (with `--snapshot-skip vendor`: listed as skipped, not stored), as they do `node_modules`."""
    flags = {"ignore": ("vendor/",), "snapshot_skip": ("vendor", "node_modules")}
    settings = load_settings(workspace=str(ws), flags=flags, env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]})
    watcher = Workspace(ws, state_dir=settings.state_dir, ignore=settings.ignore, poll_interval=0.05)
    keeper = SnapshotKeeper(settings)
    watcher.start()
    try:
        assert watcher.wait_primed(30)
        keeper.start(0, lambda: watcher.ignored_prefixes)
        assert keeper.idle(30)
        watcher.begin_iteration("1")
        keeper.iteration_started(1)
        (ws / "vendor" / "lib" / "x.go").write_text("changed\n")
        (ws / "vendor" / "new.go").write_text("new\n")
        (ws / "keep.py").write_text("changed\n")
        delta = watcher.end_iteration("1")
        keeper.iteration_ended(1, net=delta)
        assert keeper.idle(30)
    finally:
        keeper.close(1)
        watcher.stop()
    assert set(delta.start) == {"keep.py"}, "the watcher saw no change under vendor/"
    store = SnapshotStore(ws, state_dir_of(ws))
    snapshots = store.list()
    assert [i.kind for i in snapshots] == ["start", "iteration"]
    for info in snapshots:
        files = store.files_in(info)
        assert "vendor" in info.skipped and "node_modules" in info.skipped
        assert not [f for f in files if f.startswith(("vendor/", "node_modules/"))]
        assert "keep.py" in files and "app.log" in files, "ignored files are stored but for skipped trees"

"""Many loops on one box: the registry, `ls`, `watch --all`, with real files, processes and signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ralph_supervisor import fleet, fleet_view, registry, store
from ralph_supervisor.values import parse_time
from tests.helpers import state_dir_of
from tests.helpers.supervise import REPO, events, start, supervise_argv, wait_for

FAST = ("--no-echo", "--log-format", "json", "--grace", "1")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(supervise_argv(*args), capture_output=True, text=True, timeout=timeout, env=full,
                          stdin=subprocess.DEVNULL)


def state_folder(workspace: Path, **state: Any) -> Path:
    folder = workspace / ".ralph-supervise"
    folder.mkdir(parents=True)
    if state:
        (folder / "state.json").write_text(json.dumps(state))
    return folder


def write_entry(folder: Path, workspace: Path, *, pid: int, start_ticks: int | None = None,
                **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state_dir = workspace / ".ralph-supervise"
    data = {"version": 1, "pid": pid, "start_ticks": start_ticks, "boot_id": registry.current_boot_id(),
            "workspace": str(workspace), "state_dir": str(state_dir), "name": workspace.name,
            "started_at": "2026-12-01T10:00:00.000Z", **extra}
    path = folder / registry.entry_file_name(workspace, state_dir)
    path.write_text(json.dumps(data))
    return path


def dead_pid() -> int:
    """The pid of a process that existed a moment ago and has been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# -- where the registry is ----------------------------------------------------------------------


def test_the_registry_is_the_override_else_the_runtime_dir_else_local_state(tmp_path: Path):
    runtime = tmp_path / "run"
    runtime.mkdir()
    assert registry.registry_dir({"RALPH_SUPERVISE_REGISTRY": str(tmp_path / "x"),
                                  "XDG_RUNTIME_DIR": str(runtime)}) == tmp_path / "x"
    assert registry.registry_dir({"XDG_RUNTIME_DIR": str(runtime)}) == runtime / "ralph-supervise"
    # A runtime dir that is not there, or not absolute, is no runtime dir: the state folder is used.
    missing = {"XDG_RUNTIME_DIR": str(tmp_path / "gone"), "XDG_STATE_HOME": str(tmp_path / "state")}
    assert registry.registry_dir(missing) == tmp_path / "state" / "ralph-supervise"
    assert registry.registry_dir({"XDG_RUNTIME_DIR": "run", "XDG_STATE_HOME": "rel"}) == (
        Path.home() / ".local" / "state" / "ralph-supervise")
    # ls also looks in the other places a supervisor of this user may have registered, when they exist.
    state_home = tmp_path / "state"
    (state_home / "ralph-supervise").mkdir(parents=True)
    dirs = registry.reading_dirs({"XDG_RUNTIME_DIR": str(runtime), "XDG_STATE_HOME": str(state_home)})
    assert dirs[0] == runtime / "ralph-supervise" and state_home / "ralph-supervise" in dirs
    assert registry.reading_dirs({"RALPH_SUPERVISE_REGISTRY": str(tmp_path / "x")}) == [tmp_path / "x"]


def test_an_entry_is_named_after_the_folder_and_unique_per_state_folder():
    a = registry.entry_file_name(Path("/home/me/src/my project!"), Path("/home/me/src/my project!/.ralph-supervise"))
    b = registry.entry_file_name(Path("/home/me/src/my project!"), Path("/elsewhere/state"))
    assert a.startswith("my-project-") and a.endswith(".json") and a != b
    assert registry.entry_file_name(Path("/"), Path("/.ralph-supervise")).startswith("root-")


# -- entries ------------------------------------------------------------------------------------


def test_register_writes_a_private_entry_and_remove_takes_only_its_own(tmp_path: Path):
    folder = tmp_path / "reg"
    ws = tmp_path / "proj"
    entry = registry.register(workspace=ws, state_dir=ws / ".ralph-supervise", name="proj", command=("ralph",),
                              metrics_port=9101, folder=folder)
    assert entry.path.parent == folder and oct(entry.path.stat().st_mode & 0o777) == "0o600"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    read = registry.read_registry(folder)
    assert read.entries == (entry,) and read.problems == ()
    assert registry.is_alive(entry, registry.start_ticks(os.getpid()), registry.current_boot_id())
    assert [p.name for p in folder.iterdir()] == [entry.path.name]  # no temp file left
    # A successor for the same folder replaced the entry: our remove() leaves its entry alone.
    successor = {**entry.to_dict(), "pid": entry.pid + 1}
    entry.path.write_text(json.dumps(successor))
    entry.remove()
    assert entry.path.exists()
    entry.path.write_text(json.dumps(entry.to_dict()))
    entry.remove()
    assert not entry.path.exists()
    entry.remove()  # twice is harmless


def test_an_ended_entry_keeps_its_end_and_code_is_not_alive_and_a_successor_replaces_it(tmp_path: Path):
    folder = tmp_path / "reg"
    ws = tmp_path / "proj"
    entry = registry.register(workspace=ws, state_dir=ws / "s", name="proj", command=("ralph",), folder=folder)
    ended = entry.mark_ended(2, at="2026-12-02T04:12:00.000Z")
    assert ended is not None and ended.ended and (ended.ended_at, ended.exit_code) == ("2026-12-02T04:12:00.000Z", 2)
    assert registry.read_registry(folder).entries == (ended,)
    assert oct(entry.path.stat().st_mode & 0o777) == "0o600"
    # Our own pid still runs, yet the entry says it ended: not alive, whatever holds the pid now.
    assert not registry.is_alive(ended, registry.start_ticks(os.getpid()), registry.current_boot_id())
    assert entry.mark_ended(0) is None and ended.mark_ended(0) is None  # marked once
    entry.remove()
    assert entry.path.exists(), "an ended entry stays until ls --prune"
    successor = {**entry.to_dict(), "pid": entry.pid + 1}  # a new supervisor for the same folder
    store.atomic_write_bytes(entry.path, json.dumps(successor).encode())
    assert entry.mark_ended(1) is None  # the predecessor cannot mark its successor's entry
    assert not registry.read_registry(folder).entries[0].ended


def test_prune_never_removes_a_running_supervisors_entry_and_forget_removes_its_folders(tmp_path: Path):
    folder = tmp_path / "reg"
    ws = tmp_path / "proj"
    entry = registry.register(workspace=ws, state_dir=ws / "s", name="proj", command=(), folder=folder)
    ended = entry.mark_ended(0)
    assert ended is not None
    registry.register(workspace=ws, state_dir=ws / "s", name="proj", command=(), folder=folder)  # started again
    assert registry.prune([entry.path]) == ([], []) and entry.path.exists()  # read as ended, running by now
    ended = registry.parse_entry(entry.path, entry.path.read_bytes()).mark_ended(0)
    other = registry.register(workspace=tmp_path / "o", state_dir=tmp_path / "o" / "s", name="o", command=(),
                              folder=folder)
    assert ended is not None and registry.forget_state_dir(ws / "s", [folder]) == [entry.path]
    assert [e.path for e in registry.read_registry(folder).entries] == [other.path]
    assert registry.forget_state_dir(tmp_path / "o" / "s", [folder]) == []  # running: left alone


def test_an_unwritable_registry_is_one_clear_error(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(registry.RegistryError, match="cannot write .*file/"):
        registry.register(workspace=tmp_path, state_dir=tmp_path / "s", name="x", command=(), folder=blocker)


def test_liveness_is_the_pid_naming_the_process_that_registered():
    entry = registry.Entry(Path("e.json"), pid=10, workspace="/w", state_dir="/w/s", name="w", started_at="",
                           start_ticks=500, boot_id="boot-a")
    assert registry.is_alive(entry, 500, "boot-a")
    assert not registry.is_alive(entry, None, "boot-a")  # no such process
    assert not registry.is_alive(entry, 501, "boot-a")  # the pid names another process now
    assert not registry.is_alive(entry, 500, "boot-b")  # written before a reboot
    old = registry.Entry(Path("e.json"), pid=10, workspace="/w", state_dir="/w/s", name="w", started_at="")
    assert registry.is_alive(old, 123, "boot-b")  # without identity fields: the pid alone decides


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.dictionaries(st.sampled_from(["pid", "workspace", "state_dir", "name", "command",
                                                  "start_ticks", "metrics_port", "boot_id", "started_at"]),
                                 st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                                           st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3)))
                 .map(lambda d: json.dumps(d).encode())))
def test_parsing_any_bytes_gives_an_entry_or_a_value_error(raw: bytes):
    try:
        entry = registry.parse_entry(Path("x.json"), raw)
    except ValueError:
        return
    assert entry.pid > 0 and entry.workspace and entry.state_dir and isinstance(entry.name, str)
    assert all(isinstance(c, str) for c in entry.command)
    assert entry.metrics_port is None or 0 <= entry.metrics_port <= 65535
    assert registry.parse_entry(Path("x.json"), json.dumps(entry.to_dict()).encode()) == entry


def test_a_folder_full_of_garbage_yields_what_it_can_and_one_line(tmp_path: Path):
    folder = tmp_path / "reg"
    good = write_entry(folder, tmp_path / "good", pid=os.getpid())
    (folder / "cut.json").write_text('{"pid": 12, "workspace": ')
    (folder / "list.json").write_text("[1, 2]")
    (folder / "nopid.json").write_text('{"workspace": "/w", "state_dir": "/w/s"}')
    (folder / "badpid.json").write_text('{"pid": true, "workspace": "/w", "state_dir": "/w/s"}')
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (folder / "huge.json").write_bytes(b" " * (registry.ENTRY_MAX_BYTES + 10))
    (folder / "dir.json").mkdir()
    (folder / "README").write_text("not ours, not counted")
    (folder / ".proj.json.abc.tmp").write_text("{")  # an atomic write in progress
    listing = registry.read_registry(folder)
    assert [e.path for e in listing.entries] == [good]
    assert len(listing.garbage) == 7
    assert len(listing.problems) == 1
    assert listing.problems[0].startswith(f"7 file(s) in {folder} are not registry entries")


def test_missing_and_misplaced_registry_folders_are_one_line_each(tmp_path: Path):
    missing = registry.read_registry(tmp_path / "nope")
    assert missing.missing and missing.entries == () and "does not exist" in missing.problems[0]
    (tmp_path / "afile").write_text("x")
    misplaced = registry.read_registry(tmp_path / "afile")
    assert not misplaced.missing and "is not a folder" in misplaced.problems[0]


# -- rows ---------------------------------------------------------------------------------------


def test_a_row_shows_what_the_state_folder_says_including_keys_other_parts_add(tmp_path: Path):
    ws = tmp_path / "proj"
    state_folder(ws, state="OPEN", trigger="cost-budget", iteration=12, tokens_used=48_200, cost_used=3.5,
                 final=True, limit_until="2026-12-01T15:28:00.000Z", updated_at="2026-12-01T10:05:00.000Z")
    entry = registry.parse_entry(Path("e.json"), json.dumps(
        {"pid": 7, "workspace": str(ws), "state_dir": str(ws / ".ralph-supervise"), "name": "nightly",
         "started_at": "2026-12-01T10:00:00.000Z"}).encode())
    row = fleet.loop_row(entry, alive=True)
    assert (row.state, row.trigger, row.iteration, row.tokens_used, row.cost_usd, row.final) == (
        "OPEN", "cost-budget", 12, 48_200, 3.5, True)
    assert "stopped for good" in row.note and "usage limit until" in row.note and not row.ended
    now = parse_time("2026-12-01T12:13:00.000Z")
    assert now is not None
    name, state, trigger, it, spend, pid, since, alive, where, _ = fleet.cells(row, now)
    assert (name, state, trigger, it, spend, pid, since, alive, where) == (
        "nightly", "OPEN", "cost-budget", "12", "48.2k tok $3.50", "7", "2h13m", "yes", str(ws))


def test_an_ended_loop_reads_ended_with_its_time_and_code_and_no_limit_wait(tmp_path: Path):
    ws = tmp_path / "proj"
    state_folder(ws, state="OPEN", trigger="no-progress", iteration=9, final=True,
                 limit_until="2026-12-01T15:28:00.000Z")
    entry = registry.parse_entry(Path("e.json"), json.dumps(
        {"pid": 7, "workspace": str(ws), "state_dir": str(ws / ".ralph-supervise"), "name": "nightly",
         "started_at": "2026-12-01T10:00:00.000Z", "ended_at": "2026-12-01T12:00:00.000Z",
         "exit_code": 2}).encode())
    row = fleet.loop_row(entry, alive=False)
    assert row.ended and (row.ended_at, row.exit_code) == ("2026-12-01T12:00:00.000Z", 2)
    assert row.note.startswith("ended ") and ", exit 2; stopped for good" in row.note
    assert "usage limit" not in row.note  # the wait ended with the supervisor
    assert fleet.cells(row, time.time())[7] == "ended"
    assert row.to_json()["ended"] is True and row.to_json()["exit_code"] == 2


@pytest.mark.parametrize("content, note", [
    (None, "no state folder"),
    ("", "state.json is not valid JSON"),
    ('{"state": "AJAR", "iteration": -1, "tokens_used": "many", "cost_usd": NaN}', "state.json has no valid state"),
    ('["a list"]', "state.json is not a JSON object"),
])
def test_a_bad_state_file_is_a_note_on_its_row_not_an_error(tmp_path: Path, content: str | None, note: str):
    ws = tmp_path / "w"
    if content is not None:
        state_folder(ws)
        (ws / ".ralph-supervise" / "state.json").write_text(content)
    entry = registry.Entry(Path("e.json"), pid=1, workspace=str(ws), state_dir=str(ws / ".ralph-supervise"),
                           name="w", started_at="")
    row = fleet.loop_row(entry, alive=False)
    assert row.note.startswith(note) and row.state == "?"
    assert row.iteration is None and row.tokens_used is None and row.cost_usd is None
    assert fleet.cells(row, time.time())[4] == "-"


def test_the_table_is_aligned_with_one_header(tmp_path: Path):
    rows = [fleet.LoopRow("a", "/w/a", "/w/a/s", 1, True, "", "CLOSED", "none", 3, 10, None, None, False, None,
                          "", "e1"),
            fleet.LoopRow("long-name", "/w/b", "/w/b/s", 12345, False, "", "OPEN", "stall", 100, None, None, None,
                          False, None, "", "e2")]
    lines = fleet.table(rows, time.time())
    assert lines[0].split() == list(fleet.COLUMNS)
    starts = {line.index("/w/") for line in lines[1:]}
    assert len(starts) == 1 and lines[0].index("WORKSPACE") in starts
    assert lines[2].split()[:8] == ["long-name", "OPEN", "stall", "100", "-", "12345", "?", "STALE"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.builds(
    fleet.LoopRow, name=st.text(max_size=30), workspace=st.text(max_size=80), state_dir=st.text(max_size=5),
    pid=st.integers(1, 2**22), alive=st.booleans(), since=st.one_of(st.just(""), st.text(max_size=30)),
    state=st.sampled_from(["CLOSED", "HALF_OPEN", "OPEN", "?"]), trigger=st.text(max_size=20),
    iteration=st.one_of(st.none(), st.integers(0, 10**9)), tokens_used=st.one_of(st.none(), st.integers(0, 10**12)),
    cost_usd=st.one_of(st.none(), st.floats(0, 1e6)), limit_until=st.none(), final=st.booleans(),
    updated_at=st.one_of(st.none(), st.text(max_size=30)), note=st.text(max_size=60), entry=st.text(max_size=5)),
    max_size=6))
def test_any_rows_render_as_a_table_and_as_a_live_frame(rows: list[fleet.LoopRow]):
    now = time.time()
    assert len(fleet.table(rows, now)) == len(rows) + 1
    console = Console(width=120, record=True, file=open(os.devnull, "w"))
    console.print(fleet_view.render(rows, ["a problem"], now))
    text = console.export_text()
    assert "a problem" in text and f"{len(rows)} loop" in text


# -- the command --------------------------------------------------------------------------------


def test_ls_lists_live_and_stale_entries_says_what_it_skipped_and_prune_cleans(tmp_path: Path):
    folder = tmp_path / "reg"
    env = {"RALPH_SUPERVISE_REGISTRY": str(folder)}
    live_ws, dead_ws, reused_ws = tmp_path / "live", tmp_path / "dead", tmp_path / "reused"
    state_folder(live_ws, state="HALF_OPEN", trigger="no-progress", iteration=4, tokens_used=999)
    state_folder(dead_ws, state="CLOSED", iteration=2)
    live = write_entry(folder, live_ws, pid=os.getpid(), start_ticks=registry.start_ticks(os.getpid()))
    dead = write_entry(folder, dead_ws, pid=dead_pid())
    reused = write_entry(folder, reused_ws, pid=os.getpid(), start_ticks=1)  # our pid, another start time
    (folder / "junk.json").write_text("{{{")
    (folder / "keep.json").mkdir()

    shown = cli("ls", env=env)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "STATE", "TRIGGER"] and len(lines) == 4
    by_name = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_name["live"][:7] == ["live", "HALF_OPEN", "no-progress", "4", "999", "tok", str(os.getpid())]
    assert by_name["live"][8:10] == ["yes", str(live_ws)]
    assert "STALE" in by_name["dead"] and "STALE" in by_name["reused"] and "yes" not in by_name["dead"]
    assert shown.stderr.count("\n") == 1 and "2 file(s)" in shown.stderr and "junk.json" in shown.stderr

    as_json = json.loads(cli("ls", "--json", env=env).stdout)
    assert sorted((r["name"], r["alive"]) for r in as_json) == [("dead", False), ("live", True), ("reused", False)]
    assert next(r for r in as_json if r["name"] == "live")["state_dir"] == str(live_ws / ".ralph-supervise")

    pruned = cli("ls", "--prune", env=env)
    assert pruned.returncode == 0 and "removed 3 ended, stale or unreadable entries" in pruned.stderr
    assert [line.split()[0] for line in pruned.stdout.splitlines()[1:]] == ["live"]
    assert sorted(p.name for p in folder.iterdir()) == sorted([live.name, "keep.json"])
    assert not dead.exists() and not reused.exists()
    again = cli("ls", "--prune", env=env)
    assert "removed" not in again.stderr and "1 file(s)" in again.stderr  # the folder named .json stays


def test_ls_with_no_registry_yet_says_so_in_one_line(tmp_path: Path):
    env = {"RALPH_SUPERVISE_REGISTRY": str(tmp_path / "never")}
    shown = cli("ls", env=env)
    assert shown.returncode == 0 and shown.stdout == ""
    assert shown.stderr.count("\n") == 1 and "does not exist" in shown.stderr
    listed = cli("ls", "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    bad = cli("ls", "--frobnicate", env=env)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--frobnicate" in bad.stderr


def read_only_env() -> list[str] | None:
    """A command prefix that runs its command with `$RO` mounted read-only (root: a private mount namespace)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        return None
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" && exec "$@"', "ro"]


@pytest.mark.slow
def test_a_read_only_registry_costs_a_warning_not_the_loop_and_ls_still_lists(tmp_path: Path):
    prefix = read_only_env()
    if prefix is None:
        pytest.skip("root without unshare: cannot make a read-only folder that root cannot write")
    folder = tmp_path / "reg"
    ws = tmp_path / "ws"
    ws.mkdir()
    state_folder(tmp_path / "other", state="CLOSED", iteration=1)
    write_entry(folder, tmp_path / "other", pid=dead_pid())
    if not prefix:
        folder.chmod(0o500)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RALPH_SUPERVISE_REGISTRY": str(folder), "RO": str(folder)}
    probe = subprocess.run([*prefix, "true"], env=env, capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {probe.stderr.strip()}")
    run = subprocess.run([*prefix, *supervise_argv("run", *FAST, "-w", str(ws), "--", "sh", "-c", "exit 3")],
                         env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 3, run.stderr  # the loop ran and its code came through
    warning = events(state_dir_of(ws), "registry_unwritable")
    assert len(warning) == 1 and str(folder) in warning[0]["detail"]
    shown = subprocess.run([*prefix, *supervise_argv("ls", "--prune")], env=env, capture_output=True, text=True,
                           timeout=30)
    assert shown.returncode == 0
    assert [line.split()[0] for line in shown.stdout.splitlines()[1:]] == ["other"]
    problems = [line for line in shown.stderr.splitlines() if "removed" not in line]
    assert len(problems) == 2, shown.stderr
    assert "is read-only" in problems[0] and "could not remove 1 entry" in problems[1]
    if not prefix:
        folder.chmod(0o700)


@pytest.mark.slow
def test_many_loops_are_listed_watched_and_cleaned_up(tmp_path: Path, private_registry: Path):
    """Two loops side by side, a second supervisor refused for one of them, one killed (stale), one stopped."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    alpha.mkdir()
    beta.mkdir()
    first = start(alpha, "run", *FAST, "--name", "a-loop", "--", "sleep", "600")
    twin = start(alpha, "run", *FAST, "--", "sleep", "600")  # the same folder, at once
    other = start(beta, "run", *FAST, "--", "sleep", "600")
    procs = [first, twin, other]
    try:
        # One of the two for alpha is refused; the other runs on. Which one wins the lock is the race's.
        wait_for(lambda: first.poll() is not None or twin.poll() is not None, what="one alpha supervisor to give up")
        loser, winner = (first, twin) if first.poll() is not None else (twin, first)
        assert loser.returncode == 1 and b"already running" in loser.communicate(timeout=10)[1]

        def listed() -> list[dict[str, Any]]:
            rows = json.loads(cli("ls", "--json").stdout)
            return rows if len(rows) == 2 and all(r["state"] == "CLOSED" for r in rows) else []

        rows = {Path(r["workspace"]).name: r for r in wait_for(listed, what="both loops in ls")}
        assert rows["alpha"]["pid"] == winner.pid and rows["beta"]["pid"] == other.pid
        assert rows["alpha"]["name"] == ("a-loop" if winner is first else "alpha") and rows["beta"]["name"] == "beta"
        assert all(r["alive"] for r in rows.values())
        assert len(list(private_registry.iterdir())) == 2

        frame = cli("watch", "--all", "--once", env={"COLUMNS": "200"})
        assert frame.returncode == 0 and "2 loops (2 CLOSED)" in frame.stdout
        assert str(alpha) in frame.stdout and str(beta) in frame.stdout

        other.send_signal(signal.SIGKILL)  # no chance to clean up: its entry stays, stale
        other.wait(timeout=10)
        stale = wait_for(lambda: [r for r in json.loads(cli("ls", "--json").stdout) if not r["alive"]],
                         what="the killed loop shown as stale")
        assert [r["workspace"] for r in stale] == [str(beta)]
        assert "STALE" in cli("ls").stdout
        cli("ls", "--prune")
        assert [r["workspace"] for r in json.loads(cli("ls", "--json").stdout)] == [str(alpha)]

        winner.send_signal(signal.SIGTERM)
        assert winner.wait(timeout=30) == 143
        ended = json.loads(cli("ls", "--json").stdout)  # still listed, marked ended, until ls --prune
        assert [(r["workspace"], r["alive"], r["ended"], r["exit_code"]) for r in ended] == [
            (str(alpha), False, True, 143)]
        assert parse_time(ended[0]["ended_at"]) is not None and ", exit 143" in ended[0]["note"]
        line = cli("ls").stdout.splitlines()[1].split()
        assert "ended" in line and line[line.index("ended") + 1] == str(alpha), line  # ALIVE, then WORKSPACE
        frame = cli("watch", "--all", "--once", env={"COLUMNS": "200"})
        assert "1 loop (1 ended)" in frame.stdout, frame.stdout
        status = json.loads(cli("status", "--json", "-w", str(alpha)).stdout)
        assert not status["supervisor"]["running"] and status["state"] == "CLOSED"
        pruned = cli("ls", "--prune")
        assert "removed 1 ended, stale or unreadable entry" in pruned.stderr
        assert json.loads(cli("ls", "--json").stdout) == []
        assert list(private_registry.iterdir()) == []
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)

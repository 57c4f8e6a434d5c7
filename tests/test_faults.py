"""Fault injection against the real supervisor process: it is killed, starved of disk, fed garbage,
flooded and raced, and must lose nothing it can keep, say so once, and exit with the right code.

Every run carries a unique environment marker (see helpers/fault_procs.py), so "no process left
behind" is checked from /proc, independently of the supervisor's view of its tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from ralph_supervisor.process.frozen import held
from tests.helpers.disks import DiskUnavailable, loop_mounted_ext4
from tests.helpers.fault_big_line import block
from tests.helpers.fault_binary import expected as binary_output
from tests.helpers.fault_procs import (
    MARK_VAR,
    cli,
    identities,
    marked,
    new_mark,
    peak_rss,
    read_state,
    running,
    status,
    still_alive,
)
from tests.helpers.runs import FAST, Run
from tests.helpers.supervise import LOOP, REPO, events, history, loop_env, wait_for
from tests.helpers import state_dir_of

HELPERS = Path(__file__).resolve().parent / "helpers"
MiB = 1 << 20


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    try:
        yield made
    finally:
        for run in made:
            run.cleanup()


def new_run(runs: list[Run], workspace: Path, state_dir: Path | None = None) -> Run:
    run = Run(workspace, state_dir)
    runs.append(run)
    return run


def no_internal_errors(run: Run) -> None:
    text = run.stderr.decode(errors="replace")
    assert "internal error" not in text and "Traceback" not in text, text[-2000:]
    bad = [e for e in run.logged() if e.get("event") in ("supervisor_failed", "supervisor_task_failed", "tick_failed")]
    assert bad == [], bad


# ------------------------------------------------------------------------------------------- SIGKILL


def test_sigkill_mid_iteration_then_restart_keeps_breaker_and_ledger_and_leaves_no_orphan(
        tmp_path: Path, runs: list[Run]) -> None:
    args = ("--no-progress", "4", "--paraphrase", "0", "--output-decline", "100", "--on-open", "stop")
    command = ("bash", "-c", f"( setsid sleep 1000 & ); exec {LOOP}")
    env = loop_env("stuck", FAKE_CLAUDE_DELAY="0.6")
    first = new_run(runs, tmp_path / "work")
    first.start(*args, "--", *command, env=env)
    state_dir = first.state_dir
    wait_for(lambda: any(e.get("iteration") == 3 for e in events(state_dir, "iteration_started")), timeout=30,
             what="iteration 3 to start")
    time.sleep(0.2)  # inside the third agent call
    assert first.proc is not None
    first.proc.kill()
    first.proc.wait(timeout=10)
    leftovers = identities(marked(first.mark))
    assert leftovers, "the setsid'd sleep at least should have outlived the SIGKILL"

    saved = read_state(state_dir)
    assert saved, "state.json must be readable after a SIGKILL"
    assert (saved["state"], saved["iteration"], saved["consecutive_no_progress"]) == ("CLOSED", 3, 2), saved
    ledger = json.loads((state_dir / "ledger.json").read_text())
    assert [a["iteration"] for a in ledger["attempts"]] == [1, 2]
    assert all(a["outcome"] == "noop" for a in ledger["attempts"])

    second = new_run(runs, tmp_path / "work")
    second.mark = first.mark  # one marker for both: nothing of either run may survive
    second.start(*args, "--", *command, env=env)
    code = second.finish(timeout=40)
    assert code == 2, second.stderr.decode(errors="replace")[-2000:]
    swept = events(state_dir, "orphans_swept")
    assert swept[-1]["count"] >= 1, swept
    assert still_alive(leftovers) == [], "processes of the killed run survived the restart"

    # The counters carried over: 2 iterations without progress before the kill, 2 more open it.
    started = [e["iteration"] for e in events(state_dir, "iteration_started")]
    assert started[3:5] == [4, 5], started
    opened = history(state_dir)[-1]
    assert (opened["to"], opened["trigger"], opened["iteration"]) == ("OPEN", "no-progress", 5), opened
    after = json.loads((state_dir / "ledger.json").read_text())
    assert after["attempts"][:2] == ledger["attempts"]
    counted = [a["iteration"] for a in after["attempts"]]
    # No call starts before the one before it is judged (the shim waits for the verdict): none after call 5.
    assert counted == [1, 2, 4, 5], counted
    assert max(e["iteration"] for e in events(state_dir, "iteration_started")) == 5
    assert marked(first.mark) == []


def test_repeated_sigkills_at_random_moments_never_corrupt_the_state_files(tmp_path: Path, runs: list[Run]) -> None:
    """Atomic writes: whenever the kill lands, state.json and ledger.json parse and history stays whole lines;
    iteration numbers never go back or repeat across restarts."""
    rng = random.Random(11)
    workspace = tmp_path / "work"
    env = loop_env("progress", FAKE_CLAUDE_DELAY="0.05", RALPH_LOOP_PAUSE="0.05")
    mark = new_mark()
    last_iteration = 0
    for _ in range(4):
        run = new_run(runs, workspace)
        run.mark = mark
        # Calls this short are judged on luck (the tree is sampled): keep the breaker out of this test.
        run.start("--no-progress", "1000", "--paraphrase", "0", "--", str(LOOP), env=env)
        wait_for(lambda: len(events(run.state_dir, "iteration_started")) > last_iteration, timeout=20,
                 what="a new iteration")
        time.sleep(rng.uniform(0.0, 0.4))
        assert run.proc is not None
        run.proc.kill()
        run.proc.wait(timeout=10)
        saved = json.loads((run.state_dir / "state.json").read_text())
        assert saved["iteration"] >= last_iteration
        last_iteration = saved["iteration"]
        if not (run.state_dir / "ledger.json").exists():
            continue  # killed before its first iteration was judged
        ledger = json.loads((run.state_dir / "ledger.json").read_text())
        numbers = [a["iteration"] for a in ledger["attempts"]]
        assert numbers == sorted(set(numbers)), numbers
        history(run.state_dir)  # every line parses
    final = new_run(runs, workspace)
    final.mark = mark
    final.start("--", "true")
    assert final.finish(timeout=20) == 0
    assert marked(mark) == []


# ------------------------------------------------------------------------------- disk full, read-only


# `tiny_disk` (a 1 MiB tmpfs) is in conftest.py: the snapshot keeper's tests use it too.


def test_a_full_state_disk_costs_log_bytes_but_never_the_child_or_its_exit_code(
        tmp_path: Path, tiny_disk: Path, runs: list[Run]) -> None:
    script = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done >&2; sleep 0.5; exit 3"
    run = new_run(runs, tmp_path / "work", tiny_disk)
    run.start("--state-dir", str(tiny_disk), "--", "sh", "-c", script)
    assert run.finish(timeout=20) == 3
    warned = run.logged("child_log_unwritable")
    assert len(warned) == 1 and "No space left" in warned[0]["error"], warned
    assert [e["code"] for e in run.logged("child_exited")] == [3]
    log = (tiny_disk / "child.log").read_bytes()
    assert 100_000 < len(log) < 1 << 20 and log == b"x" * len(log), "child.log should be a clean prefix"
    no_internal_errors(run)
    assert marked(run.mark) == []


def test_a_state_disk_already_full_at_start_still_runs_the_child(
        tmp_path: Path, tiny_disk: Path, runs: list[Run]) -> None:
    with open(tiny_disk / "filler", "wb") as fh:
        try:
            fh.write(b"\0" * (2 * MiB))
        except OSError:
            pass
    run = new_run(runs, tmp_path / "work", tiny_disk)
    run.start("--state-dir", str(tiny_disk), "--", "sh", "-c", "echo hi; exit 3")
    assert run.finish(timeout=20) == 3, run.stderr.decode(errors="replace")[-1500:]
    assert [e["code"] for e in run.logged("child_exited")] == [3]
    no_internal_errors(run)


DISK_FILLER = "head -c 3000000 /dev/zero | tr '\\0' x; echo; RALPH_LOOP_MAX=3 exec {loop}"


def test_iterations_are_still_judged_and_the_exit_code_passed_when_the_state_disk_is_full(
        tmp_path: Path, tiny_disk: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work", tiny_disk)
    run.start("--state-dir", str(tiny_disk), "--", "bash", "-c", DISK_FILLER.format(loop=LOOP),
              env=loop_env("progress"))
    assert run.finish(timeout=15) == 0
    assert len(run.logged("iteration_finished")) == 3
    no_internal_errors(run)


def test_a_full_state_disk_is_reported_once_per_file(tmp_path: Path, tiny_disk: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work", tiny_disk)
    run.start("--state-dir", str(tiny_disk), "--", "bash", "-c", DISK_FILLER.format(loop=LOOP),
              env=loop_env("progress", FAKE_CLAUDE_TOKENS="0"))  # no daily spend: see the test above
    assert run.finish(timeout=15) == 0
    assert len(run.logged("iteration_finished")) == 3
    warnings = [e["event"] for e in run.logged() if e.get("level") == "warning"]
    assert warnings and len(warnings) == len(set(warnings)), warnings


def fill_up(folder: Path) -> Path:
    """Fill the file system of `folder` to the last byte; return the filler (delete it to free the space)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_json_lines_files_stay_whole_lines_when_the_disk_fills_up_and_frees_again(
        tmp_path: Path, tiny_disk: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work", tiny_disk)
    run.start("--state-dir", str(tiny_disk), "--", str(LOOP),
              env=loop_env("progress", FAKE_CLAUDE_TOKENS="0", FAKE_CLAUDE_DELAY="0.1", RALPH_LOOP_PAUSE="0.1"))
    wait_for(lambda: len(events(tiny_disk, "iteration_finished")) >= 2, timeout=30, what="two iterations")
    filler = fill_up(tiny_disk)
    time.sleep(2.5)  # iterations go on; their events no longer fit
    filler.unlink()
    time.sleep(1.5)  # and fit again
    assert run.proc is not None
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=15) == 143
    broken = []
    for line in (tiny_disk / "events.jsonl").read_bytes().splitlines():
        try:
            json.loads(line)
        except ValueError:
            broken.append(line[:160])
    assert broken == [], broken


@dataclass
class Immutable:
    """Where the test may make folders immutable (`root`), and the paths it made so (cleared afterwards)."""

    root: Path
    paths: list[Path]


def _chattr_works(folder: Path) -> str:
    """"" when `chattr +i` works in `folder`, else what it said."""
    probe = folder / "probe"
    probe.mkdir()
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.rmdir()
    return "" if done.returncode == 0 else (done.stderr.strip() or "chattr +i failed")


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Immutable]:
    """A folder whose paths can be made immutable (`chattr +i`: even root cannot create, rename or unlink in
    them): tmp_path, or where its filesystem keeps no such flag (tmpfs, overlayfs), a small ext4 image
    loop-mounted in it (as root). The flags are removed again after the test."""
    made = Immutable(tmp_path, [])
    with contextlib.ExitStack() as cleanup:
        why = _chattr_works(tmp_path)
        if why:
            try:
                made.root = cleanup.enter_context(loop_mounted_ext4(tmp_path / "ext4", size_mib=32))
            except DiskUnavailable as exc:
                pytest.skip(f"chattr +i does not work here ({why}) and no ext4 can be mounted: {exc}")
            why = _chattr_works(made.root)
            if why:
                pytest.skip(f"chattr +i does not work even on a loop-mounted ext4: {why}")
        try:
            yield made
        finally:
            for path in made.paths:
                subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True)


def freeze(immutable: Immutable, folder: Path) -> None:
    """Make `folder` immutable first (no entry can appear, vanish or be renamed any more), then the
    regular files in it (sockets cannot carry the flag)."""
    immutable.paths.append(folder)
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    files = [str(p) for p in folder.iterdir() if p.is_file() and not p.is_symlink()]
    if files:
        done = subprocess.run(["chattr", "+i", *files], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_a_state_folder_made_read_only_mid_run_keeps_supervising_and_exits_with_the_childs_code(
        immutable: Immutable, runs: list[Run]) -> None:
    go = immutable.root / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; RALPH_LOOP_MAX=3 exec {LOOP}"
    run = new_run(runs, immutable.root / "work")
    run.start("--", "bash", "-c", script, env=loop_env("progress", FAKE_CLAUDE_TOKENS="0"))
    wait_for(lambda: events(run.state_dir, "child_started"), what="child_started")
    wait_for((run.state_dir / "tree.json").exists, what="the tree record")
    freeze(immutable, run.state_dir)
    go.touch()
    code = run.finish(timeout=15)
    assert code == 0, run.stderr.decode(errors="replace")[-3000:]
    assert len(run.logged("iteration_finished")) == 3
    no_internal_errors(run)


def test_a_read_only_state_folder_at_start_is_one_clear_line_and_nothing_runs(
        immutable: Immutable, runs: list[Run]) -> None:
    workspace = immutable.root / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    state_dir = immutable.root / "state"  # named, so it lies where chattr works
    state_dir.mkdir(parents=True)
    (state_dir / ".gitignore").write_text("*\n")
    freeze(immutable, state_dir)
    run = new_run(runs, workspace)
    witness = immutable.root / "spawned"
    run.start("--state-dir", str(state_dir), "--", "touch", str(witness))
    assert run.finish(timeout=15) == 1
    lines = run.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and str(state_dir) in lines[0], lines
    assert not witness.exists()


# ------------------------------------------------------------------------------ corrupt state, config

CORRUPT_STATES = {
    "truncated": b'{"state": "OPEN", "reason": "stuck", "iterat',
    "garbage": bytes(random.Random(5).randbytes(300)),
    "empty": b"",
    "nul": b"\x00" * 64,
    "array": b"[1, 2, 3]",
    "bad-state": b'{"state": "SIDEWAYS", "iteration": 4}',
    "bad-types": b'{"state": "OPEN", "iteration": "seven", "consecutive_no_progress": null, "opened_at": "x"}',
}


@pytest.mark.parametrize("kind", sorted(CORRUPT_STATES))
def test_a_corrupt_state_file_is_moved_aside_with_a_warning_and_the_breaker_starts_closed(
        tmp_path: Path, runs: list[Run], kind: str) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    state_dir = state_dir_of(workspace)
    state_dir.mkdir(parents=True)
    content = CORRUPT_STATES[kind]
    (state_dir / "state.json").write_bytes(content)
    shown = status(workspace)
    assert shown["supervisor"]["running"] is False
    run = new_run(runs, workspace)
    run.start("--", "sh", "-c", "exit 3")
    assert run.finish(timeout=20) == 3, run.stderr.decode(errors="replace")[-1500:]
    aside = list(state_dir.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    warned = run.logged("state_file_corrupt")
    assert len(warned) == 1 and "state.json" in warned[0]["detail"], warned
    saved = read_state(state_dir)
    assert saved["state"] == "CLOSED" and saved["iteration"] == 0
    no_internal_errors(run)


DEEP = b"[" * 200_000
HUGE_INT = b"1" + b"0" * 5000
PATHOLOGICAL = [
    pytest.param("state.json", DEEP, id="state-deep"),
    pytest.param("state.json", b'{"state": "CLOSED", "iteration": ' + HUGE_INT + b"}", id="state-huge-int"),
    pytest.param("state.json", b'{"state": "CLOSED", "iteration": 1e999}', id="state-infinite"),
    pytest.param("state.json", b'{"state": "OPEN", "opened_at": NaN, "cooldown_s": -Infinity}', id="state-nan"),
    pytest.param("ledger.json", DEEP, id="ledger-deep"),
    pytest.param("ledger.json", b'{"goal": "g", "attempts": [{"iteration": ' + HUGE_INT + b"}]}", id="ledger-huge-int"),
    pytest.param("tree.json", DEEP, id="tree-deep"),
    pytest.param("tree.json", b'{"version": 1, "members": [{"pid": ' + HUGE_INT + b', "start_ticks": 1}]}',
                 id="tree-huge-int"),
]


@pytest.mark.parametrize(("name", "content"), PATHOLOGICAL)
def test_a_pathological_state_folder_file_never_stops_the_supervisor_from_starting(
        tmp_path: Path, runs: list[Run], name: str, content: bytes) -> None:
    """The supervisor never refuses to start because of its own old files."""
    workspace = tmp_path / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    state_dir = state_dir_of(workspace)
    state_dir.mkdir(parents=True)
    (state_dir / name).write_bytes(content)
    run = new_run(runs, workspace)
    run.start("--", "sh", "-c", "exit 3")
    assert run.finish(timeout=20) == 3, run.stderr.decode(errors="replace")[-800:]
    aside = list(state_dir.glob(f"{name}.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    no_internal_errors(run)


@pytest.mark.parametrize("content", [
    pytest.param(b"garbage{", id="garbage"),
    pytest.param(b'{"date": "2026-01-01", "tokens": -5}', id="negative"),
    pytest.param(DEEP, id="deep"),
])
def test_a_corrupt_daily_spend_file_is_set_aside_and_iterations_are_still_judged(
        tmp_path: Path, runs: list[Run], content: bytes) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    state_dir = state_dir_of(workspace)
    state_dir.mkdir(parents=True)
    (state_dir / "daily-spend.json").write_bytes(content)
    run = new_run(runs, workspace)
    run.start("--", str(LOOP), env=loop_env("progress", RALPH_LOOP_MAX="2"))
    assert run.finish(timeout=20) == 0
    assert len(events(state_dir, "iteration_finished")) == 2
    assert json.loads((state_dir / "daily-spend.json").read_text())["tokens"] == 2400
    no_internal_errors(run)


@pytest.mark.parametrize("content", [
    pytest.param(DEEP, id="deep"),
    pytest.param(b'{"state": "CLOSED", "iteration": ' + HUGE_INT + b"}", id="huge-int"),
    pytest.param(CORRUPT_STATES["garbage"], id="garbage"),
    pytest.param(CORRUPT_STATES["bad-types"], id="bad-types"),
])
def test_status_and_reset_without_a_supervisor_survive_a_pathological_state_file(tmp_path: Path, content: bytes) -> None:
    state_dir = state_dir_of(tmp_path)
    state_dir.mkdir(parents=True)
    (state_dir / "state.json").write_bytes(content)
    shown = cli(tmp_path, "status", "--json")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-800:]
    assert json.loads(shown.stdout)["state"] in ("CLOSED", "HALF_OPEN", "OPEN")
    reset = cli(tmp_path, "reset")
    assert reset.returncode == 0 and "Traceback" not in reset.stderr, reset.stderr[-800:]
    assert read_state(state_dir)["state"] == "CLOSED"


def _config_cases(tmp_path: Path) -> dict[str, tuple[list[str], Path]]:
    folder = tmp_path / "conf.d"
    folder.mkdir()
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"grace = 1\n\xff\xfe\x00 = 2\n")
    nul = tmp_path / "nul.toml"
    nul.write_bytes(b"grace = \x001\n")
    return {
        "a-directory": (["--config", str(folder)], folder),
        "missing": (["--config", str(tmp_path / "nope.toml")], tmp_path / "nope.toml"),
        "not-utf8": (["--config", str(binary)], binary),
        "nul-byte": (["--config", str(nul)], nul),
    }


@pytest.mark.parametrize("case", ["a-directory", "missing", "not-utf8", "nul-byte", "default-not-utf8"])
def test_an_unreadable_config_is_exit_1_with_one_line_naming_the_file(
        tmp_path: Path, runs: list[Run], case: str) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    if case == "default-not-utf8":
        named = workspace / ".ralph-supervise.toml"
        named.write_bytes(b"grace = 1\nno_progress = \"\xff\"\n")
        flags: list[str] = []
    else:
        flags, named = _config_cases(tmp_path)[case]
    witness = tmp_path / "spawned"
    run = new_run(runs, workspace)
    run.start(*flags, "--", "touch", str(witness))
    assert run.finish(timeout=15) == 1
    lines = run.stderr.decode(errors="replace").strip().splitlines()
    assert len(lines) == 1 and named.name in lines[0], lines
    assert not witness.exists() and not state_dir_of(workspace).exists()


# ------------------------------------------------------------------------------------ hostile output


def test_binary_and_nul_output_is_logged_byte_exact_and_marker_iterations_still_count(
        tmp_path: Path, runs: list[Run]) -> None:
    calls = 5
    run = new_run(runs, tmp_path / "work")
    run.start("--iteration-marker", "^=== call \\d+ ===$", "--no-progress", "50", "--same-error", "50",
              "--max-failures", "50", "--", sys.executable, str(HELPERS / "fault_binary.py"), str(calls))
    assert run.finish(timeout=20) == 0
    assert (run.state_dir / "child.log").read_bytes() == binary_output(calls)
    started = [e["iteration"] for e in events(run.state_dir, "iteration_started")]
    assert started == list(range(1, calls + 1))
    no_internal_errors(run)


@pytest.mark.parametrize("as_agent", [False, True], ids=["plain-child", "agent-call"])
def test_a_100_mib_line_is_logged_byte_exact_with_bounded_supervisor_memory(
        tmp_path: Path, runs: list[Run], as_agent: bool) -> None:
    """As plain output, and as the output of an agent call (an iteration, whose text the tracker keeps)."""
    import hashlib
    import shutil

    mib = 100
    control = tmp_path / "control"
    control.mkdir()
    script = HELPERS / "fault_big_line.py"
    prompt: tuple[str, ...] = ()
    if as_agent:
        script = Path(shutil.copy(script, control / "claude"))  # `python .../claude -p` is an agent call
        prompt = ("-p",)
    run = new_run(runs, tmp_path / "work")
    run.start("--log-max-bytes", "200MB", "--log-total-bytes", "400MB",
              "--", sys.executable, str(script), *prompt, str(control), str(mib))
    wait_for(lambda: events(run.state_dir, "child_started"), what="child_started")
    time.sleep(0.5)  # the supervisor settled: its watcher primed, its first ticks done
    assert run.proc is not None
    before = peak_rss(run.proc.pid)
    (control / "go-write").touch()
    size = mib * MiB + 1
    log = run.state_dir / "child.log"
    wait_for(lambda: log.exists() and log.stat().st_size >= size, timeout=60, interval=0.1, what="the whole line")
    time.sleep(0.5)  # the analysis worker has the line's cut head; let it finish with it
    after = peak_rss(run.proc.pid)
    (control / "go-exit").touch()
    assert run.finish(timeout=20) == 0
    print(f"\nsupervisor peak RSS ({'agent call' if as_agent else 'plain child'}): {before / MiB:.1f} MiB before "
          f"the line, {after / MiB:.1f} MiB after it")
    assert after < 100 * MiB, f"peak RSS {after / MiB:.0f} MiB for a 100 MiB line"
    assert after - before < 40 * MiB, f"a 100 MiB line grew the supervisor by {(after - before) / MiB:.0f} MiB"
    expected = hashlib.sha256(block() * mib + b"\n").hexdigest()
    digest = hashlib.sha256()
    with open(log, "rb") as fh:
        for piece in iter(lambda: fh.read(8 * MiB), b""):
            digest.update(piece)
    assert log.stat().st_size == size and digest.hexdigest() == expected
    if as_agent:
        assert [e["output_bytes"] for e in events(run.state_dir, "iteration_finished")] == [size]
    no_internal_errors(run)


# ------------------------------------------------------------------------------ the child misbehaves


def test_a_child_that_closes_stdout_and_stderr_is_still_supervised_to_its_exit_code(
        tmp_path: Path, runs: list[Run]) -> None:
    flag, go = tmp_path / "closed", tmp_path / "go"
    script = f"echo before; exec >&- 2>&-; touch {flag}; while [ ! -e {go} ]; do sleep 0.05; done; exit 5"
    run = new_run(runs, tmp_path / "work")
    run.start("--", "sh", "-c", script)
    wait_for(flag.exists, what="the child to close its outputs")
    time.sleep(0.3)
    live = status(run.workspace)
    assert live["supervisor"]["running"] is True and live["child"]["running"] is True
    go.touch()
    assert run.finish(timeout=15) == 5
    assert [e["code"] for e in events(run.state_dir, "child_exited")] == [5]
    assert (run.state_dir / "child.log").read_bytes() == b"before\n"
    no_internal_errors(run)


def test_a_child_with_closed_outputs_can_still_be_stopped(tmp_path: Path, runs: list[Run]) -> None:
    flag = tmp_path / "closed"
    script = f"exec >&- 2>&-; trap '' TERM; touch {flag}; while :; do sleep 0.2; done"
    run = new_run(runs, tmp_path / "work")
    run.start("--", "bash", "-c", script)
    wait_for(flag.exists, what="the child to close its outputs")
    assert cli(run.workspace, "stop").returncode == 0
    assert run.finish(timeout=10) == 0
    assert all(e["survivors"] == 0 for e in events(run.state_dir, "tree_stopped"))
    assert marked(run.mark) == []


def test_a_child_that_exits_while_its_background_job_holds_the_pipes_is_not_waited_for(
        tmp_path: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work")
    run.start("--", "sh", "-c", "sleep 1000 & echo bye; exit 4")
    assert run.finish(timeout=15) == 4
    assert marked(run.mark) == [], "the background job must be stopped with the tree"
    no_internal_errors(run)


def test_a_child_killed_while_paused_ends_the_run_with_its_code_and_no_survivors(
        tmp_path: Path, runs: list[Run]) -> None:
    script = "trap '' TERM; setsid sleep 1000 & ( setsid sleep 1000 & ); while :; do sleep 0.2; done"
    run = new_run(runs, tmp_path / "work")
    run.start("--", "bash", "-c", script)
    child = wait_for(lambda: events(run.state_dir, "child_started"), what="child_started")[0]["pid"]
    wait_for(lambda: len(marked(run.mark)) >= 4, what="the tree")
    assert cli(run.workspace, "pause").returncode == 0
    assert held(child)
    os.kill(child, signal.SIGKILL)
    assert run.finish(timeout=10) == 128 + signal.SIGKILL
    assert [e["code"] for e in events(run.state_dir, "child_exited")] == [137]
    assert all(e["survivors"] == 0 for e in events(run.state_dir, "tree_stopped"))
    assert marked(run.mark) == []
    no_internal_errors(run)


# ----------------------------------------------------------------------------------- hooks, socket


@pytest.mark.parametrize("hook", ["sleep 1000", "trap '' TERM; sleep 1000 & sleep 1000"])
def test_a_hook_that_never_returns_is_cut_off_and_supervision_goes_on(
        tmp_path: Path, runs: list[Run], hook: str) -> None:
    run = new_run(runs, tmp_path / "work")
    run.start("--no-progress", "2", "--paraphrase", "0", "--cooldown", "10", "--on-open", "pause",
              "--on-open-hook", hook, "--hook-timeout", "0.5", "--", str(LOOP), env=loop_env("stuck"))
    wait_for(lambda: events(run.state_dir, "tree_paused"), timeout=30, what="the breaker to open and pause")
    live = status(run.workspace)
    assert live["state"] == "OPEN" and live["child"]["paused"] is True
    failed = wait_for(lambda: events(run.state_dir, "hook_failed"), timeout=5, what="hook_failed")
    assert failed[0]["timed_out"] is True
    assert run.proc is not None
    wait_for(lambda: not running(run.mark, ["sleep", "1000"], frozenset({run.proc.pid})), timeout=3, what="the hook's sleeps to be killed")
    assert status(run.workspace)["state"] == "OPEN"
    assert cli(run.workspace, "stop").returncode == 0
    assert run.finish(timeout=10) == 0
    assert marked(run.mark) == []
    no_internal_errors(run)


def test_a_second_signal_ends_the_supervisor_at_once_even_while_a_hook_hangs(tmp_path: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work")
    run.start("--no-progress", "2", "--paraphrase", "0", "--cooldown", "10", "--on-open-hook", "sleep 1000",
              "--hook-timeout", "20", "--", str(LOOP), env=loop_env("stuck"))
    wait_for(lambda: events(run.state_dir, "tree_paused"), timeout=30, what="the breaker to open")
    assert run.proc is not None
    wait_for(lambda: running(run.mark, ["sleep", "1000"], frozenset({run.proc.pid})),
             timeout=5, what="the hook to run")
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=3) == 143
    assert marked(run.mark) == [], "the hook outlived its supervisor"


def _flood_one(path: str, rng: random.Random) -> None:
    kind = rng.randrange(8)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(path)
        if kind == 0:
            sock.sendall(rng.randbytes(rng.randrange(1, 2000)) + b"\n")
        elif kind == 1:
            sock.sendall(b"x" * 100_000)  # longer than any request, no newline
        elif kind == 2:
            sock.sendall(b'{"cmd": "sta')  # cut off, then hang up
        elif kind == 3:
            sock.sendall(b'{"cmd": "explode"}\n')
        elif kind == 4:
            sock.sendall(b"[" * 50_000 + b"\n")
        elif kind == 5:
            sock.sendall(b'{"cmd": 7, "pid": "\xff"}\n')
        elif kind == 6:
            sock.sendall(b"\x00\x00\x00\n")
        else:
            pass  # connect and hang up at once
        if kind not in (2, 7):
            sock.shutdown(socket.SHUT_WR)
            sock.recv(4096)
    except OSError:
        pass
    finally:
        sock.close()


def test_a_control_socket_flooded_with_garbage_keeps_supervising_and_answering(
        tmp_path: Path, runs: list[Run]) -> None:
    run = new_run(runs, tmp_path / "work")
    run.start("--", str(LOOP), env=loop_env("progress", FAKE_CLAUDE_DELAY="0.2", RALPH_LOOP_PAUSE="0.1"))
    wait_for(lambda: events(run.state_dir, "iteration_finished"), timeout=30, what="a first iteration")
    assert run.proc is not None
    supervisor = psutil.Process(run.proc.pid)
    fds_before = supervisor.num_fds()
    path = str(run.state_dir / "control.sock")
    stop = threading.Event()
    sent = [0]

    def flood(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            _flood_one(path, rng)
            sent[0] += 1

    threads = [threading.Thread(target=flood, args=(seed,), daemon=True) for seed in range(8)]
    finished_before = len(events(run.state_dir, "iteration_finished"))
    for thread in threads:
        thread.start()
    answered_during = 0
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            result = cli(run.workspace, "status", "--json")
            if result.returncode == 0 and json.loads(result.stdout)["supervisor"]["running"]:
                answered_during += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    finished_during = len(events(run.state_dir, "iteration_finished")) - finished_before
    assert sent[0] > 200, f"only {sent[0]} bad requests sent"
    assert answered_during >= 1, "status never answered during the flood"
    assert finished_during >= 1, "no iteration finished during the flood"
    live = status(run.workspace)
    assert live["supervisor"]["running"] is True and live["child"]["running"] is True
    wait_for(lambda: supervisor.num_fds() <= fds_before + 4, timeout=8, what="the flood's descriptors to close")
    assert cli(run.workspace, "stop").returncode == 0
    assert run.finish(timeout=10) == 0
    no_internal_errors(run)


# ------------------------------------------------------------------------------------------- racing


def test_two_supervisors_started_at_the_same_instant_exactly_one_wins(tmp_path: Path) -> None:
    """Four folders raced at once, two fresh and two with the lock file a SIGKILLed supervisor left."""
    mark = new_mark()
    env = {**os.environ, MARK_VAR: mark, "PYTHONPATH": str(REPO)}
    folders = []
    for index in range(4):
        workspace = tmp_path / f"work-{index}"
        workspace.mkdir(parents=True)
        state_dir_of(workspace).mkdir(parents=True)
        if index >= 2:
            (state_dir_of(workspace) / "supervisor.lock").write_text("999999\n")
        folders.append(workspace)
    racers: dict[Path, list[subprocess.Popen[bytes]]] = {}
    try:
        for workspace in folders:
            argv = [sys.executable, str(HELPERS / "fault_race.py"), str(workspace / "go"), *FAST,
                    "-w", str(workspace), "--", "sleep", "1000"]
            racers[workspace] = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE) for _ in range(2)]
        wait_for(lambda: all(len(list(w.glob("go.ready-*"))) == 2 for w in folders), timeout=30,
                 what="every racer to be ready")
        for workspace in folders:
            (workspace / "go").touch()
        winners = []
        for workspace in folders:
            pair = racers[workspace]
            loser = wait_for(lambda: next((p for p in pair if p.poll() is not None), None), timeout=10,
                             what="one racer to give up")
            winner = next(p for p in pair if p is not loser)
            assert loser.returncode == 1 and loser.stderr is not None
            message = loser.stderr.read().decode().strip()
            assert len(message.splitlines()) == 1 and str(workspace) in message, (workspace.name, message)
            # It names the winner's PID, or (the race in the test below) no PID, but never another one.
            assert "pid " not in message or f"(pid {winner.pid})" in message, (workspace.name, message)
            assert winner.poll() is None, winner.communicate()[1].decode()[-1500:]
            winners.append(winner)
        for workspace, winner in zip(folders, winners):
            started = wait_for(lambda: events(state_dir_of(workspace), "child_started"), timeout=10,
                               what="the winner's child")
            assert len(started) == 1
        assert status(folders[0])["supervisor"]["pid"] == winners[0].pid
        for winner in winners:
            winner.send_signal(signal.SIGTERM)
        assert [winner.wait(timeout=15) for winner in winners] == [143] * len(winners)
    finally:
        for pair in racers.values():
            for proc in pair:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stderr is not None:
                    proc.stderr.close()
    assert marked(mark) == []


def test_the_loser_of_a_tight_lock_race_always_names_the_winners_pid(tmp_path: Path) -> None:
    """The lock alone, raced 150 times by forked processes released at the same instant."""
    result = subprocess.run([sys.executable, str(HELPERS / "fault_lock_race.py"), str(tmp_path), "150"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["none_won"] == 0
    assert len(summary["loser_messages"]) == len(summary["winner_pids"]) >= 100
    unnamed = [m for m, pid in zip(summary["loser_messages"], summary["winner_pids"]) if f"(pid {pid})" not in m]
    assert unnamed == [], f"{len(unnamed)} of {len(summary['winner_pids'])} losers did not name the winner: {unnamed[:2]}"

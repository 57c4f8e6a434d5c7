"""`ralph-supervise run`: spawning, exit codes, the output tap, signals, the lock, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.supervise import events, run, start, wait_for
from tests.helpers import state_dir_of

NO_BREAKER = ("--no-echo", "--log-format", "json")


def test_exit_code_zero_is_passed_through(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", "true")
    assert result.returncode == 0, result.stderr


def test_exit_code_three_is_passed_through(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", "sh", "-c", "exit 3")
    assert result.returncode == 3


def test_child_killed_by_a_signal_gives_128_plus_n(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", "sh", "-c", "kill -9 $$")
    assert result.returncode == 128 + 9


def test_run_is_the_default_command_and_the_workspace_flag_sets_the_cwd(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    result = run(tmp_path, "run", "-w", str(work), *NO_BREAKER, "--", "sh", "-c", "pwd > where.txt")
    assert result.returncode == 0
    assert (work / "where.txt").read_text().strip() == str(work.resolve())
    assert sorted(os.listdir(work)) == ["where.txt"], "the supervisor keeps nothing in the workspace"
    assert (state_dir_of(work) / "events.jsonl").is_file()


def test_child_is_a_session_leader_with_stdin_from_dev_null(tmp_path: Path) -> None:
    script = "import os,sys; print(os.getsid(0)==os.getpid(), sys.stdin.read()=='' )"
    result = run(tmp_path, *NO_BREAKER, "--", sys.executable, "-c", script)
    assert result.returncode == 0
    assert (state_dir_of(tmp_path) / "child.log").read_text().strip() == "True True"


def test_output_reaches_child_log_byte_for_byte(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3 + b"\xff\xfe invalid utf-8 \x00 NUL\n" + b"x" * (5 * 1024 * 1024)
    (tmp_path / "payload.bin").write_bytes(payload)
    script = ("import sys; d=open('payload.bin','rb').read(); sys.stdout.buffer.write(d[:1000]); sys.stdout.flush();"
              "sys.stderr.buffer.write(b''); sys.stdout.buffer.write(d[1000:]); sys.stdout.flush()")
    result = run(tmp_path, *NO_BREAKER, "--", sys.executable, "-c", script)
    assert result.returncode == 0, result.stderr
    assert (state_dir_of(tmp_path) / "child.log").read_bytes() == payload


def test_the_end_of_a_run_says_how_many_bytes_the_error_filter_scanned_and_dropped(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", sys.executable, "-c",
                 "import sys; sys.stdout.write('x' * 99 + '\\n' + 'Error: y\\n' * 1000)")
    assert result.returncode == 0
    [analysed] = events(state_dir_of(tmp_path), "output_analysed")
    assert analysed["bytes_read"] == 100 + 9 * 1000
    assert analysed["bytes_scanned"] == analysed["bytes_read"] and analysed["analysis_dropped_bytes"] == 0
    assert analysed["cut_lines"] == 0


def test_echo_copies_the_output_to_stdout(tmp_path: Path) -> None:
    result = run(tmp_path, "--echo", "--log-format", "json", "--", "printf", "hello\\n")
    assert result.stdout == b"hello\n"
    quiet = run(tmp_path, *NO_BREAKER, "--", "printf", "hello\\n")
    assert quiet.stdout == b""


def test_a_child_writing_200_mb_is_never_blocked_and_memory_stays_flat(tmp_path: Path) -> None:
    script = "import sys\nblock = (b'y' * 1023 + b'\\n') * 1024\nfor _ in range(200): sys.stdout.buffer.write(block)\n"
    proc = start(tmp_path, *NO_BREAKER, "--log-max-bytes", "20MB", "--log-total-bytes", "60MB",
                 "--", sys.executable, "-c", script)
    sup = psutil.Process(proc.pid)
    peak = 0
    started = time.monotonic()
    while proc.poll() is None:
        try:
            peak = max(peak, sup.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
        assert time.monotonic() - started < 60, "a 200 MB child took over a minute: it was blocked"
    proc.communicate()
    assert proc.returncode == 0
    assert peak < 150 * 1024 * 1024, f"supervisor RSS peaked at {peak / 2**20:.0f} MiB"
    logs = list(state_dir_of(tmp_path).glob("child.log*"))
    total = sum(p.stat().st_size for p in logs)
    assert total <= 60_000_000, f"child logs use {total} bytes, over the 60 MB budget"
    assert (state_dir_of(tmp_path) / "child.log.1").exists()


def test_sigterm_stops_the_child_and_exits_143(tmp_path: Path) -> None:
    proc = start(tmp_path, *NO_BREAKER, "--grace", "2", "--", "sh", "-c", "echo started; sleep 1000")
    state = state_dir_of(tmp_path)
    child = wait_for(lambda: events(state, "child_started"), what="child_started")[0]["pid"]
    wait_for(lambda: (state / "child.log").exists() and b"started" in (state / "child.log").read_bytes())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=15)
    assert proc.returncode == 143
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert [e["event"] for e in events(state)][-1] == "supervisor_stopped"


def test_sigint_exits_130_and_a_second_signal_kills_at_once(tmp_path: Path) -> None:
    loop = "trap '' TERM; echo started; while true; do sleep 0.1; done"
    proc = start(tmp_path, *NO_BREAKER, "--grace", "30", "--", "bash", "-c", loop)
    state = state_dir_of(tmp_path)
    wait_for(lambda: (state / "child.log").exists() and b"started" in (state / "child.log").read_bytes())
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None, "the TERM-ignoring child should hold the graceful stop"
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert time.monotonic() - began < 5


def test_sighup_changes_nothing(tmp_path: Path) -> None:
    proc = start(tmp_path, *NO_BREAKER, "--", "sh", "-c", "sleep 1.5; echo survived")
    state = state_dir_of(tmp_path)
    wait_for(lambda: events(state, "child_started"))
    proc.send_signal(signal.SIGHUP)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert b"survived" in (state / "child.log").read_bytes()


def test_a_second_supervisor_on_the_same_folder_is_refused(tmp_path: Path) -> None:
    first = start(tmp_path, *NO_BREAKER, "--", "sleep", "30")
    try:
        state = state_dir_of(tmp_path)
        wait_for(lambda: events(state, "child_started"))
        second = run(tmp_path, *NO_BREAKER, "--", "true")
        assert second.returncode == 1
        message = second.stderr.decode().strip()
        assert len(message.splitlines()) == 1
        assert f"pid {first.pid}" in message
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=20)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--no-progress", "zero", "--", "true"), "--no-progress"),
        (("--paraphrase", "1.5", "--", "true"), "--paraphrase"),
        (("--on-open", "explode", "--", "true"), "--on-open"),
        (("--frobnicate", "--", "true"), "--frobnicate"),
        (("--iteration-marker", "([", "--", "true"), "--iteration-marker"),
        (("-w", "/nonexistent/dir", "--", "true"), "--workspace"),
        ((), "COMMAND"),
    ],
)
def test_bad_flags_give_exit_1_and_one_line_naming_the_flag(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    result = run(tmp_path, "run", *args)
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert needle in lines[0]
    assert not state_dir_of(tmp_path).exists(), "nothing may be created before the settings are valid"


@pytest.mark.parametrize("text", ["grace = 5\nno_progress = = 3\n", "grace = 5\nno_progress = [1,\n"])
def test_a_bad_toml_file_names_the_file_and_line(tmp_path: Path, text: str) -> None:
    (tmp_path / ".ralph-supervise.toml").write_text(text)
    result = run(tmp_path, "--", "true")
    assert result.returncode == 1
    line = result.stderr.decode().strip()
    assert ".ralph-supervise.toml" in line and "line 2" in line and len(line.splitlines()) == 1


def test_a_bad_value_in_toml_names_the_file_line_and_key(tmp_path: Path) -> None:
    (tmp_path / ".ralph-supervise.toml").write_text("grace = 5\n\nno_progress = -2\n")
    result = run(tmp_path, "--", "true")
    assert result.returncode == 1
    line = result.stderr.decode().strip()
    assert ".ralph-supervise.toml:3" in line and "no_progress" in line


def test_a_bad_environment_variable_is_named(tmp_path: Path) -> None:
    result = run(tmp_path, "--", "true", env={"CB_NO_PROGRESS_THRESHOLD": "lots"})
    assert result.returncode == 1
    assert "CB_NO_PROGRESS_THRESHOLD" in result.stderr.decode()


def test_a_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", "/no/such/program")
    assert result.returncode == 127
    assert "/no/such/program" in result.stderr.decode()


def test_events_carry_the_contract_names(tmp_path: Path) -> None:
    result = run(tmp_path, *NO_BREAKER, "--", "sh", "-c", "exit 4")
    assert result.returncode == 4
    names = [e["event"] for e in events(state_dir_of(tmp_path))]
    for name in ("supervisor_started", "child_started", "child_exited", "supervisor_stopped"):
        assert name in names
    exited = events(state_dir_of(tmp_path), "child_exited")[0]
    assert exited["code"] == 4


def test_version_and_help(tmp_path: Path) -> None:
    version = subprocess.run([sys.executable, "-m", "ralph_supervisor", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("ralph-supervise ")
    helped = subprocess.run([sys.executable, "-m", "ralph_supervisor", "run", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--no-progress" in helped.stdout and "--cooldown" in helped.stdout


def test_supervisor_survives_sighup_from_a_closing_terminal_group(tmp_path: Path) -> None:
    """tmux detach / SSH logout: SIGHUP to the supervisor's whole process group."""
    proc = start(tmp_path, *NO_BREAKER, "--", "sh", "-c", "sleep 1; echo done")
    state = state_dir_of(tmp_path)
    wait_for(lambda: events(state, "child_started"))
    os.kill(proc.pid, signal.SIGHUP)
    proc.communicate(timeout=20)
    assert proc.returncode == 0

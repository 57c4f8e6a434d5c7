"""The shims' notices as read: records of the box's channel, the arguments a boxed notice is trusted with,
forged and deleted notices. The channel runs for real (a FIFO, real shims), without a box: the reader's PIDs
are then ours."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.evidence.notices import (
    Announcement,
    NoticeChannel,
    NoticeReader,
    STRAY_NOTICE_SECONDS,
    announcer_args,
    split_lines,
    trusted_args,
)
from ralph_supervisor.evidence.shims import NOTICE_VERSION, Notice, Record, install_shims, parse_record, read_notice

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\n"), max_size=40)


def record_line(kind: str, name: str, pid: int, at: str, target: str, argc: int) -> bytes:
    return "\0".join([NOTICE_VERSION, kind, name, str(pid), at, target, str(argc), ""]).encode()


# ------------------------------------------------------------------ pure rules


@given(st.sampled_from(["call", "missing", "refused"]), texts, st.integers(2, 4_000_000), texts, st.integers(0, 500))
def test_a_record_reads_back_as_written(kind: str, name: str, pid: int, target: str, argc: int) -> None:
    record = parse_record(record_line(kind, name, pid, "1700000000.25", target, argc))
    assert record == Record(kind, name, pid, 1700000000.25, target, argc)
    assert record.describes(Notice(kind, name, pid, 1700000000.25, target, ("x",) * argc))
    assert not record.describes(Notice(kind, name, pid, 1700000000.5, target, ("x",) * argc)), "another time"
    assert not record.describes(Notice(kind, name, pid, 1700000000.25, target, ("x",) * (argc + 1)))


@given(st.binary(max_size=200))
def test_anything_else_is_no_record(data: bytes) -> None:
    record = parse_record(data)
    assert record is None or data.startswith(NOTICE_VERSION.encode() + b"\0")


def test_a_record_whose_target_was_left_out_still_describes_its_notice() -> None:
    record = parse_record(record_line("missing", "claude", 42, "", "", 2))
    assert record is not None and record.at is None
    assert record.describes(Notice("missing", "claude", 42, 99.0, "/usr/bin:/bin", ("-p", "go")))
    assert parse_record(record_line("call", "claude", 1, "", "", 0)) is None, "PID 1 names no call"
    assert parse_record(record_line("call", "claude", 42, "", "", 0) + b"extra") is None


@given(st.lists(st.binary(max_size=30).filter(lambda b: b"\n" not in b), max_size=8), st.binary(max_size=30))
def test_lines_are_split_whole_and_the_rest_kept(lines: list[bytes], rest: bytes) -> None:
    rest = rest.replace(b"\n", b"")
    data = b"".join(line + b"\n" for line in lines) + rest
    cut = len(data) // 2
    first, kept = split_lines(data[:cut])
    second, left = split_lines(kept + data[cut:])
    assert first + second == lines and left == rest


def test_an_overlong_line_is_dropped_up_to_its_newline() -> None:
    lines, rest = split_lines(b"x" * 50, limit=10)
    assert lines == [] and len(rest) > 10
    lines, rest = split_lines(rest + b"more\nnext\n", limit=10)
    assert lines == [b"next"] and rest == b""


def test_the_arguments_follow_the_shim_or_the_agent_in_the_command_line() -> None:
    notice = Notice("call", "claude", 7, None, "/opt/bin/claude", ())
    shim = lambda arg: arg.startswith("/run/shims/bin/")  # noqa: E731
    assert announcer_args(("/usr/bin/bash", "-p", "/run/shims/bin/claude", "-p", "go"), notice, shim) == ("-p", "go")
    assert announcer_args(("claude", "-p", ""), notice, shim) == ("-p", "")
    assert announcer_args(("/usr/bin/env", "node", "/opt/bin/claude", "-p"), notice, shim) == ("-p",)
    assert announcer_args(("bash", "-c", "printf x > calls/7"), notice, shim) is None, "the loop's shell"


def test_a_boxed_call_is_trusted_with_what_its_process_shows() -> None:
    assert trusted_args(("-p", "go"), ("-p", "go")) == ("-p", "go")
    assert trusted_args(("--version",), ("-p", "go")) == ("-p", "go"), "a notice file rewritten in the box"
    assert trusted_args(None, ("-p", "go")) == ("-p", "go"), "a notice file deleted in the box"
    assert trusted_args(("-p", "go"), None) == ("-p", "go"), "a process gone: its file is all there is"
    assert trusted_args(("-p", "x" * 100), ("-p", "x" * 10), whole=False) == ("-p", "x" * 100)
    assert trusted_args(("-p", "y" * 100), ("-p", "x" * 10), whole=False) == ("-p", "x" * 10)


# ------------------------------------------------------------------ the channel, for real

AGENT = "#!/bin/sh\nexit 0\n"


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    (folder / "claude").write_text(AGENT)
    (folder / "claude").chmod(0o755)
    return folder


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[NoticeReader]:
    """A reader of a channel, as in a box (without one: the PIDs are ours)."""
    shims = install_shims(tmp_path / "shims", ["claude"], channel=True)
    reader = NoticeReader(shims, NoticeChannel(shims.channel))
    try:
        yield reader
    finally:
        reader.close()


def run_shim(shims_path: str, *args: str) -> int:
    return subprocess.run(["/bin/bash", "-c", 'claude "$@"', "loop", *args], env={**os.environ, "PATH": shims_path},
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode


@pytest.mark.parametrize("bash", [True, False], ids=["bash", "sh"])
def test_a_shim_tells_the_channel_one_line_the_file_notice_agrees_with(tmp_path: Path, agent_dir: Path,
                                                                      bash: bool) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"], bash=bash, channel=True)
    channel = NoticeChannel(shims.channel)
    try:
        assert (os.stat(shims.channel).st_mode & 0o777) == 0o200, "write-only once the supervisor holds it"
        assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "a\nmulti-line prompt", "") == 0
        assert run_shim(shims.path_for("/nowhere:" + "/x" * 400), "-p", "go") == 127  # missing, a long PATH
        shims.refuse(True)
        assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "go") == 143
        records = channel.drain()
        assert [r.kind for r in records] == ["call", "missing", "refused"]
        files = {n.kind: n for n in (read_notice(p) for p in shims.calls.iterdir()) if n is not None}
        for record in records:
            assert record.describes(files[record.kind]), (record, files[record.kind])
        assert files["call"].args == ("-p", "a\nmulti-line prompt", "")
        assert records[0].target == str(agent_dir / "claude")
        assert records[1].target == "", "a long target stays in the file: the record stays one short write"
    finally:
        channel.close()


def test_the_reader_counts_a_record_whose_file_was_deleted_and_ignores_a_file_no_shim_told_of(
        reader: NoticeReader, agent_dir: Path) -> None:
    shims = reader.shims
    path = shims.path_for(f"{agent_dir}:/usr/bin:/bin")
    assert run_shim(path, "-p", "one") == 0 and run_shim(path, "-p", "two") == 0
    first, second = sorted(shims.calls.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    os.unlink(second)  # the box deleted it; its event still names it
    taken = reader.take(first.name)
    assert taken is not None and taken.notice.args == ("-p", "one") and not taken.unknown_args
    gone = reader.take(second.name)
    assert isinstance(gone, Announcement) and gone.notice.pid == int(second.name) == gone.mark
    assert gone.notice.args == () and gone.unknown_args, "file and process gone: its arguments are lost"
    assert reader.take(second.name) is None, "one record, one call"
    forged = Notice("call", "claude", os.getpid(), time.time(), str(agent_dir / "claude"), ("-p", "x"))
    (shims.calls / str(os.getpid())).write_bytes(
        "\0".join([NOTICE_VERSION, "call", "claude", str(os.getpid()), str(forged.at), forged.target, "2",
                   "-p", "x", ""]).encode())
    assert reader.take(str(os.getpid())) is None, "a file no shim told the channel of"
    assert not (shims.calls / str(os.getpid())).exists()


def test_a_record_whose_file_never_came_is_taken_by_the_tick_a_moment_later(reader: NoticeReader,
                                                                           agent_dir: Path) -> None:
    shims = reader.shims
    shims.calls.rmdir()  # no notice file can be made
    assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "go") == 0
    now = time.time()
    assert reader.waiting(time.time()), "a record is waiting for its file"
    assert reader.strays(now, watched=True) == [], "its file may still come"
    late = reader.strays(now + STRAY_NOTICE_SECONDS + 0.5, watched=True)
    assert len(late) == 1 and late[0].notice.kind == "call" and not reader.waiting(time.time())
    shims.calls.mkdir()
    assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "go") == 0
    assert len(reader.strays(time.time(), watched=True, final=True)) == 1, "the loop is over: all of them now"


def test_refusals_are_taken_the_moment_the_channel_is_read(reader: NoticeReader, agent_dir: Path) -> None:
    shims = reader.shims
    shims.refuse(True)
    for _ in range(3):
        assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "go") == 143
    for notice_file in shims.calls.iterdir():
        notice_file.unlink()  # what a box does to them
    refused = reader.refusals()
    assert [a.notice.kind for a in refused] == ["refused"] * 3
    assert reader.refusals() == [] and not reader.waiting(time.time())


def test_a_process_is_announced_while_its_record_waits_and_after_it_was_taken(tmp_path: Path) -> None:
    from ralph_supervisor.evidence.call_identity import read_cmdline
    from ralph_supervisor.process.linux import read_stat

    shims = install_shims(tmp_path / "shims", ["claude"], channel=True)
    reader = NoticeReader(shims, NoticeChannel(shims.channel))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stat = None
        while stat is None or "import time; time.sleep(30)" not in read_cmdline(sleeper.pid):  # exec'd
            stat = read_stat(sleeper.pid)
        assert not reader.announced(stat)
        with open(shims.channel, "wb") as fh:
            fh.write(record_line("call", "claude", sleeper.pid, f"{time.time():.6f}", "", 0) + b"\n")
        assert reader.announced(stat), "told, not taken yet: the sampler leaves it to its notice"
        assert reader.strays(time.time() + 5, watched=True) == [], "its process is no shim nor agent: forged"
        assert not reader.announced(stat), "a forged record hides no process from the sampler"
    finally:
        sleeper.kill()
        sleeper.wait()
        reader.close()


def test_outside_a_box_a_notice_waits_from_its_file_until_the_event_loop_has_it(tmp_path: Path,
                                                                              agent_dir: Path) -> None:
    """A quick call's reply can be read before its notice (a busy machine runs the watcher's thread late):
    while its notice waits, the reply is not made an iteration of its own."""
    shims = install_shims(tmp_path / "shims", ["claude"])
    reader = NoticeReader(shims)
    assert not reader.waiting(time.time()), "no notice yet"
    assert run_shim(shims.path_for(f"{agent_dir}:/usr/bin:/bin"), "-p", "go") == 0
    (name,) = [p.name for p in shims.calls.iterdir()]
    assert reader.waiting(time.time()), "its file is there, not read yet"
    found = reader.take(name, to_loop=True)
    assert found is not None and found.notice.kind == "call" and not (shims.calls / name).exists()
    assert reader.waiting(time.time()), "taken by the watcher's thread, on its way to the event loop"
    reader.arrived()
    assert not reader.waiting(time.time()), "the event loop has it"
    assert reader.take("4242", to_loop=True) is None and not reader.waiting(time.time()), "no such notice"
    stuck = shims.calls / "4343"
    stuck.write_bytes(b"")
    assert reader.waiting(time.time())
    old = time.time() - 30
    os.utime(stuck, (old, old))
    assert not reader.waiting(time.time()), "a notice file nobody took for a long time stands for no call"

"""Shims: how an agent call announces itself, exactly when it starts.

The supervisor puts `STATE/shims/bin` first on the child's `PATH`, with one small shell script per watched
agent name. A loop that runs `claude` (directly, through GNU `timeout`, in the background) runs the script,
which:

1. waits while an earlier call's verdict is pending (a file in `STATE/shims/pending/`, made by that call's
   shim and removed by the supervisor once the call is judged; a call still running does not hold others
   back), so that no call starts before the one before it is judged; it stops waiting when the verdict is in, the supervisor refuses, the supervisor is
   gone, or after `GATE_SECONDS` (the call then runs: a supervisor that does not answer never stops a loop);
   While the tree is frozen (`STATE/shims/hold` exists: a pause, a limit wait) it waits, without the bound,
   until the tree is thawed: a call that slipped through the freeze (or that something outside thawed)
   neither runs nor fails, it starts when the supervisor lets the loop go on;
2. exits at once with 143 when the supervisor refuses new calls (`STATE/shims/refuse` exists: a stop is
   decided), after leaving a `refused` notice;
3. finds the real agent on the rest of `PATH` (without the shim folder), with shell builtins only;
4. marks its own verdict pending, then writes a notice `STATE/shims/calls/PID` with one builtin redirection
   (no fork, never blocks; when the folder is gone the write fails silently and the call goes on);
5. `exec`s the real agent with `PATH` as it was minus the shim folder.

`exec` keeps the pid, so the notice names the agent process itself, whose end a pidfd then tells. Not found:
a `missing` notice (with the `PATH` searched), `NAME: command not found` on stderr, exit 127, what a shell
would have given the loop.

The script runs under `bash -p` when bash is installed (`exec -a` keeps the caller's argv[0], the agent's
name, and `-p` keeps `BASH_ENV` and exported functions from running in the shim) and under `/bin/sh`
otherwise (then the agent's argv[0] is its full path, as when a loop runs it by path). What the agent sees
is otherwise its own: pid, arguments, stdio, signals, exit code, `/proc/PID/comm` (the kernel names the
process after the file it runs, the real agent), environment but `PATH`. Known differences, from the shell:
under bash an exported `SHELLOPTS`/`BASHOPTS` is rewritten and a missing `SHLVL` appears as 0; under dash,
environment entries whose names are not shell identifiers (bash's exported functions) are dropped.

A notice is NUL-separated: `v1, kind (call|missing|refused), name, pid, time, target, argc, args...`, where
time is `$EPOCHREALTIME` under bash (empty under sh: the file's mtime serves), and target the real agent's
path (call) or the `PATH` searched (missing).

In a box (`--sandbox`), whose processes can write into `calls/` (and so delete a notice before it is read),
each notice is told a second time, first, as one record into `STATE/shims/channel`: a FIFO the supervisor
holds open, in the read-only part of the bind, mode 0200, so the box can write to it but neither read,
delete nor replace it (evidence/notices.py reads it). A record is the notice without its arguments, one
line: `v1, kind, name, pid, time, target, argc` NUL-separated, then a newline. bash's `printf` writes it in
one `write()` (its stdout is line-buffered), and with the target left empty when it is long or
holds a newline, a record is far below PIPE_BUF: atomic, never interleaved with another shim's. Opening the
FIFO would wait for a reader with no supervisor; the box's init (the shims' `supervisor_pid` there) and its
processes die with the supervisor (`--die-with-parent`), so a box never outlives its reader.

Usage:

    shims = install_shims(state_dir / "shims", ["claude", "codex"])
    env["PATH"] = shims.path_for(env.get("PATH"))
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

NOTICE_VERSION = "v1"
KINDS = frozenset({"call", "missing", "refused"})
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
"""An agent name the shim may carry: a plain file name, no path separator, no shell metacharacters."""
MAX_NOTICE_BYTES = 1 << 20
GATE_SECONDS = 5.0
"""The longest a shim waits for the verdict on the call before it (one `sleep 0.01` a step)."""


def bad_agent_name(name: str) -> str | None:
    """Why `name` cannot be an agent's process name (None when it can). Pure."""
    if not name:
        return "an empty name"
    if "/" in name:
        return f"{name!r} holds a path separator (give the program's name, not its path)"
    if SAFE_NAME.fullmatch(name) is None:
        return (f"{name!r} is not a plain program name (letters, digits, . _ + -, not starting with . or -)")
    return None


@dataclass(frozen=True)
class ShimDir:
    """Where the shims live and what they read and write."""

    root: Path
    names: tuple[str, ...]

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def calls(self) -> Path:
        return self.root / "calls"

    @property
    def refuse_flag(self) -> Path:
        return self.root / "refuse"

    @property
    def channel(self) -> Path:
        """The box's notices, one record a line (a FIFO: only with `install_shims(channel=True)`)."""
        return self.root / "channel"

    @property
    def tick(self) -> Path:
        """A FIFO nobody writes: a bash shim waits 10 ms with `read -t` on it (no `sleep` process to fork)."""
        return self.root / "tick"

    @property
    def pending(self) -> Path:
        """One file per call whose verdict is pending (named by its pid): the next shim waits for it to go."""
        return self.root / "pending"

    def judged(self, pid: int | None) -> None:
        """The call of `pid` is judged (or was no call): the next call may start."""
        if pid is None:
            return
        try:
            (self.pending / str(pid)).unlink()
        except OSError:
            pass

    def sweep_pending(self, keep: set[int], older_than: float) -> None:
        """Remove pending marks of no call awaiting its verdict (a notice lost, a call never judged)."""
        try:
            entries = list(os.scandir(self.pending))
        except OSError:
            return
        for entry in entries:
            try:
                if int(entry.name) in keep or entry.stat().st_mtime > older_than:
                    continue
                os.unlink(entry.path)
            except (OSError, ValueError):
                continue

    def path_for(self, path: str | None) -> str:
        """The child's PATH: the shims first, then what it would have had."""
        return f"{self.bin}:{path}" if path else str(self.bin)

    def is_shim(self, cmdline: Sequence[str]) -> bool:
        """Is this command line a shim still running (an interpreter on one of our scripts)?"""
        prefix = f"{self.bin}/"
        return any(arg.startswith(prefix) for arg in cmdline[:3])

    @property
    def hold_flag(self) -> Path:
        return self.root / "hold"

    def refuse(self, on: bool) -> None:
        """Make every shim refuse (exit 143) or run new calls again."""
        _flag(self.refuse_flag, on)

    def hold(self, on: bool) -> None:
        """Make every shim wait (the tree is frozen) or go on."""
        _flag(self.hold_flag, on)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _flag(path: Path, on: bool) -> None:
    if on:
        path.touch(mode=0o644)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _notice(kind: str, name: str, at: str, target: str, calls: Path) -> str:
    # Two printf builtins in one group, one open and one close of the notice: one IN_CLOSE_WRITE.
    # The redirection of stderr comes first, so a vanished folder fails without a word.
    return (f"{{ printf '{NOTICE_VERSION}\\0{kind}\\0%s\\0%s\\0%s\\0%s\\0%s\\0' {shlex.quote(name)} \"$$\" {at} "
            f"{target} \"$#\"; printf '%s\\0' \"$@\"; }} 2>/dev/null >{shlex.quote(str(calls))}/\"$$\"")


RECORD_TARGET_CHARS = 512
"""A longer target (a `PATH` searched, most likely) goes into the file notice only: a record stays atomic."""


def _record(kind: str, name: str, at: str, target: str, channel: Path | None) -> str:
    """The shim's lines telling the channel (nothing without one): one printf, one write of one line, the
    target only when it is one short line (`_rs_t`). `at` must be the file notice's own (`_rs_a`)."""
    if channel is None:
        return ""
    stamp = "_rs_a=$EPOCHREALTIME\n" if at == '"$_rs_a"' else ""  # one time for the record and its file
    sane = ("_rs_t=\n" if target == "''" else
            f"case {target} in *'\n'*) _rs_t= ;; *) _rs_t={target} ;; esac\n"
            f"[ \"${{#_rs_t}}\" -le {RECORD_TARGET_CHARS} ] || _rs_t=\n")
    return (f"{stamp}{sane}printf '{NOTICE_VERSION}\\0{kind}\\0%s\\0%s\\0%s\\0%s\\0%s\\0\\n' {shlex.quote(name)} \"$$\" {at} "
            f"\"$_rs_t\" \"$#\" 2>/dev/null >{shlex.quote(str(channel))}\n")


def shim_script(name: str, shims: ShimDir, bash: str | None, supervisor_pid: int = 0,
                channel: bool = False) -> str:
    """The text of one shim. Pure. `bash`: the bash to run it (None: /bin/sh); `supervisor_pid`: the
    supervisor whose verdicts it waits for (0: none to wait for); `channel`: each notice is told to the
    channel too (a box)."""
    q = shlex.quote
    told = shims.channel if channel else None
    steps = int(GATE_SECONDS / 0.01) if supervisor_pid else 0
    # bash waits on a FIFO nobody writes (a builtin: no process to fork, which a frozen tree would keep as a
    # zombie); sh has no `read -t`, so it forks a sleep
    step = (f"read -r -t 0.01 _rs_w <>{q(str(shims.tick))} 2>/dev/null" if bash else "sleep 0.01 2>/dev/null || break")
    held = (f"read -r -t 0.1 _rs_w <>{q(str(shims.tick))} 2>/dev/null" if bash else "sleep 0.1 2>/dev/null || break")
    hold = q(str(shims.hold_flag))
    at = ('"$_rs_a"' if channel else '"$EPOCHREALTIME"') if bash else "''"
    run = f'exec -a {q(name)} "$_rs_x" "$@"' if bash else 'exec "$_rs_x" "$@"'
    return f"""#!{bash + ' -p' if bash else '/bin/sh'}
# ralph-supervise: a call of {name} starts here. Tell the supervisor, then run the real {name} found on the
# rest of PATH (exec: the same pid, stdio, signals and exit code). Builtins only; written by ralph-supervise.
_rs_d={q(str(shims.bin))}
case $PATH in
"$_rs_d") _rs_p= ;;
"$_rs_d":*) _rs_p=${{PATH#"$_rs_d":}} ;;
*:"$_rs_d") _rs_p=${{PATH%:"$_rs_d"}} ;;
*:"$_rs_d":*) _rs_p=${{PATH%%:"$_rs_d":*}}:${{PATH#*:"$_rs_d":}} ;;
*) _rs_p=$PATH ;;
esac
_rs_busy() {{ for _rs_f in {q(str(shims.pending))}/*; do [ -e "$_rs_f" ] && [ ! -d "/proc/${{_rs_f##*/}}" ] && return 0; done; return 1; }}
_rs_n=0
while [ ! -e {q(str(shims.refuse_flag))} ] && [ -d /proc/{supervisor_pid} ] && {{ [ -e {hold} ] || {{ [ "$_rs_n" -lt {steps} ] && _rs_busy; }}; }}; do
if [ -e {hold} ]; then {held}; else {step}; _rs_n=$((_rs_n + 1)); fi
done
if [ -e {q(str(shims.refuse_flag))} ]; then
{_record("refused", name, at, "''", told)}{_notice("refused", name, at, "''", shims.calls)}
exit 143
fi
_rs_r=$_rs_p
_rs_x=
while :; do
_rs_e=${{_rs_r%%:*}}
if [ "$_rs_e" != "$_rs_d" ] && [ -f "${{_rs_e:-.}}"/{q(name)} ] && [ -x "${{_rs_e:-.}}"/{q(name)} ]; then
_rs_x=${{_rs_e:-.}}/{q(name)}
break
fi
case $_rs_r in *:*) _rs_r=${{_rs_r#*:}} ;; *) break ;; esac
done
if [ -z "$_rs_x" ]; then
{_record("missing", name, at, '"$_rs_p"', told)}{_notice("missing", name, at, '"$_rs_p"', shims.calls)}
printf '%s: command not found\\n' {q(name)} >&2
exit 127
fi
: 2>/dev/null >{q(str(shims.pending))}/"$$"
{_record("call", name, at, '"$_rs_x"', told)}{_notice("call", name, at, '"$_rs_x"', shims.calls)}
PATH=$_rs_p
{run}
"""


def install_shims(root: Path, names: Sequence[str], bash: str | None | bool = True,
                  supervisor_pid: int | None = None, channel: bool = False) -> ShimDir:
    """Write one shim per name under `root/bin` (replacing what a previous run left), empty calls and
    pending folders, no refuse flag. `bash`: True finds bash on this machine, False or None uses /bin/sh, a
    path uses that bash; `supervisor_pid` (default: this process) is whose verdicts the shims wait for;
    `channel`: make the channel FIFO and tell each notice to it too (a box: open it before the box starts).
    Raises OSError (read-only state folder, say) and ValueError (a path with ':')."""
    root = Path(root).absolute()
    if ":" in str(root):
        raise ValueError(f"{root}: a folder whose path holds ':' cannot go on PATH")
    for name in names:
        reason = bad_agent_name(name)
        if reason is not None:
            raise ValueError(reason)
    if bash is True:
        bash = shutil.which("bash", path="/usr/bin:/bin")
    shell = bash if isinstance(bash, str) else None
    shims = ShimDir(root, tuple(dict.fromkeys(names)))
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"{root} exists and is not a folder")
    shutil.rmtree(root, ignore_errors=True)
    shims.bin.mkdir(parents=True)
    shims.calls.mkdir()
    shims.pending.mkdir()
    os.mkfifo(shims.tick, 0o600)
    if channel:
        os.mkfifo(shims.channel, 0o600)  # 0200 once the supervisor holds it open (notices.NoticeChannel)
    owner = os.getpid() if supervisor_pid is None else supervisor_pid
    for name in shims.names:
        path = shims.bin / name
        path.write_text(shim_script(name, shims, shell, owner, channel))
        path.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return shims


@dataclass(frozen=True)
class Notice:
    """What a shim said about one call."""

    kind: str
    """call (the agent runs), missing (not found on PATH), refused (we refused it)."""
    name: str
    pid: int
    at: float | None
    """When the shim ran (epoch seconds), when the shell could tell."""
    target: str
    """The real agent's path (call) or the PATH searched (missing)."""
    args: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.name, *self.args)


def _header(fields: list[str]) -> tuple[str, str, int, float | None, str, int] | None:
    """kind, name, pid, time, target and argc of a notice's or a record's fields; None when they are not. Pure."""
    if len(fields) < 7 or fields[0] != NOTICE_VERSION or fields[1] not in KINDS:
        return None
    try:
        pid = int(fields[3])
        argc = int(fields[6])
    except ValueError:
        return None
    if pid <= 1 or argc < 0:
        return None
    try:
        at = float(fields[4].replace(",", ".")) if fields[4] else None  # EPOCHREALTIME follows the locale
    except ValueError:
        at = None
    return fields[1], fields[2], pid, at, fields[5], argc


def parse_notice(data: bytes) -> Notice | None:
    """A notice's fields, or None when it is not one (truncated, foreign, corrupt). Pure."""
    if len(data) > MAX_NOTICE_BYTES:
        return None
    fields = [part.decode("utf-8", "surrogateescape") for part in data.split(b"\0")]
    header = _header(fields)
    if header is None or len(fields) < 7 + max(header[5], 1) + 1:
        return None
    kind, name, pid, at, target, argc = header
    return Notice(kind, name, pid, at, target, tuple(fields[7:7 + argc]))


@dataclass(frozen=True)
class Record:
    """A notice as the channel tells it: without its arguments (their count only), the target when short."""

    kind: str
    name: str
    pid: int
    at: float | None
    target: str
    argc: int

    def describes(self, notice: Notice) -> bool:
        """Is `notice` (a file, as written) the same notice? Pure."""
        return (notice.kind, notice.name, notice.pid, len(notice.args)) == (self.kind, self.name, self.pid, self.argc) \
            and (self.at is None or notice.at == self.at) and self.target in ("", notice.target)

    def notice(self, args: tuple[str, ...] = ()) -> Notice:
        return Notice(self.kind, self.name, self.pid, self.at, self.target, args)


def parse_record(line: bytes) -> Record | None:
    """One line of the channel (without its newline), or None when it is not a record. Pure."""
    if len(line) > MAX_NOTICE_BYTES:
        return None
    fields = [part.decode("utf-8", "surrogateescape") for part in line.split(b"\0")]
    header = _header(fields) if len(fields) == 8 and fields[7] == "" else None
    return Record(*header) if header is not None else None


def read_notice(path: Path, seen: Callable[[Notice], None] | None = None) -> Notice | None:
    """Read and remove one notice file; None when it is gone or not a notice (an empty one: the disk was
    full). Its mtime stands in for the time under /bin/sh. `seen(notice)` runs before the file goes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = os.read(fd, MAX_NOTICE_BYTES + 1)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    notice = parse_notice(data)
    if notice is not None and notice.at is None:
        notice = Notice(notice.kind, notice.name, notice.pid, info.st_mtime_ns / 1e9, notice.target, notice.args)
    if notice is not None and seen is not None:
        seen(notice)
    try:
        os.unlink(path)
    except OSError:
        pass
    return notice

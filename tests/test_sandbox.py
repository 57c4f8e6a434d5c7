"""`--sandbox bwrap`: the loop in a real bubblewrap box, supervised as without it.

The box's rules are pure (the environment's allow-list, bubblewrap's arguments in mount order) and tested
as such; the rest runs real loops in real boxes: writes in the workspace count, a second folder and a fake
home's `.ssh` are out of reach, a pause freezes, a stop leaves nothing, the shims' notices still arrive,
and with the network off a loopback HTTP probe from inside fails while one from outside works.
"""

from __future__ import annotations

import dataclasses
import http.server
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ralph_supervisor.sandbox import Bind, Box, box_environment, keep_variable
from tests.helpers import executable, wait_for
from tests.helpers.fault_procs import MARK_VAR, cli, marked, paused, states, wait_gone
from tests.helpers.runs import Run
from tests.helpers.supervise import events, history

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed "
                                                       "(scripts/setup.d/45-bubblewrap.sh installs it)")


def _box_works() -> str | None:
    if BWRAP is None:
        return "no bwrap"
    done = subprocess.run([BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
                          capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else done.stderr.strip()


# ------------------------------------------------------------------ the rules


def test_refused_writes_are_counted_from_the_output() -> None:
    from ralph_supervisor.sandbox import refused_writes

    text = b"sh: 1: cannot create /x/a: Read-only file system\nok\ntouch: cannot touch 'b': Read-only file system\n"
    assert refused_writes(text) == 2 and refused_writes(b"No such file or directory\n") == 0


def test_the_environment_is_an_allow_list() -> None:
    env = {"PATH": "/usr/bin", "HOME": "/h", "LANG": "C.UTF-8", "LC_ALL": "C", "TERM": "xterm",
           "AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "t", "SSH_AUTH_SOCK": "/run/x", "DBUS_SESSION_BUS_ADDRESS": "u",
           "ANTHROPIC_API_KEY": "k", "MY_TOOL_A": "1", "MY_TOOL_B": "2", "NAMED": "n", "TREE_MARK": "m",
           "XDG_RUNTIME_DIR": "/run/user/1"}
    out = box_environment(env, extra=("NAMED", "MY_TOOL_*"), agent_prefixes=("ANTHROPIC_",), keep=("TREE_MARK",))
    assert set(out) == {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "ANTHROPIC_API_KEY", "MY_TOOL_A", "MY_TOOL_B",
                        "NAMED", "TREE_MARK", "TMPDIR"}
    assert out["TMPDIR"] == "/tmp"
    assert not keep_variable("GITHUB_TOKEN", (), ()) and keep_variable("GITHUB_TOKEN", ("GITHUB_TOKEN",), ())


def test_the_arguments_mount_parents_first_hide_the_state_folder_and_bind_the_shims_read_only(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    (ws / ".state").mkdir(parents=True)
    box = Box(bwrap="/usr/bin/bwrap", workspace=ws, state_dir=ws / ".state", home=home,
              binds=(Bind(home / ".claude/settings.json", False, "claude"), Bind(home / ".claude", True, "claude")),
              network=False, shims=tmp_path / "shims", shim_writable=(tmp_path / "shims/calls",),
              hidden=(ws / ".state",))
    args = box.arguments()
    assert args[:4] == ["--die-with-parent", "--new-session", "--cap-drop", "ALL"] and "--unshare-net" in args
    rw = args.index(str(home / ".claude"))
    ro = args.index(str(home / ".claude/settings.json"))
    assert args[rw - 1] == "--bind" and args[ro - 1] == "--ro-bind" and rw < ro, "the read-only file covers the rw folder"
    assert args[args.index("--tmpfs", args.index(str(ws))) + 1] == str(ws / ".state")
    assert args[args.index(str(tmp_path / "shims")) - 1] == "--ro-bind"
    assert args[args.index(str(tmp_path / "shims/calls")) - 1] == "--bind"
    assert "/run" not in args and args[-2:] == ["--chdir", str(ws)]
    assert "--unshare-net" not in Box(bwrap="b", workspace=ws, state_dir=ws, home=home, binds=(), network=True).arguments()


def test_bad_paths_and_a_missing_bubblewrap_are_one_line_each(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    plan = dict(workspace=tmp_path, state_dir=state, env={"HOME": str(tmp_path), "PATH": "/usr/bin"}, bwrap="/b")
    assert Box.plan(**plan, ro=[tmp_path / "nope"]).problem() == f"--sandbox-ro: {tmp_path / 'nope'} does not exist"
    problem = Box.plan(**plan, rw=[tmp_path]).problem()
    assert problem and problem.startswith(f"--sandbox-rw: {tmp_path} holds the state folder")
    assert "bubblewrap (bwrap) is not installed" in (dataclasses.replace(Box.plan(**plan), bwrap=None).problem() or "")
    assert Box.plan(**plan).problem() is None


def test_the_adapters_name_their_folders_and_a_found_agent_is_bound_read_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text("{}")
    (home / ".codex").mkdir()
    agent = executable(tmp_path / "tools" / "agentbin", "claude", "#!/bin/sh\n")
    box = Box.plan(workspace=tmp_path / "ws", state_dir=tmp_path / "state", bwrap="/b", agents=("claude",),
                   env={"HOME": str(home), "PATH": f"{agent.parent}:/usr/bin", "CLAUDE_CODE_X": "1", "OPENAI_API_KEY": "o"})
    binds = {(b.path, b.writable) for b in box.binds}
    assert (home / ".claude", True) in binds and (home / ".claude/settings.json", False) in binds
    assert (agent.parent, False) in binds
    assert not any(b.path == home / ".codex" for b in box.binds), "only the adapters of the watched agents"
    assert "CLAUDE_CODE_X" in box.env and "OPENAI_API_KEY" not in box.env
    (home / ".ralph").mkdir()
    ralph = Box.plan(workspace=tmp_path / "ws", state_dir=tmp_path / "state", bwrap="/b", command=("ralph", "--monitor"),
                     env={"HOME": str(home), "PATH": "/usr/bin"})
    assert Bind(home / ".ralph", False, "Ralph's install") in ralph.binds, "Ralph's global install runs ~/.ralph/"


# ------------------------------------------------------------------ real boxes

SANDBOXED = ("--sandbox", "bwrap", "--sandbox-env", f"{MARK_VAR},MARKS")


@pytest.fixture
def boxed(tmp_path: Path) -> Iterator[Run]:
    reason = _box_works()
    if reason is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {reason}")
    run = Run(tmp_path / "ws", marks=tmp_path / "ws" / "marks")
    try:
        yield run
    finally:
        run.cleanup()


@needs_bwrap
@pytest.mark.slow
def test_a_boxed_loop_writes_its_workspace_and_nothing_else(boxed: Run, tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    other.mkdir()
    (other / "keep.txt").write_text("untouched\n")
    shown = tmp_path / "shown"  # --sandbox-ro: readable, not writable
    shown.mkdir()
    (shown / "notes.txt").write_text("visible\n")
    agent = executable(tmp_path / "tools" / "agentbin", "claude",
                       "#!/bin/sh\necho \"step $$\" > \"step_$$.txt\"\n[ \"$2\" = slow ] && sleep 1.5\n"
                       "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\"}'\n")
    script = (f"claude -p slow; claude -p quick; echo evil > {other}/keep.txt; echo new > {other}/new.txt; "
              f"cat {home}/.ssh/id_ed25519; echo \"home: $(ls -A {home})\"; echo \"aws: ${{AWS_SECRET_ACCESS_KEY:-none}}\"; "
              f"echo \"shown: $(cat {shown}/notes.txt)\"; echo changed > {shown}/notes.txt; sleep 0.5")
    boxed.start(*SANDBOXED, "--sandbox-ro", str(shown), "--", "sh", "-c", script,
                env={"HOME": str(home), "PATH": f"{agent.parent}:{os.environ['PATH']}", "AWS_SECRET_ACCESS_KEY": "sek"})
    seen = wait_for(lambda: [p.pid for p in boxed.tree() if _name(p) == "claude"], what="the slow call in the box")
    assert boxed.finish(60) == 0
    log = (boxed.state_dir / "child.log").read_bytes().decode(errors="replace")
    assert (other / "keep.txt").read_text() == "untouched\n" and not (other / "new.txt").exists()
    assert f"{other}/keep.txt: Directory nonexistent" in log, log
    assert f"{shown}/notes.txt: Read-only file system" in log and "shown: visible" in log, log
    assert (shown / "notes.txt").read_text() == "visible\n"
    assert "PRIVATE KEY" not in log and f"{home}/.ssh/id_ed25519: No such file or directory" in log, log
    assert "home: \n" in log, "the fake home is empty in the box"
    assert "aws: none" in log
    assert len(list(boxed.workspace.glob("step_*.txt"))) == 2
    finished = events(boxed.state_dir, "iteration_finished")
    assert len(finished) == 2 and all(e.get("files_changed", 1) >= 1 for e in finished), finished
    # The slow call's notice named the box's PID, mapped to ours through NSpid: the call is the process we saw.
    # The quick one may be over before its notice is read (no process left to map: PID 0); an iteration all the same.
    started = events(boxed.state_dir, "iteration_started")
    assert len(started) == 2 and started[0]["pid"] == seen[0], (started, seen)
    inner = {int(p.name.removeprefix("step_").removesuffix(".txt")) for p in boxed.workspace.glob("step_*.txt")}
    assert seen[0] not in inner, "inside the box the agent has a PID of the box's own"
    report = cli(boxed.workspace, "report")
    assert "| box | bubblewrap (`--sandbox bwrap`), 1 write(s) refused (`Read-only file system` in the output) |" \
        in report.stdout, report.stdout[:3000]
    assert marked(boxed.mark) == []


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except (psutil.Error, OSError):  # gone while we look
        return ""


PAUSABLE = """
bash -c 'echo $$ > "$MARKS/busy.pid.tmp"; mv "$MARKS/busy.pid.tmp" "$MARKS/busy.pid"; while :; do :; done' &
( setsid sleep 1000 & )
while :; do sleep 0.2; done
"""


@needs_bwrap
@pytest.mark.slow
def test_a_boxed_tree_is_frozen_by_a_pause_and_a_stop_leaves_nothing(boxed: Run) -> None:
    assert boxed.marks is not None
    boxed.start(*SANDBOXED, "--", "bash", "-c", PAUSABLE)
    wait_for(lambda: (boxed.marks / "busy.pid").exists(), what="the busy child in the box")
    wait_for(lambda: len(boxed.tree()) >= 4, what="the boxed tree (bwrap, bash, busy, sleep)")
    names = {_name(p) for p in boxed.tree()}
    assert "bwrap" in names, names
    assert cli(boxed.workspace, "pause").returncode == 0
    frozen = paused(boxed.tree())
    assert frozen and all(frozen.values()), states(boxed.tree())
    busy = psutil.Process(int((boxed.marks / "busy.pid").read_text()))
    before = busy.cpu_times()
    time.sleep(0.4)
    assert busy.cpu_times() == before, "a paused boxed loop accumulated CPU"
    assert cli(boxed.workspace, "stop").returncode == 0
    assert wait_gone(boxed.proc, 15) == 0  # type: ignore[arg-type]
    assert marked(boxed.mark) == []
    assert all(e["survivors"] == 0 for e in events(boxed.state_dir, "tree_stopped"))


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("network", ["off", "on"])
def test_with_the_network_off_a_loopback_probe_from_inside_fails_while_one_from_outside_works(
        boxed: Run, network: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        probe = (f"if exec 3<>/dev/tcp/127.0.0.1/{port}; then printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; "
                 "echo \"probe: $(cat <&3 | tail -n 1)\"; else echo 'probe: refused'; fi")
        boxed.start(*SANDBOXED, "--sandbox-network", network, "--", "bash", "-c", probe)
        boxed.finish(60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
            assert reply.read() == b"hello", "from outside the server answers"
        log = (boxed.state_dir / "child.log").read_bytes().decode(errors="replace")
        assert ("probe: refused" if network == "off" else "probe: hello") in log, log
    finally:
        server.shutdown()
        server.server_close()


@needs_bwrap
@pytest.mark.slow
def test_a_path_to_bind_that_does_not_exist_is_one_line_and_nothing_is_spawned(boxed: Run, tmp_path: Path) -> None:
    assert boxed.marks is not None
    boxed.start(*SANDBOXED, "--sandbox-ro", str(tmp_path / "absent"), "--", "sh", "-c", f"touch {boxed.marks}/ran")
    assert boxed.finish(60) == 1
    err = boxed.stderr.decode(errors="replace")
    assert f"ralph-supervise: --sandbox-ro: {tmp_path / 'absent'} does not exist" in err
    assert not (boxed.marks / "ran").exists() and not events(boxed.state_dir, "child_started")


# ------------------------------------------------------------------ the verify in a box

CHECK = """#!/bin/sh
if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo "probe: reached"; else echo "probe: refused"; fi
echo "canary: $(cat {canary} 2>/dev/null || echo hidden)"
echo "aws: ${{AWS_SECRET_ACCESS_KEY:-none}}"
echo ok > written-by-the-verify.txt
echo "============================== 1 passed in 0.01s =============================="
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("network", ["off", "on"])
def test_the_verify_runs_in_a_box_too_its_network_off_unless_asked(boxed: Run, tmp_path: Path, network: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    canary = tmp_path / "canary"
    canary.write_text("seen\n")
    try:
        (boxed.workspace / "check.sh").write_text(CHECK.format(port=server.server_address[1], canary=canary))
        loop = "echo ITER; echo one > one.txt; sleep 0.5; echo ITER; sleep 1.5"
        boxed.start(*SANDBOXED, "--verify-network", network, "--verify", "sh check.sh", "--iteration-marker", "^ITER$",
                    "--", "sh", "-c", loop, env={"AWS_SECRET_ACCESS_KEY": "sek"})
        assert boxed.finish(60) == 0, boxed.stderr.decode(errors="replace")[-2000:]
    finally:
        server.shutdown()
        server.server_close()
    finished = events(boxed.state_dir, "verify_finished")
    assert finished and finished[0].get("passed") == 1 and not finished[0].get("unverified"), finished
    output = (boxed.state_dir / "verify-output.log").read_text()
    assert ("probe: refused" if network == "off" else "probe: reached") in output, output
    assert "canary: hidden" in output and "aws: none" in output, output
    assert not (boxed.workspace / "written-by-the-verify.txt").exists()


def test_the_box_holds_no_capability_even_when_the_supervisor_is_root(tmp_path: Path) -> None:
    """Root in a box with its capabilities could remount the read-only binds writable, or read the notice channel
    (mode 0200): the box's arguments drop them all, and no setuid program gets them back."""
    if _box_works() is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {_box_works()}")
    ws = tmp_path / "ws"
    ws.mkdir()
    box = Box(bwrap=BWRAP, workspace=ws, state_dir=tmp_path / "state", home=tmp_path / "home", binds=(),
              network=True, shims=None, shim_writable=(), hidden=())
    probe = ("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
             "mount -o remount,rw /usr 2>/dev/null && echo remounted || echo 'remount: refused'; "
             "touch /usr/planted 2>/dev/null && echo planted || echo 'plant: refused'")
    done = subprocess.run([BWRAP, *box.arguments(), "--chdir", str(ws), "sh", "-c", probe],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "CapEff:\t0000000000000000" in done.stdout and "NoNewPrivs:\t1" in done.stdout, done.stdout
    assert "remount: refused" in done.stdout and "plant: refused" in done.stdout, done.stdout
    assert not os.path.exists("/usr/planted")


def test_nspid_is_read_and_a_box_pid_maps_to_ours(tmp_path: Path) -> None:
    from ralph_supervisor.process.namespace import box_namespace, host_pid, inner_pid, parse_ns_pids

    assert parse_ns_pids("Name:\tsleep\nNSpid:\t4242\t7\n") == (4242, 7)
    assert parse_ns_pids("Name:\tx\n") == ()
    if _box_works() is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {_box_works()}")
    outer = subprocess.Popen([BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                              "--die-with-parent", "sh", "-c", "sleep 30 & echo $! > /dev/stderr; wait"],
                             stderr=subprocess.PIPE, text=True)
    try:
        assert outer.stderr is not None
        inside = int(outer.stderr.readline())
        namespace = wait_for(lambda: box_namespace(outer.pid), what="the box's PID namespace")
        host = wait_for(lambda: host_pid(namespace, inside), what="the sleep's PID of ours")
        wait_for(lambda: psutil.Process(host).cmdline() == ["sleep", "30"], what="the sleep itself (past its exec)")
        assert host != inside
        assert inner_pid(host) == inside and host_pid(namespace, 99999) is None
    finally:
        outer.kill()
        outer.wait()
    wait_for(lambda: host_pid(namespace, inside) is None, what="the box to be gone with its bubblewrap")


@pytest.mark.slow
def test_a_kernel_without_user_namespaces_is_one_line_and_nothing_is_spawned(tmp_path: Path) -> None:
    """bubblewrap's own words where the kernel refuses it a namespace (a bwrap that answers as Debian's does
    there: this machine allows user namespaces, so the refusal is played by a stand-in on PATH)."""
    fake = executable(tmp_path / "fakebin", "bwrap",
                      "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
                      "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    run = Run(tmp_path / "ws", marks=tmp_path / "marks")
    try:
        run.start(*SANDBOXED, "--", "sh", "-c", f"touch {tmp_path}/marks/ran",
                  env={"PATH": f"{fake.parent}:{os.environ['PATH']}"})
        assert run.finish(60) == 1
    finally:
        run.cleanup()
    lines = [line for line in run.stderr.decode(errors="replace").splitlines() if line.startswith("ralph-supervise:")]
    assert len(lines) == 1 and "--sandbox bwrap: the box cannot be made: bwrap: No permissions to creating new " \
        "namespace" in lines[0] and "user namespaces" in lines[0], lines
    assert not (tmp_path / "marks" / "ran").exists() and not events(run.state_dir, "child_started")


REAL_AGENT = ("#!/bin/sh\necho real > real.txt\nsleep 0.5\n"
              "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\"}'\n")


@needs_bwrap
@pytest.mark.slow
def test_a_notice_forged_from_inside_the_box_is_no_call(boxed: Run, tmp_path: Path) -> None:
    agent = executable(tmp_path / "tools" / "agentbin", "claude", REAL_AGENT)
    # The loop's shell writes a call notice naming itself into the shims' calls/ (writable from inside).
    forge = ("calls=\"${PATH%%:*}/../calls\"; printf 'v1\\0call\\0claude\\0%s\\0\\0/usr/bin/claude\\0%s\\0\\0' $$ 0 "
             "> \"$calls/$$\"; sleep 1; claude -p real; sleep 0.3")
    boxed.start(*SANDBOXED, "--", "bash", "-c", forge, env={"PATH": f"{agent.parent}:{os.environ['PATH']}"})
    assert boxed.finish(60) == 0
    forged = events(boxed.state_dir, "agent_call_forged")
    assert len(forged) == 1 and forged[0]["name"] == "claude", forged
    started = events(boxed.state_dir, "iteration_started")
    assert len(started) == 1 and started[0]["pid"] != forged[0]["pid"], started
    finished = events(boxed.state_dir, "iteration_finished")
    assert len(finished) == 1 and "real.txt" in finished[0]["paths"], finished


# ------------------------------------------------------------------ the notices' channel: a box cannot silence a call

# The loop's side of the attack: every notice file of the next 1,000 PIDs leads to /dev/null (no file, no event;
# planted by one process, so that planting burns no PIDs), whatever notice file is made anyway is deleted at
# once, and so is the refuse flag, where it can be.
SILENCER = ('calls="${PATH%%:*}/../calls"; '
            'python3 -c \'import os, sys\nfor p in range(int(sys.argv[2]), int(sys.argv[2]) + 1000):\n'
            '    try: os.symlink("/dev/null", f"{sys.argv[1]}/{p}")\n    except OSError: pass\' "$calls" $$; '
            '( while :; do for f in "$calls"/*; do [ -L "$f" ] || rm -f "$f"; done; '
            '[ -e "$calls/../refuse" ] && rm -f "$calls/../refuse" 2>/dev/null; done ) & ')
STEP_AGENT = ("#!/bin/sh\necho \"step $*\" > \"step_$$.txt\"\n"
              "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\"}'\n")


@needs_bwrap
@pytest.mark.slow
def test_a_box_that_deletes_and_redirects_its_notices_still_has_every_call_counted_exactly(
        boxed: Run, tmp_path: Path) -> None:
    """Each call's record in the channel still counts: the box can write to the channel, never take from it."""
    agent = executable(tmp_path / "tools" / "agentbin", "claude", STEP_AGENT)
    script = SILENCER + "for i in 1 2 3 4 5 6; do claude -p \"step $i\"; done; kill $!"
    boxed.start(*SANDBOXED, "--", "bash", "-c", script, env={"PATH": f"{agent.parent}:{os.environ['PATH']}"})
    assert boxed.finish(90) == 0, boxed.stderr.decode(errors="replace")[-3000:]
    assert len(list(boxed.workspace.glob("step_*.txt"))) == 6
    finished = events(boxed.state_dir, "iteration_finished")
    assert len(finished) == 6, finished
    steps = [[path for path in e["paths"] if path.startswith("step_")] for e in finished]  # (marks/ is the test's)
    assert all(len(own) == 1 for own in steps), ("each call its own file", finished)
    assert sorted(own[0] for own in steps) == sorted(p.name for p in boxed.workspace.glob("step_*.txt"))
    assert events(boxed.state_dir, "agent_call_forged") == []
    assert marked(boxed.mark) == []


@needs_bwrap
def test_in_a_box_a_refusing_shim_holds_though_the_loop_deletes_the_flag_and_every_notice(tmp_path: Path) -> None:
    """The refusal during a stop is a flag in the shims' read-only part, and each refusal is told to the channel:
    nothing the box can delete. (A supervised stop TERMs bubblewrap, which takes the box with it at once: the
    refusal covers the calls that start between the stop's decision and that.)"""
    from ralph_supervisor.evidence.notices import NoticeChannel, NoticeReader
    from ralph_supervisor.evidence.shims import install_shims

    reason = _box_works()
    if reason is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {reason}")
    ws = tmp_path / "ws"
    ws.mkdir()
    shims = install_shims(tmp_path / "run" / "shims", ["claude"], supervisor_pid=1, channel=True)
    reader = NoticeReader(shims, NoticeChannel(shims.channel), box_namespace=lambda: None)
    try:
        shims.refuse(True)
        agent = executable(tmp_path / "tools" / "agentbin", "claude", "#!/bin/sh\necho ran >> ran.txt\n")
        env = {**os.environ, "PATH": shims.path_for(f"{agent.parent}:{os.environ['PATH']}")}
        box = Box.plan(workspace=ws, state_dir=tmp_path / "state", env=env, agents=("claude",), shims=shims.root,
                       shim_writable=(shims.calls, shims.pending), bwrap=BWRAP)
        script = ('calls="${PATH%%:*}/../calls"; rm -f "$calls/../refuse" 2>&1; '
                  'for i in 1 2 3; do claude -p go; echo "exit $?"; rm -f "$calls"/*; done')
        done = subprocess.run(box.wrap(["bash", "-c", script]), env=box.env, cwd=ws, capture_output=True,
                              timeout=60, check=False)
        out = done.stdout.decode() + done.stderr.decode()
        assert out.count("exit 143") == 3 and not (ws / "ran.txt").exists(), out
        assert "Read-only file system" in out and shims.refuse_flag.exists(), out
        assert list(shims.calls.iterdir()) == [], "the box deleted every notice file"
        refused = reader.refusals()
        assert [a.notice.kind for a in refused] == ["refused"] * 3, "each refusal told to the channel all the same"
    finally:
        reader.close()


@needs_bwrap
@pytest.mark.slow
def test_a_stop_ends_a_boxed_loop_that_deletes_every_notice_and_starts_no_call_after_it(boxed: Run,
                                                                                       tmp_path: Path) -> None:
    agent = executable(tmp_path / "tools" / "agentbin", "claude",
                       "#!/bin/sh\nsleep 0.02\necho 'Error: Claude Code cannot be launched inside another Claude "
                       "Code session.' >&2\nexit 1\n")
    script = SILENCER + "trap '' TERM; while :; do claude -p go --output-format json; sleep 0.1; done"
    boxed.start(*SANDBOXED, "--on-open", "stop", "--no-progress", "100", "--grace", "2", "--", "bash", "-c", script,
                env={"PATH": f"{agent.parent}:{os.environ['PATH']}"})
    assert boxed.finish(90) == 2, boxed.stderr.decode(errors="replace")[-3000:]
    opened = [h for h in history(boxed.state_dir) if h["to"] == "OPEN"]
    stopped = events(boxed.state_dir, "tree_stopped")[-1]
    assert stopped["survivors"] == 0
    started = [e["iteration"] for e in events(boxed.state_dir, "iteration_started")]
    assert opened and max(started) <= opened[0]["iteration"] + 2, ("no call once the stop was decided", started)
    assert marked(boxed.mark) == []


@needs_bwrap
@pytest.mark.slow
def test_a_record_forged_into_the_channel_is_no_call(boxed: Run, tmp_path: Path) -> None:
    agent = executable(tmp_path / "tools" / "agentbin", "claude", REAL_AGENT)
    # The loop's shell tells the channel of a call naming itself, and of a missing agent naming its `sleep`.
    forge = ("channel=\"${PATH%%:*}/../channel\"; sleep 5 & "
             "printf 'v1\\0call\\0claude\\0%s\\0\\0/usr/bin/claude\\0%s\\0\\n' $$ 0 > \"$channel\"; "
             "printf 'v1\\0missing\\0claude\\0%s\\0\\0/usr/bin\\0%s\\0\\n' $! 0 > \"$channel\"; "
             "sleep 1.5; claude -p real; sleep 0.3; kill $!")
    boxed.start(*SANDBOXED, "--", "bash", "-c", forge, env={"PATH": f"{agent.parent}:{os.environ['PATH']}"})
    assert boxed.finish(60) == 0
    forged = events(boxed.state_dir, "agent_call_forged")
    assert sorted(e["kind"] for e in forged) == ["call", "missing"], forged
    started = events(boxed.state_dir, "iteration_started")
    assert len(started) == 1 and started[0]["pid"] != forged[0]["pid"], started
    finished = events(boxed.state_dir, "iteration_finished")
    assert len(finished) == 1 and "real.txt" in finished[0]["paths"] and not finished[0].get("blocked"), finished

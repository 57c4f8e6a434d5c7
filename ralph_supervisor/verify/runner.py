"""The verify: the project's test command, run by the supervisor on each changed iteration's snapshot.

The loop never sees it: the snapshot's files are written to a folder of the verify's own outside the
workspace, so what runs is exactly what the iteration left, and nothing the agent does next can change
it. Dependencies the snapshot does not hold (`node_modules`, a virtual environment) are linked in from
the workspace, and the snapshot comes first on the import path (an editable install in a borrowed
virtual environment points at the workspace). Build caches (`CARGO_TARGET_DIR`) persist under the
state folder.

One verify at a time, on a thread of its own (`serial.SerialWorker`), at low priority (box.py): when
iterations come faster than verifies, the newest waiting snapshot is verified and those in between are
marked skipped, and each verify names the iterations it covers. A verify that cannot say anything (its command is missing, it
hangs past `--verify-timeout`, it is killed, it ran no test) is "unverified", never "failed": the
supervisor's own trouble is never the agent's fault. It is a helper (process/helpers.py): never in the
loop's tree, never frozen by a pause; `close` ends it with its whole tree.

Usage (what the supervisor does):

    verifier = Verifier(VerifyPlan.of(settings), store, on_finished=lambda run: ...)
    verifier.submit(snapshot_info)     # from the keeper, after each iteration's snapshot
    verifier.close(wait=600)           # at exit: finish what is pending (bounded), then stop
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor import store as state_files
from ralph_supervisor.files import verify_jsonl
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.sandbox import VerifyBox
from ralph_supervisor.serial import Job, SerialWorker
from ralph_supervisor.snapshots.git import SnapshotError
from ralph_supervisor.snapshots.info import SnapshotInfo
from ralph_supervisor.snapshots.restore import write_files
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.verify.results import ERROR, FAILED, PASSED, TestResults, read_results
from ralph_supervisor.verify.tampering import Finding, find_weakening, watched

log = structlog.get_logger(__name__)

BOX = Path(__file__).with_name("box.py")
BORROWED = ("node_modules", ".venv", "venv")
"""Folders used from the workspace when the snapshot does not hold them (the snapshots ignore them)."""
HEAD_BYTES = 256 * 1024
TAIL_BYTES = 2 * 1024 * 1024
"""What of a verify's output is kept for reading: its start and its end (summaries are at the end)."""
TEXT_MAX = 1_000_000
"""Test files larger than this are not diffed for tampering."""
KILL_GRACE_S = 3.0
NOT_FOUND_CODES = (126, 127)
_CANNOT_RUN = re.compile(
    r"^.*(?:No module named '?(?:pytest|unittest|nose2?)'?|: command not found|: not found|"
    r"npm (?:ERR!|error) (?:Missing script|enoent|code ENOENT)|Cannot find module '(?:jest|vitest|mocha)[^']*'|"
    r"make: \*\*\* No rule to make target '?test'?|error: no such command: `nextest`).*$",
    re.MULTILINE,
)
"""The test command's tools are missing: the supervisor's (or the setup's) trouble, not a failing test."""


@dataclass(frozen=True)
class VerifyPlan:
    """What every verify runs and where: the command, its timeout, the workspace, the folders of its own."""

    command: str
    timeout: float
    workspace: Path
    state_dir: Path
    python: str = sys.executable
    sandbox: VerifyBox | None = None
    """The box every verify runs in where the loop is boxed (`--sandbox`), else None."""

    @classmethod
    def of(cls, settings: Any) -> VerifyPlan:
        return cls(command=settings.verify, timeout=settings.verify_timeout, workspace=settings.workspace,
                   state_dir=settings.state_dir, sandbox=VerifyBox.of(settings))

    @property
    def root(self) -> Path:
        """The verify's folder: under the state folder when that is outside the workspace, else in the temp dir."""
        try:
            self.state_dir.resolve().relative_to(self.workspace.resolve())
        except ValueError:
            return self.state_dir / "verify"
        key = hashlib.sha256(str(self.workspace.resolve()).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"ralph-supervise-verify-{os.getuid()}-{key}"

    @property
    def cache(self) -> Path:
        """Build caches kept from one verify to the next."""
        return self.state_dir / "verify-cache"


@dataclass(frozen=True)
class VerifyRun:
    """One verify: the snapshot it ran on, the iterations it covers, what the tests said."""

    iteration: int
    snapshot: int
    covers: tuple[int, ...]
    started: float
    seconds: float
    exit_code: int | None
    results: TestResults | None
    unverified: str | None = None
    """Why this verify proves nothing (None: it does)."""
    left: tuple[str, ...] = ()
    """Processes the test command left running (killed)."""
    findings: tuple[Finding, ...] = ()
    """Weakened tests since the last verified snapshot."""
    fixed: tuple[str, ...] = ()
    broke: tuple[str, ...] = ()
    skipped_iterations: tuple[int, ...] = ()
    previous_iteration: int | None = None
    """The iteration of the last verified snapshot this one was compared with."""
    previous_results: TestResults | None = field(default=None, compare=False)
    previous_snapshot: SnapshotInfo | None = field(default=None, compare=False)
    """The last verified snapshot (the one to restore after a tampering)."""

    @property
    def verified(self) -> bool:
        return self.unverified is None and self.results is not None

    @property
    def failed(self) -> bool:
        """The tests failed (a verified run whose tests did not all pass)."""
        return self.verified and self.results is not None and not self.results.ok

    def line(self) -> dict[str, Any]:
        """Its `verify.jsonl` line."""
        r = self.results
        return {
            "iteration": self.iteration, "covers": list(self.covers), "snapshot": self.snapshot,
            "started": state_files.iso_utc(self.started), "seconds": round(self.seconds, 3), "exit": self.exit_code,
            "passed": r.passed if r else None, "failed": r.failed if r else None,
            "errors": r.errors if r else None, "skipped": r.skipped if r else None,
            "runner": r.runner if r else None, "unverified": self.unverified,
            "fixed": list(self.fixed[: verify_jsonl.NAMES_MAX]), "broke": list(self.broke[: verify_jsonl.NAMES_MAX]),
            "weakened": [f.describe() for f in self.findings[:20]],
            "skipped_iterations": list(self.skipped_iterations),
        }


def changes(before: TestResults | None, after: TestResults | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tests fixed (failing before, passing now) and broken (passing before, failing now), by name."""
    if before is None or after is None:
        return (), ()
    bad = (FAILED, ERROR)
    fixed = sorted(n for n, o in after.tests.items() if o == PASSED and before.tests.get(n) in bad)
    broke = sorted(n for n, o in after.tests.items() if o in bad and before.tests.get(n) == PASSED)
    return tuple(fixed), tuple(broke)


def as_passed(results: TestResults, names: list[str]) -> TestResults:
    """The results with these failing tests counted as passed (they passed when run again: flaky)."""
    tests = dict(results.tests)
    failed = errors = 0
    for name in names:
        if tests.get(name) == FAILED:
            failed += 1
        elif tests.get(name) == ERROR:
            errors += 1
        else:
            continue
        tests[name] = PASSED
    return replace(results, passed=results.passed + failed + errors, failed=max(0, results.failed - failed),
                   errors=max(0, results.errors - errors), tests=tests)


def unverified_reason(results: TestResults, exit_code: int | None, output_tail: str) -> str | None:
    """Why a finished command proves nothing, or None. Pure."""
    if exit_code is None:
        return "the test command was killed"
    if not results.counted:
        cannot = _CANNOT_RUN.search(output_tail)
        if exit_code in NOT_FOUND_CODES or cannot:
            last = cannot.group(0) if cannot else next((line for line in reversed(output_tail.splitlines()) if line.strip()), "")
            return f"the test command could not run (exit {exit_code}: {last.strip()[:200]})"
        if exit_code not in (0, 1):
            return f"the test command exited {exit_code} with no test results"
        return None
    if results.ran_nothing:
        return f"the test command ran no test (exit {exit_code})"
    return None


class _Output:
    """A verify's output as far as it is kept: the first HEAD_BYTES and the last TAIL_BYTES."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[: len(self.tail) - TAIL_BYTES]

    def text(self) -> str:
        tail = bytes(self.tail[-TAIL_BYTES:])
        cut = self.total - len(self.head) - len(tail)
        gap = f"\n[... {cut} bytes of output not kept ...]\n".encode() if cut > 0 else b""
        return (bytes(self.head) + gap + tail).decode("utf-8", "replace")


@dataclass(frozen=True)
class _Job:
    """One snapshot to verify, the iterations its verify covers, those whose snapshots it skipped."""

    info: SnapshotInfo
    covers: tuple[int, ...]
    skipped: tuple[int, ...] = ()

    def after(self, waiting: _Job) -> _Job:
        """This job in place of `waiting` (never begun): it covers that one's iterations too, and skips it."""
        return _Job(self.info, tuple(sorted({*waiting.covers, *self.covers})),
                    tuple(sorted({*waiting.skipped, waiting.info.iteration})))


VERIFY = "verify"
"""The kind of the verify's jobs on its worker: a newer one replaces one that waits."""


class Verifier:
    """Runs the verifies, one at a time, newest waiting first; reports each on `on_finished` (its thread).

    Threads: the jobs are the worker's (`SerialWorker`, its own lock); what a verify leaves for the next (the
    last verified tree, `last`) is written on the worker's thread only; `_lock` guards the iterations covered so
    far (the submitting thread's) and the process running (read by `close`)."""

    def __init__(self, plan: VerifyPlan, store: SnapshotStore, *,
                 on_finished: Callable[[VerifyRun], None] = lambda run: None, rerun_broken: bool = True) -> None:
        self.plan = plan
        self.enter: Callable[[], None] | None = None
        """Run in each verify's process before its exec: it enters the verify's cgroup (the tree's bounds)."""
        self.rerun_broken = rerun_broken
        """Run a newly failing test's command once more before it counts (off with --regression 0)."""
        self.store = store
        self._on_finished = on_finished
        self._lock = threading.Lock()
        self._worker = SerialWorker("ralph-verify", merge={VERIFY}, on_error=self._failed,
                                    fold=lambda waiting, newer: self._job(newer.about.after(waiting.about)))
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._last_covered = 0
        self._previous: tuple[SnapshotInfo, Path, TestResults] | None = None
        self.last: VerifyRun | None = None
        self._log = verify_jsonl.VerifyLog(plan.state_dir)
        self._box_problem: str | None = None
        """Why the verify's box cannot be made ("" once it was made; None before the first verify)."""

    # -- what the supervisor calls --------------------------------------------------------------------

    def start(self) -> None:
        """Before the first `submit`: the verify's folder emptied of a crash's leftovers."""
        root = self.plan.root
        shutil.rmtree(root, ignore_errors=True)
        log.info("verify_ready", command=self.plan.command, timeout_s=self.plan.timeout, folder=str(root))

    def submit(self, info: SnapshotInfo) -> None:
        """A new snapshot to verify: it replaces the one waiting (which is marked skipped)."""
        with self._lock:
            if info.kind == "start":  # the state the run began in (after a restart, not iterations 1..N again)
                covers: tuple[int, ...] = (info.iteration,)
            else:
                covers = tuple(range(self._last_covered + 1, info.iteration + 1)) or (info.iteration,)
            self._last_covered = max(self._last_covered, info.iteration)
        replaced = self._worker.submit(self._job(_Job(info, covers)))
        if replaced is not None:
            log.info("verify_skipped", iteration=replaced.about.info.iteration, newer=info.iteration)

    def busy(self) -> bool:
        return self._worker.busy

    def idle(self, timeout: float) -> bool:
        """Wait until nothing is waiting or running; False on timeout."""
        return self._worker.idle(timeout)

    def close(self, wait: float = 0.0) -> None:
        """Let what is pending finish (at most `wait` seconds), then end the verify under way and its tree."""
        if wait > 0 and self.busy():
            log.info("verify_waiting", seconds=wait)
            if not self.idle(wait):
                log.warning(events.VERIFY_UNFINISHED, hint=f"pending verifies took longer than {wait:g} s: ended")
        self._stop.set()  # a verify that begins now ends at once
        self._end_process()
        self._worker.close(KILL_GRACE_S + 5.0, drain=False)
        self._log.close()
        shutil.rmtree(self.plan.root, ignore_errors=True)

    # -- the verify's thread --------------------------------------------------------------------------

    def _job(self, job: _Job) -> Job:
        return Job(VERIFY, lambda: self._run_job(job), about=job)

    def _run_job(self, job: _Job) -> None:
        if self._stop.is_set():
            return
        run = self._verify(job)
        if run is not None:
            self.last = run
            self._log.record(run.line())
            self._on_finished(run)

    @staticmethod
    def _failed(job: Job, exc: BaseException) -> None:
        """A fault of ours never stops supervision: said, and the next verify runs."""
        log.warning("verify_failed", iteration=job.about.info.iteration, error=repr(exc)[:300])

    def _verify(self, job: _Job) -> VerifyRun | None:
        info = job.info
        covers = job.covers
        started, began = time.time(), time.monotonic()
        log.info("verify_started", iteration=info.iteration, covers=list(covers), snapshot=info.id,
                 skipped_iterations=list(job.skipped), command=self.plan.command)
        tree = self.plan.root / f"tree-{info.id}"
        try:
            self._export(info, tree)
        except (SnapshotError, OSError) as exc:
            return self._finish(job, started, began, None, None, f"the snapshot could not be written out: {exc}", (), tree)
        code, results, reason, left = self._run_and_read(tree, info)
        if self._stop.is_set():
            shutil.rmtree(tree, ignore_errors=True)
            log.info(events.VERIFY_FINISHED, iteration=info.iteration, unverified="ended by the supervisor's stop",
                     seconds=round(time.monotonic() - began, 3))
            return None
        previous = self._previous
        if reason is None and results is not None and previous is not None and self.rerun_broken:
            _fixed, broke = changes(previous[2], results)
            if broke:  # a newly failing test is run once more before it counts: a flaky one does not stop a loop
                _code, again, why, _left = self._run_and_read(tree, info)
                if why is None and again is not None:
                    flaky = [name for name in broke if again.tests.get(name) == PASSED]
                    if flaky:
                        log.info("verify_flaky", iteration=info.iteration, tests=flaky[:20])
                        results = as_passed(results, flaky)
        return self._finish(job, started, began, code, results, reason, left, tree)

    def _run_and_read(self, tree: Path, info: SnapshotInfo) -> tuple[int | None, TestResults | None, str | None, tuple[str, ...]]:
        """One run of the command in the tree, read: (exit code, results, why unverified, processes it left)."""
        code, output, left, why = self._run(tree, info.iteration)
        junit_path = tree.parent / f"junit-{info.id}.xml"
        junit = None
        with contextlib.suppress(OSError):
            junit = junit_path.read_bytes() if junit_path.stat().st_size < 50_000_000 else None
        with contextlib.suppress(OSError):
            junit_path.unlink()
        text = output.text()
        results = read_results(text, code, junit)
        self._keep_output(info.iteration, text)
        return code, results, why or unverified_reason(results, code, text[-4000:]), left

    def _finish(self, job: _Job, started: float, began: float, code: int | None, results: TestResults | None,
                reason: str | None, left: tuple[str, ...], tree: Path) -> VerifyRun:
        info = job.info
        previous = self._previous
        findings: tuple[Finding, ...] = ()
        fixed: tuple[str, ...] = ()
        broke: tuple[str, ...] = ()
        if reason is None and results is not None and previous is not None:
            findings = tuple(self._weakening(previous[0], previous[1], info, tree))
            fixed, broke = changes(previous[2], results)
        run = VerifyRun(
            iteration=info.iteration, snapshot=info.id, covers=job.covers, started=started,
            seconds=time.monotonic() - began, exit_code=code, results=results, unverified=reason, left=left,
            findings=findings, fixed=fixed, broke=broke, skipped_iterations=job.skipped,
            previous_iteration=previous[0].iteration if previous else None,
            previous_results=previous[2] if previous else None,
            previous_snapshot=previous[0] if previous else None,
        )
        if reason is None and results is not None:
            if previous is not None and previous[1] != tree:
                shutil.rmtree(previous[1], ignore_errors=True)
            self._previous = (info, tree, results)
        elif previous is None or previous[1] != tree:
            shutil.rmtree(tree, ignore_errors=True)
        fields: dict[str, Any] = {"iteration": info.iteration, "covers": list(job.covers), "seconds": round(run.seconds, 3),
                                  "exit": code}
        if results is not None:
            fields.update(passed=results.passed, failed=results.failed, errors=results.errors,
                          skipped=results.skipped, runner=results.runner)
        if reason:
            fields["unverified"] = reason
        if fixed or broke:
            fields.update(fixed=list(fixed[:20]), broke=list(broke[:20]))
        if findings:
            fields["weakened"] = [f.describe() for f in findings[:10]]
        log.info(events.VERIFY_FINISHED, **fields)
        if left:
            log.warning("verify_left_processes", iteration=info.iteration, processes=list(left),
                        hint="the test command left these running: they were killed")
        return run

    # -- the pieces --------------------------------------------------------------------------------

    def _export(self, info: SnapshotInfo, tree: Path) -> None:
        shutil.rmtree(tree, ignore_errors=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        write_files(self.store, info, tree, self.store.files_in(info))
        for name in BORROWED:
            source = self.plan.workspace / name
            if source.is_dir() and not (tree / name).exists():
                os.symlink(source, tree / name, target_is_directory=True)

    def _environment(self, tree: Path, iteration: int, junit: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RALPH_SUPERVISE_", "GIT_"))}
        paths = [str(tree / sub) for sub in (".venv/bin", "venv/bin", "node_modules/.bin") if (tree / sub).is_dir()]
        env["PATH"] = os.pathsep.join([*paths, env.get("PATH", os.defpath)])
        for venv in (".venv", "venv"):
            if (tree / venv / "pyvenv.cfg").is_file():
                env["VIRTUAL_ENV"] = str(tree / venv)
                break
        imports = [str(tree / "src")] if (tree / "src").is_dir() else []
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *imports, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} --junitxml={junit}".strip()
        env.setdefault("CARGO_TARGET_DIR", str(self.plan.cache / "cargo-target"))
        env["CI"] = "true"  # runners stay non-interactive (jest's watch mode, prompts)
        env["RALPH_SUPERVISE_VERIFYING"] = str(iteration)
        return env

    def _run(self, tree: Path, iteration: int) -> tuple[int | None, _Output, tuple[str, ...], str | None]:
        """Run the command in the box; (exit code or None when ended, output, left processes, why unverified)."""
        status = tree.parent / f"box-{iteration}.json"
        junit = tree.parent / f"junit-{tree.name.removeprefix('tree-')}.xml"
        output = _Output()
        command = ["/bin/sh", "-c", self.plan.command]
        env = self._environment(tree, iteration, junit)
        try:
            self.plan.cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return None, output, (), f"the verify could not start: {exc.strerror or exc}"
        if self.plan.sandbox is not None:  # the agent's code runs in the same kind of box as the agent
            junit.touch()  # bound into the box as a file (an empty one is read as no JUnit)
            box = self.plan.sandbox.box(
                tree=tree, state_dir=self.plan.state_dir, workspace=self.plan.workspace, env=env,
                command=self.plan.command, writable=(junit, self.plan.cache),
                borrowed=[self.plan.workspace / n for n in BORROWED if (self.plan.workspace / n).is_dir()])
            if self._box_problem is None:
                self._box_problem = box.problem() or box.probe() or ""
            if self._box_problem:
                return None, output, (), self._box_problem
            command, env = box.wrap(command), box.env
        argv = [self.plan.python, "-I", str(BOX), str(status), "--", *command]
        try:
            proc = HELPERS.popen(argv, cwd=tree, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True,
                                 preexec_fn=self.enter)
        except OSError as exc:
            return None, output, (), f"the verify could not start: {exc.strerror or exc}"
        with self._lock:
            self._proc = proc
        why: str | None = None
        deadline = time.monotonic() + self.plan.timeout
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        try:
            while True:
                if self._stop.is_set():
                    why = "ended by the supervisor's stop"
                    break
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    why = f"the test command did not finish in {self.plan.timeout:g} s (--verify-timeout)"
                    log.warning("verify_timeout", iteration=iteration, timeout_s=self.plan.timeout)
                    break
                ready, _, _ = select.select([fd], [], [], min(left_s, 0.5))
                if ready:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    output.add(data)
            if why is not None:
                self._end_process()
            code = proc.wait()
        finally:
            proc.stdout.close()
            HELPERS.done(proc.pid)
            with self._lock:
                self._proc = None
        box = _read_status(status)
        with contextlib.suppress(OSError):
            status.unlink()
        if why is not None:
            return None, output, (), why
        if box.get("error"):
            return code, output, (), str(box["error"])
        left = tuple(str(p) for p in box.get("left", []) if isinstance(p, str))
        raw = box.get("exit")
        if code < 0 or box.get("ended_by") or not isinstance(raw, int):
            return None, output, left, "the verify was killed"
        if raw < 0:
            return None, output, left, f"the test command was killed by signal {-raw}"
        return raw, output, left, None

    def _end_process(self) -> None:
        """SIGTERM the box (it kills its tree); past the grace, SIGKILL what is left of it."""
        with self._lock:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            from ralph_supervisor.verify.box import kill_all

            kill_all(proc.pid)
            with contextlib.suppress(OSError):
                proc.kill()

    def _weakening(self, old: SnapshotInfo, old_tree: Path, new: SnapshotInfo, new_tree: Path) -> list[Finding]:
        try:
            paths = self.store.changed_between(old, new)
        except SnapshotError as exc:
            log.warning("verify_diff_failed", error=str(exc))
            return []
        before: dict[str, str | None] = {}
        after: dict[str, str | None] = {}
        for path in paths:
            old_text, new_text = _read_text(old_tree / path), _read_text(new_tree / path)
            if watched(path, old_text) or watched(path, new_text):
                before[path], after[path] = old_text, new_text
        return find_weakening(before, after)

    def _keep_output(self, iteration: int, text: str) -> None:
        """The last verify's output, for a human (`STATE_DIR/verify-output.log`)."""
        with contextlib.suppress(OSError):
            state_files.atomic_write_text(self.plan.state_dir / "verify-output.log",
                                          f"# verify of iteration {iteration}: {self.plan.command}\n{text}")


def _read_text(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > TEXT_MAX:
            return None
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _read_status(path: Path) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

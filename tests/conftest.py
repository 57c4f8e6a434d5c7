"""Shared fixtures. The one that matters most: no test may leave a process behind.

Every test runs with a unique `RALPH_TEST_ID` in its environment. Processes inherit it (through
setsid, double forks and re-parenting to init alike), so after the test we can find every process
it started, wherever it ended up in the process table, by reading `/proc/PID/environ`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest_plugins = ("tests.helpers.fuzzing",  # the `scratch` and `here` folders of the property tests
                  "tests.helpers.skips")  # every skip listed at the end; --allowed-skips fails on the others
import tests.helpers.hypothesis_profile  # noqa: E402,F401 - deadline=None for every property test: a busy machine

from tests.helpers import EXAMPLES, REPO  # noqa: F401 - the tests import them from here too
TEST_ID_VAR = "RALPH_TEST_ID"
SESSION_VAR = "RALPH_TEST_SESSION"
os.environ[SESSION_VAR] = f"{os.getpid()}-{uuid.uuid4().hex}"
"""Every process this test process starts carries it, fixtures of a module or session included (they are set
up before a test's own id exists): `no_process_left_by_fixtures` finds them by it at the end."""


def processes_with_env(name: str, value: str, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Every live (non-zombie) process, other than us and `exclude`, whose environment holds NAME=value."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    found: list[psutil.Process] = []
    for pid in psutil.pids():
        if pid == me or pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle not in env.split(b"\0"):
            continue
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        found.append(proc)
    return found


def processes_with_test_id(test_id: str) -> list[psutil.Process]:
    """Every live process this test started, wherever it ended up in the process table."""
    return processes_with_env(TEST_ID_VAR, test_id)


_PROCESS_STARTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
                             "os.system", "pty.spawn"})
_starts = 0


def _count_process_starts(event: str, _args: tuple[object, ...]) -> None:
    """Audit hook: counts every way this interpreter starts a process (asyncio included, and multiprocessing
    with the fork method; its spawn and forkserver methods raise no audit event, and no test uses them)."""
    global _starts
    if event in _PROCESS_STARTS:
        _starts += 1


sys.addaudithook(_count_process_starts)


def _survivors(name: str, value: str, wait: float = 3.0) -> list[psutil.Process]:
    """The processes carrying NAME=value still alive after up to `wait` seconds."""
    deadline = time.monotonic() + wait
    survivors = processes_with_env(name, value)
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = processes_with_env(name, value)
    return survivors


def _kill_and_describe(survivors: list[psutil.Process]) -> list[str]:
    described = []
    for proc in survivors:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:80]!r}")
            proc.kill()
        except psutil.Error:
            pass
    return described


@pytest.fixture(scope="session", autouse=True)
def no_process_left_by_fixtures() -> Iterator[None]:
    """At the end of the session (of each worker): nothing any test or fixture of it started is alive."""
    yield
    survivors = _survivors(SESSION_VAR, os.environ[SESSION_VAR])
    if survivors:
        pytest.fail(f"the session left {len(survivors)} process(es) behind: {_kill_and_describe(survivors)}")


@pytest.fixture(autouse=True)
def no_process_left_behind(monkeypatch: pytest.MonkeyPatch):
    """Fail the test if any process it started is still alive shortly after it ends (and kill it).

    A test that started no process (the audit hook saw none) is not searched for: scanning `/proc`
    after every pure unit test would cost more than the test.
    """
    test_id = uuid.uuid4().hex
    monkeypatch.setenv(TEST_ID_VAR, test_id)
    starts_before = _starts
    yield test_id
    if _starts == starts_before:
        return
    survivors = _survivors(TEST_ID_VAR, test_id)
    if survivors:
        pytest.fail(f"test left {len(survivors)} process(es) behind: {_kill_and_describe(survivors)}")


@pytest.fixture(autouse=True)
def private_registry(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Supervisors a test starts register in a folder of the test's own (created by the first one),
    never in the user's registry that `ralph-supervise ls` reads."""
    folder = tmp_path_factory.getbasetemp() / f"registry-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("RALPH_SUPERVISE_REGISTRY", str(folder))
    return folder


@pytest.fixture(autouse=True)
def private_state_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """State folders of the supervisors a test starts (and of every command it runs) go under a folder of the
    test's own, never into the user's ~/.local/state; processes inherit it through the environment."""
    folder = tmp_path_factory.getbasetemp() / f"state-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


@pytest.fixture
def python() -> str:
    return sys.executable


SLOW_MODULES = frozenset({"test_faults", "test_e2e_breaker", "test_e2e_evidence", "test_e2e_devbox", "test_tree_e2e",
                          "test_run"})
"""Modules whose tests start the supervisor (or long-running process trees): all of them are `slow`."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` marks every test of SLOW_MODULES, so `scripts/test.sh --fast` (`-m "not slow"`) leaves them out."""
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs to put a state folder on (needs root and mount; skipped otherwise)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)

"""Tools some tests need (headless Chromium, tmux, promtool) come from Debian's packages.

`installed(binary, package)` finds the tool, or installs its package with apt-get where it is missing and we
are root; otherwise it says why not, so the test can skip saying so. apt runs under one file lock: the suite
runs in several worker processes, and two apt-gets at once fail on dpkg's own lock.

    >>> path, why = installed("tmux", "tmux")   # doctest: +SKIP
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/tmp/ralph-supervise-tests-apt.lock")
APT_TIMEOUT = 600


@contextmanager
def apt_lock() -> Iterator[None]:
    """Hold the tests' apt lock (other workers wait here instead of failing on dpkg's)."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def apt_get(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    return subprocess.run(["apt-get", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT,
                          env=env)


def installed(binary: str, package: str, *, also: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(path of `binary`, how it was found) or (None, why it cannot be had here)."""
    found = shutil.which(binary)
    if found:
        return found, f"{found} (on PATH)"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, f"{binary} is not installed and cannot be installed here (needs root and apt-get): " \
                     f"`apt-get install {package}` to run this test"
    started = time.monotonic()
    with apt_lock():
        found = shutil.which(binary)  # another worker may have installed it meanwhile
        if found:
            return found, f"{found} (installed by another worker)"
        install = ("install", "-y", "--no-install-recommends", package, *also)
        done = apt_get(*install)
        if done.returncode != 0:
            apt_get("update")
            done = apt_get(*install)
        if done.returncode != 0:
            return None, f"`apt-get install {package}` failed: {(done.stderr or done.stdout).strip()[-300:]}"
    found = shutil.which(binary)
    if not found:
        return None, f"apt-get installed {package} but {binary} is not on PATH"
    return found, f"{found} (installed with apt in {time.monotonic() - started:.0f} s)"

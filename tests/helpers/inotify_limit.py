"""Run a Python script with the kernel's inotify limits lowered for it alone.

The limits are per user namespace (`/proc/sys/user/max_inotify_watches`, `max_inotify_instances`), so the
script runs in a new one, mapped to root there, and the machine's own limits are never touched. Where
unprivileged user namespaces are not allowed, the test is skipped.

    done = run_limited(script, "max_inotify_watches", 6, str(root))
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNSHARE = shutil.which("unshare")
needs_unshare = pytest.mark.skipif(UNSHARE is None, reason="unshare is not installed")


def run_limited(script: Path, setting: str, value: int, *args: str, timeout: float = 30,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` under this interpreter with `setting` lowered to `value` (and `env` added to the
    environment); skip the test where the namespace cannot be made or the limit cannot be written. Fails on
    a non-zero exit."""
    shell = f'echo {value} > /proc/sys/user/{setting} || exit 77; exec "$0" "$@"'
    done = subprocess.run(
        [UNSHARE or "unshare", "--user", "--map-root-user", "sh", "-c", shell, sys.executable, str(script), *args],
        capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})},
    )
    if done.returncode == 77 or "Operation not permitted" in done.stderr:
        pytest.skip(f"cannot lower {setting} in a user namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr + done.stdout
    return done

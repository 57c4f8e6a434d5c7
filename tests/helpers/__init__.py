"""What the tests share: where the repository is, how to wait for something to become true, and the state
the watcher records for a file's content (`held`), written out here as the spec, not taken from the code.

Waits poll with a generous deadline that returns as soon as the condition holds: on a loaded machine a
test waits longer, it never fails for being slow.

    >>> wait_for(lambda: True)
    True
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, what: str = "", *, interval: float = 0.02) -> T:
    """Poll `predicate` until it returns something truthy, and return that; after `timeout` seconds, fail
    with an AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def held(content: bytes) -> bytes:
    """A regular file's state as the watcher records it: b"H", the size (8 bytes), the blake2b-128 hash."""
    return b"H" + len(content).to_bytes(8, "big") + hashlib.blake2b(content, digest_size=16).digest()


def executable(folder: Path, name: str, text: str) -> Path:
    """Write an executable script `folder/name` (the folder made as needed): a fake agent or tool."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return path


__all__ = ["EXAMPLES", "REPO", "executable", "held", "wait_for"]


def state_dir_of(workspace: Path) -> Path:
    """Where a workspace's state folder is by default, written out from the spec (docs/reference.md section 2),
    not taken from the code: `$XDG_STATE_HOME/ralph-supervise/workspaces/NAME-HASH`, HASH the first 12 hex
    digits of the SHA-256 of the workspace's real path (the tests' folder names need no escaping)."""
    import os

    real = os.path.realpath(workspace)
    digest = hashlib.sha256(real.encode()).hexdigest()[:12]
    return Path(os.environ["XDG_STATE_HOME"]) / "ralph-supervise" / "workspaces" / f"{Path(real).name}-{digest}"

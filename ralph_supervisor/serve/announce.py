"""`serve.page`: while `serve` runs it says at which address, so a supervisor's notices can link to the loop's
page. It holds the address only (`--public-url`, else the local one), never the token or a code.

Why a file, and in the registry's folder: supervisors and `serve` start and stop independently, and both
already meet there (`registry.py`; the name does not end in `.json`, so it is no entry); the supervisor reads
this small file when it sends a notice, and a `serve` that died (its pid gone or reused) is ignored.

    announce("https://ralph.example.net")           # at serve's start
    page_for("proj-3f2a9c1b7d4e")                   # -> "https://ralph.example.net/loop/proj-3f2a9c1b7d4e"
    withdraw()                                      # at its exit
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ralph_supervisor import registry, store

NAME = "serve.page"


def path(env: Mapping[str, str] | None = None) -> Path:
    return registry.registry_dir(env) / NAME


def announce(address: str, where: Path | None = None) -> None:
    """Say this process serves the page at `address` (OSError when the folder cannot take the file)."""
    where = path() if where is None else where
    pid = os.getpid()
    data = {"pid": pid, "start_ticks": registry.start_ticks(pid), "boot_id": registry.current_boot_id(),
            "address": address.rstrip("/")}
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.atomic_write_bytes(where, (json.dumps(data) + "\n").encode(), mode=0o600)


def _read(where: Path) -> dict[str, Any] | None:
    """The file's object, or None (missing, unreadable, garbage): only read, never moved aside."""
    try:
        with open(where, "rb") as fh:
            data = json.loads(fh.read(4096).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def withdraw(where: Path | None = None) -> None:
    """Remove the file if it is still this process's (a newer serve may have replaced it)."""
    where = path() if where is None else where
    data = _read(where)
    if data and data.get("pid") == os.getpid():
        try:
            where.unlink()
        except OSError:
            pass


def served_address(where: Path | None = None) -> str | None:
    """The address of the page while its `serve` runs; None when none runs (or the file is garbage)."""
    where = path() if where is None else where
    data = _read(where)
    if data is None:
        return None
    pid, address = data.get("pid"), data.get("address")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(address, str):
        return None
    if not address.startswith(("http://", "https://")) or any(c.isspace() for c in address):
        return None
    ticks = data.get("start_ticks")
    entry = registry.Entry(path=where, pid=pid, workspace="", state_dir="", name="", started_at="",
                           start_ticks=ticks if isinstance(ticks, int) else None,
                           boot_id=data.get("boot_id") if isinstance(data.get("boot_id"), str) else "")
    if not registry.is_alive(entry, registry.start_ticks(pid), registry.current_boot_id()):
        return None
    return address


def page_for(loop_id: str, where: Path | None = None) -> str | None:
    """The loop's page address while `serve` runs, else None."""
    address = served_address(where)
    return f"{address}/loop/{loop_id}" if address else None

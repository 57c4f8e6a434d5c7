"""`status --json` is built once (`ralph_supervisor/status_json.py`): the running supervisor's answer and the
one `status` makes from the files carry the same keys, `"schema": 1` among them, those of docs/reference.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from ralph_supervisor import status
from tests.helpers import REPO, wait_for
from tests.helpers.supervise import events, start, supervise_argv

FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false")
REFERENCE = REPO / "docs" / "reference.md"


def reference_keys() -> set[str]:
    text = REFERENCE.read_text(encoding="utf-8")
    block = text.split("## 3. `status --json`", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    return set(re.findall(r'^\s*"(\w+)":', block, re.M))


def test_the_reply_from_the_files_has_the_schema_and_every_key_of_the_reference(tmp_path: Path) -> None:
    reply = status.collect(tmp_path)
    assert reply["schema"] == 1 and list(reply)[:2] == ["state", "schema"]
    assert reference_keys() <= set(reply), reference_keys() - set(reply)
    assert reply["supervisor"] == {"pid": None, "running": False} and reply["child"] is None


@pytest.mark.slow
def test_the_live_reply_and_the_reply_from_the_files_have_the_same_keys(tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    state_dir = tmp_path / "state"
    proc = start(ws, *FAST, "--state-dir", str(state_dir), "--", "sleep", "30")
    try:
        wait_for(lambda: events(state_dir, "supervisor_started"), what="supervisor_started")
        done = subprocess.run(supervise_argv("status", "--json", "--state-dir", str(state_dir), "-w", str(ws)),
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr
        live = json.loads(done.stdout)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert live["schema"] == 1 and live["supervisor"]["running"] and live["child"]["running"]
    done = subprocess.run(supervise_argv("status", "--json", "--state-dir", str(state_dir), "-w", str(ws)),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    from_files = json.loads(done.stdout)  # the same command, now that none runs: the answer from the files
    assert not from_files["supervisor"]["running"]
    assert set(from_files) == set(status.collect(state_dir)) | {"worktrees"}  # `status` adds the worktrees' loops
    extras = {"current", "tree", "tap"}  # the watch view's, live only
    assert set(live) - extras == set(from_files) - {"warning"}, set(live) ^ set(from_files)

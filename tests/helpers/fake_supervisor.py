"""A minimal supervisor for tests that must kill the supervisor itself.

usage: python fake_supervisor.py RECORD_PATH MARKER -- COMMAND [ARG...]

Becomes the child subreaper, spawns COMMAND with the marker in its environment (spawn(): new session,
pipes, PR_SET_PDEATHSIG=SIGKILL), then keeps recording the tree to RECORD_PATH and prints one JSON line
per change: {"child": pid, "members": [[pid, name], ...]}. It never exits by itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ralph_supervisor.process.linux import set_child_subreaper
from ralph_supervisor.process.orphans import MemberRecord
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.spawn import spawn
from ralph_supervisor.process.tree import ProcessTree


def main(argv: list[str]) -> None:
    record_path, marker, sep, *command = argv
    assert sep == "--" and command, __doc__
    set_child_subreaper()
    name, value = marker.split("=", 1)
    child = spawn(command, Path.cwd(), env={**os.environ, name: value})
    reaper = Reaper()
    reaper.adopt(child)
    tree = ProcessTree(os.getpid(), reaper)
    record = MemberRecord(Path(record_path), marker)
    last: list[list[object]] = []
    while True:
        reaper.reap()
        members = tree.scan()
        record.record(members, time.monotonic())
        now = [[m.pid, m.name] for m in members]
        if now != last:
            print(json.dumps({"child": child.pid, "members": now}), flush=True)
            last = now
        time.sleep(0.02)


if __name__ == "__main__":
    main(sys.argv[1:])

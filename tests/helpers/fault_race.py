"""Start `ralph-supervise ARGS` the instant a go file appears (two of these race for one folder).

Usage: fault_race.py GO_FILE ARGS...  The package is imported first, then `GO_FILE.ready-PID` is
created, so once the test has seen both racers ready and creates GO_FILE, they reach the lock
within a millisecond or so of each other.
"""

from __future__ import annotations

import os
import sys
import time

from ralph_supervisor.cli import main
from ralph_supervisor import files, supervisor  # noqa: F401 - imported before the start signal

if __name__ == "__main__":
    go = sys.argv[1]
    open(f"{go}.ready-{os.getpid()}", "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    sys.exit(main(sys.argv[2:]))

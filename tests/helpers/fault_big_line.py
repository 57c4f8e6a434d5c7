"""Print one 100 MiB line (no newline inside), in steps the test controls through files.

Usage: fault_big_line.py DIR MIB.  Waits for DIR/go-write, prints MIB MiB of seeded random bytes
without a newline, then one newline, then waits for DIR/go-exit and exits 0. The test can thus read
the supervisor's peak memory before and after the line, while the child is still alive.
"""

from __future__ import annotations

import os
import sys
import time


def block() -> bytes:
    import random

    data = random.Random(1234).randbytes(1 << 20)
    return data.replace(b"\n", b" ")


def wait(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg != "-p"]  # `claude -p CONTROL MIB`: a prompt-mode agent call
    folder, mib = args[0], int(args[1])
    wait(os.path.join(folder, "go-write"))
    chunk = block()
    out = sys.stdout.buffer
    for _ in range(mib):
        out.write(chunk)
    out.write(b"\n")
    out.flush()
    wait(os.path.join(folder, "go-exit"))

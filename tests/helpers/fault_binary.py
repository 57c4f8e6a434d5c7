"""Binary output: seeded random bytes with NULs, invalid UTF-8, lone CRs and escape sequences.

Usage: fault_binary.py CALLS.  Before each of CALLS chunks of noise prints a line
`=== call N ===`, so a supervisor run with `--iteration-marker '^=== call'` sees CALLS iterations.
The exact bytes are `expected(CALLS)`, so the test can compare child.log byte for byte.
"""

from __future__ import annotations

import random
import sys
import time

NOISE = [b"\x00" * 64, b"\xff\xfe\xfd", b"\r", b"\x1b[31mred\x1b[0m", b"\xc3\x28", b"\xed\xa0\x80", b"\x00\n\x00"]


def expected(calls: int) -> bytes:
    rng = random.Random(99)
    parts = []
    for n in range(1, calls + 1):
        parts.append(f"=== call {n} ===\n".encode())
        for _ in range(40):
            parts.append(rng.randbytes(rng.randrange(1, 4096)).replace(b"\n=== call", b"\n=== cal1"))
            parts.append(rng.choice(NOISE))
        parts.append(b"\n")
    return b"".join(parts)


if __name__ == "__main__":
    calls = int(sys.argv[1])
    data = expected(calls)
    out = sys.stdout.buffer
    marks = [i for i in range(len(data)) if data.startswith(b"=== call ", i) and (i == 0 or data[i - 1] == 10)]
    marks.append(len(data))
    for start, end in zip(marks, marks[1:]):
        out.write(data[start:end])
        out.flush()
        time.sleep(0.25)

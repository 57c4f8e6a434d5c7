"""How the supervisor uses glibc's allocator: large reads without page faults, freed heap given back.

Every pipe read asks for a READ_SIZE (1 MiB) bytes object and usually keeps far less (a call prints
100 KB at a time). Above glibc's mmap threshold such a request is a fresh mapping that the kernel
zeroes page by page, then shrinks: at 10 MB/s of output that was a fifth of the event loop's time.
Served from the heap instead, the request reuses freed memory and the shrink is a split in place.
`release_free_memory` gives what the heap no longer uses back to the system now and then.
Elsewhere (no glibc) both are no-ops.
"""

from __future__ import annotations

import ctypes
import functools

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
"""Requests up to this size come from the heap: a pipe read (1 MiB) and a chunk's text stay below it."""
TRIM_THRESHOLD = 32 << 20
"""Free heap at the top kept for reuse up to this size, instead of being handed back after every free."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library already loaded into this process (dlopen(NULL): no search, no subprocess), once."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def tune_allocator() -> bool:
    """Serve large requests from the heap (see the module's docstring). True when glibc took the settings."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def release_free_memory() -> None:
    """Give freed heap back to the system (glibc's malloc_trim). Our threads each get a malloc arena,
    and over thousands of iterations the arenas' free pages otherwise make RSS creep upward."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)

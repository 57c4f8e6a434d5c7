"""The allocator tuning: short reads of a 1 MiB request stop costing fresh pages (measured in page faults)."""

from __future__ import annotations

import subprocess
import sys

READS = (
    "import fcntl, os, resource, sys\n"
    "from ralph_supervisor.memory import tune_allocator\n"
    "if sys.argv[1] == 'tuned':\n"
    "    assert tune_allocator()\n"
    "r, w = os.pipe()\n"
    "fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ: room for a whole piece\n"
    "piece = b'x' * 100_000\n"
    "kept = []\n"
    "os.write(w, piece); kept.append(os.read(r, 1 << 20))  # warm up\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(300):\n"
    "    os.write(w, piece)\n"
    "    kept.append(os.read(r, 1 << 20))\n"
    "    del kept[:-3]\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", READS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_tuned_short_reads_reuse_memory_instead_of_faulting_in_fresh_pages() -> None:
    untuned, tuned = faults("default"), faults("tuned")
    # Untuned, each read maps a fresh 1 MiB and touches about 25 of its pages; tuned, the heap is reused.
    assert untuned > 300 * 10, untuned
    assert tuned < untuned / 10, (tuned, untuned)


GIVE_BACK = (
    "from ralph_supervisor.memory import release_free_memory, tune_allocator\n"
    "def anon_kib():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        return next(int(line.split()[1]) for line in fh if line.startswith('RssAnon:'))\n"
    "assert tune_allocator()\n"
    "held = [bytearray(100_000) for _ in range(200)]  # 20 MB of the heap (each below the mmap threshold)\n"
    "del held  # freed, but kept by the process: below the tuned trim threshold\n"
    "kept = anon_kib()\n"
    "release_free_memory()\n"
    "given = anon_kib()\n"
    "release_free_memory()\n"
    "print(kept, given, anon_kib())\n"
)


def test_giving_memory_back_returns_the_freed_heap_and_is_safe_to_repeat() -> None:
    out = subprocess.run([sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, check=True)
    kept, given, again = (int(word) for word in out.stdout.split())
    assert kept - given > 15_000, (kept, given)  # most of the 20 MB freed went back to the system
    assert abs(again - given) < 1_000, (given, again)  # a second time finds nothing more and breaks nothing

"""The allocator tuning: short reads of a 1 MiB request stop costing fresh pages (measured in page faults)."""

from __future__ import annotations

import subprocess
import sys

from ralph_supervisor.memory import release_free_memory

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


def test_giving_memory_back_is_safe_to_repeat() -> None:
    release_free_memory()
    release_free_memory()

#!/usr/bin/env python3
"""Benchmark: keeping the workspace fingerprint up to date, against recomputing it by a rescan.

On the workspace benchmark's tree (100,000 files, a fifth of them the project, the rest an ignored
`node_modules`), a real `Workspace` watches while iterations each rewrite 10 project files. Like for like,
both sides do what a fingerprint needs, from the files' contents to the number: ours hashes the files that
changed (the watcher's `file_state`, read and hashed as they are recorded) and updates the fingerprint
change by change (`Fingerprint.change`), then `Returns.record`, all timed inside the watcher; the baseline,
a fingerprint without incremental upkeep, rescans the non-ignored files (walk, hash each file) once per
iteration. Ours needs no walk: inotify said which files changed. Also: RSS and the number of remembered
states after many iterations (bounded). The tail is a p99 over at least 100 iterations, else the maximum.

    python scripts/bench_fingerprint.py            # 100,000 files, 200 iterations of 10 changes
    python scripts/bench_fingerprint.py --quick    # 10,000 files, 50 iterations
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import time
from pathlib import Path

import psutil
import structlog

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import _benchkit as kit  # noqa: E402
from bench_workspace import make_tree  # noqa: E402

from ralph_supervisor.evidence import fingerprint as fp_module  # noqa: E402
from ralph_supervisor.evidence.fingerprint import Returns  # noqa: E402
from ralph_supervisor.evidence.workspace import Workspace  # noqa: E402

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))

CHANGES_PER_ITERATION = 10


class TimedHashing:
    """The watcher's `file_state` (read and hash one file), timing each call."""

    spent = 0.0
    calls = 0

    def __init__(self, real) -> None:  # noqa: ANN001 - the function it wraps
        self.real = real

    def __call__(self, path: Path) -> bytes:
        started = time.perf_counter()
        try:
            return self.real(path)
        finally:
            TimedHashing.spent += time.perf_counter() - started
            TimedHashing.calls += 1


class TimedFingerprint(fp_module.Fingerprint):
    """The real fingerprint, timing each update (perf_counter around the same code)."""

    spent = 0.0
    updates = 0

    def change(self, path: str, before: bytes | None, after: bytes) -> None:
        started = time.perf_counter()
        super().change(path, before, after)
        TimedFingerprint.spent += time.perf_counter() - started
        TimedFingerprint.updates += 1


def rescan(root: Path, ws: Workspace) -> int:
    """The fingerprint computed from scratch: every non-ignored file hashed (the baseline)."""
    total = 0
    for path, entry in ws._scope.files(""):  # the watcher's own walk: the same ignore rules
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as fh:
                digest = hashlib.blake2b(fh.read(), digest_size=16).digest()
            total += fp_module.term(path, b"H" + digest)
    return total % fp_module.MODULUS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--files", type=int, default=None, help="files in the tree (default 100,000; 10,000 quick)")
    parser.add_argument("--out", type=Path, default=None, help="the section's file (default docs/bench/fingerprint.md)")
    args = parser.parse_args()
    files = args.files or (10_000 if args.quick else 100_000)
    iterations = args.iterations or (50 if args.quick else 200)
    base = kit.temp_dir("ralph-bench-fingerprint-")
    fp_module_fingerprint = fp_module.Fingerprint
    import ralph_supervisor.evidence.recorder as recorder_module
    import ralph_supervisor.evidence.segments as segments_module

    real_file_state = recorder_module.file_state
    try:
        root = base / "ws"
        make_tree(root, files)
        segments_module.Fingerprint = TimedFingerprint  # type: ignore[misc]
        ws = Workspace(root, state_dir=root / ".ralph-supervise")
        ws.start()
        ws.wait_primed(300)
        recorder_module.file_state = TimedHashing(real_file_state)  # after priming: only the changes' hashing
        project = sorted((root / "src").rglob("*.js"))
        returns = Returns()
        upkeep: list[float] = []
        hashing: list[float] = []
        rounds: list[float] = []
        for n in range(1, iterations + 1):
            ws.begin_iteration()
            TimedFingerprint.spent, TimedFingerprint.updates = 0.0, 0
            TimedHashing.spent, TimedHashing.calls = 0.0, 0
            for k in range(CHANGES_PER_ITERATION):
                target = project[(n * CHANGES_PER_ITERATION + k) % len(project)]
                target.write_bytes(f"y = {n}\n".encode() * 20)
            started = time.perf_counter()
            delta = ws.end_iteration()
            rounds.append(time.perf_counter() - started)
            record_started = time.perf_counter()
            returns.record(n, delta.fingerprint)
            upkeep.append(TimedHashing.spent + TimedFingerprint.spent + time.perf_counter() - record_started)
            hashing.append(TimedHashing.spent)
            assert delta.files_changed == CHANGES_PER_ITERATION, (n, delta.files_changed, TimedFingerprint.updates)
        scans = []
        for _ in range(3):
            started = time.perf_counter()
            rescan(root, ws)
            scans.append(time.perf_counter() - started)
        rss = psutil.Process().memory_info().rss / 2**20
        ws.stop()
    finally:
        fp_module.Fingerprint = fp_module_fingerprint  # type: ignore[misc]
        segments_module.Fingerprint = fp_module_fingerprint  # type: ignore[misc]
        recorder_module.file_state = real_file_state
        shutil.rmtree(base, ignore_errors=True)

    p50 = statistics.median(upkeep)
    tail_name, tail_value = kit.tail(upkeep)
    scan = min(scans)
    rows = [
        kit.Row(f"fingerprint upkeep per iteration ({CHANGES_PER_ITERATION} files changed: hash them, update), p50",
                f"{p50 * 1000:.3f} ms", f"{scan * 1000:.0f} ms (one rescan, every file hashed)",
                f"{scan / p50:,.0f}x less", "< 5 ms"),
        kit.Row(f"same, {tail_name}", f"{tail_value * 1000:.3f} ms", "", "", "< 5 ms"),
        kit.Row("of which hashing the changed files, p50", f"{statistics.median(hashing) * 1000:.3f} ms", "", "",
                "(for reference)"),
        kit.Row("end_iteration round-trip (barrier, refs, delta), p50", f"{statistics.median(rounds) * 1000:.2f} ms"),
        kit.Row(f"states remembered after {iterations} iterations", f"{len(returns):,}", "", "",
                f"<= {fp_module.RETURNS_KEPT:,}"),
        kit.Row("RSS of the benchmark process at the end", kit.fmt_mib(rss)),
    ]
    for row in rows:
        row.met = kit.judge(row.ours, row.ratio, row.target)
    markdown = "\n".join([
        "## Workspace fingerprint",
        "",
        f"Tree: {files:,} files ({int(files * 0.2):,} in the project, the rest in an ignored `node_modules`); "
        f"{iterations} iterations, each rewriting {CHANGES_PER_ITERATION} project files. Like for like, from the "
        "files' contents to the number. Ours: the changed files hashed as the watcher records them (every "
        "`file_state` call after priming) and the fingerprint updated change by change (every "
        "`Fingerprint.change`), plus `Returns.record`. Baseline: the same fingerprint recomputed by one full "
        "rescan of the non-ignored files (the watcher's own walk and ignore rules, every file hashed), best of 3 "
        "after the page cache is warm.",
        "",
        kit.table(rows),
        "",
        kit.machine_line() + (" (smaller than the full sizes)" if files < 100_000 or iterations < 200 else ""),
    ])
    path = kit.write_section("fingerprint", markdown, rows, args.out)
    print(markdown)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Benchmark the echo: a child writes 1 GiB under the supervisor whose terminal reads slowly, echo on vs off.

Side by side in one run, alternating, the same writer child as the tap benchmark (`scripts/bench_tap.py
--emit`: realistic agent output, a 1 MiB block written again and again) runs under
  - `python -m ralph_supervisor run --no-echo -- CHILD` (the baseline), and
  - `python -m ralph_supervisor run --echo -- CHILD`,
both with stdout and stderr on a real pty whose reader takes 100 KB/s in 4 KiB reads (a slow SSH link),
and, for reference, `--echo` on a pty stopped by Ctrl-S (XOFF) for the whole run. Measured: the child's
own time from its first write to its exit, the whole process, the supervisor's CPU time, what the terminal
showed and what the supervisor said it dropped (they must add up to every byte), and the worst time a
`status` request took while the child wrote. Target (issue 13): child time with echo <= 1.1x without.

With `--base REV`, the echo runs (slow terminal and Ctrl-S) also run with the code of commit REV (`git archive`
into a temporary folder), in the same rounds, alternating: before and after a change side by side. Target:
no median of ours worse than the slowest run of the base (the spread measured in the same run).

Usage: scripts/bench_echo.py [--quick] [--size MiB] [--rounds N (7)] [--base REV] [--out docs/bench/echo.md]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import sys
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402
from bench_tap import child_argv, read_stamp  # noqa: E402 - the same writer child
from ralph_supervisor.state_folder import default_state_dir  # noqa: E402 - the state is outside the workspace

RATIO_TARGET = 1.1
READ_RATE = 100_000
"""Bytes per second the slow terminal takes."""


class SlowTerminal:
    """A pty whose reader takes `rate` bytes a second (None: a terminal stopped by Ctrl-S)."""

    def __init__(self, rate: float | None) -> None:
        self.master, self.slave = pty.openpty()
        attrs = termios.tcgetattr(self.slave)
        attrs[1] &= ~termios.OPOST  # bytes as written: what arrives can be counted against what was sent
        termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        self.rate = rate
        self.received = 0
        self._stop = threading.Event()
        if rate is None:
            os.write(self.master, b"\x13")  # XOFF: the line discipline stops the output
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            if self.rate is None:
                time.sleep(0.05)
                continue
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            self.received += len(chunk)
            time.sleep(len(chunk) / self.rate)

    def finish(self) -> int:
        """Take what is still in the pty (at full speed), close it; the bytes received in all."""
        self._stop.set()
        self._thread.join(2)
        if self.rate is None:
            os.write(self.master, b"\x11")
        os.close(self.slave)
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if not ready:
                break
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.received += len(chunk)
        os.close(self.master)
        return self.received


def status_times(state_dir: Path, stop: threading.Event, out: list[float]) -> None:
    """Ask `status` every 0.2 s while the child writes; record how long each answer took."""
    from ralph_supervisor import control

    while not stop.is_set():
        started = time.monotonic()
        try:
            control.request(state_dir, "status", timeout=30)
            out.append(time.monotonic() - started)
        except (control.NoSupervisor, control.ControlError, OSError):
            pass
        stop.wait(0.2)


def run_once(tmp: Path, size: int, echo: bool, rate: float | None, tag: str,
             source: Path | None = None) -> dict[str, float]:
    stamp = tmp / f"{tag}.stamp"
    workspace = tmp / f"ws-{tag}"
    workspace.mkdir()
    terminal = SlowTerminal(rate)
    argv = [sys.executable, "-m", "ralph_supervisor", "run", "--echo" if echo else "--no-echo",
            "--log-format", "json", "-w", str(workspace), "--", *child_argv(size, stamp)]
    started = time.monotonic()
    proc = kit.start(argv, stdout=terminal.slave, stderr=terminal.slave, source=source)
    stop = threading.Event()
    answers: list[float] = []
    asker = threading.Thread(target=status_times, args=(default_state_dir(workspace), stop, answers), daemon=True)
    asker.start()
    try:
        code, usage = kit.wait_rusage(proc, timeout=120 + size / 20e6)
    finally:
        stop.set()
        asker.join(35)
    whole = time.monotonic() - started
    received = terminal.finish()
    state = default_state_dir(workspace)
    dropped = said = shown = 0
    for line in (state / "events.jsonl").read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "echo_dropped":
            said += event.get("bytes", 0)
        if event.get("event") == "supervisor_stopped":
            shown, dropped = event.get("echo_shown_bytes", 0), event.get("echo_dropped_bytes", 0)
    kit.shutil.rmtree(workspace, ignore_errors=True)
    if code != 0:
        raise SystemExit(f"bench_echo: the supervised run ({tag}) exited {code}")
    return {"child_s": read_stamp(stamp), "whole_s": whole, "cpu_s": usage.ru_utime + usage.ru_stime,
            "received": received, "dropped": dropped, "said": said, "shown": shown, "total": size,
            "status_worst_s": max(answers, default=float("nan")), "status_answers": len(answers)}


def before_and_after(runs: dict[str, list[dict[str, float]]], rev: str) -> str:
    """The echo's runs with this code against the base's, in the same rounds: medians, and the base's spread."""

    def cell(which: str, key: str, scale: float = 1.0, unit: str = "s") -> str:
        values = [r[key] * scale for r in runs[which]]
        places = 0 if unit == "ms" else 2
        return f"{statistics.median(values):.{places}f} {unit} ({min(values):.{places}f}-{max(values):.{places}f})"

    lines = ["| metric (median, min-max) | this code | base | ratio | met? (median <= the base's slowest) |",
             "|---|---|---|---|---|"]
    for label, ours, theirs, key, scale, unit in (
            ("child's time, terminal read at 100 KB/s", "echo", "base-echo", "child_s", 1.0, "s"),
            ("child's time, terminal stopped by Ctrl-S", "xoff", "base-xoff", "child_s", 1.0, "s"),
            ("supervisor CPU time, 100 KB/s", "echo", "base-echo", "cpu_s", 1.0, "s"),
            ("supervisor CPU time, Ctrl-S", "xoff", "base-xoff", "cpu_s", 1.0, "s"),
            ("whole process, 100 KB/s", "echo", "base-echo", "whole_s", 1.0, "s"),
            ("worst `status` answer, 100 KB/s", "echo", "base-echo", "status_worst_s", 1000.0, "ms")):
        mine = statistics.median(r[key] for r in runs[ours])
        base_median = statistics.median(r[key] for r in runs[theirs])
        met = mine <= max(r[key] for r in runs[theirs])
        lines.append(f"| {label} | {cell(ours, key, scale, unit)} | {cell(theirs, key, scale, unit)} "
                     f"| {mine / base_median:.2f} | {'yes' if met else '**NO**'} |")
    return f"""
### Before and after: this code against {rev}

The same rounds ran the echo with the code of {rev} too (`--base {rev}`), alternating with this code's runs.

""" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 MiB instead of 1024 MiB")
    parser.add_argument("--size", type=int, help="MiB to write")
    parser.add_argument("--rounds", type=int, default=7, help="each run is short: more rounds, a steadier median")
    parser.add_argument("--base", help="also run the echo with the code of this commit, side by side")
    parser.add_argument("--out", type=Path, default=kit.DOCS / "echo.md")
    args = parser.parse_args(argv)

    kit.become_subreaper()
    size_mib = args.size or (200 if args.quick else 1024)
    size = size_mib * kit.MIB
    load_start = kit.loadavg()
    tmp = kit.temp_dir("echo")
    base = kit.archive(args.base) if args.base else None
    runs: dict[str, list[dict[str, float]]] = {"off": [], "echo": [], "xoff": []}
    if base is not None:
        runs.update({"base-echo": [], "base-xoff": []})
    for round_no in range(args.rounds):
        order = tuple(runs) if round_no % 2 == 0 else tuple(reversed(runs))
        for which in order:
            os.sync()
            result = run_once(tmp, size, echo=which != "off", rate=None if which.endswith("xoff") else READ_RATE,
                              tag=f"{which}{round_no}", source=base if which.startswith("base-") else None)
            runs[which].append(result)
            print(f"round {round_no + 1} {which}: child {result['child_s']:.2f} s, whole {result['whole_s']:.2f} s, "
                  f"echo shown {result['shown'] / 1e6:.2f} MB, dropped {result['dropped'] / 1e6:.1f} MB, "
                  f"worst status {result['status_worst_s'] * 1000:.0f} ms", flush=True)
    load_end = kit.loadavg()

    def med(which: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[which])

    off, echo, xoff = med("off", "child_s"), med("echo", "child_s"), med("xoff", "child_s")
    ratio, xoff_ratio = echo / off, xoff / off
    # Every byte the child wrote was either shown or counted as dropped, and every drop was said (on the
    # terminal when it caught up, or in events.jsonl at exit); the terminal got at least what was shown.
    exact = all(r["shown"] + r["dropped"] == r["total"] and r["said"] == r["dropped"] and r["received"] >= r["shown"]
                for w in ("echo", "xoff") for r in runs[w])
    worst = max(r["status_worst_s"] for w in ("off", "echo", "xoff") for r in runs[w])
    rows = [
        kit.Row(f"child writes {size_mib} MiB, terminal read at 100 KB/s: child's time with echo (median)",
                kit.fmt_s(echo), kit.fmt_s(off) + " (`--no-echo`)", f"{ratio:.2f}", f"<= {RATIO_TARGET}",
                ratio <= RATIO_TARGET),
        kit.Row("same, terminal stopped by Ctrl-S for the whole run", kit.fmt_s(xoff), kit.fmt_s(off) + " (`--no-echo`)",
                f"{xoff_ratio:.2f}", "(for reference)"),
        kit.Row("whole process with echo, slow terminal (median)", kit.fmt_s(med("echo", "whole_s")),
                kit.fmt_s(med("off", "whole_s")), f"{med('echo', 'whole_s') / med('off', 'whole_s'):.2f}",
                "(for reference)"),
        kit.Row("supervisor CPU time with echo, slow terminal (median)", kit.fmt_s(med("echo", "cpu_s")),
                kit.fmt_s(med("off", "cpu_s")), f"{med('echo', 'cpu_s') / med('off', 'cpu_s'):.2f}", "(for reference)"),
        kit.Row("echo shown on the slow terminal / dropped (median)",
                f"{med('echo', 'shown') / 1e6:.2f} MB / {med('echo', 'dropped') / 1e6:.1f} MB", "", "",
                "(for reference)"),
        kit.Row("runs where shown + dropped was not every byte, or a drop went unsaid", str(0 if exact else 1),
                "", "", "0", exact),
        kit.Row("worst `status` answer while the child wrote (every run)", f"{worst * 1000:.0f} ms", "", "", "< 1 s",
                worst < 1.0),
    ]
    table_runs = "\n".join(
        f"| {i + 1} | {a['child_s']:.2f} s | {b['child_s']:.2f} s | {c['child_s']:.2f} s "
        f"| {b['shown'] / 1e6:.2f} MB / {b['dropped'] / 1e6:.1f} MB | {c['shown'] / 1e6:.2f} MB / {c['dropped'] / 1e6:.1f} MB |"
        for i, (a, b, c) in enumerate(zip(runs["off"], runs["echo"], runs["xoff"])))
    before = before_and_after(runs, args.base) if base is not None else ""
    verdict = ("The target is met." if ratio <= RATIO_TARGET else
               f"**The target is not met**: child time ratio {ratio:.2f} > {RATIO_TARGET} (see the notes below).")
    md = f"""## Echo: {size_mib} MiB through the supervisor to a terminal that reads slowly, echo on vs off

Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {load_end:.1f} at the end (the machine
was shared with other work). {args.rounds} rounds, alternating, median.
The child (`scripts/bench_tap.py --emit`) writes a 1 MiB block of realistic agent output again and again.
The supervisor's stdout and stderr are a real pty; its reader takes 100 KB/s in 4 KiB reads (a slow link),
or nothing (Ctrl-S written to the pty, XOFF, for the whole run). Baseline: the same with `--no-echo`.
`status` is asked every 0.2 s during each run. "Shown" and "dropped" are the echo's counts in the
supervisor's last event (`supervisor_stopped`); the drops said (`echo_dropped` events) must add up to them.

{kit.table(rows)}

{verdict}

Runs (child's time; echo shown / dropped):

| round | `--no-echo` | echo, 100 KB/s | echo, Ctrl-S | shown / dropped, 100 KB/s | shown / dropped, Ctrl-S |
|---|---|---|---|---|---|
{table_runs}
{before}"""
    kit.publish("echo", md, rows, args.out, load_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())

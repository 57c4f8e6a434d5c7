"""Shared pieces of the supervisor benchmarks (bench_tap, bench_supervisor, soak).

Why a module: all three start the real supervisor as a subprocess, sample it through /proc (RSS, CPU
time, open fds), feed it realistic agent output, and write a section in the same shape
(`docs/bench/<name>.md` for people, `docs/bench/<name>.json` for `scripts/bench.sh`'s summary table).
Every process they start is tracked here and killed at exit, even after an exception.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import signal
import subprocess
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20

_started: list[subprocess.Popen[bytes]] = []
_temp_dirs: list[Path] = []


# ---------------------------------------------------------------------------------------------- machine


def loadavg() -> float:
    return os.getloadavg()[0]


def commit() -> str:
    """The code measured: HEAD, marked dirty when the package has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "ralph_supervisor"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' + uncommitted changes' if dirty else ''}" if head else "unknown"


def machine_line() -> str:
    source = os.environ.get("RALPH_BENCH_SOURCE")
    code = f"code {commit()}" if not source else f"code from {source}"
    return f"`{platform.platform()}`, {os.cpu_count()} CPUs, Python {platform.python_version()}; {code}"


# ---------------------------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int, *, children: bool = False) -> float | None:
    """utime + stime of this one process (its threads included, its children not); with `children`, of its
    children that ended and were waited for instead (cutime + cstime: a supervisor's helper processes)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / CLK_TCK


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB."""
    rss = hwm = None
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        return None
    if rss is None or hwm is None:
        return None
    return rss, hwm


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass
class Sample:
    t: float
    rss_kib: int
    hwm_kib: int
    cpu_s: float
    fds: int


@dataclass
class Sampler:
    """Samples one process every `interval` seconds on a thread until it exits or `stop()`."""

    pid: int
    interval: float = 0.05
    samples: list[Sample] = field(default_factory=list)
    max_samples: int = 200_000

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.take()
            self._stop.wait(self.interval)

    def take(self) -> Sample | None:
        mem = memory_kib(self.pid)
        cpu = cpu_seconds(self.pid)
        fds = fd_count(self.pid)
        if mem is None or cpu is None or fds is None:
            return None
        sample = Sample(time.monotonic(), mem[0], mem[1], cpu, fds)
        if len(self.samples) >= self.max_samples:
            del self.samples[::2]  # keep the whole span, at half the resolution
        self.samples.append(sample)
        return sample

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    @property
    def peak_hwm_mib(self) -> float:
        return max((s.hwm_kib for s in self.samples), default=0) / 1024

    @property
    def peak_rss_mib(self) -> float:
        return max((s.rss_kib for s in self.samples), default=0) / 1024


# ---------------------------------------------------------------------------------------------- processes


def supervisor_argv(workspace: Path, child: Sequence[str], *flags: str) -> list[str]:
    return [sys.executable, "-m", "ralph_supervisor", "run", "--no-echo", "--log-format", "json",
            "-w", str(workspace), *flags, "--", *child]


def start(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
          stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.DEVNULL,
          stderr: Any = subprocess.DEVNULL, source: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a process in its own session and remember it, so `cleanup()` can always end it. `source`: the
    copy of the package it runs (`archive`), for a before-and-after in one run."""
    full_env = dict(os.environ)
    # RALPH_BENCH_SOURCE: measure another copy of the package (e.g. a candidate patch) with the same script.
    package = str(source) if source is not None else os.environ.get("RALPH_BENCH_SOURCE", str(ROOT))
    full_env["PYTHONPATH"] = package + os.pathsep + full_env.get("PYTHONPATH", "")
    if cwd is None:
        cwd = Path(package)  # `python -m` puts the working directory first on sys.path
    # A benchmark's supervisors register in a folder of their own, never in the user's `ls`.
    full_env["RALPH_SUPERVISE_REGISTRY"] = str(_private_registry())
    if env:
        full_env.update(env)
    proc = subprocess.Popen(list(argv), cwd=cwd, env=full_env, stdin=stdin, stdout=stdout,
                            stderr=stderr, start_new_session=True)
    _started.append(proc)
    return proc


def supervisor_cpu_percent(proc: subprocess.Popen[bytes], seconds: float, settle: float = 3.0,
                           who: str = "bench") -> float:
    """The supervisor's CPU (percent of one core) over `seconds` after `settle` seconds of start-up; then it is
    stopped. Exits the benchmark when the supervisor ended during the measurement."""
    try:
        time.sleep(settle)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    finally:
        stop_supervisor(proc)
    if cpu0 is None or cpu1 is None:
        raise SystemExit(f"{who}: the supervisor ended during the CPU measurement")
    return (cpu1 - cpu0) / (t1 - t0) * 100


def stop_supervisor(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int | None:
    """SIGTERM (the supervisor stops its whole tree), then SIGKILL if it does not exit."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def become_subreaper() -> None:
    """Orphans of the trees we start come back to us (not to init), so `cleanup()` can find them."""
    try:
        from ralph_supervisor.process.linux import set_child_subreaper

        set_child_subreaper()
    except Exception:  # noqa: BLE001 - without it we still kill what we can see
        pass


def descendants(root: int | None = None) -> list[int]:
    """Every live process below `root` (default: us), found through /proc's parent links."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def leftovers() -> list[int]:
    """Processes still alive below us (with `become_subreaper()`, orphans of our trees included)."""
    return descendants()


def cleanup() -> None:
    """Kill every process we started (and its session) and remove our temp folders."""
    for proc in _started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
    for pid in leftovers():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    while True:  # reap orphans handed to us as subreaper
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    _remove_state_folders(_temp_dirs)
    for path in _temp_dirs:
        shutil.rmtree(path, ignore_errors=True)
    _temp_dirs.clear()
    _registry.clear()


def _remove_state_folders(temp_dirs: list[Path]) -> None:
    """The state folders our supervisors made for workspaces in our temp folders (snapshot stores, child.log:
    hundreds of MB for some), which live in the user's state home, not in the temp folder."""
    from ralph_supervisor.state_folder import workspaces_home

    home = workspaces_home()
    try:
        folders = list(home.iterdir())
    except OSError:
        return
    ours = [str(path) + os.sep for path in temp_dirs]
    for folder in folders:
        try:
            workspace = json.loads((folder / "workspace.json").read_text())["workspace"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(workspace, str) and any(workspace.startswith(prefix) for prefix in ours):
            shutil.rmtree(folder, ignore_errors=True)


atexit.register(cleanup)


def temp_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"ralph-bench-{prefix}-"))
    _temp_dirs.append(path)
    return path


def archive(rev: str) -> Path:
    """The code of commit `rev` in a temporary folder (`git archive`: the repository's worktrees untouched)."""
    where = temp_dir("base")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    return where


_registry: list[Path] = []


def _private_registry() -> Path:
    if not _registry:
        _registry.append(temp_dir("registry"))
    return _registry[0]


def dir_bytes(path: Path, glob: str = "*") -> int:
    return sum(p.stat().st_size for p in path.glob(glob) if p.is_file())


# ---------------------------------------------------------------------------------------------- output


def realistic_block(size: int = MIB, seed: int = 0) -> bytes:
    """About `size` bytes of what an agent loop prints: stream-json events (some long tool results),
    test runner lines, a few error lines. Deterministic."""
    parts: list[str] = []
    total = 0
    i = seed
    while total < size:
        i += 1
        if i % 97 == 0:
            line = json.dumps({"type": "user", "message": {"content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i:08d}", "is_error": False,
                 "content": "def handler(request):\n    return respond(request, status=200)\n" * 150}]}})
        elif i % 7 == 0:
            line = json.dumps({"type": "assistant", "message": {"content": [
                {"type": "text", "text": f"Reading src/module_{i % 40}.py and running the test suite again."}]}})
        elif i % 251 == 0:
            line = f"Error: Failed to compile src/main_{i % 5}.ts:{i % 300}:5"
        else:
            line = f"tests/test_module_{i % 40}.py::test_case_{i} PASSED [{i % 100:3d}%]"
        parts.append(line + "\n")
        total += len(line) + 1
    return "".join(parts).encode()[:size]


@dataclass
class Row:
    metric: str
    ours: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    met: bool | None = None


def table(rows: Sequence[Row]) -> str:
    lines = ["| metric | ours | baseline | ratio | target | met? |", "|---|---|---|---|---|---|"]
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "**NO**")
        lines.append(f"| {r.metric} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {met} |")
    return "\n".join(lines)


def write_section(name: str, markdown: str, rows: Sequence[Row], out: Path | None = None,
                  extra: dict[str, Any] | None = None) -> Path:
    """docs/bench/<name>.md (the section) and docs/bench/<name>.json (rows for bench.sh's summary)."""
    out = out or DOCS / f"{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    data = {"name": name, "rows": [asdict(r) for r in rows], "load_average_end": round(loadavg(), 2),
            "machine": machine_line(), **(extra or {})}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return out


def publish(name: str, markdown: str, rows: Sequence[Row], out: Path, load_start: float) -> Path:
    """A benchmark's last step: its notes file (`<name>.notes.md`, kept by hand) appended, the section
    written (`write_section`), printed."""
    notes_file = out.with_name(f"{name}.notes.md")
    if notes_file.exists():
        markdown += "\n" + notes_file.read_text(encoding="utf-8")
    path = write_section(name, markdown, rows, out, {"load_average_start": round(load_start, 2)})
    print(markdown)
    print(f"wrote {path}")
    return path


TAIL_SAMPLES = 100
"""Samples needed before a 99th percentile means something: with fewer, the "p99" is the maximum."""


def tail(values: Sequence[float]) -> tuple[str, float]:
    """The high tail of `values`, named for what it is: ("p99", the nearest-rank 99th percentile) with at least
    TAIL_SAMPLES samples, else ("max of N", the maximum), since over fewer samples a p99 is the maximum."""
    ordered = sorted(values)
    if not ordered:
        return "max of 0", float("nan")
    if len(ordered) < TAIL_SAMPLES:
        return f"max of {len(ordered)}", ordered[-1]
    rank = max(1, -(-99 * len(ordered) // 100))  # nearest rank: ceil(0.99 n)
    return "p99", ordered[rank - 1]


def median_ratio(ours: Sequence[float], base: Sequence[float]) -> str:
    """The ratio of the medians, ours over the baseline's ("n/a" when the baseline's is 0)."""
    b = statistics.median(base)
    return f"{statistics.median(ours) / b:.2f}" if b > 0 else "n/a"


def fmt_mib(value: float) -> str:
    return f"{value:.1f} MiB"


def fmt_s(value: float) -> str:
    return f"{value:.2f} s"


def wait_rusage(proc: subprocess.Popen[bytes], timeout: float | None = None) -> tuple[int, Any]:
    """Wait for `proc` with wait4, returning (exit code, its own resource usage: CPU times, ru_maxrss)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline is not None else 0)
        if pid == proc.pid:
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            return code, usage
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------- docs/benchmarks.md

SECTION_ORDER = ("tap", "echo", "supervisor", "soak", "filter", "tree", "workspace", "check")


def _number(text: str) -> tuple[float, str] | None:
    """The first number in `text` and the unit right after it ('107 ms' -> (107.0, 'ms'))."""
    import re

    match = re.search(r"(-?[\d][\d,]*(?:\.\d+)?)\s*(ms|µs|s\b|MiB|MB/s|MB|GB|%|x)?", text.replace("**", ""))
    if not match:
        return None
    return float(match.group(1).replace(",", "")), match.group(2) or ""


_SECONDS = {"ms": 1e-3, "µs": 1e-6, "s": 1.0}


def judge(ours: str, ratio: str, target: str) -> bool | None:
    """Is a target met? Read from the target's text: a comparison with a unit of time, size or % is
    checked against `ours`; a bare comparison (or one in x) against `ratio`; a bare number means equal to
    `ours`. Anything else (flat, (for reference), grace + ...) is left to the section: None."""
    import re

    target = target.replace("≤", "<=").replace("≥", ">=").strip()
    match = re.fullmatch(r"(<=|<|>=|>|==)?\s*(-?[\d,]*\.?\d+)\s*(ms|µs|s|MiB|MB|GB|%|x)?", target)
    if not match:
        return None
    op, value, unit = match.group(1) or "==", float(match.group(2).replace(",", "")), match.group(3) or ""
    if unit in ("", "x") and match.group(1):
        got = _number(ratio)
        if got is None:
            return None
        actual = got[0]
    else:
        got = _number(ours)
        if got is None:
            return None
        actual, its_unit = got
        if unit in _SECONDS:
            if its_unit not in _SECONDS:
                return None
            actual, value = actual * _SECONDS[its_unit], value * _SECONDS[unit]
    return {"<=": actual <= value, "<": actual < value, ">=": actual >= value, ">": actual > value,
            "==": actual == value}[op]


def markdown_rows(markdown: str) -> list[Row]:
    """Rows of the first `| metric | ours | baseline | ratio | target |` table of a section."""
    rows: list[Row] = []
    in_table = False
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            if [c.lower() for c in cells[:5]] == ["metric", "ours", "baseline", "ratio", "target"]:
                in_table = True
            continue
        if not line.strip().startswith("|"):
            break
        if set("".join(cells)) <= set("-: "):
            continue
        cells += [""] * (6 - len(cells))
        met = None
        if len(cells) >= 6 and cells[5]:
            met = {"yes": True, "no": False, "**no**": False}.get(cells[5].lower())
        if met is None:
            met = judge(cells[1], cells[3], cells[4])
        rows.append(Row(cells[0], cells[1], cells[2], cells[3], cells[4], met))
    return rows


def assemble(load_start: float, started: str, out: Path | None = None) -> Path:
    """Write docs/benchmarks.md: the machine, one summary table from every section, then the sections."""
    out = out or ROOT / "docs" / "benchmarks.md"
    names = [n for n in SECTION_ORDER if (DOCS / f"{n}.md").exists()]
    names += sorted(p.stem for p in DOCS.glob("*.md")
                    if p.stem not in names and p.stem != "README" and not p.stem.endswith(".notes"))
    summary = ["| section | metric | ours | baseline | ratio | target | met? |", "|---|---|---|---|---|---|---|"]
    sections = []
    for name in names:
        md = (DOCS / f"{name}.md").read_text(encoding="utf-8")
        sections.append(md.rstrip())
        data_file = DOCS / f"{name}.json"
        rows = [Row(**r) for r in json.loads(data_file.read_text())["rows"]] if data_file.exists() else markdown_rows(md)
        for r in rows:
            met = "?" if r.met is None else ("yes" if r.met else "**NO**")
            if r.met is None and (not r.target or r.target.startswith("(")):
                met = ""
            summary.append(f"| [{name}](#{name}) | {r.metric} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {met} |")
    text = f"""# Benchmarks

Generated by `scripts/bench.sh` on {started} (finished {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}).
Machine: `{platform.platform()}`, {os.cpu_count()} CPUs, Python {platform.python_version()}; assembled at code
{commit()}. Load average (1 min) {load_start:.2f} at the start, {loadavg():.2f} at the end. Each section names the
code it ran at and the load during its own run (a section kept from an earlier run keeps its own); ratios are
measured side by side in one run, so they travel better than absolute numbers.

## Summary

Every row of every section. `met?`: the section's own verdict where it gives one, otherwise read from the
target (`?` = a target the section judges in words, such as "flat" or "grace + < 1 s").

{chr(10).join(summary)}

""" + "\n\n".join(f'<a id="{name}"></a>\n\n{body}' for name, body in zip(names, sections)) + "\n"
    out.write_text(text, encoding="utf-8")
    return out


if __name__ == "__main__":
    # python scripts/_benchkit.py assemble LOAD_AT_START "STARTED"
    if len(sys.argv) >= 4 and sys.argv[1] == "assemble":
        print(assemble(float(sys.argv[2]), sys.argv[3]))
    else:
        print("usage: _benchkit.py assemble LOAD_AT_START STARTED", file=sys.stderr)
        sys.exit(1)

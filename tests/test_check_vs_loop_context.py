"""Side by side with the real loop-context 1.5.0 CLI.

scripts/test.sh installs it from the npm registry (scripts/install-loop-context.sh, into ./node_modules), where
this module finds it; LOOP_CONTEXT_BIN names another cli.js. Without it (or without node) the tests skip, and
scripts/test.sh fails on those skips. Every case runs both programs as real processes on the same ledger file
with the same flags and compares stdout and the exit code byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO

INSTALLED = REPO / "node_modules/@cobusgreyling/loop-context/dist/cli.js"
LOOP_CONTEXT = os.environ.get("LOOP_CONTEXT_BIN") or str(INSTALLED)
NODE = shutil.which("node")


def _why_not() -> str:
    """Why the comparison cannot run here ("" when it can)."""
    if NODE is None:
        return "node is not installed (Debian: nodejs)"
    if not Path(LOOP_CONTEXT).is_file():
        return f"no loop-context cli.js at {LOOP_CONTEXT}: run scripts/install-loop-context.sh (scripts/test.sh does)"
    try:
        version = json.loads((Path(LOOP_CONTEXT).parents[1] / "package.json").read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        version = "of no version we can read"
    return "" if version == "1.5.0" else f"loop-context at {LOOP_CONTEXT} is {version}, not 1.5.0"


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")

ACTIONS = ["run tests", "run tests again", "Run Tests", "patch schema", "patch schema v2", "try 1", "try 5", "fix ü", "😀 emoji"]
PIECES = [
    "Error: connect ECONNREFUSED 127.0.0.1:", "5432", "5433", "TypeError: cannot read x at /home/u/app/foo.js:12:5",
    "\n", "\n\n", "   ", "\tat Object.<anonymous> (/a/b.js:3:9)", "2024-01-02T03:04:05.123Z ", "ENOENT", "Ünïcødé ü2",
    "٣", "0xdeadbeef", "C:\\x\\y.ts:4", "\u00a0", "\u2028", "\ufeff", "\u0085", "\r", "retry ", "😀", "x",
]


def random_case(rnd: random.Random) -> tuple[dict[str, Any], list[str]]:
    attempts = []
    narrow = rnd.sample(ACTIONS, 2) if rnd.random() < 0.4 else ACTIONS
    for i in range(rnd.randint(0, 12)):
        a: dict[str, Any] = {"iteration": i + 1, "action": rnd.choice(narrow), "outcome": rnd.choices(["failure", "success", "noop"], [6, 1, 1])[0]}
        if rnd.random() < 0.9:
            a["error"] = "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 6)))
        if rnd.random() < 0.8:
            a["tokensUsed"] = rnd.randint(0, 3000)
        attempts.append(a)
    flags: list[str] = []
    for flag, lo, hi in (("--stagnation", 1, 5), ("--no-progress", 1, 7), ("--max-iterations", 1, 14), ("--token-budget", 1, 20000), ("--window", 1, 7), ("--max-trace-lines", 1, 9)):
        if rnd.random() < 0.4:
            flags += [flag, str(rnd.randint(lo, hi))]
    if rnd.random() < 0.4:
        flags += ["--similarity-threshold", rnd.choice(["0.3", "0.4", "0.5", "0.85", "1", "0.7222222222222222"])]
    if rnd.random() < 0.2:
        flags += ["--budget-from-pattern", rnd.choice(["ci-sweeper", "issue-triage"]), "--budget-level", rnd.choice(["L1", "L2", "L3"])]
    return {"goal": rnd.choice(["g", "Fix the ünïcode bug"]), "attempts": attempts}, flags


def run_both(args: list[str], cwd: Path) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    ours = subprocess.run([sys.executable, "-m", "ralph_supervisor.check", *args], capture_output=True, cwd=cwd, timeout=60)
    theirs = subprocess.run([NODE or "node", LOOP_CONTEXT, "--check", *args], capture_output=True, cwd=cwd, timeout=60)
    return (ours.returncode, ours.stdout), (theirs.returncode, theirs.stdout)


@pytest.mark.parametrize("seed", range(10))
def test_same_stdout_and_exit_code_as_loop_context(seed: int, tmp_path: Path) -> None:
    ledger, flags = random_case(random.Random(seed))
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger, ensure_ascii=False), encoding="utf-8")
    for extra in ([], ["--json"]):
        ours, theirs = run_both(["-f", str(path), *flags, *extra], tmp_path)
        assert ours == theirs, (flags, extra)
    ours_inject = subprocess.run([sys.executable, "-m", "ralph_supervisor.check", "-f", str(path), *flags, "--inject"], capture_output=True, timeout=60)
    theirs_inject = subprocess.run([NODE or "node", LOOP_CONTEXT, "--inject", "-f", str(path), *flags], capture_output=True, timeout=60)
    assert (ours_inject.returncode, ours_inject.stdout) == (theirs_inject.returncode, theirs_inject.stdout)


def test_first_daily_check_agrees_with_loop_context(tmp_path: Path) -> None:
    ledger = {"goal": "g", "attempts": [{"iteration": 1, "action": "a", "outcome": "success", "tokensUsed": 80000}]}
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = subprocess.run([sys.executable, "-m", "ralph_supervisor.check", "-f", str(path), "--daily-budget-from-pattern", "issue-triage"], capture_output=True, cwd=tmp_path / "a", timeout=60)
    theirs = subprocess.run([NODE or "node", LOOP_CONTEXT, "--check", "-f", str(path), "--daily-budget-from-pattern", "issue-triage"], capture_output=True, cwd=tmp_path / "b", timeout=60)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout)
    ours_state = json.loads((tmp_path / "a" / ".loop-context" / "daily-spend.issue-triage.json").read_text())
    theirs_state = json.loads((tmp_path / "b" / ".loop-context" / "daily-spend.issue-triage.json").read_text())
    assert {k: ours_state[k] for k in theirs_state} == theirs_state

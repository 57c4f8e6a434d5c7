"""What the fake agents in this folder share (claude, codex, gemini, opencode, cursor-agent, amp): the scenario, the call number,
the work a call does in the workspace and the reply it gives. Each fake prints the result in its agent's own
format. No AI anywhere.

Scenarios (FAKE_AGENT_SCENARIO, else FAKE_CLAUDE_SCENARIO; default progress):

  progress      write a new file in the workspace each call, reply "implemented step N"
  stuck         change nothing, reply something different (and useless) every call
  progress-then-stuck  progress for FAKE_AGENT_PROGRESS_CALLS calls (default 2), then stuck
  same-error    change nothing, reply with "Error: Failed to compile src/main.ts" (line numbers vary)
  paraphrase    change nothing, restate the same blocker in new words
  auth          the agent's own "not logged in / invalid key" error, a non-zero exit
  usage-limit   the agent's own usage-limit error (with a reset time FAKE_AGENT_RESET_IN seconds ahead,
                default 3600, where the agent says one), a non-zero exit
  fail          print an error and no result, exit 1
  hang          print nothing and sleep (a hung call)
  done          change nothing and say EXIT_SIGNAL: true

FAKE_AGENT_SCENARIO_FILE (or FAKE_CLAUDE_SCENARIO_FILE), when set, names a file whose content overrides the
scenario (read on every call, so a test can change the agent's behaviour mid-run). FAKE_AGENT_DELAY (seconds,
default 0.3) is how long a call takes; FAKE_AGENT_TOKENS the tokens it reports (default 1200). The call number
comes from "Loop #N" in the arguments, else a counter file.

FAKE_AGENT_SESSIONS, when set, makes each call keep its session (and Claude its configuration) where the
real CLI does, in the home folder (_fake_sessions.py).

FAKE_AGENT_CALLS_DIR (or FAKE_CLAUDE_CALLS_DIR), when set, names a folder of shell scripts, one per call: call N
runs N.sh there (with `sh`, in the workspace), whatever the scenario, then answers like `progress` (without a file
of its own). This is how the tests play an agent that runs `git clean -fd`, `rm -rf src` or `git reset --hard`.
A file N.done beside N.sh makes call N say the work is done ("all tests pass", EXIT_SIGNAL: true).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _fake_sessions import keep_session

STUCK_REPLIES = [
    "Reviewed the parser module and its fixtures; no changes were needed there.",
    "Read through the database migrations looking for the cause, found nothing conclusive yet.",
    "Checked the logging configuration and environment variables, everything looks normal.",
    "Explored the caching layer and request timeouts; still investigating the flaky behaviour.",
    "Looked at deployment scripts and container settings but did not modify anything.",
]

PARAPHRASES = [
    "Still blocked: the deploy needs the owner attestation gate, which remains unsigned.",
    "The owner attestation gate is still unsigned, so the deploy is blocked.",
    "Deploy blocked: owner attestation gate unsigned. This remains the state.",
    "Blocked on the unsigned owner attestation gate; the deploy cannot go ahead.",
]


def setting(name: str, default: str) -> str:
    """FAKE_AGENT_<name>, else the older FAKE_CLAUDE_<name>, else the default."""
    return os.environ.get(f"FAKE_AGENT_{name}") or os.environ.get(f"FAKE_CLAUDE_{name}") or default


def status_block(status: str, files: int, exit_signal: bool, recommendation: str) -> str:
    return (
        "\n---RALPH_STATUS---\n"
        f"STATUS: {status}\nTASKS_COMPLETED_THIS_LOOP: {1 if files else 0}\nFILES_MODIFIED: {files}\n"
        "TESTS_STATUS: NOT_RUN\nWORK_TYPE: IMPLEMENTATION\n"
        f"EXIT_SIGNAL: {'true' if exit_signal else 'false'}\nRECOMMENDATION: {recommendation}\n"
        "---END_RALPH_STATUS---"
    )


def default_counter() -> Path:
    """One counter per workspace (a stable digest of the working folder: `hash()` differs in every process),
    in one folder of the temp dir, outside the workspace (a counter there would be a file change)."""
    folder = Path(tempfile.gettempdir()) / f"fake-agent-calls-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    return folder / hashlib.sha256(os.getcwd().encode("utf-8", "surrogateescape")).hexdigest()[:24]


def call_number(argv: list[str]) -> int:
    for arg in argv:
        match = re.search(r"Loop #(\d+)", arg)
        if match:
            return int(match.group(1))
    counter = Path(setting("COUNTER", "") or default_counter())
    try:
        n = int(counter.read_text()) + 1
    except (OSError, ValueError):
        n = 1
    counter.write_text(str(n))
    return n


@dataclass(frozen=True)
class Call:
    """What this call does: `kind` is "reply" (print `text`) or the scenario's failure (auth, usage-limit, fail)."""

    kind: str
    number: int
    text: str = ""
    tokens: int = 1200
    reset_in: float = 3600.0


def play(argv: list[str], agent: str = "") -> Call:
    """Run the scenario for this call: sleep, change the workspace, and say what the agent answers. With
    FAKE_AGENT_SESSIONS set, `agent`'s session is kept where the real CLI keeps it (_fake_sessions.py)."""
    keep_session(agent)
    scenario = setting("SCENARIO", "progress")
    scenario_file = setting("SCENARIO_FILE", "")
    if scenario_file and os.path.exists(scenario_file):
        scenario = Path(scenario_file).read_text().strip() or scenario
    n = call_number(argv)
    tokens = int(setting("TOKENS", "1200"))
    if scenario == "progress-then-stuck":
        scenario = "progress" if n <= int(setting("PROGRESS_CALLS", "2")) else "stuck"
    time.sleep(float(setting("DELAY", "0.3")))
    calls_dir = setting("CALLS_DIR", "")
    script = Path(calls_dir) / f"{n}.sh" if calls_dir else None
    if script is not None and script.is_file():
        code = subprocess.call(["sh", str(script)])
        if script.with_suffix(".done").is_file():
            return Call("reply", n, f"Ran step {n} (exit {code}). All tests pass: the work is complete."
                        + status_block("COMPLETE", 1, True, "nothing left to do"), tokens)
        return Call("reply", n, f"Ran step {n} (exit {code})." + status_block("IN_PROGRESS", 1, False, "continue"),
                    tokens)
    if scenario == "progress":
        Path("src").mkdir(exist_ok=True)
        Path(f"src/step_{n}.py").write_text(f"STEP = {n}\n")
        return Call("reply", n, "Implemented step %d." % n + status_block("IN_PROGRESS", 1, False,
                                                                          "continue with the next step"), tokens)
    if scenario == "stuck":
        return Call("reply", n, STUCK_REPLIES[(n - 1) % len(STUCK_REPLIES)] + status_block(
            "IN_PROGRESS", 0, False, "keep investigating"), tokens)
    if scenario == "same-error":
        return Call("reply", n, f"The build still fails:\nError: Failed to compile src/main.ts:{10 + n}:5\nI will try "
                                "again." + status_block("IN_PROGRESS", 0, False, "fix the compile error"), tokens)
    if scenario == "paraphrase":
        return Call("reply", n, PARAPHRASES[(n - 1) % len(PARAPHRASES)] + status_block("BLOCKED", 0, False,
                                                                                       "owner must sign"), tokens)
    if scenario == "hang":
        time.sleep(float(setting("HANG", "1000")))
        return Call("hang", n)
    if scenario == "done":
        return Call("reply", n, "All tasks are complete." + status_block("COMPLETE", 0, True, "nothing left to do"),
                    tokens)
    if scenario in ("auth", "usage-limit", "fail"):
        return Call(scenario, n, reset_in=float(setting("RESET_IN", "3600")))
    return Call("none", n)  # an unknown scenario prints nothing

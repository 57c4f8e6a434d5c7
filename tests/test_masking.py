"""Credentials the agent prints are masked in everything the supervisor shows or sends; child.log keeps them."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.masking import MASK, PATTERNS, Masker, env_values
from tests.helpers import REPO, state_dir_of
from tests.helpers.fuzzing import CHEAP
from tests.helpers.supervise import supervise_argv

ANTHROPIC = "sk-ant-api03-" + "Q" * 40
TOKENS = [ANTHROPIC, "sk-proj-" + "a1B2" * 10, "ghp_" + "x" * 36, "github_pat_" + "Y" * 40, "xoxb-1234567890-abcdefghij",
          "AKIAIOSFODNN7EXAMPLE", "AIza" + "S" * 35, "Bearer " + "t0k3n" * 6,
          "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"]


@pytest.mark.parametrize("token", TOKENS)
def test_known_credential_formats_are_masked_wherever_they_stand(token: str) -> None:
    text = f'Error: request failed ("{token}") at line 3'
    masked = Masker().mask(text)
    assert token not in masked and MASK in masked and masked.startswith("Error: request failed") and "line 3" in masked


def test_a_private_key_block_is_masked_whole() -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAA\n-----END OPENSSH PRIVATE KEY-----"
    assert Masker().mask(f"cat id: {key} done") == f"cat id: {MASK} done"


def test_env_values_are_the_secret_looking_ones() -> None:
    text = ("# local\nexport API_KEY='short1'\nDATABASE_URL=\"postgres://u:p@h/db\"\nNODE_ENV=production\nPORT=3000\n"
            "DEBUG=true\nSESSION=Zm9vYmFyYmF6cXV4MTIz\nEMPTY=\n")
    assert env_values(text) == {"short1", "postgres://u:p@h/db", "Zm9vYmFyYmF6cXV4MTIz"}
    masker = Masker(frozenset(env_values(text)))
    assert masker.mask("mode production on port 3000, debug true") == "mode production on port 3000, debug true"
    assert masker.mask("connect postgres://u:p@h/db with short1") == f"connect {MASK} with {MASK}"


def test_ordinary_output_is_left_alone() -> None:
    text = "Ran 41 tests in 0.8s; FAILED test_auth (sk-learn is not installed); see https://docs.example/api-keys"
    assert Masker().mask(text) == text


@pytest.mark.slow
def test_what_the_agent_prints_is_masked_in_events_escalation_report_and_status_not_in_child_log(
        tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    ws.mkdir()
    (ws / ".gitignore").write_text(".env\n")
    (ws / ".env").write_text("STRIPE_SECRET=rk_live_notreal_51Habc\n")
    script = ("for i in 1 2 3; do echo '=== iteration'; "
              f"echo 'Error: auth failed for {ANTHROPIC} and rk_live_notreal_51Habc' >&2; sleep 0.3; done; sleep 5")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(supervise_argv("run", "--no-echo", "--log-format", "json", "--grace", "1",
                                         "--iteration-marker", "^=== iteration", "--max-failures", "2",
                                         "--on-open", "stop", "--notify-desktop", "false", "--", "sh", "-c", script),
                          cwd=ws, env=env, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    state = state_dir_of(ws)
    log = (state / "child.log").read_bytes()
    assert ANTHROPIC.encode() in log and b"rk_live_notreal_51Habc" in log, "child.log keeps the bytes as printed"
    assert stat.S_IMODE((state / "child.log").stat().st_mode) == 0o600
    shown = {
        "events.jsonl": (state / "events.jsonl").read_text(),
        "escalation.md": (state / "escalation.md").read_text(),
        "stderr": done.stderr.decode(),
        "report": subprocess.run(supervise_argv("report"), cwd=ws, env=env, capture_output=True, text=True,
                                 timeout=120).stdout,
        "report --json": subprocess.run(supervise_argv("report", "--json"), cwd=ws, env=env, capture_output=True,
                                        text=True, timeout=120).stdout,
        "report.html": (state / "report.html").read_text(),
        "status": subprocess.run(supervise_argv("status", "--json"), cwd=ws, env=env, capture_output=True,
                                 text=True, timeout=60).stdout,
    }
    assert "auth failed" in shown["events.jsonl"] and MASK in shown["events.jsonl"]
    for where, text in shown.items():
        assert ANTHROPIC not in text and "rk_live_notreal_51Habc" not in text, where


_PIECES = st.sampled_from([
    "sk-", "ant-", "ghp_", "gho", "github_pat_", "glpat-", "xoxb-", "hooks.slack.com/services/", "AKIA", "ASIA",
    "AIza", "npm_", "Bearer ", "bearer\t", "eyJ", ".", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "PRIVATE KEY", " ", "\n", "_", "-", "/",
]) | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=40)


@given(st.lists(_PIECES, max_size=12).map("".join))
@CHEAP
def test_a_text_left_unsearched_is_one_the_patterns_would_not_change(text: str) -> None:
    """mask skips the search where none of MUST_HOLD is in the text: it gives what the search gives."""
    assert Masker().mask(text) == PATTERNS.sub(MASK, text)

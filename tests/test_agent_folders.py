"""The agents' folders in a `--sandbox` box: the user's settings read-only, nothing the box writes reaches
them, the sessions and the login still shared, Claude's configuration through CLAUDE_CONFIG_DIR.

The layout is tested as values over a fake home; then a real loop in a real bubblewrap box runs the fake
agents of examples/bin (which keep their sessions where the real CLIs do) and tries to plant each agent's
settings, hooks, `.env` and plugins, existing or not: nothing appears outside, and the run's own folders
are gone with the run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ralph_supervisor.agent_folders import RUN_FOLDER, AgentFolders, places
from ralph_supervisor.agents import ADAPTERS
from ralph_supervisor.agents.base import COPY, RO, RUN, RW
from ralph_supervisor.sandbox import Bind, Box
from tests.helpers import EXAMPLES
from tests.helpers.fault_procs import marked
from tests.helpers.runs import Run
from tests.helpers.supervise import events
from tests.test_sandbox import _box_works, needs_bwrap

CLAUDE, CODEX = ADAPTERS["claude"], ADAPTERS["codex"]


def _by_place(folders: AgentFolders) -> dict[Path, Bind]:
    return {b.path: b for b in folders.binds}


# ------------------------------------------------------------------ the layout


@pytest.mark.parametrize("name", [n for n, a in ADAPTERS.items() if a.sandbox_home])
def test_whatever_of_the_users_folder_is_writable_is_named_inside_a_folder_of_the_run(name: str) -> None:
    """The structure that closes the hole: every agent folder the box writes is a folder of the run's own,
    and what it shares of the user's (a file, a `name/` folder) or copies sits directly in one of those."""
    entries = ADAPTERS[name].sandbox_home
    runs = [path for path, how in entries if how == RUN]
    assert runs, "an agent with folders has one of the run's own"
    for index, (path, how) in enumerate(entries):
        assert how in (RUN, RO, RW, COPY), (path, how)
        parent = str(Path(path.rstrip("/")).parent)
        if how in (RW, COPY):
            assert parent in runs, f"{path}: {how} outside a folder of the run"
        if parent in runs:
            assert (parent, RUN) in entries[:index], f"{path} comes before its folder of the run"


def test_claudes_folder_is_the_runs_with_the_users_settings_read_only_and_its_configuration_a_copy(
        tmp_path: Path) -> None:
    home, run_dir = tmp_path / "home", tmp_path / "run"
    (home / ".claude" / "hooks").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"hooks": {}}')
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {}}')
    (home / ".claude.json").write_text('{"numStartups": 3}')
    folders = AgentFolders.plan([CLAUDE], home=home, env={"HOME": str(home)}, run_dir=run_dir)
    binds = _by_place(folders)
    mine = run_dir / RUN_FOLDER / str(home / ".claude").lstrip("/")
    assert binds[home / ".claude"] == Bind(home / ".claude", True, "the claude adapter", source=mine)
    assert not binds[home / ".claude/settings.json"].writable and not binds[home / ".claude/hooks"].writable
    assert binds[home / ".claude/projects"].writable and binds[home / ".claude/.credentials.json"].writable
    assert home / ".claude/settings.local.json" not in binds, "a settings file the user has not: not bound"
    assert home / ".claude.json" not in binds, "the box's Claude keeps its configuration in ~/.claude"
    assert folders.env == {"CLAUDE_CONFIG_DIR": str(home / ".claude")}
    assert folders.copies == ((home / ".claude.json", mine / ".claude.json"),)
    assert folders.shared == (home / ".claude/projects",)
    assert folders.prepare() is None
    assert (home / ".claude/projects").is_dir(), "the missing shared folder is made outside the box"
    assert json.loads((mine / ".claude.json").read_text()) == {"numStartups": 3}
    assert (mine / ".claude.json").stat().st_mode & 0o077 == 0
    (mine / ".claude.json").write_text('{"numStartups": 4}')  # Claude's own update, in the run
    assert folders.prepare() is None
    assert json.loads((mine / ".claude.json").read_text()) == {"numStartups": 4}, "a restart keeps the run's copy"


def test_a_moved_folder_is_followed_and_a_missing_one_gets_nothing_of_the_run(tmp_path: Path) -> None:
    home, moved = tmp_path / "home", tmp_path / "elsewhere"
    moved.mkdir(parents=True)
    (moved / "settings.json").write_text("{}")
    (moved / ".claude.json").write_text("{}")
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(moved)}
    assert {str(p.path) for p in places(CLAUDE, home, env) if p.how == RO} >= {str(moved / "settings.json")}
    folders = AgentFolders.plan([CLAUDE, CODEX], home=home, env=env, run_dir=tmp_path / "run")
    binds = _by_place(folders)
    assert binds[moved].source is not None and not binds[moved / "settings.json"].writable
    assert folders.copies[0][0] == moved / ".claude.json", "Claude keeps it in the moved folder"
    assert folders.env["CLAUDE_CONFIG_DIR"] == str(moved)
    assert not any(p.is_relative_to(home / ".codex") for p in binds), "no ~/.codex: nothing of it in the box"
    assert "CODEX_HOME" not in folders.env, "Codex refuses a CODEX_HOME that does not exist"


def test_without_a_run_folder_the_agents_folders_are_empty_mounts_of_the_box(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex" / "skills" / "mine").mkdir(parents=True)
    (home / ".codex" / "skills" / ".system").mkdir()
    (home / ".codex" / "config.toml").write_text("")
    box = Box.plan(workspace=tmp_path / "ws", state_dir=tmp_path / "state", bwrap="/b", agents=("codex",),
                   env={"HOME": str(home), "PATH": "/usr/bin"})
    args = box.arguments()
    codex, skills = str(home / ".codex"), str(home / ".codex/skills")
    assert args[args.index(codex) - 1] == "--tmpfs" and args[args.index(skills) - 1] == "--tmpfs"
    mine = args.index(str(home / ".codex/skills/mine"))
    assert args[mine - 1:mine + 2] == ["--ro-bind", *[str(home / ".codex/skills/mine")] * 2], "each skill of the user's"
    assert str(home / ".codex/skills/.system") not in args, "Codex's own skills are the run's"
    assert args.index(codex) < args.index(skills) < mine < len(args)
    assert box.env["CODEX_HOME"] == codex


# ------------------------------------------------------------------ a real box

SETTINGS = {
    "claude": [".claude/settings.json", ".claude/settings.local.json", ".claude/hooks/evil.sh", ".claude/CLAUDE.md",
               ".claude/commands/x.md", ".claude/agents/x.md", ".claude/plugins/x.json", ".claude.json"],
    "codex": [".codex/config.toml", ".codex/hooks.json", ".codex/.env", ".codex/AGENTS.md", ".codex/rules/x.rules"],
    "gemini": [".gemini/settings.json", ".gemini/.env", ".gemini/extensions/x/gemini-extension.json"],
    "opencode": [".config/opencode/opencode.json", ".config/opencode/plugin/x.js",
                 ".cache/opencode/node_modules/x/index.js", ".local/share/opencode/snapshot/x/config"],
    "cursor": [".cursor/hooks.json", ".cursor/mcp.json", ".cursor/cli-config.json"],
    "amp": [".config/amp/settings.json"],
}
"""What each agent's CLI would run or trust the next time, outside the box: the box tries to write each."""

SHARED = (".claude/projects", ".claude/.credentials.json", ".codex/sessions")
"""What the box shares of the user's: the sessions and the login."""


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (but the shared session folders and the state folder) by content hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith((*SHARED, ".local/state/ralph-supervise")):
            continue
        found[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return found


def _home(root: Path) -> Path:
    """A user with every agent: some settings there (the box may read them), others not yet."""
    home = root / "home"
    files = {".claude/settings.json": '{"hooks": {}}', ".claude.json": '{"numStartups": 1}',
             ".claude/.credentials.json": '{"claudeAiOauth": {"accessToken": "a"}}', ".claude/CLAUDE.md": "be nice\n",
             ".codex/config.toml": 'model = "m"\n', ".codex/auth.json": '{"OPENAI_API_KEY": "k"}',
             ".gemini/settings.json": "{}", ".config/opencode/opencode.json": "{}", ".cursor/mcp.json": "{}",
             ".cursor/cli-config.json": '{"version": 1}', ".config/amp/settings.json": "{}"}
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    for folder in (".local/share/opencode", ".cache/opencode", ".local/share/amp", ".cache/amp", ".config/cursor"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    return home


PLANT = """
for f in {paths}; do
  if mkdir -p "$(dirname "$f")" 2>/dev/null && echo planted > "$f"; then echo "planted $f"; fi
done
cat ~/.claude/CLAUDE.md
echo "config dir: $CLAUDE_CONFIG_DIR"
"""


@needs_bwrap
@pytest.mark.slow
def test_a_boxed_loop_plants_no_settings_outside_and_the_agents_sessions_and_login_still_work(tmp_path: Path) -> None:
    reason = _box_works()
    if reason is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {reason}")
    home = _home(tmp_path)
    before = _tree(home)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    calls = "; ".join(["claude -p one", "codex exec one", "gemini -p one", "opencode run one", "cursor-agent -p one",
                       "amp -x one", "claude -p two"])
    paths = " ".join(f"~/{p}" for paths in SETTINGS.values() for p in paths)
    run = Run(tmp_path / "ws")
    try:
        run.start("--sandbox", "bwrap", "--sandbox-env", "FAKE_AGENT_*", "--sandbox-ro", str(EXAMPLES / "bin"), "--",
                  "sh", "-c", f"{calls}; {PLANT.format(paths=paths)}",
                  env={"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "FAKE_AGENT_SESSIONS": "1",
                       "FAKE_AGENT_DELAY": "0", "PATH": f"{EXAMPLES / 'bin'}:{os.environ['PATH']}"})
        assert run.finish(90) == 0, run.stderr.decode(errors="replace")[-2000:]
    finally:
        run.cleanup()
    log = (run.state_dir / "child.log").read_text(errors="replace")
    assert ": cannot write" not in log, log  # every agent kept its session where it keeps it
    for existing in (".claude/settings.json", ".claude/CLAUDE.md", ".codex/config.toml", ".gemini/settings.json",
                     ".config/opencode/opencode.json", ".cursor/mcp.json", ".config/amp/settings.json"):
        assert f"{home / existing}: Read-only file system" in log, (existing, log)
    assert "be nice" in log, "the user's settings are there to read"
    assert f"config dir: {home / '.claude'}" in log
    assert _tree(home) == before, "nothing the box wrote, planted or not, is in the user's folders"
    sessions = list((home / ".claude/projects").rglob("*.jsonl"))
    assert len(sessions) == 2, "Claude's sessions are shared: `--resume` works across runs"
    assert len(list((home / ".codex/sessions").rglob("rollout-*.jsonl"))) == 1
    assert json.loads((home / ".claude.json").read_text()) == {"numStartups": 1}, "Claude wrote its copy only"
    assert len(events(run.state_dir, "iteration_finished")) == 7
    assert not list(runtime.rglob(RUN_FOLDER)), "the run's own folders are gone with the run"
    assert marked(run.mark) == []


@needs_bwrap
@pytest.mark.slow
def test_a_login_refreshed_in_the_box_reaches_the_users_credentials(tmp_path: Path) -> None:
    """Claude rewrites `.credentials.json` through a renamed temporary file and copies over a file it
    cannot rename onto: the bound file refuses the rename (EBUSY), the copy lands in the user's file."""
    reason = _box_works()
    if reason is not None:
        pytest.skip(f"bubblewrap cannot make a box here: {reason}")
    home = _home(tmp_path)
    run = Run(tmp_path / "ws")
    try:
        run.start("--sandbox", "bwrap", "--sandbox-env", "FAKE_AGENT_*", "--sandbox-ro", str(EXAMPLES / "bin"), "--",
                  "claude", "-p", "one",
                  env={"HOME": str(home), "FAKE_AGENT_SESSIONS": "1", "FAKE_AGENT_DELAY": "0",
                       "PATH": f"{EXAMPLES / 'bin'}:{os.environ['PATH']}"})
        assert run.finish(60) == 0, run.stderr.decode(errors="replace")[-2000:]
    finally:
        run.cleanup()
    credentials = json.loads((home / ".claude/.credentials.json").read_text())
    assert credentials["claudeAiOauth"] == {"accessToken": "a"} and credentials["refreshedAt"] > 0
    assert not list((home / ".claude").glob(".credentials.json.tmp.*"))

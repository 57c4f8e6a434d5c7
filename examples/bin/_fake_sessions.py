"""Where the fake agents keep their sessions and configuration, where the real CLIs do (only with
FAKE_AGENT_SESSIONS=1, which the tests set with a home folder of their own: never the user's).

Seen from Claude Code 2.1.197, Codex 0.171.0, Gemini CLI 0.61.0 and opencode 1.18.33 run offline:

  claude        $CLAUDE_CONFIG_DIR (else ~/.claude)/projects/<the working folder, - for each / and .>/<session>.jsonl;
                its configuration $CLAUDE_CONFIG_DIR/.claude.json (else ~/.claude.json), rewritten through a
                temporary file renamed over it; a `.credentials.json` there rewritten the same way, copied over
                where the rename is refused (EBUSY, EXDEV, EPERM, EEXIST), as Claude's writer does
  codex         $CODEX_HOME (else ~/.codex)/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl, and its databases
                at the top of that folder
  gemini        $GEMINI_CLI_HOME (else ~)/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl, projects.json
  opencode      ~/.local/share/opencode/opencode.db; ~/.config/opencode/opencode.jsonc made where missing
  cursor-agent  $CURSOR_CONFIG_DIR (else ~/.cursor)/cli-config.json rewritten through a renamed temporary file
  amp           ~/.local/share/amp/threads/T-<id>.json

A write that fails prints `<agent>: cannot write <path>: <reason>` on stderr, and the call goes on.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

REFUSED_RENAME = {errno.EXDEV, errno.EPERM, errno.EEXIST, errno.EBUSY}


def _home() -> Path:
    return Path(os.environ.get("HOME") or os.path.expanduser("~"))


def _folder(variable: str, default: str) -> Path:
    value = os.environ.get(variable, "")
    return Path(value) if value and os.path.isabs(value) else _home() / default


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Read `path` (JSON, {} when missing), change it, write it back through a renamed temporary file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data = change(data if isinstance(data, dict) else {})
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.tmp.{uuid.uuid4().hex[:8]}")
    temp.write_text(json.dumps(data), encoding="utf-8")
    try:
        os.replace(temp, path)
    except OSError as exc:
        if exc.errno not in REFUSED_RENAME:
            temp.unlink(missing_ok=True)
            raise
        shutil.copyfile(temp, path)  # a bound file cannot be renamed over: copied over, as Claude's writer does
        temp.unlink(missing_ok=True)


def _claude(session: str) -> None:
    config = os.environ.get("CLAUDE_CONFIG_DIR", "")
    folder = _folder("CLAUDE_CONFIG_DIR", ".claude")
    slug = re.sub(r"[^A-Za-z0-9]", "-", os.getcwd())
    _append(folder / "projects" / slug / f"{session}.jsonl", json.dumps({"type": "user", "sessionId": session}))
    settings = Path(config) / ".claude.json" if config else _home() / ".claude.json"
    _rewrite(settings, lambda d: {**d, "numStartups": int(d.get("numStartups", 0)) + 1})
    credentials = folder / ".credentials.json"
    if credentials.is_file():
        _rewrite(credentials, lambda d: {**d, "refreshedAt": time.time()})


def _codex(session: str) -> None:
    folder = _folder("CODEX_HOME", ".codex")
    day = time.strftime("%Y/%m/%d")
    _append(folder / "sessions" / day / f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S')}-{session}.jsonl",
            json.dumps({"type": "session_meta", "payload": {"id": session}}))
    _append(folder / "state_5.sqlite", session)


def _gemini(session: str) -> None:
    folder = _folder("GEMINI_CLI_HOME", "") / ".gemini"
    project = Path(os.getcwd()).name
    _append(folder / "tmp" / project / "chats" / f"session-{time.strftime('%Y-%m-%dT%H-%M')}-{session[:8]}.jsonl",
            json.dumps({"sessionId": session}))
    _rewrite(folder / "projects.json", lambda d: {"projects": {**d.get("projects", {}), os.getcwd(): project}})


def _opencode(session: str) -> None:
    _append(_home() / ".local/share/opencode/opencode.db", session)
    config = _home() / ".config/opencode/opencode.jsonc"
    if not config.exists():
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text('{\n  "$schema": "https://opencode.ai/config.json"\n}\n', encoding="utf-8")


def _cursor(session: str) -> None:
    _rewrite(_folder("CURSOR_CONFIG_DIR", ".cursor") / "cli-config.json",
             lambda d: {"version": 1, "permissions": {"allow": [], "deny": []}, **d, "lastSession": session})


def _amp(session: str) -> None:
    _append(_home() / ".local/share/amp/threads" / f"T-{session}.json", json.dumps({"id": f"T-{session}"}))


WRITERS = {"claude": _claude, "codex": _codex, "gemini": _gemini, "opencode": _opencode, "cursor-agent": _cursor,
           "amp": _amp}


def keep_session(agent: str) -> None:
    """Write this call's session where `agent`'s real CLI does, when FAKE_AGENT_SESSIONS is set."""
    writer = WRITERS.get(agent)
    if writer is None or not os.environ.get("FAKE_AGENT_SESSIONS"):
        return
    try:
        writer(str(uuid.uuid4()))
    except OSError as exc:
        print(f"{agent}: cannot write {exc.filename}: {exc.strerror or exc}", file=sys.stderr)

"""The state folder (outside the workspace by default, see `state_folder.py`): one module owns each file in it.

Each module alone knows its file's name and format; it reads the file (a missing file is no error, a
corrupt one is moved aside with `store.move_aside` and reported in one line), writes it (atomically, or
appended and rotated) and locks it where several processes share it:

| file | owner |
|---|---|
| `state.json` | `files/state_json.py` |
| `history.jsonl` | `files/history_jsonl.py` |
| `ledger.json` | `files/ledger_json.py` |
| `daily-spend.json` | `files/daily_spend_json.py` |
| `escalation.md` | `files/escalation_md.py` |
| `report.html` | `files/report_html.py` (written by `report/`) |
| `events.jsonl` | `files/events_jsonl.py` (written through `logging.py`; the event names: `events.py`) |
| `supervisor.lock` | `files/lock.py` |
| `child.log` | `files/child_log.py` |
| `control.sock` | `control.py` |
| `tree.json` | `process/orphans.py` |
| `snapshots/` (a private git store), `snapshots.store.lock` | `snapshots/store.py` |

    >>> from pathlib import Path
    >>> prepare(Path("/tmp/ralph-example/.ralph-supervise"))  # the folder, with a .gitignore of `*`
"""

from __future__ import annotations

from pathlib import Path

GITIGNORE = "*\n"


def prepare(state_dir: Path) -> None:
    """Create the state folder with a `.gitignore` of `*`, so it never shows in the user's git status."""
    state_dir.mkdir(parents=True, exist_ok=True)
    ignore = state_dir / ".gitignore"
    if not ignore.exists():
        try:
            ignore.write_text(GITIGNORE)
        except OSError:
            pass

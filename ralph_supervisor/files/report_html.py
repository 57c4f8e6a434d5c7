"""`report.html`: the self-contained report, rewritten at every open and when the supervisor exits.

The report package renders and writes it (`report.write_report`, in a helper process); the notices name it
and the page serves it, all through `path`.

    >>> path(Path("/tmp/ralph-example/.ralph-supervise")).name
    'report.html'
"""

from __future__ import annotations

from pathlib import Path

NAME = "report.html"


def path(state_dir: Path) -> Path:
    return state_dir / NAME

"""`escalation.md`: written when the breaker opens (rendered by `escalation.render_escalation`).

    >>> write(Path("/tmp/ralph-example/.ralph-supervise"), "# Escalation\\n")   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from ralph_supervisor import masking, store

NAME = "escalation.md"


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def write(state_dir: Path, text: str) -> None:
    """Replace the summary atomically (a reader never sees half of one). Raises OSError."""
    store.atomic_write_text(path(state_dir), masking.mask(text))  # it quotes the agent: no credentials

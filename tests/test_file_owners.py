"""Each file of the state folder is named by its owner in `ralph_supervisor/files/` alone: a reader that
builds the path itself (`state_dir / "history.jsonl"`), or its own rotated name (`NAME + ".1"`), goes wrong
the day the owner changes, and no behaviour test notices until then. Checked on the package's source."""

from __future__ import annotations

import ast
from pathlib import Path

from ralph_supervisor.files import (
    child_log,
    daily_spend_json,
    escalation_md,
    events_jsonl,
    history_jsonl,
    ledger_json,
    lock,
    state_json,
    verify_jsonl,
)
from tests.helpers.supervise import REPO

PACKAGE = REPO / "ralph_supervisor"
OWNED = {m.NAME: m.__name__ for m in (child_log, daily_spend_json, escalation_md, events_jsonl, history_jsonl,
                                      ledger_json, lock, state_json, verify_jsonl)}


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_module_outside_its_owner_names_a_state_file() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "files":
            continue
        for line, value in _literals(path):
            if value in OWNED or value.lstrip("/") in OWNED:
                found.append(f"{path.relative_to(REPO)}:{line}: {value!r} (owned by {OWNED[value.lstrip('/')]})")
    assert OWNED, "the state folder has owned files"
    assert not found, "\n".join(found)


def test_a_rotated_name_is_made_in_one_place() -> None:
    """`NAME.1`, `NAME.2`: only `rotating.rotated_path` spells the rotation rule."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, value in _literals(path):
            if value in (".1", ".2"):
                found.append(f"{path.relative_to(REPO)}:{line}: {value!r}")
    text = (PACKAGE / "rotating.py").read_text(encoding="utf-8")
    assert text.count('path.with_name(f"{path.name}.{index}")') == 1
    assert not found, "\n".join(found)

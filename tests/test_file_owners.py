"""Each file of the state folder is named by its owner alone: a reader that builds the path itself
(`state_dir / "history.jsonl"`), or its own rotated name (`NAME + ".1"`), goes wrong the day the owner
changes, and no behaviour test notices until then. Checked on the package's source."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

from ralph_supervisor import files
from tests.helpers.supervise import REPO

PACKAGE = REPO / "ralph_supervisor"
OWNED = {module.NAME: module.__name__
         for module in (importlib.import_module(f"{files.__name__}.{info.name}")
                        for info in pkgutil.iter_modules(files.__path__))
         if isinstance(getattr(module, "NAME", None), str)}
"""The files `files/` owns, one module each: their names appear nowhere else in the package."""
OWNERS = {
    "tree.json": ("process/orphans.py",),
    "control.sock": ("control.py",),
    "cgroup.json": ("process/cgroup.py",),
    "cgroup-verify.json": ("process/cgroup.py",),
    "worktree.json": ("worktree.py",),
    "workspace.json": ("state_folder.py",),
    "snapshots": ("snapshots.py", "snapshots/"),
    "trips.jsonl": ("snapshots.py", "snapshots/"),
    "store.lock": ("snapshots.py", "snapshots/"),
    "serve.token": ("serve/auth.py",),
    "serve.page": ("serve/announce.py",),
}
"""The other files of the state folder (and of `serve`'s folder) and the modules that own them: nobody else
builds a path from their names."""


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


def _joined_names(path: Path) -> list[tuple[int, str]]:
    """Literal names a path is built from: `folder / "name"`, `.joinpath("name")`, `open("name")`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.right]
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in ("joinpath", "with_name")) or (
                    isinstance(func, ast.Name) and func.id in ("open", "Path")):
                parts = list(node.args)
        found += [(n.lineno, n.value) for n in parts if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return found


def test_no_module_but_its_owner_builds_a_path_from_a_state_file_name() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, value in _joined_names(path):
            owners = OWNERS.get(value.strip("/"))
            if owners is not None and not relative.startswith(owners):
                found.append(f"ralph_supervisor/{relative}:{line}: {value!r} (owned by {', '.join(owners)})")
    assert "report.html" in OWNED and "state.json" in OWNED
    assert all(any((PACKAGE / owner).exists() for owner in owners) for owners in OWNERS.values())
    assert not found, "\n".join(found)

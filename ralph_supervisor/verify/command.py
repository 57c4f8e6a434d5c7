"""`--verify auto`: the project's test command, picked from the files that declare it.

The order is the project's own word first: a `Makefile` `test` target, then `npm test` (a `test` script
other than npm's placeholder), then the language's runner (pytest, cargo test, go test). Pure: it takes
the workspace's top-level names and the texts it needs.

    >>> pick_command({"pyproject.toml", "tests"}, {"pyproject.toml": "[tool.pytest.ini_options]\\n"}).command
    'python -m pytest -q'
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
NPM_PLACEHOLDER = "no test specified"
READ_MAX = 1_000_000
WANTED_TEXTS = ("Makefile", "makefile", "GNUmakefile", "package.json", "pyproject.toml", "setup.cfg", "tox.ini")


@dataclass(frozen=True)
class Picked:
    command: str
    why: str


def pick_command(names: Collection[str], texts: Mapping[str, str], tests_dir_has_python: bool = False) -> Picked | None:
    """The test command a project declares, or None. `names`: the workspace's top-level entries."""
    for makefile in ("GNUmakefile", "makefile", "Makefile"):
        if makefile in names and re.search(r"^test\s*:(?!=)", texts.get(makefile, ""), re.MULTILINE):
            return Picked("make test", f"{makefile} has a test target")
    if "package.json" in names:
        script = _npm_test_script(texts.get("package.json", ""))
        if script and NPM_PLACEHOLDER not in script:
            return Picked("npm test", f"package.json's test script is {script!r}")
    pytest_why = _pytest_reason(names, texts, tests_dir_has_python)
    if pytest_why:
        return Picked("python -m pytest -q", pytest_why)
    if "Cargo.toml" in names:
        return Picked("cargo test", "Cargo.toml")
    if "go.mod" in names:
        return Picked("go test ./...", "go.mod")
    return None


def _npm_test_script(text: str) -> str | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    scripts = data.get("scripts") if isinstance(data, dict) else None
    script = scripts.get("test") if isinstance(scripts, dict) else None
    return script if isinstance(script, str) and script.strip() else None


def _pytest_reason(names: Collection[str], texts: Mapping[str, str], tests_dir_has_python: bool) -> str | None:
    if "pytest.ini" in names:
        return "pytest.ini"
    if "conftest.py" in names:
        return "conftest.py"
    for name, header in (("pyproject.toml", "[tool.pytest"), ("setup.cfg", "[tool:pytest]"), ("tox.ini", "[pytest]")):
        if name in names and header in texts.get(name, ""):
            return f"{name} has {header}"
    if any(re.fullmatch(r"test_\w+\.py|\w+_test\.py", name) for name in names):
        return "test_*.py files"
    if tests_dir_has_python and ({"tests", "test"} & set(names)):
        return "a tests folder of Python files"
    return None


def pick_in(workspace: Path) -> Picked | None:
    """`pick_command` on a real folder (its top level, the few files it reads, a look into tests/)."""
    try:
        names = {entry.name for entry in workspace.iterdir()}
    except OSError:
        return None
    texts: dict[str, str] = {}
    for name in WANTED_TEXTS:
        if name in names:
            try:
                with open(workspace / name, "rb") as fh:
                    texts[name] = fh.read(READ_MAX).decode("utf-8", "replace")
            except OSError:
                continue
    has_python = False
    for folder in ("tests", "test"):
        try:
            has_python = has_python or any(p.suffix == ".py" for p in (workspace / folder).iterdir())
        except OSError:
            continue
    return pick_command(names, texts, has_python)

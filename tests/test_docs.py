"""The documents say what the code does: the reference is generated where it can be, and every test a
document names as proof exists."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers.supervise import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_reference_is_in_step_with_the_options_and_triggers() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "reference.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_test_a_document_names_exists() -> None:
    """`tests/test_x.py::test_name` (and `::test_other` after it, meaning the same file) must be real tests."""
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        current = None
        for match in re.finditer(r"(tests/[\w/]+\.py)?::(test_\w+)", text):
            if match.group(1):
                current = REPO / match.group(1)
            if current is None:
                continue
            if not current.exists():
                missing.append(f"{doc.name}: {current.relative_to(REPO)} does not exist")
                continue
            if not re.search(rf"^(async )?def {match.group(2)}\(", current.read_text(), re.M):
                missing.append(f"{doc.name}: {current.relative_to(REPO)}::{match.group(2)}")
    assert not missing, "\n".join(missing)


def test_nothing_in_the_repository_points_outside_it() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    pointing = [name for name in tracked
                if name.endswith((".py", ".md", ".sh", ".toml", ".service"))
                and "../shared" in (REPO / name).read_text(encoding="utf-8", errors="replace")
                and name != "tests/test_docs.py"]
    assert pointing == []

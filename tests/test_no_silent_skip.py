"""No silent skip: every skip is listed with its reason at the end of the run, and with `--allowed-skips`
(scripts/test.sh) a skip the list does not allow fails the run. The end-to-end tests run a real pytest on a
small folder of tests, with this suite's plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import REPO
from tests.helpers.skips import Allowed, AllowListError, Skip, not_allowed, read_allowed

SKIPPING = '''
import pytest

def test_passes():
    assert True is not False

def test_needs_a_tool():
    pytest.skip("frobnicate is not installed")

@pytest.mark.skipif(True, reason="a filesystem without sparse files")
def test_sparse():
    assert False
'''


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.skips", "-p", "no:cacheprovider",
                           "-q", *args, str(folder)], capture_output=True, text=True, cwd=folder, env=env, timeout=120)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_tools.py").write_text(SKIPPING)
    return folder


def test_every_skip_is_listed_with_its_reason_at_the_end(suite: Path) -> None:
    done = run_pytest(suite)
    assert done.returncode == 0, done.stdout  # without a list, skips are said but fail nothing
    section = done.stdout[done.stdout.index("skips: 2"):]
    assert "test_tools.py::test_needs_a_tool: frobnicate is not installed" in section
    assert "test_tools.py::test_sparse: a filesystem without sparse files" in section


def test_a_skip_the_list_does_not_allow_fails_the_run(suite: Path) -> None:
    allowed = suite.parent / "allowed.txt"
    allowed.write_text("# only the sparse one\ntest_tools.py::test_sparse  # no sparse files on some filesystems\n")
    done = run_pytest(suite, f"--allowed-skips={allowed}")
    assert done.returncode == 1, done.stdout
    assert "NOT ALLOWED test_tools.py::test_needs_a_tool: frobnicate is not installed" in done.stdout
    assert "NOT ALLOWED test_tools.py::test_sparse" not in done.stdout
    assert "1 skip(s) not allowed by" in done.stdout


def test_skips_all_on_the_list_pass_and_a_failure_still_fails(suite: Path) -> None:
    allowed = suite.parent / "allowed.txt"
    allowed.write_text("test_tools.py::test_*  # both, for this test\n")
    assert run_pytest(suite, f"--allowed-skips={allowed}").returncode == 0
    (suite / "test_broken.py").write_text("def test_broken():\n    assert 1 == 2\n")
    assert run_pytest(suite, f"--allowed-skips={allowed}").returncode == 1


def test_an_unreadable_list_fails_the_run_naming_the_line(suite: Path) -> None:
    allowed = suite.parent / "allowed.txt"
    allowed.write_text("test_tools.py::test_sparse\n")  # no reason
    done = run_pytest(suite, f"--allowed-skips={allowed}")
    assert done.returncode == 1
    assert f"{allowed}:1: expected 'TEST-ID-GLOB  # why it cannot be avoided'" in done.stdout


def test_the_list_reads_globs_with_their_reasons_and_refuses_a_line_without_one() -> None:
    assert read_allowed("# a comment\n\n  tests/a.py::t[*]  # why  not\n") == (Allowed("tests/a.py::t[*]", "why  not"),)
    for bad in ("tests/a.py::t", "tests/a.py::t #", "# fine\n  # also fine\n# why\n#\n x #  "):
        with pytest.raises(AllowListError, match=r"allowed skips:\d+: expected"):
            read_allowed(bad)


def test_a_glob_covers_parametrized_ids_and_nothing_else() -> None:
    skips = [Skip("tests/a.py::t[1]", "r"), Skip("tests/a.py::t[2]", "r"), Skip("tests/b.py::t", "r")]
    assert not_allowed(skips, (Allowed("tests/a.py::t*", "why"),)) == [Skip("tests/b.py::t", "r")]
    assert not_allowed(skips, ()) == skips


def test_the_suite_allow_list_is_readable_and_short() -> None:
    entries = read_allowed((REPO / "tests/allowed_skips.txt").read_text(), "tests/allowed_skips.txt")
    assert 0 < len(entries) <= 10
    assert all(entry.pattern.startswith("tests/test_") for entry in entries)


def test_property_tests_run_without_a_deadline_on_a_busy_machine() -> None:
    assert settings.default.deadline is None
    assert settings().deadline is None

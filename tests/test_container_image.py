"""The image in deploy/docker, built and run for real: the result of `scripts/container-check.sh --result`,
which scripts/setup.d/90-container-image.sh runs before the suite (outside its timing: a build takes minutes)
in CI or with RALPH_TEST_IMAGE=1. Each part passes, fails, or skips with the reason the machine gave (no root,
no buildah, no base to build from, no container runtime), or because the check did not run for these sources."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.container_image import Result, Row, inputs_digest, read_result, result_path, write_result


@pytest.fixture(scope="module")
def result() -> Result:
    path = result_path()
    found = read_result(path)
    if found is None:
        pytest.skip(f"the image check did not run before this suite (no {path}): scripts/setup.d/90-container-image.sh "
                    "runs it in CI or with RALPH_TEST_IMAGE=1 (a build takes minutes)")
    if found.digest != inputs_digest():
        pytest.skip(f"the image check in {path} ran for other sources than these (run the suite with "
                    "RALPH_TEST_IMAGE=1 to build again)")
    if found.status == "cannot":
        pytest.skip(f"this machine cannot build the image: {found.reason}")
    return found


def met(result: Result, prefix: str) -> str:
    row = result.row(prefix)
    assert row is not None, f"the image check {result.status}: {result.reason or 'no row ' + repr(prefix)}"
    assert row.met == "yes", f"{row.metric}: {row.ours} (target {row.target}); {result.reason}"
    return row.ours


def test_the_image_builds_from_the_dockerfile(result: Result):
    met(result, "image built")
    size = result.row("image size")
    assert size is not None and size.ours, result.rows


def test_a_stuck_loop_is_caught_and_sigterm_stops_a_working_one_in_the_container(result: Result):
    not_run = [n for n in result.not_run if n.startswith("running the image")]
    if not_run:
        pytest.skip(f"the image was built but cannot run here: {not_run[0]}")
    assert met(result, "stuck loop in the container: exit code") == "2"
    assert met(result, "`status --json` read from the state volume") == "OPEN final no-progress"
    assert met(result, "SIGTERM to a working loop's container: exit code") == "143"
    met(result, "SIGTERM to the container's exit")
    assert met(result, "survivors of the tree stop") == "0"
    assert met(result, "processes of both containers left on the host") == "0"
    assert result.status == "passed", result.reason


# -- the hand-over itself (fast: no build) ------------------------------------------------------


def test_the_result_is_handed_over_whole_and_names_the_sources_it_was_built_from(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "deploy" / "docker").mkdir(parents=True)
    (repo / "deploy" / "docker" / "Dockerfile").write_text("FROM scratch\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.md").write_text("not in the image\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    before = inputs_digest(repo)
    (repo / "docs" / "notes.md").write_text("changed, still not in the image\n")
    assert inputs_digest(repo) == before
    (repo / "examples").mkdir()
    (repo / "examples" / "loop.sh").write_text("echo new\n")  # untracked, yet in the image
    assert inputs_digest(repo) != before

    path = tmp_path / "cache" / "result.json"
    write_result(path, "passed", "", ["image built (`buildah build`)|160.6 s|builds|yes", "image size|1.5 GB|"],
                 ["pulling `python:3.12-slim`: its registry cannot be reached"])
    got = read_result(path)
    assert got is not None and got.status == "passed" and got.digest == inputs_digest()
    assert got.row("image built") == Row("image built (`buildah build`)", "160.6 s", "builds", "yes")
    assert got.row("image size") == Row("image size", "1.5 GB", "", "")
    assert got.not_run == ("pulling `python:3.12-slim`: its registry cannot be reached",)
    path.write_text("{not json")
    assert read_result(path) is None and read_result(tmp_path / "none.json") is None


def test_the_check_script_refuses_bad_arguments_in_one_line():
    done = subprocess.run(["bash", str(REPO / "scripts" / "container-check.sh"), "--frobnicate"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stderr == "usage: scripts/container-check.sh [--result FILE]\n"

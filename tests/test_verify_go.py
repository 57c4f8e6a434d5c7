"""The verify's reader against a live `go test` (Debian's golang-go, installed by scripts/setup.d/50-go.sh).

The recorded fixtures (tests/fixtures/verify/go_*) were taken from this module with go 1.19; here the same
module runs under whatever go is installed, so a go whose output moved on is noticed: plain, `-v` and `-json`
must agree on what failed, and `-v` and `-json` on every test's outcome.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ralph_supervisor.verify.results import ERROR, FAILED, PASSED, SKIPPED, read_results

MODULE = Path(__file__).parent / "fixtures" / "verify" / "go_shop"
GO = shutil.which("go")
pytestmark = pytest.mark.skipif(GO is None, reason="go is not installed (scripts/setup.d/50-go.sh installs golang-go)")


def go_test(folder: Path, *args: str, broken: bool) -> tuple[str, int]:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local",
           "GOPATH": str(folder.parent / "gopath")}
    env.pop("BREAK", None)
    if broken:
        env["BREAK"] = "1"
    done = subprocess.run([GO or "go", "test", "-count=1", *args, "./..."], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr, done.returncode


def test_plain_verbose_and_json_runs_of_go_test_are_read_alike(tmp_path: Path) -> None:
    folder = tmp_path / "shop"
    shutil.copytree(MODULE, folder)
    verbose = read_results(*go_test(folder, "-v", broken=True))
    as_json = read_results(*go_test(folder, "-json", broken=True))
    plain = read_results(*go_test(folder, broken=True))
    expected = {"TestAdd": PASSED, "TestSub": FAILED, "TestTable": PASSED, "TestTable/zero": PASSED,
                "TestTable/one": PASSED, "TestNetwork": SKIPPED, "TestShout": PASSED}
    assert dict(verbose.tests) == expected and dict(as_json.tests) == expected
    assert (verbose.passed, verbose.failed, verbose.skipped) == (as_json.passed, as_json.failed, as_json.skipped) == (5, 1, 1)
    assert plain.named(FAILED) == {"TestSub"} and not plain.ok
    passing = read_results(*go_test(folder, broken=False))
    assert passing.ok and passing.tests == {"example.com/shop/calc": PASSED, "example.com/shop/strs": PASSED}


def test_a_package_that_does_not_build_is_an_error_in_every_format(tmp_path: Path) -> None:
    folder = tmp_path / "shop"
    shutil.copytree(MODULE, folder)
    with (folder / "calc" / "calc.go").open("a") as source:
        source.write('func Broken() int { return "x" }\n')
    for args in ((), ("-v",), ("-json",)):
        output, code = go_test(folder, *args, broken=False)
        r = read_results(output, code)
        assert code != 0 and not r.ok, (args, output)
        assert r.named(ERROR) == {"example.com/shop/calc"} and r.tests.get("TestShout", PASSED) == PASSED, (args, output)

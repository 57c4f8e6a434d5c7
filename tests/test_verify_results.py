"""Reading a test run: counts and test names from JUnit XML, each runner's summary lines, or the exit code.

The fixtures in tests/fixtures/verify/ are real output, recorded from pytest 8, unittest (Python 3.11),
jest 30, vitest 4 (coloured, as on a TTY, and with NO_COLOR), mocha 11, jest-junit and cargo test 1.9x
on small projects with passing, failing, erroring and skipped tests, and go test 1.19 (plain, `-v`, `-json`,
a build failure) on a module of two tested packages, and cargo-nextest 0.9.148 (see its README).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.verify.results import (
    ERROR,
    EXIT_CODE,
    FAILED,
    NAMES_MAX,
    PASSED,
    SKIPPED,
    TestResults,
    read_junit,
    read_results,
)

FIXTURES = Path(__file__).parent / "fixtures" / "verify"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def counts(r: TestResults) -> tuple[str, int, int, int, int]:
    return (r.runner, r.passed, r.failed, r.errors, r.skipped)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pytest_q.txt", ("pytest", 3, 1, 1, 2)),  # 1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error
        ("pytest_full.txt", ("pytest", 3, 1, 1, 2)),
        ("pytest_deselect.txt", ("pytest", 1, 0, 0, 0)),  # deselected tests are not run: not counted
        ("ut.txt", ("unittest", 1, 1, 1, 1)),
        ("ut_v.txt", ("unittest", 1, 1, 1, 1)),
        ("jest.txt", ("jest", 2, 1, 0, 1)),
        ("jest_verbose.txt", ("jest", 2, 1, 0, 1)),
        ("jest_pass.txt", ("jest", 3, 0, 0, 1)),
        ("vitest.txt", ("vitest", 2, 1, 0, 1)),
        ("vitest_pass_nocolor.txt", ("vitest", 3, 0, 0, 1)),
        ("mocha.txt", ("mocha", 2, 1, 0, 1)),
        ("mocha_pass.txt", ("mocha", 3, 0, 0, 1)),
        ("cargo_test.txt", ("cargo", 2, 1, 0, 1)),
        ("cargo_test_pass.txt", ("cargo", 5, 0, 0, 1)),  # unit tests, an integration test and a doc-test, added up
        ("node_test_tap.txt", ("node", 2, 1, 0, 1)),  # node 20's `node --test` (TAP when not on a terminal)
        ("node_test_spec.txt", ("node", 2, 1, 0, 1)),
        # go test 1.19, `./...` over calc (4 tests, 2 subtests, 1 skipped; TestSub fails), strs (1) and a
        # package with no test files. Plain output names only the failing tests: a passing package is one test.
        ("go_test_pass.txt", ("go", 2, 0, 0, 0)),
        ("go_test_cached.txt", ("go", 2, 0, 0, 0)),
        ("go_test.txt", ("go", 1, 1, 0, 0)),  # TestSub, and strs passing; calc's passing tests are not named
        ("go_test_build_failed.txt", ("go", 1, 0, 1, 0)),  # calc did not build: an error, not a pass
        ("go_test_v_pass.txt", ("go", 6, 0, 0, 1)),  # every test and subtest by name
        ("go_test_v.txt", ("go", 5, 1, 0, 1)),
        ("go_test_json_pass.jsonl", ("go-json", 6, 0, 0, 1)),  # the same counts as -v
        ("go_test_json.jsonl", ("go-json", 5, 1, 0, 1)),
        ("go_test_json_build_failed.jsonl", ("go+go-json", 1, 0, 1, 0)),  # the build failure is text on stderr
        # cargo-nextest 0.9.148 on a crate of 2 unit tests (1 ignored) and an integration test; `subs` fails.
        ("nextest_pass.txt", ("nextest", 3, 0, 0, 1)),
        ("nextest.txt", ("nextest", 2, 1, 0, 1)),  # its captured `test result:` line is not read as cargo's
        ("nextest_status_all.txt", ("nextest", 2, 1, 0, 1)),
    ],
)
def test_each_runners_real_summary_gives_its_counts(name: str, expected: tuple[str, int, int, int, int]) -> None:
    assert counts(read_results(fixture(name), exit_code=1)) == expected


def test_pytest_names_the_failing_and_erroring_tests_from_its_short_summary() -> None:
    r = read_results(fixture("pytest_q.txt"), exit_code=1)
    assert r.tests == {"test_sample.py::test_fails": FAILED, "test_sample.py::test_error": ERROR}
    assert r.named(FAILED) == {"test_sample.py::test_fails"}


def test_pytest_ra_and_verbose_lines_name_passing_tests_too() -> None:
    text = (
        "test_a.py::test_one PASSED                                   [ 50%]\n"
        "test_a.py::test_two FAILED                                   [100%]\n"
        "PASSED test_a.py::TestX::test_three\n"
        "XFAIL test_a.py::test_four - reason\n"
        "1 failed, 2 passed, 1 xfailed in 0.10s\n"
    )
    r = read_results(text, exit_code=1)
    assert r.tests == {
        "test_a.py::test_one": PASSED,
        "test_a.py::test_two": FAILED,
        "test_a.py::TestX::test_three": PASSED,
        "test_a.py::test_four": SKIPPED,
    }
    assert counts(r) == ("pytest", 2, 1, 0, 1)


def test_unittest_verbose_names_every_test_and_plain_names_the_failures() -> None:
    verbose = read_results(fixture("ut_v.txt"), exit_code=1)
    assert verbose.tests == {
        "test_ut.T.test_a": PASSED, "test_ut.T.test_b": FAILED, "test_ut.T.test_c": ERROR, "test_ut.T.test_d": SKIPPED,
    }
    plain = read_results(fixture("ut.txt"), exit_code=1)
    assert plain.tests == {"test_ut.T.test_b": FAILED, "test_ut.T.test_c": ERROR}


def test_unittest_ok_with_details_and_several_runs_add_up() -> None:
    text = "Ran 5 tests in 0.1s\n\nOK (skipped=1, expected failures=1)\n...\nRan 3 tests in 0.0s\n\nFAILED (errors=1)\n"
    assert counts(read_results(text, exit_code=1)) == ("unittest", 5, 0, 1, 2)


def test_jest_and_vitest_name_the_failing_test_with_its_suite() -> None:
    assert read_results(fixture("jest.txt"), 1).tests == {"math > adds wrong": FAILED}
    assert read_results(fixture("vitest.txt"), 1).tests == {"math > adds wrong": FAILED}


def test_jest_counts_a_test_file_that_failed_to_load_as_an_error() -> None:
    text = "Test Suites: 1 failed, 2 passed, 3 total\nTests:       7 passed, 7 total\n"
    assert counts(read_results(text, 1)) == ("jest", 7, 0, 1, 0)


def test_cargo_names_each_test_of_each_binary() -> None:
    r = read_results(fixture("cargo_test.txt"), exit_code=101)
    assert r.tests == {
        "tests::adds": PASSED, "tests::also_ok": PASSED, "tests::ignored_one": SKIPPED, "tests::adds_wrong": FAILED,
    }


def test_go_test_verbose_names_tests_and_plain_counts_packages() -> None:
    verbose = read_results(fixture("go_test_v.txt"), exit_code=1)
    assert verbose.tests == {
        "TestAdd": PASSED, "TestSub": FAILED, "TestTable": PASSED, "TestTable/zero": PASSED, "TestTable/one": PASSED,
        "TestNetwork": SKIPPED, "TestShout": PASSED,
    }
    plain = read_results(fixture("go_test.txt"), exit_code=1)
    assert plain.tests == {"TestSub": FAILED, "example.com/shop/strs": PASSED}  # no package stands for a failure
    quiet = read_results(fixture("go_test_cached.txt"), exit_code=0)
    assert quiet.ok and quiet.tests == {"example.com/shop/calc": PASSED, "example.com/shop/strs": PASSED}
    broken = read_results(fixture("go_test_build_failed.txt"), exit_code=2)
    assert not broken.ok and broken.named(ERROR) == {"example.com/shop/calc"}
    only_broken = "# example.com/calc\n./calc.go:3:1: syntax error\nFAIL\texample.com/calc [build failed]\nFAIL\n"
    assert counts(read_results(only_broken, exit_code=2)) == ("go", 0, 0, 1, 0)
    none = read_results("ok  \texample.com/calc\t0.002s [no tests to run]\n", exit_code=0)
    assert none.ran_nothing


def test_go_test_json_names_every_test_as_verbose_does() -> None:
    json_run = read_results(fixture("go_test_json.jsonl"), exit_code=1)
    assert dict(json_run.tests) == dict(read_results(fixture("go_test_v.txt"), exit_code=1).tests)
    broken = read_results(fixture("go_test_json_build_failed.jsonl"), exit_code=2)
    assert broken.tests == {"example.com/shop/calc": ERROR, "TestShout": PASSED}
    # A test name in two packages stays two tests; a package failing outside its tests is an error.
    events = (
        '{"Action":"pass","Package":"a","Test":"TestX"}\n{"Action":"fail","Package":"b","Test":"TestX"}\n'
        '{"Action":"fail","Package":"b"}\n{"Action":"output","Package":"c","Output":"panic: boom\\n"}\n'
        '{"Action":"fail","Package":"c"}\n{"Action":"skip","Package":"d"}\n'
    )
    r = read_results(events, exit_code=1)
    assert r.tests == {"TestX": PASSED, "b.TestX": FAILED, "c": ERROR}
    assert counts(r) == ("go-json", 1, 1, 1, 0)


def test_go_test_cut_short_keeps_the_tests_it_named() -> None:
    r = read_results("=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.01s)\n", exit_code=None)
    assert counts(r) == ("go", 1, 1, 0, 0)


def test_node_test_names_its_tests_from_the_tap_lines() -> None:
    r = read_results(fixture("node_test_tap.txt"), exit_code=1)
    assert r.tests["adds"] == PASSED and r.tests["adds wrong"] == FAILED and r.tests["later"] == SKIPPED
    assert r.tests["subs"] == PASSED


def test_nextest_summary_and_lines() -> None:
    r = read_results(fixture("nextest.txt"), exit_code=100)
    assert r.tests == {"calc tests::adds": PASSED, "calc::it from_outside": PASSED, "calc tests::subs": FAILED}
    every = read_results(fixture("nextest_status_all.txt"), exit_code=100)
    assert every.tests == {**r.tests, "calc tests::later": SKIPPED}  # `--status-level all` names the skipped too
    older = (  # the lines without the (n/m) counter, as REFERENCE.md section 7 quotes them
        "        PASS [   0.004s] calc tests::adds\n        FAIL [   0.005s] calc tests::subs\n"
        "     Summary [   1.200s] 43 tests run: 41 passed, 2 failed, 1 skipped\n"
    )
    assert read_results(older, exit_code=100).tests == {"calc tests::adds": PASSED, "calc tests::subs": FAILED}


def test_junit_xml_wins_over_the_summary_and_names_every_test() -> None:
    r = read_results(fixture("pytest_q.txt"), exit_code=1, junit_xml=fixture("pytest-junit.xml"))
    assert counts(r) == ("junit", 3, 1, 1, 2)
    assert r.tests["test_sample::test_ok_one"] == PASSED
    assert r.tests["test_sample.TestGroup::test_inside"] == PASSED
    assert r.tests["test_sample::test_error"] == ERROR
    assert r.tests["test_sample::test_xf"] == SKIPPED
    jest = read_junit(fixture("jest-junit.xml"))
    assert jest is not None and jest.tests == {
        "math adds": PASSED, "math adds wrong": FAILED, "math later": SKIPPED, "math also": PASSED,
    }


def test_a_bare_testsuite_root_is_read_and_broken_xml_falls_back_to_the_summary() -> None:
    bare = '<testsuite tests="2"><testcase classname="a" name="t1"/><testcase classname="a" name="t2"><failure/></testcase></testsuite>'
    assert counts(read_junit(bare)) == ("junit", 1, 1, 0, 0)  # type: ignore[arg-type]
    assert read_junit("<testsuites><testsuite") is None
    assert read_junit("<html>not junit</html>") is None
    r = read_results(fixture("jest.txt"), exit_code=1, junit_xml="<testsuites><testsuite")
    assert r.runner == "jest"
    empty = read_results("Ran 0 tests in 0.000s\n\nOK\n", exit_code=0, junit_xml="<testsuites/>")
    assert empty.runner == "unittest" and empty.ran_nothing


def test_an_entity_bomb_is_not_expanded() -> None:
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
        + ']><testsuite><testcase name="&j;"/></testsuite>'
    )
    assert read_junit(bomb) is None


def test_only_the_exit_code_when_nothing_is_recognised() -> None:
    r = read_results("make: *** [test] Error 2\n", exit_code=2)
    assert (r.runner, r.counted, r.ok, r.total) == (EXIT_CODE, False, False, 0)
    assert read_results("all good\n", exit_code=0).ok


def test_no_tests_ran_is_not_a_pass() -> None:
    r = read_results("no tests ran in 0.01s\n", exit_code=5)
    assert r.runner == "pytest" and r.ran_nothing and not r.ok
    assert read_results("Ran 0 tests in 0.000s\n\nNO TESTS RAN\n", exit_code=5).ran_nothing


def test_a_runner_saying_it_found_no_test_ran_nothing_even_with_exit_0() -> None:
    for text in ("No tests found, exiting with code 0\n", "Error: No test files found: \"test\"\n",
                 "ok  \texample.com/calc\t0.002s [no tests to run]\ntesting: warning: no tests to run\n"):
        r = read_results(text, exit_code=0)
        assert r.ran_nothing and not r.ok, text
    assert read_results("running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; "
                        "finished in 0.00s\n", exit_code=0).ran_nothing


def test_a_make_target_running_two_runners_adds_both() -> None:
    text = fixture("pytest_q.txt") + "\n" + fixture("jest_pass.txt")
    assert counts(read_results(text, exit_code=2)) == ("pytest+jest", 6, 1, 1, 3)


def test_names_are_bounded_and_counts_stay_exact() -> None:
    lines = "".join(f"PASSED t.py::test_{i}\n" for i in range(NAMES_MAX + 50))
    r = read_results(lines + f"{NAMES_MAX + 50} passed in 9.00s\n", exit_code=0)
    assert len(r.tests) == NAMES_MAX and r.passed == NAMES_MAX + 50


def test_real_pytest_and_unittest_runs_are_read(tmp_path: Path) -> None:
    """The runners installed here, run now: what they print today is what is read."""
    (tmp_path / "test_real.py").write_text(
        "import unittest\n"
        "def test_good():\n    assert 1 + 1 == 2\n"
        "def test_bad():\n    assert 1 + 1 == 3\n"
        "class T(unittest.TestCase):\n"
        "    def test_u(self):\n        self.assertTrue(True)\n"
        "    @unittest.skip('later')\n    def test_s(self):\n        pass\n"
    )
    junit = tmp_path / "junit.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "test_real.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    printed = read_results(run.stdout, run.returncode)
    assert counts(printed) == ("pytest", 2, 1, 0, 1) and printed.tests == {"test_real.py::test_bad": FAILED}
    from_xml = read_results(run.stdout, run.returncode, junit.read_text())
    assert counts(from_xml) == ("junit", 2, 1, 0, 1)
    assert from_xml.tests["test_real::test_good"] == PASSED and from_xml.tests["test_real.T::test_s"] == SKIPPED
    unit = subprocess.run(
        [sys.executable, "-m", "unittest", "-v", "test_real"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    r = read_results(unit.stderr, unit.returncode)
    assert counts(r) == ("unittest", 1, 0, 0, 1)
    assert r.tests == {"test_real.T.test_u": PASSED, "test_real.T.test_s": SKIPPED}


# Properties ---------------------------------------------------------------------------------------------

n = st.integers(min_value=0, max_value=100_000)


@given(passed=n, failed=n, skipped=n, errors=n, xfailed=n, ansi=st.booleans())
def test_any_pytest_summary_reads_back(passed: int, failed: int, skipped: int, errors: int, xfailed: int, ansi: bool) -> None:
    parts = [f"{failed} failed", f"{passed} passed", f"{skipped} skipped", f"{xfailed} xfailed", f"{errors} errors"]
    body = ", ".join(p for p in parts if not p.startswith("0 ")) or "no tests ran"
    line = f"===== {body} in 1.23s ====="
    if ansi:
        line = f"\x1b[31m\x1b[1m{line}\x1b[0m"
    r = read_results("collected\n" + line + "\n", exit_code=1)
    assert counts(r) == ("pytest", passed, failed, errors, skipped + xfailed)


@given(passed=n, failed=n, skipped=n)
def test_any_jest_and_cargo_summary_reads_back(passed: int, failed: int, skipped: int) -> None:
    total = passed + failed + skipped
    jest = f"Tests:       {failed} failed, {skipped} skipped, {passed} passed, {total} total\n"
    assert counts(read_results(jest, 1)) == ("jest", passed, failed, 0, skipped)
    cargo = f"test result: FAILED. {passed} passed; {failed} failed; {skipped} ignored; 0 measured; 0 filtered out; finished in 0.01s\n"
    assert counts(read_results(cargo, 101)) == ("cargo", passed, failed, 0, skipped)


@given(ran=n, failures=n, errors=n, skipped=n)
def test_any_unittest_summary_reads_back(ran: int, failures: int, errors: int, skipped: int) -> None:
    total = ran + failures + errors + skipped
    details = ", ".join(f"{k}={v}" for k, v in (("failures", failures), ("errors", errors), ("skipped", skipped)) if v)
    verdict = f"FAILED ({details})" if failures or errors else (f"OK ({details})" if details else "OK")
    r = read_results(f"Ran {total} tests in 0.5s\n\n{verdict}\n", exit_code=0)
    assert counts(r) == ("unittest", ran, failures, errors, skipped)


@given(st.text(max_size=400), st.one_of(st.none(), st.integers(-255, 255)))
def test_any_text_is_read_without_crashing(text: str, code: int | None) -> None:
    r = read_results(text, code, junit_xml=text)
    assert min(r.passed, r.failed, r.errors, r.skipped) >= 0
    assert set(r.tests.values()) <= {PASSED, FAILED, ERROR, SKIPPED}


@given(st.binary(max_size=300))
def test_any_bytes_as_junit_are_read_or_refused(data: bytes) -> None:
    r = read_junit(b"<testsuites>" + data)
    assert r is None or r.total >= 0

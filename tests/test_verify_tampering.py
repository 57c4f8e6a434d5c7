"""Tests weakened instead of code fixed: each way agents were seen doing it, found with file:line, and the rule
that lets an honest refactor through."""

from __future__ import annotations

import doctest

from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor.verify import results, tampering
from ralph_supervisor.verify.results import FAILED, PASSED, TestResults
from ralph_supervisor.verify.tampering import (
    CONFIG_NARROWED,
    DELETED_FILE,
    FEWER_RUN,
    REMOVED_ASSERT,
    REMOVED_TEST,
    SKIP_ADDED,
    WEAKENED_ASSERT,
    find_weakening,
    is_test_file,
    judge,
    read_tests,
)

CALC_TESTS = """\
from calc import add, sub


def test_add():
    assert add(2, 2) == 4


def test_sub():
    assert sub(3, 1) == 2
    assert sub(1, 1) == 0


class TestMore:
    def test_neg(self):
        assert add(-1, -1) == -2
"""


def kinds(found: list[tampering.Finding]) -> list[tuple[str, str, str | None]]:
    return [(f.kind, f.where, f.test) for f in found]


def test_the_modules_examples_hold() -> None:
    for module in (results, tampering):
        assert doctest.testmod(module).failed == 0


def test_reading_tests_finds_each_languages_tests_and_their_assertions() -> None:
    py = read_tests(CALC_TESTS)
    assert [(t.name, len(t.asserts)) for t in py] == [("test_add", 1), ("test_sub", 2), ("test_neg", 1)]
    js = read_tests("describe('calc', () => {\n  it('adds', () => {\n    expect(add(1, 2)).toBe(3);\n  });\n"
                    "  test.skip('subs', () => {\n    expect(sub(1, 1)).toBe(0);\n  });\n});\n")
    assert [(t.name, t.line, len(t.asserts)) for t in js] == [("adds", 2, 1), ("subs", 5, 1)]
    go = read_tests("func TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Errorf(\"want 3\")\n\t}\n}\n")
    assert [(t.name, len(t.asserts)) for t in go] == [("TestAdd", 1)]
    rs = read_tests("#[cfg(test)]\nmod tests {\n    #[test]\n    #[ignore]\n    fn adds() {\n        assert_eq!(add(2, 2), 4);\n    }\n}\n")
    assert [(t.name, t.line, len(t.asserts)) for t in rs] == [("adds", 5, 1)]


def test_added_skip_markers_are_found_on_their_line_and_name_their_test() -> None:
    after = CALC_TESTS.replace("def test_add():", "@pytest.mark.skip(reason='later')\ndef test_add():").replace(
        "    def test_neg(self):\n", "    @unittest.skip('flaky')\n    def test_neg(self):\n")
    found = find_weakening({"tests/test_calc.py": CALC_TESTS}, {"tests/test_calc.py": after})
    assert kinds(found) == [
        (SKIP_ADDED, "tests/test_calc.py:4", "test_add"),
        (SKIP_ADDED, "tests/test_calc.py:15", "test_neg"),
    ]
    assert found[0].text == "@pytest.mark.skip(reason='later')"


def test_every_marker_of_the_list_is_found() -> None:
    cases = {
        "test_a.py": ("def test_x():\n    assert f()\n", "def test_x():\n    pytest.skip('no')\n    assert f()\n"),
        "test_b.py": ("def test_x():\n    assert f()\n", "@pytest.mark.xfail\ndef test_x():\n    assert f()\n"),
        "a.test.js": ("it('x', () => {\n  expect(f()).toBe(1);\n});\n", "it.skip('x', () => {\n  expect(f()).toBe(1);\n});\n"),
        "b.test.js": ("it('x', () => {\n  expect(f()).toBe(1);\n});\n", "xit('x', () => {\n  expect(f()).toBe(1);\n});\n"),
        "c.spec.ts": ("describe('s', () => {\n  it('x', () => {});\n});\n", "describe.skip('s', () => {\n  it('x', () => {});\n});\n"),
        "d.test.js": ("it('x', () => {});\nit('y', () => {});\n", "it.only('x', () => {});\nit('y', () => {});\n"),
        "calc_test.go": ("func TestX(t *testing.T) {\n\tcheck(t)\n}\n", "func TestX(t *testing.T) {\n\tt.Skip(\"later\")\n\tcheck(t)\n}\n"),
        "e.test.js": ("test('x', () => {\n  assert.ok(f());\n});\n", "test('x', { skip: true }, () => {\n  assert.ok(f());\n});\n"),
        "f.test.mjs": ("test('x', (t) => {\n  assert.ok(f());\n});\n", "test('x', (t) => {\n  t.skip('later');\n  assert.ok(f());\n});\n"),
        "tests/it.rs": ("#[test]\nfn x() {\n    assert!(f());\n}\n", "#[test]\n#[ignore]\nfn x() {\n    assert!(f());\n}\n"),
    }
    for path, (old, new) in cases.items():
        found = find_weakening({path: old}, {path: new})
        assert [f.kind for f in found] == [SKIP_ADDED], (path, found)


def test_a_marker_in_a_comment_or_an_unchanged_marker_is_not_a_finding() -> None:
    old = "@pytest.mark.skip\ndef test_x():\n    assert f()\n"
    new = "@pytest.mark.skip\ndef test_x():\n    # we used pytest.skip( here once\n    assert f()\n"
    assert find_weakening({"test_a.py": old}, {"test_a.py": new}) == []


def test_a_deleted_test_file_and_its_tests_are_found() -> None:
    found = find_weakening({"tests/test_calc.py": CALC_TESTS, "src/calc.py": "x = 1\n"}, {"src/calc.py": "x = 2\n"})
    assert kinds(found) == [
        (DELETED_FILE, "tests/test_calc.py", None),
        (REMOVED_TEST, "tests/test_calc.py:4", "test_add"),
        (REMOVED_TEST, "tests/test_calc.py:8", "test_sub"),
        (REMOVED_TEST, "tests/test_calc.py:14", "test_neg"),
    ]


def test_a_test_file_moved_whole_is_not_a_deletion() -> None:
    found = find_weakening({"tests/test_calc.py": CALC_TESTS}, {"tests/test_calc.py": None, "tests/unit/test_calc.py": CALC_TESTS})
    assert found == []


def test_a_removed_test_is_found_and_one_moved_to_another_file_is_not() -> None:
    after = CALC_TESTS.replace("def test_add():\n    assert add(2, 2) == 4\n", "")
    assert kinds(find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": after})) == [
        (REMOVED_TEST, "test_calc.py:4", "test_add")]
    other = "def test_add():\n    assert add(2, 2) == 4\n"
    assert find_weakening({"test_calc.py": CALC_TESTS, "test_add.py": None},
                          {"test_calc.py": after, "test_add.py": other}) == []


def test_removed_and_weakened_assertions_in_a_test_that_stays() -> None:
    removed = CALC_TESTS.replace("    assert sub(1, 1) == 0\n", "")
    assert kinds(find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": removed})) == [
        (REMOVED_ASSERT, "test_calc.py:10", "test_sub")]
    weakened = CALC_TESTS.replace("assert add(2, 2) == 4", "assert add(2, 2)")
    assert kinds(find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": weakened})) == [
        (WEAKENED_ASSERT, "test_calc.py:5", "test_add")]
    trivial = CALC_TESTS.replace("assert add(-1, -1) == -2", "assert True")
    assert kinds(find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": trivial})) == [
        (WEAKENED_ASSERT, "test_calc.py:15", "test_neg")]


def test_changing_an_expected_value_or_adding_assertions_is_not_weakening() -> None:
    changed = CALC_TESTS.replace("assert sub(3, 1) == 2", "assert sub(3, 1) == 2.0")
    more = CALC_TESTS.replace("    assert add(2, 2) == 4\n", "    assert add(2, 2) == 4\n    assert add(0, 0) == 0\n")
    assert find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": changed}) == []
    assert find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": more}) == []


def test_test_configuration_narrowed() -> None:
    toml_old = '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n[tool.ruff]\nline-length = 100\n'
    toml_new = toml_old.replace('testpaths = ["tests"]\n', 'testpaths = ["tests"]\naddopts = "-k \'not test_sub\'"\n').replace(
        "line-length = 100\n", 'line-length = 100\nexclude = ["build"]\n')
    assert kinds(find_weakening({"pyproject.toml": toml_old}, {"pyproject.toml": toml_new})) == [
        (CONFIG_NARROWED, "pyproject.toml:6", None)]  # ruff's exclude is not the tests' business
    ini = find_weakening({"pytest.ini": "[pytest]\n"}, {"pytest.ini": "[pytest]\naddopts = --deselect tests/test_calc.py::test_sub\n"})
    assert kinds(ini) == [(CONFIG_NARROWED, "pytest.ini:2", None)]
    pkg_old = '{\n  "scripts": {\n    "test": "jest"\n  },\n  "dependencies": {}\n}\n'
    pkg_new = '{\n  "scripts": {\n    "test": "jest --passWithNoTests"\n  },\n  "dependencies": {"left-pad": "1"}\n}\n'
    assert kinds(find_weakening({"package.json": pkg_old}, {"package.json": pkg_new})) == [(CONFIG_NARROWED, "package.json:3", None)]
    jest_old = "module.exports = {\n  testEnvironment: 'node',\n};\n"
    jest_new = "module.exports = {\n  testEnvironment: 'node',\n  testPathIgnorePatterns: ['calc'],\n};\n"
    assert kinds(find_weakening({"jest.config.js": jest_old}, {"jest.config.js": jest_new})) == [
        (CONFIG_NARROWED, "jest.config.js:3", None)]
    conftest = find_weakening({"tests/conftest.py": "import pytest\n"},
                              {"tests/conftest.py": "import pytest\ncollect_ignore = ['test_calc.py']\n"})
    assert kinds(conftest) == [(CONFIG_NARROWED, "tests/conftest.py:2", None)]


def test_a_makefile_test_target_rewritten_is_found_and_other_targets_are_not() -> None:
    old = "build:\n\tcc -o calc calc.c\n\ntest: build\n\tpytest -q tests\n"
    new = "build:\n\tcc -O2 -o calc calc.c\n\ntest: build\n\tpytest -q tests/test_safe.py\n\nlint:\n\truff .\n"
    found = find_weakening({"Makefile": old}, {"Makefile": new})
    assert kinds(found) == [(CONFIG_NARROWED, "Makefile:5", None)]
    assert found[0].text == "pytest -q tests/test_safe.py"
    gone = find_weakening({"Makefile": old}, {"Makefile": "build:\n\tcc -o calc calc.c\n"})
    assert [f.kind for f in gone] == [CONFIG_NARROWED] and "test" in gone[0].text


def test_files_that_are_neither_tests_nor_test_settings_are_ignored() -> None:
    assert not is_test_file("src/calc.py") and is_test_file("tests/helpers.py") and is_test_file("calc_test.go")
    assert is_test_file("src/lib.rs", "#[test]\nfn x() {}\n") and not is_test_file("src/lib.rs", "fn x() {}\n")
    assert find_weakening({"src/calc.py": "def test_x():\n    assert 1\n"}, {"src/calc.py": None}) == []


# The rule ------------------------------------------------------------------------------------------------

SKIP_SUB = find_weakening({"test_calc.py": CALC_TESTS},
                          {"test_calc.py": CALC_TESTS.replace("def test_sub", "@pytest.mark.skip\ndef test_sub")})


def run(passed: int, failed: int, skipped: int = 0, **tests: str) -> TestResults:
    return TestResults("pytest", passed=passed, failed=failed, skipped=skipped,
                       tests={f"test_calc.py::{k}": v for k, v in tests.items()})


def test_skipping_a_test_that_was_failing_fires_and_quotes_the_line() -> None:
    verdict = judge(SKIP_SUB, run(2, 1, test_sub=FAILED), run(2, 0, 1))
    assert verdict is not None
    assert "test_sub" in verdict.why
    reason = verdict.reason(iteration=7, restore_from=6, restore="ralph-supervise restore 6 -w /ws")
    assert "iteration 7" in reason and "test_calc.py:8 skip marker added: `@pytest.mark.skip`" in reason
    assert "the snapshot of iteration 6 holds the tests before: `ralph-supervise restore 6 -w /ws`" in reason


def test_skipping_a_passing_test_fires_when_the_passing_count_did_not_rise() -> None:
    verdict = judge(SKIP_SUB, run(3, 0, test_sub=PASSED), run(2, 0, 1))
    assert verdict is not None and "passing tests 3 before, 2 after" in verdict.why


def test_a_renamed_or_merged_test_keeping_its_assertions_is_not_removed() -> None:
    renamed = CALC_TESTS.replace("def test_add", "def test_sum")
    assert find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": renamed}) == []
    merged = CALC_TESTS.replace("def test_add():\n    assert add(2, 2) == 4\n\n\n", "").replace(
        "def test_sub():\n", "def test_arithmetic():\n    assert add(2, 2) == 4\n")
    assert find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": merged}) == []
    gutted = CALC_TESTS.replace("def test_add():\n    assert add(2, 2) == 4", "def test_sum():\n    assert add(2, 2)")
    assert [f.kind for f in find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": gutted})] == [REMOVED_TEST]


def test_a_refactor_that_raises_the_passing_count_and_weakens_no_failing_test_does_not_fire() -> None:
    removed = find_weakening({"test_calc.py": CALC_TESTS}, {"test_calc.py": CALC_TESTS.replace(
        "def test_add():\n    assert add(2, 2) == 4\n", "")})
    assert [f.kind for f in removed] == [REMOVED_TEST]
    assert judge(removed, run(2, 1, test_sub=FAILED, test_add=PASSED), run(3, 0)) is None
    assert judge([], run(2, 1), run(3, 0)) is None


def test_fewer_tests_run_is_a_finding_of_its_own() -> None:
    verdict = judge([], run(40, 2), run(38, 0))
    assert verdict is not None and [f.kind for f in verdict.findings] == [FEWER_RUN]
    assert "42 tests ran before, 38 now" in verdict.reason(3, 2)


def test_without_a_verified_result_only_a_weakened_failing_test_can_fire() -> None:
    assert judge(SKIP_SUB, None, None) is None
    assert judge(SKIP_SUB, run(2, 1, test_sub=FAILED), None) is not None
    assert judge(SKIP_SUB, run(3, 0, test_sub=PASSED), None) is None
    only_code = TestResults(results.EXIT_CODE, exit_code=1)
    assert judge(SKIP_SUB, only_code, TestResults(results.EXIT_CODE, exit_code=0)) is None


line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=40)
source = st.lists(st.one_of(line, st.sampled_from([
    "def test_a():", "    assert f() == 1", "@pytest.mark.skip", "it('x', () => {", "  expect(f()).toBe(1);", "});",
    "#[test]", "fn t() {", "    assert!(x);", "}", "addopts = -k x", "[pytest]", "test:", "\tpytest -q",
])), max_size=30).map(lambda lines: "\n".join(lines) + "\n")
paths = st.sampled_from(["test_a.py", "tests/b.py", "a.test.js", "x_test.go", "src/lib.rs", "pytest.ini", "Makefile", "package.json"])


@given(st.dictionaries(paths, st.one_of(st.none(), source), max_size=4), st.dictionaries(paths, st.one_of(st.none(), source), max_size=4))
@example({"Makefile": "\ntest:\n"}, {"Makefile": "\n"})  # a removed target once pointed at the old file's line 2
def test_any_two_versions_are_diffed_without_crashing_and_every_finding_points_into_a_file(before: dict, after: dict) -> None:
    findings = find_weakening(before, after)
    assert all(f.path in before or f.path in after for f in findings)
    for f in findings:
        text = after.get(f.path) if f.kind in (SKIP_ADDED, CONFIG_NARROWED) else before.get(f.path)
        assert not f.line or (text is not None and 1 <= f.line <= len(text.splitlines()))


@given(st.dictionaries(paths, source, max_size=4))
def test_nothing_changed_means_nothing_found(files: dict) -> None:
    assert find_weakening(files, dict(files)) == []

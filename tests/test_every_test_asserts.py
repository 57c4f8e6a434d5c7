"""No test that cannot fail: every test function of the suite has a check on every way through it, and no
assert in it is trivially true (tests/helpers/assertions.py says what counts). The pass reads the syntax
trees only, so it costs a fraction of a second for the whole suite."""

from __future__ import annotations

import textwrap

from tests.helpers import REPO
from tests.helpers.assertions import sources_under, trivial_asserts, weak_tests


def weak(source: str, **more: str) -> list[str]:
    return [where.rpartition(":")[2] for where in weak_tests({"tests/test_x.py": textwrap.dedent(source), **more})]


def test_every_test_of_the_suite_can_fail() -> None:
    sources = sources_under(REPO / "tests")
    assert len(sources) > 50  # the pass really read the suite
    assert weak_tests(sources) == [], "test functions in which nothing can fail (add the check they are named for)"
    assert trivial_asserts(sources) == [], "asserts that can never be false"


def test_a_test_without_a_check_is_found() -> None:
    assert weak("""
        def test_nothing():
            x = compute()

        def test_something():
            assert compute() == 2
    """) == ["test_nothing"]


def test_a_check_under_an_if_with_no_check_on_the_other_side_is_found() -> None:
    assert weak("""
        def test_one_mode_only(mode):
            stop()
            if mode == "inotify":
                assert watched() == 0

        def test_both_modes(mode):
            if mode == "inotify":
                assert watched() == 0
            else:
                assert polled() == 0

        def test_a_skip_ends_the_other_way(tool):
            if tool is None:
                pytest.skip("no tool")
            else:
                assert tool.run()
    """) == ["test_one_mode_only"]


def test_an_error_swallowed_with_no_check_leaves_a_way_through() -> None:
    assert weak("""
        def test_swallowed():
            try:
                result = decode(b"x")
            except ControlError:
                pass
            else:
                assert isinstance(result, dict)

        def test_both_sides():
            try:
                result = decode(b"x")
            except ControlError as exc:
                assert "\\n" not in str(exc)
            else:
                assert isinstance(result, dict)
    """) == ["test_swallowed"]


def test_checks_in_helpers_nested_functions_and_pytest_count() -> None:
    assert weak("""
        from tests.helpers import wait_for

        def expect_quiet(view):
            assert view.quiet()

        def test_helper(view):
            expect_quiet(view)

        def test_shared_helper():
            wait_for(lambda: True)

        def test_nested():
            async def scenario():
                assert await answer() == 1
            asyncio.run(scenario())

        def test_raises():
            with pytest.raises(ValueError):
                parse("x")

        class TestGroup:
            def test_method(self):
                pass
    """, **{"tests/helpers/__init__.py": "def wait_for(p):\n    raise AssertionError\n"}) == ["test_method"]


def test_a_helper_of_another_test_module_does_not_count() -> None:
    other = "def settle(x):\n    assert x\n"
    assert weak("def test_uses_a_name_from_elsewhere():\n    settle(1)\n", **{"tests/test_other.py": other}) \
        == ["test_uses_a_name_from_elsewhere"]


def test_asserts_that_can_never_be_false_are_found() -> None:
    source = textwrap.dedent("""
        def test_tautologies(x):
            assert True
            assert (x == 1, "the message became part of a tuple")
            assert x == 1 or "never false"
            assert x == 1 or x == 2
    """)
    assert trivial_asserts({"tests/test_x.py": source}) == ["tests/test_x.py:3", "tests/test_x.py:4",
                                                             "tests/test_x.py:5"]
    assert weak(source) == []  # the fourth one can fail
    assert weak("def test_only_tautologies():\n    assert True\n") == ["test_only_tautologies"]

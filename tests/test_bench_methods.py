"""How the benchmarks name what they measure: a tail called p99 only when there are enough samples for one
(scripts/_benchkit.py), tested as pure functions; the scripts themselves are run by the lead, not the suite."""

from __future__ import annotations

import importlib.util
import math
import sys

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import REPO

_spec = importlib.util.spec_from_file_location("_benchkit", REPO / "scripts" / "_benchkit.py")
assert _spec is not None and _spec.loader is not None
kit = importlib.util.module_from_spec(_spec)
sys.modules["_benchkit"] = kit  # its dataclasses look their module up while being made
_spec.loader.exec_module(kit)


def test_fewer_than_a_hundred_samples_give_their_maximum_by_that_name() -> None:
    assert kit.tail([3.0, 1.0, 2.0]) == ("max of 3", 3.0)
    assert kit.tail([float(i) for i in range(40)]) == ("max of 40", 39.0)


def test_a_hundred_samples_or_more_give_the_nearest_rank_p99() -> None:
    assert kit.tail([float(i) for i in range(1, 101)]) == ("p99", 99.0)
    assert kit.tail([float(i) for i in range(1, 201)]) == ("p99", 198.0)


def test_no_samples_is_said_not_invented() -> None:
    name, value = kit.tail([])
    assert name == "max of 0" and math.isnan(value)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=400))
def test_the_tail_is_a_sample_and_at_least_as_high_as_ninety_nine_in_a_hundred(values: list[float]) -> None:
    name, value = kit.tail(values)
    assert value in values
    assert sum(v <= value for v in values) >= 0.99 * len(values)
    assert (name == "p99") == (len(values) >= kit.TAIL_SAMPLES)

"""The destruction judgement: what an iteration deleted, emptied or reverted, on its net effect (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.snapshots.discarded import content_state
from ralph_supervisor.evidence.destruction import (
    SHARE_MIN_FILES,
    destroyed_paths,
    discard_candidates,
    is_destroyed,
    judge,
    reverted,
    threshold_crossed,
)
from ralph_supervisor.evidence.file_state import ABSENT
from tests.helpers import held


def test_deleting_more_than_n_files_trips_naming_a_few_of_them() -> None:
    start = {f"src/f{i}.py": held(b"x%d" % i) for i in range(6)}
    lost = destroyed_paths(start, {path: ABSENT for path in start})
    assert lost == sorted(start)
    found = judge(lost, files_at_start=100, max_files=3, max_share=0)
    assert found is not None and found.count == 6 and found.why == "more than 3 files" and found.discarded == 0
    assert found.sample == ("src/f0.py", "src/f1.py", "src/f2.py", "src/f3.py", "src/f4.py")
    assert judge(lost[:3], files_at_start=100, max_files=3, max_share=0) is None, "3 is not more than 3"


def test_a_share_of_the_files_trips_but_never_below_the_floor() -> None:
    assert threshold_crossed(SHARE_MIN_FILES - 1, 2, 0, 30.0) is None  # both files of a new project
    assert threshold_crossed(SHARE_MIN_FILES, 9, 0, 30.0) == "more than 30%"
    assert threshold_crossed(3, 10, 0, 30.0) is None  # exactly 30 % is not more
    assert threshold_crossed(3, None, 0, 30.0) is None  # unknown start: the share rule waits
    assert threshold_crossed(26, None, 25, 30.0) == "more than 25 files"
    assert threshold_crossed(1000, 1000, 0, 0) is None  # both off


def test_emptied_files_count_and_edits_do_not() -> None:
    big = held(b"x" * 1000)
    assert is_destroyed(big, held(b"x" * 100))  # a tenth
    assert not is_destroyed(big, held(b"x" * 101))
    assert not is_destroyed(big, held(b"y" * 1000))
    assert is_destroyed(None, ABSENT)  # never seen before, now gone: it existed at the start
    assert not is_destroyed(None, held(b""))  # its old size is unknown: cannot judge a truncation
    assert not is_destroyed(ABSENT, ABSENT)  # created in the iteration, then removed: a temporary file
    assert not is_destroyed(held(b""), held(b""))


def test_only_the_ends_count_so_what_came_back_by_the_end_was_not_destroyed() -> None:
    """`git stash -u; pytest; git stash pop` and `mv src /tmp/x; ...; mv /tmp/x src` leave each path as it
    began: the watcher's segment has the same state at both ends, and nothing is lost."""
    start = {f"work/f{i}": held(b"w%d" % i) for i in range(40)} | {"tmp/scratch": ABSENT}
    end = dict(start) | {"tmp/scratch": ABSENT}
    assert destroyed_paths(start, end) == [] and discard_candidates(start, end) == {}
    assert destroyed_paths({"a": held(b"a")}, {}) == [], "a path whose end is unknown is not judged"
    assert destroyed_paths({"a": held(b"a")}, {"a": None}) == []


def test_renamed_content_is_not_destroyed_but_a_second_copy_lost_is() -> None:
    start = {f"src/a{i}.py": held(b"module %d" % i) for i in range(20)} | {f"lib/a{i}.py": ABSENT for i in range(20)}
    end = {f"src/a{i}.py": ABSENT for i in range(20)} | {f"lib/a{i}.py": held(b"module %d" % i) for i in range(20)}
    assert destroyed_paths(start, end) == []  # git mv src lib
    twins = {"x": held(b"same"), "y": held(b"same"), "z": ABSENT}
    assert destroyed_paths(twins, {"x": ABSENT, "y": ABSENT, "z": held(b"same")}) == ["y"], "one copy moved, one lost"
    unhashed = {"big": b"B99999999:1", "new": ABSENT}
    assert destroyed_paths(unhashed, {"big": ABSENT, "new": b"B99999999:1"}) == ["big"], "unhashed: not shown to move"


def test_a_file_back_at_its_committed_version_lost_its_uncommitted_changes() -> None:
    committed, work, other = content_state(b"v1\n"), content_state(b"v1\nthe agent's work\n"), content_state(b"v2\n")
    start = {"reverted": work, "edited": work, "clean": committed, "unknown": None, "gone": work}
    end = {"reverted": committed, "edited": other, "clean": other, "unknown": committed, "gone": ABSENT}
    candidates = discard_candidates(start, end)
    assert candidates == {"reverted": (work, committed), "edited": (work, other), "clean": (committed, other)}
    head = {"reverted": committed, "edited": committed, "clean": committed}
    assert reverted(candidates, [head]) == ["reverted"], "an edit is not a revert; a clean file had nothing to lose"
    older = {"clean": other}
    assert reverted(candidates, [head, older]) == ["clean", "reverted"], "HEAD moved back: its version counts too"
    assert reverted(candidates, []) == [], "no repository: nothing is reverted"
    found = judge(["gone", "reverted"], files_at_start=5, max_files=1, max_share=0, discarded=1)
    assert found is not None and found.count == 2 and found.discarded == 1


def test_content_state_is_the_watchers_state_of_a_file(tmp_path) -> None:
    from ralph_supervisor.evidence.file_state import file_state

    path = tmp_path / "f.bin"
    for data in (b"", b"\x00\xff" * 5000, "ünïcode\r\n".encode()):
        path.write_bytes(data)
        assert content_state(data) == file_state(path) == held(data)


paths = st.sampled_from([f"d/f{i}" for i in range(6)])
contents = st.sampled_from([ABSENT, held(b""), held(b"a" * 100), held(b"a" * 5), held(b"b" * 100), held(b"c")])


@settings(max_examples=150, deadline=None)
@given(start=st.dictionaries(paths, contents), steps=st.lists(st.tuples(paths, contents)))
def test_a_history_and_its_undoing_destroy_nothing_and_the_loss_never_exceeds_the_files_gone(
        start: dict[str, bytes], steps: list[tuple[str, bytes]]) -> None:
    """Whatever happens in between, the verdict reads the ends only: undo every step and nothing is lost; and
    no more paths are lost than hold a state at the start that is gone or emptied at the end."""
    now = dict(start)
    first: dict[str, bytes] = {}
    for path, after in steps:
        first.setdefault(path, now.get(path, ABSENT))
        now[path] = after
    begin = {path: start.get(path, ABSENT) for path in first}
    assert destroyed_paths(begin, dict(begin)) == []
    end = {path: now[path] for path in first}
    lost = destroyed_paths(begin, end)
    assert lost == sorted(set(lost)) and set(lost) <= {p for p in begin if is_destroyed(begin[p], end[p])}
    kept = {state for state in end.values() if state[:1] == b"H"}
    assert all(begin[p] not in kept or begin[p][:1] != b"H" or
               sum(1 for q in begin if begin[q] == begin[p] and is_destroyed(begin[q], end[q]))
               > sum(1 for q in end if end[q] == begin[p]) for p in lost), "a lost content is held by fewer paths"

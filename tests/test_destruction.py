"""The destruction count: files an iteration deletes or empties, judged change by change (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.destruction import (
    SHARE_MIN_FILES,
    DestructionWatch,
    is_destroyed,
    threshold_crossed,
)
from ralph_supervisor.evidence.workspace import ABSENT, Change
from tests.helpers import held


def change(path: str, before: bytes | None, after: bytes) -> Change:
    return Change(path, 0.0, before, after)


def test_deleting_more_than_n_files_trips_once_naming_a_few_of_them() -> None:
    watch = DestructionWatch(max_files=3, max_share=0)
    watch.begin(files_at_start=100)
    found = [watch.saw(change(f"src/f{i}.py", held(b"x%d" % i), ABSENT)) for i in range(6)]
    assert found[:3] == [None, None, None]
    assert found[3] is not None and found[3].count == 4 and found[3].why == "more than 3 files"
    assert found[3].sample == ("src/f0.py", "src/f1.py", "src/f2.py", "src/f3.py")
    assert found[4:] == [None, None], "once per iteration"
    assert watch.count == 6


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


def test_files_created_and_removed_in_the_iteration_are_not_destruction() -> None:
    watch = DestructionWatch(max_files=1, max_share=0)
    watch.begin(files_at_start=5)
    for i in range(10):
        assert watch.saw(change(f"tmp/{i}", ABSENT, held(b"t"))) is None
        assert watch.saw(change(f"tmp/{i}", held(b"t"), ABSENT)) is None
    assert watch.count == 0


def test_renamed_content_is_not_destroyed() -> None:
    watch = DestructionWatch(max_files=2, max_share=0)
    watch.begin(files_at_start=50)
    for i in range(20):  # git mv src/a_i lib/a_i, event by event: the old name goes first
        content = held(b"module %d" % i)
        watch.saw(change(f"src/a{i}.py", content, ABSENT))
        assert watch.saw(change(f"lib/a{i}.py", ABSENT, content)) is None
    assert watch.count == 0
    watch.saw(change("lib/a3.py", held(b"module 3"), ABSENT))  # then the moved copy is deleted too
    assert watch.count == 1


def test_a_file_restored_within_the_iteration_is_no_longer_counted() -> None:
    watch = DestructionWatch(max_files=10, max_share=0)
    watch.begin(files_at_start=10)
    original = held(b"precious")
    watch.saw(change("a.txt", original, ABSENT))
    assert watch.count == 1
    watch.saw(change("a.txt", ABSENT, original))
    assert watch.count == 0


def test_a_new_iteration_starts_from_nothing_and_the_count_can_arrive_late() -> None:
    watch = DestructionWatch(max_files=0, max_share=30.0)
    watch.begin(files_at_start=None)
    for i in range(5):
        assert watch.saw(change(f"f{i}", held(b"%d" % i), ABSENT)) is None  # unknown start: no share yet
    watch.know_files_at_start(10)
    found = watch.saw(change("f9", held(b"9"), ABSENT))
    assert found is not None and found.count == 6 and found.files_at_start == 10
    watch.begin(files_at_start=10)
    assert watch.count == 0
    watch.know_files_at_start(99)
    assert watch.files_at_start == 10, "a known count is not replaced"


paths = st.sampled_from([f"d/f{i}" for i in range(6)])
contents = st.sampled_from([ABSENT, held(b""), held(b"a" * 100), held(b"a" * 5), held(b"b" * 100), held(b"c")])


@settings(max_examples=150, deadline=None)
@given(start=st.dictionaries(paths, contents.filter(lambda c: c != ABSENT)), steps=st.lists(st.tuples(paths, contents)))
def test_the_running_count_equals_a_recount_from_scratch(start: dict[str, bytes], steps: list[tuple[str, bytes]]) -> None:
    """However the changes come, the incremental count is: destroyed paths whose content no touched path holds."""
    watch = DestructionWatch(max_files=1000, max_share=0)
    watch.begin(files_at_start=len(start))
    now = dict(start)
    first: dict[str, bytes] = {}
    for path, after in steps:
        before = now.get(path, ABSENT)
        if before == after:
            continue  # the watcher reports real changes only
        first.setdefault(path, before)
        now[path] = after
        watch.saw(change(path, before, after))
        destroyed: dict[bytes, int] = {}
        for p, was in first.items():
            if is_destroyed(was, now.get(p, ABSENT)):
                destroyed[was] = destroyed.get(was, 0) + 1
        holding: dict[bytes, int] = {}
        for p in first:
            if now.get(p, ABSENT) != ABSENT:
                holding[now[p]] = holding.get(now[p], 0) + 1
        expected = sum(max(0, n - holding.get(c, 0)) for c, n in destroyed.items())
        assert watch.count == expected

"""The segment book with plain values: which segment (a call, or the gap between calls) each change lands
in, what a segment's net change is, and what a late-found call takes from its gap. No files, no threads:
the workspace tests prove the same through real inotify and polling."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.file_state import ABSENT
from ralph_supervisor.evidence.fingerprint import UNSEEN, term
from ralph_supervisor.evidence.git_refs import GitRefs
from ralph_supervisor.evidence.segments import (
    CLOSED_SEGMENTS,
    COARSE_CLOCK_NS,
    GAP_CHANGES,
    Segment,
    SegmentBook,
    WorkspaceDelta,
)

REFS = GitRefs("h0", {"refs/heads/main": "h0"})
MOVED = GitRefs("h1", {"refs/heads/main": "h1"})


def at(ns: int):  # a change's time, as the workspace stamps it (epoch ns)
    return lambda: ns


def test_split_takes_each_path_with_its_state_before_the_first_change_at_or_after_the_time() -> None:
    segment = Segment(None, GitRefs())
    segment.changes = [(10, "a", b"A0"), (20, "b", None), (30, "a", b"A1"), (40, "a", b"A2"), (50, "c", b"")]
    assert segment.split(25) == {"a": b"A1", "c": b""}
    assert segment.split(0) == {"a": b"A0", "b": None, "c": b""}
    assert segment.split(60) == {}


def test_a_change_belongs_to_the_segment_open_when_it_is_recorded_and_a_gap_is_handed_back() -> None:
    book = SegmentBook()
    book.record("loop.json", b"H1", created=True)
    gap = book.open("call", REFS)
    assert gap is not None and gap.paths == ("loop.json",)
    book.record("src/a.py", b"H2", created=True)
    assert book.close("call", MOVED) is None  # a call's segment is kept for `take`
    book.record("between.txt", b"H3", created=True)
    delta = book.take("call")
    assert (delta.paths, delta.commits, delta.head_before, delta.head_after) == (("src/a.py",), 1, "h0", "h1")
    assert delta.start == {"src/a.py": ABSENT} and delta.end == {"src/a.py": b"H2"}
    assert book.close(None, MOVED).paths == ("between.txt",)  # the run's end: the last gap


def test_only_the_net_change_counts() -> None:
    book = SegmentBook()
    book.learn("a", b"old")
    book.open("one", REFS)
    assert book.record("a", b"old") is None  # a rewrite with the same content: no change
    assert book.record("a", b"new").before == b"old"
    book.record("a", b"old")  # reverted within the call
    book.record("tmp", b"x", created=True)
    book.record("tmp", ABSENT)  # created and removed again
    book.close("one", REFS)
    assert book.take("one").files_changed == 0


def test_a_file_whose_old_content_was_never_seen_counts_at_its_first_write() -> None:
    book = SegmentBook()
    book.open("one", REFS)
    change = book.record("unprimed.txt", b"same as before, but who knew")
    assert change is not None and change.before is None
    book.close("one", REFS)
    assert book.take("one").paths == ("unprimed.txt",)


def test_closing_a_call_that_is_no_longer_open_changes_nothing_and_a_key_taken_twice_is_empty() -> None:
    book = SegmentBook()
    book.open("a", REFS)
    book.record("a.txt", b"A", created=True)
    book.open("b", REFS)  # b began before a's end was handled: a ends where b began
    book.close("a", REFS)  # a's late end does not close b
    assert book.is_open("b")
    book.record("b.txt", b"B", created=True)
    book.close("b", REFS)
    assert (book.take("a").paths, book.take("b").paths) == (("a.txt",), ("b.txt",))
    assert book.take("a").files_changed == 0
    assert book.take("never opened") == WorkspaceDelta(0, (), 0, fingerprint=book.fingerprint.value)


def test_a_key_used_again_starts_afresh_and_closed_calls_are_kept_in_a_bound() -> None:
    book = SegmentBook()
    book.open("pid-7", REFS)
    book.record("first.txt", b"1", created=True)
    book.close("pid-7", REFS)
    book.open("pid-7", REFS)  # a recycled pid, never taken in between
    book.close("pid-7", REFS)
    assert book.take("pid-7").files_changed == 0
    for n in range(CLOSED_SEGMENTS + 10):
        book.open(f"k{n}", REFS)
        book.close(f"k{n}", REFS)
    assert len(book._closed) == CLOSED_SEGMENTS
    assert book.take("k0").files_changed == 0 and book.take(f"k{CLOSED_SEGMENTS + 9}").files_changed == 0


def test_paths_recorded_absent_are_forgotten_at_the_next_open_so_churn_does_not_grow_the_book() -> None:
    book = SegmentBook()
    for n in range(100):
        book.open(f"call{n}", REFS)
        book.record(f"scratch{n}.txt", b"x", created=True)
        book.record(f"scratch{n}.txt", ABSENT)
        book.close(f"call{n}", REFS)
        book.take(f"call{n}")
    assert len(book.known) <= 1


def test_a_late_found_call_takes_from_the_gap_what_changed_since_it_began() -> None:
    book = SegmentBook()
    book.learn("shared.txt", b"S0")
    book.record("loop.json", b"L", created=True, stamp=at(1_000_000_000))
    book.record("shared.txt", b"S1", stamp=at(1_000_000_000))
    book.record("first.txt", b"F", created=True, stamp=at(2_000_000_000))
    book.record("shared.txt", b"S2", stamp=at(2_000_000_000))
    gap = book.open("late", REFS, since_ns=2_000_000_000 + COARSE_CLOCK_NS // 2)  # within the coarse clock
    assert gap is not None and gap.paths == ("loop.json", "shared.txt")
    assert gap.end["shared.txt"] == b"S1"  # the gap ends where the call's first change began
    book.close("late", REFS)
    delta = book.take("late")
    assert delta.paths == ("first.txt", "shared.txt")
    assert delta.start == {"first.txt": ABSENT, "shared.txt": b"S1"}


def test_a_call_seen_only_in_the_output_takes_its_window_out_of_the_gap() -> None:
    book = SegmentBook()
    book.record("before.txt", b"B", created=True, stamp=at(1_000_000_000))
    book.record("reply.txt", b"R1", created=True, stamp=at(5_000_000_000))
    book.record("after.txt", b"A", created=True, stamp=at(9_000_000_000))
    book.record("reply.txt", b"R2", stamp=at(9_000_000_000))
    delta = book.take_from_gap(4_000_000_000, 6_000_000_000)
    assert delta.paths == ("reply.txt",)
    assert (delta.start, delta.end) == ({"reply.txt": ABSENT}, {"reply.txt": b"R1"})
    gap = book.close(None, REFS)
    assert gap is not None and gap.paths == ("after.txt", "before.txt", "reply.txt")
    assert gap.start["reply.txt"] == b"R1"  # the gap keeps only what came after the call's window
    book.open("call", REFS)
    assert book.take_from_gap(0, 10_000_000_000).files_changed == 0  # a call is open: no gap to take from


def test_a_gap_remembers_a_bounded_number_of_timed_changes() -> None:
    book = SegmentBook()
    for n in range(GAP_CHANGES + 1):
        book.record(f"f{n}", b"x", created=True, stamp=at(n))
    assert len(book.segment.changes) <= GAP_CHANGES


def test_a_new_virtual_environment_is_forgotten_and_lost_events_are_said() -> None:
    book = SegmentBook()
    book.open("call", REFS)
    book.record("env/lib/site.py", b"x", created=True)
    book.record("src/m.py", b"y", created=True)
    book.forget_under("env")
    book.lose_events()
    assert book.present_under("env") == [] and book.present_under("src") == ["src/m.py"]
    book.close("call", REFS)
    delta = book.take("call")
    assert (delta.paths, delta.events_lost) == (("src/m.py",), True)


# ------------------------------------------------------------------------------ the invariant

PATHS = ["a.py", "src/b.py", "c.txt"]
STATES = [b"H1", b"H2", b"H3"]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(PATHS), st.sampled_from(STATES)),
        st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
        st.tuples(st.just("begin"), st.none(), st.none()),
        st.tuples(st.just("end"), st.none(), st.none()),
        st.tuples(st.just("late end"), st.none(), st.none()),
        st.tuples(st.just("close gap"), st.none(), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(PATHS), st.sampled_from(STATES)), st.sets(st.sampled_from(PATHS)), OPS)
def test_every_change_lands_in_exactly_one_segment_and_each_segment_is_its_net_change(
    existing: dict[str, bytes], primed: set[str], ops: list[tuple[str, str | None, bytes | None]]
) -> None:
    """Replay calls, gaps and file changes against a model: each change is in the start map of the one
    segment open when it was recorded, and each closed segment's delta is exactly its paths' net change,
    its refs at its open and close, and the fingerprint of the whole workspace computed from scratch."""
    world = dict(existing)  # what the files hold now (missing: absent)
    seen = {p for p in primed if p in existing}
    book = SegmentBook()
    for path in seen:
        book.learn(path, existing[path])
    first: dict[str, bytes | None] = {}  # each path's state before its first recorded change
    model = {"key": None, "touched": {}, "head": "r0"}
    calls = 0
    previous_key: str | None = None
    recorded: set[str] = set()
    covered: list[str] = []  # the paths of every closed segment's start map

    def refs(step: int) -> GitRefs:
        return GitRefs(f"r{step}")

    def expect(delta: WorkspaceDelta, segment: dict, head_after: str) -> None:
        touched = segment["touched"]
        changed = sorted(p for p, before in touched.items() if before is None or before != world.get(p, ABSENT))
        assert dict(delta.start) == touched
        assert (delta.files_changed, delta.paths) == (len(changed), tuple(changed))
        assert (delta.head_before, delta.head_after) == (segment["head"], head_after)
        value = 0
        for path, before in first.items():
            value += term(path, world.get(path, ABSENT)) - term(path, UNSEEN if before is None else before)
        assert delta.fingerprint == value % (1 << 128)

    def close_and_open(key: str | None, step: int) -> None:
        nonlocal model
        closing = model
        gap = book.close(closing["key"], refs(step)) if key is None else book.open(key, refs(step))
        if closing["key"] is None:  # a gap closed: handed back at once
            assert gap is not None
            expect(gap, closing, f"r{step}")
        else:  # a call closed: kept for its `take`
            assert gap is None
            expect(book.take(closing["key"]), closing, f"r{step}")
        covered.extend(closing["touched"])
        model = {"key": key, "touched": {}, "head": f"r{step}"}

    book.open(None, refs(0))
    for step, (op, path, state) in enumerate(ops, start=1):
        if op in ("write", "delete"):
            assert path is not None
            before = world.get(path, ABSENT)
            if op == "delete" and before == ABSENT:
                continue
            after = state if op == "write" else ABSENT
            created = before == ABSENT
            known_before = before if path in seen or created else None
            book.record(path, after, created=created)
            model["touched"].setdefault(path, known_before)
            first.setdefault(path, known_before)
            world[path] = after
            seen.add(path)
            recorded.add(path)
        elif op == "begin":
            calls += 1
            previous_key = model["key"]
            close_and_open(f"call{calls}", step)
        elif op == "end" and model["key"] is not None:
            close_and_open(None, step)
        elif op == "late end" and previous_key is not None and previous_key != model["key"]:
            book.close(previous_key, refs(step))  # an end handled after the next call began: nothing moves
            assert book.is_open(model["key"])
        elif op == "close gap" and model["key"] is None:
            close_and_open(None, step)
    close_and_open(None, len(ops) + 1)
    assert set(covered) == recorded  # and no change was left out of every segment

"""The workspace fingerprint: a state, not a history; kept up to date change by change."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.evidence.fingerprint import UNSEEN, Fingerprint, Returns, term

PATHS = st.sampled_from(["a.py", "src/b.py", "src/c/d.txt", "README.md", "é.txt"])
STATES = st.sampled_from([b"", b"H1", b"H2", b"H3", b"Lx"])


def direct(start: dict[str, bytes | None], end: dict[str, bytes]) -> int:
    """The fingerprint of `end` computed from scratch, relative to `start` (None: the first state unseen)."""
    value = 0
    for path, state in end.items():
        first = start.get(path)
        value += term(path, state) - term(path, UNSEEN if first is None else first)
    return value % (1 << 128)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(PATHS, st.lists(STATES, min_size=1, max_size=5), min_size=1), st.data())
def test_updates_commute_across_paths_and_give_the_state_computed_from_scratch(
    chains: dict[str, list[bytes]], data: st.DataObject
) -> None:
    """Each path goes through its own chain of states; interleave the chains in any order."""
    firsts = {path: data.draw(st.one_of(st.none(), STATES)) for path in chains}
    pending = {path: [firsts[path], *chain] for path, chain in chains.items()}
    fingerprint = Fingerprint()
    while pending:
        path = data.draw(st.sampled_from(sorted(pending)))
        chain = pending[path]
        fingerprint.change(path, chain[0], chain[1])
        chain.pop(0)
        if len(chain) == 1:
            del pending[path]
    assert fingerprint.value == direct(firsts, {path: chain[-1] for path, chain in chains.items()})


def test_flipping_a_file_between_two_contents_returns_to_both_states() -> None:
    fingerprint, returns = Fingerprint(), Returns()
    fingerprint.change("src/a.py", b"H0", b"Hx=1")
    assert returns.record(1, fingerprint.value) is None
    fingerprint.change("src/a.py", b"Hx=1", b"Hx=2")
    assert returns.record(2, fingerprint.value) is None
    fingerprint.change("src/a.py", b"Hx=2", b"Hx=1")
    assert returns.record(3, fingerprint.value) == 1
    fingerprint.change("src/a.py", b"Hx=1", b"H0")
    assert returns.record(4, fingerprint.value) == 0  # back to how the run started


def test_returns_keeps_a_bounded_number_of_states() -> None:
    returns = Returns(kept=3)
    for iteration in range(1, 10):
        returns.record(iteration, iteration * 7)
    assert len(returns) == 3
    assert returns.record(10, 9 * 7) == 9 and returns.record(11, 7) is None  # the oldest were forgotten

"""Commits from the repository's files: counting moved refs, packed refs, HEAD through symbolic refs and
worktrees. Real files (a `.git` laid out by hand, so no git is needed); git itself in test_workspace.py."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.evidence.git_refs import GitRefs, count_commits, find_git_dirs, parse_packed_refs, read_git_refs

def test_count_commits_counts_moved_created_and_deleted_refs() -> None:
    before = GitRefs("a1", {"refs/heads/main": "a1", "refs/heads/old": "b1"})
    after = GitRefs("c1", {"refs/heads/main": "c1", "refs/tags/v1": "c1"})
    assert count_commits(before, after) == 3


def test_count_commits_head_moved_alone_counts_one() -> None:
    refs = {"refs/heads/main": "a1"}
    assert count_commits(GitRefs("a1", refs), GitRefs("d4", refs)) == 1
    assert count_commits(GitRefs("a1", refs), GitRefs("a1", dict(refs))) == 0
    assert count_commits(GitRefs(), GitRefs()) == 0


@given(st.dictionaries(st.sampled_from(["refs/heads/a", "refs/heads/b", "refs/tags/t"]), st.sampled_from(["1", "2"])))
def test_count_commits_is_zero_exactly_when_nothing_moved(refs: dict[str, str]) -> None:
    assert count_commits(GitRefs("h", refs), GitRefs("h", dict(refs))) == 0


def test_parse_packed_refs_skips_comments_and_peeled_lines() -> None:
    text = "# pack-refs with: peeled fully-peeled sorted\naaa refs/heads/main\nbbb refs/tags/v1\n^ccc\n"
    assert parse_packed_refs(text) == {"refs/heads/main": "aaa", "refs/tags/v1": "bbb"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_git_refs_reads_loose_and_packed_refs_and_follows_a_symbolic_head(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    write(git / "HEAD", "ref: refs/heads/main\n")
    write(git / "refs" / "heads" / "main", "a1\n")
    write(git / "refs" / "heads" / "feature" / "x", "b2\n")
    write(git / "refs" / "remotes" / "origin" / "main", "r9\n")  # a fetch is not the agent's work
    write(git / "packed-refs", "# pack-refs with: peeled\nc3 refs/tags/v1\n^d4\nold refs/heads/main\ne5 refs/stash\n")
    refs = read_git_refs(tmp_path)
    assert refs == GitRefs("a1", {"refs/heads/main": "a1", "refs/heads/feature/x": "b2", "refs/tags/v1": "c3"})


def test_a_head_on_a_packed_branch_and_a_detached_head_are_read(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    write(git / "HEAD", "ref: refs/heads/main\n")
    write(git / "packed-refs", "f6 refs/heads/main\n")
    assert read_git_refs(tmp_path).head == "f6"
    write(git / "HEAD", "0123abcd\n")
    assert read_git_refs(tmp_path).head == "0123abcd"
    write(git / "HEAD", "ref: refs/heads/unborn\n")
    assert read_git_refs(tmp_path).head == ""  # a new repository's branch has no commit yet


def test_a_worktree_reads_its_own_head_and_the_shared_refs(tmp_path: Path) -> None:
    common = tmp_path / "repo" / ".git"
    write(common / "HEAD", "ref: refs/heads/main\n")
    write(common / "refs" / "heads" / "main", "a1\n")
    write(common / "refs" / "heads" / "side", "s2\n")
    private = common / "worktrees" / "side"
    write(private / "HEAD", "ref: refs/heads/side\n")
    write(private / "commondir", "../..\n")
    tree = tmp_path / "side"
    write(tree / ".git", f"gitdir: {private}\n")
    assert find_git_dirs(tree / "deeper") == (private, private / "../..")
    assert read_git_refs(tree) == GitRefs("s2", {"refs/heads/main": "a1", "refs/heads/side": "s2"})


def test_a_dot_git_file_that_names_no_git_dir_reads_as_no_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write(plain / ".git", "not a gitdir line\n")
    assert find_git_dirs(plain) is None
    assert read_git_refs(plain) == GitRefs()

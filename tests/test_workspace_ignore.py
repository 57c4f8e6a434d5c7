"""The pure rules behind workspace progress: ignore decisions."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.evidence.ignore import BUILTIN_IGNORED_NAMES, IgnoreRules, load_ignore_rules, relative_inside
from hypothesis import example

from tests.helpers.fuzzing import CHEAP
from tests.helpers.fuzzing import budget
from tests.helpers.fuzzing import empty

segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8).filter(
    lambda s: s not in {".", ".."} and s not in BUILTIN_IGNORED_NAMES
)
rel_paths = st.lists(segment, min_size=1, max_size=5).map("/".join)


def rules_with(root_gitignore: str = "", nested: dict[str, str] | None = None, extra: list[str] | None = None) -> IgnoreRules:
    rules = IgnoreRules().with_gitignore("", root_gitignore)
    for directory, text in (nested or {}).items():
        rules = rules.with_gitignore(directory, text)
    if extra:
        from pathspec import GitIgnoreSpec

        rules = IgnoreRules(rules.gitignores, GitIgnoreSpec.from_lines(extra), rules.exclude, rules.prefixes, rules.names)
    return rules


def test_builtin_names_are_ignored_at_any_depth() -> None:
    rules = IgnoreRules()
    for name in ("node_modules", ".git", ".ralph", ".venv", "venv", "__pycache__", ".pytest_cache"):
        assert rules.is_ignored(name, is_dir=True)
        assert rules.is_ignored(f"web/{name}/x/y.js", is_dir=False)
    assert not rules.is_ignored("src/node_modules_helper.py", is_dir=False)
    assert not rules.is_ignored("src/main.py", is_dir=False)


def test_gitignore_semantics_directory_only_negation_and_anchoring() -> None:
    rules = rules_with("build/\n*.log\n!important.log\n/top-only.txt\n")
    assert rules.is_ignored("build", is_dir=True)
    assert rules.is_ignored("build/app.bin", is_dir=False)
    assert not rules.is_ignored("build", is_dir=False)  # `build/` names directories only
    assert rules.is_ignored("deep/x.log", is_dir=False)
    assert not rules.is_ignored("deep/important.log", is_dir=False)
    assert rules.is_ignored("top-only.txt", is_dir=False)
    assert not rules.is_ignored("sub/top-only.txt", is_dir=False)


def test_nested_gitignore_applies_below_its_directory_and_wins_over_the_root() -> None:
    rules = rules_with("*.gen\n", {"lib": "!keep.gen\nlocal.txt\n"})
    assert rules.is_ignored("a.gen", is_dir=False)
    assert rules.is_ignored("lib/a.gen", is_dir=False)
    assert not rules.is_ignored("lib/keep.gen", is_dir=False)
    assert rules.is_ignored("lib/sub/local.txt", is_dir=False)
    assert not rules.is_ignored("local.txt", is_dir=False)  # the nested file does not reach up


def test_removing_a_gitignore_drops_its_rules() -> None:
    rules = rules_with("*.log\n")
    assert rules.is_ignored("a.log", is_dir=False)
    assert not rules.with_gitignore("", None).is_ignored("a.log", is_dir=False)


def test_state_folder_prefix_is_ignored_with_everything_below() -> None:
    rules = IgnoreRules().with_prefix("var/state/")
    assert rules.is_ignored("var/state", is_dir=True)
    assert rules.is_ignored("var/state/events.jsonl", is_dir=False)
    assert not rules.is_ignored("var/other.txt", is_dir=False)


def test_load_ignore_rules_reads_root_gitignore_exclude_and_state_dir(tmp_path: Path) -> None:
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("secret.txt\n")
    (tmp_path / ".gitignore").write_text("dist/\n!secret.txt\n")
    rules = load_ignore_rules(tmp_path, state_dir=tmp_path / "st", extra=["*.tmp"])
    assert rules.is_ignored("dist", is_dir=True)
    assert not rules.is_ignored("secret.txt", is_dir=False)  # .gitignore outranks info/exclude
    assert rules.is_ignored("st/state.json", is_dir=False)
    assert rules.is_ignored("a/b.tmp", is_dir=False)
    outside = load_ignore_rules(tmp_path, state_dir=tmp_path.parent / "elsewhere")
    assert outside.prefixes == ()


def test_relative_inside() -> None:
    root = Path("/w/proj")
    assert relative_inside(root, Path("/w/proj/.ralph-supervise")) == ".ralph-supervise"
    assert relative_inside(root, Path("/w/proj")) == ""
    assert relative_inside(root, Path("/w/other")) is None


@given(rel_paths, st.sampled_from(sorted(BUILTIN_IGNORED_NAMES)), rel_paths)
def test_anything_below_an_ignored_directory_is_ignored(prefix: str, name: str, rest: str) -> None:
    rules = rules_with("*.o\n")
    assert rules.is_ignored(f"{prefix}/{name}/{rest}", is_dir=False)
    assert rules.is_ignored(f"{prefix}/{name}/{rest}", is_dir=True)


@given(rel_paths)
def test_is_ignored_entry_agrees_with_is_ignored_when_the_parent_is_kept(path: str) -> None:
    rules = rules_with("*.o\nbuild/\n", {"a": "x*\n"})
    parent, _, name = path.rpartition("/")
    if rules.is_ignored(parent, is_dir=True):
        return
    for is_dir in (False, True):
        assert rules.is_ignored_entry(parent, name, is_dir=is_dir) == rules.is_ignored(path, is_dir=is_dir)


@given(rel_paths)
def test_without_rules_only_builtin_names_are_ignored(path: str) -> None:
    assert not IgnoreRules().is_ignored(path, is_dir=False)


PATH_PART = st.text("abcxyz._-", min_size=1, max_size=6).filter(lambda p: p not in (".", ".."))


WORKSPACE_PATHS = st.lists(PATH_PART, min_size=1, max_size=4).map("/".join)


PLAIN_PATTERN = st.one_of(
    PATH_PART,
    PATH_PART.map(lambda p: p + "/"),
    PATH_PART.map(lambda p: "*" + p),
    PATH_PART.map(lambda p: p + "?"),
    PATH_PART.map(lambda p: "!" + p),
    PATH_PART.map(lambda p: "**/" + p),
    PATH_PART.map(lambda p: "/" + p),
    st.just("# a comment"),
    st.just(""),
)


@CHEAP
@given(patterns=st.lists(PLAIN_PATTERN, max_size=8), paths=st.lists(WORKSPACE_PATHS, min_size=1, max_size=5),
       is_dir=st.booleans())
def test_gitignore_rules_from_plain_patterns_decide_every_path(
    patterns: list[str], paths: list[str], is_dir: bool
) -> None:
    rules = IgnoreRules().with_gitignore("", "\n".join(patterns) + "\n")
    for path in paths:
        assert rules.is_ignored(path, is_dir=is_dir) in (True, False)
    names = [p for p in patterns if p and p[0] not in "#!*/" and not p.endswith(("/", "?"))]
    if names and not any(p.startswith("!") for p in patterns):
        assert rules.is_ignored(names[-1], is_dir=is_dir)  # a plain name ignores that name


@budget(40)
@given(text=st.lists(st.text("!*?[]-\\/az# ", max_size=6), max_size=5).map("\n".join))
@example(text="node_modules\n!\n")
@example(text="[z-a]")
@example(text="\\")
def test_any_gitignore_text_gives_rules_never_an_error(here: Path, text: str) -> None:
    rules = IgnoreRules().with_gitignore("sub", text)
    assert rules.is_ignored("sub/a/b", is_dir=False) in (True, False)
    (empty(here) / ".gitignore").write_text(text, encoding="utf-8")
    assert load_ignore_rules(here, state_dir=None).is_ignored("a", is_dir=False) in (True, False)


def test_two_threads_match_the_same_rules_at_once_without_an_error() -> None:
    """The watcher's thread and the priming thread ask the same rules at the same time. pathspec would pick
    its hyperscan backend when hyperscan is installed, whose shared scratch space raises ScratchInUseError
    then: the rules use pathspec's own matcher."""
    import threading

    rules = rules_with("*.log\nbuild/\n!keep.log\n/data/*.csv\n", nested={"web": "dist/\n*.map\n"})
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def ask() -> None:
        start.wait()
        try:
            for i in range(20_000):
                rules.is_ignored_entry("web" if i % 2 else "", f"f{i}.log", is_dir=False)
        except BaseException as exc:  # noqa: BLE001 - what the other thread's scan may raise
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert rules.is_ignored_entry("", "f1.log", is_dir=False) and not rules.is_ignored_entry("", "keep.log", is_dir=False)

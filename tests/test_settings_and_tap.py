"""Pure pieces of step 1: settings layering, the line splitter, the rotating file."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from ralph_supervisor.cli import build_run_settings
from ralph_supervisor.evidence.tap import LineSplitter
from ralph_supervisor.rotating import RotatingFile
from ralph_supervisor.settings import OPTIONS, Settings, SettingsError, load_settings


def test_settings_defaults_are_the_contract_defaults(tmp_path: Path) -> None:
    s = load_settings(workspace=str(tmp_path), env={})
    assert (s.no_progress, s.same_error, s.output_decline, s.max_failures) == (3, 5, 70.0, 5)
    assert (s.stall, s.paraphrase, s.max_iterations, s.token_budget, s.daily_token_budget) == (1800, 0.82, 0, 0, 0)
    assert (s.on_open, s.cooldown, s.max_opens, s.grace) == ("pause", 30, 3, 10)
    assert s.iteration_process == ("claude", "codex", "gemini", "opencode", "cursor-agent", "amp")
    assert s.state_dir.parent == Path.home() / ".local" / "state" / "ralph-supervise" / "workspaces"
    assert load_settings(workspace=str(tmp_path), env={"XDG_STATE_HOME": str(tmp_path / "st")}).state_dir.parent \
        == tmp_path / "st" / "ralph-supervise" / "workspaces"
    assert s.log_max_bytes == 50_000_000 and s.log_total_bytes == 500_000_000 and s.line_cap == 1 << 20


def test_every_option_default_matches_the_settings_field() -> None:
    defaults = {f.name: f.default for f in fields(Settings)}
    for option in OPTIONS:
        assert defaults[option.name] == option.default, option.name


def test_later_layers_win_default_config_environment_flag(tmp_path: Path) -> None:
    (tmp_path / ".ralph-supervise.toml").write_text("no_progress = 4\nsame_error = 6\ngrace = 2\n")
    env = {"CB_SAME_ERROR_THRESHOLD": "7", "RALPH_SUPERVISE_GRACE": "3"}
    s = build_run_settings(["-w", str(tmp_path), "--grace", "4", "--", "true"], env=env)
    assert s.no_progress == 4  # config
    assert s.same_error == 7  # environment over config
    assert s.grace == 4.0  # flag over environment
    assert s.max_failures == 5  # default
    assert s.sources["grace"] == "flag --grace"
    assert s.sources["same_error"] == "environment CB_SAME_ERROR_THRESHOLD"


def test_ralph_cb_variables_are_honoured(tmp_path: Path) -> None:
    env = {"CB_NO_PROGRESS_THRESHOLD": "2", "CB_COOLDOWN_MINUTES": "0.5", "CB_OUTPUT_DECLINE_THRESHOLD": "50"}
    s = load_settings(workspace=str(tmp_path), env=env)
    assert (s.no_progress, s.cooldown, s.output_decline) == (2, 0.5, 50.0)
    assert s.cooldown_s == 30.0


def test_config_flag_names_a_file_and_dashes_are_accepted(tmp_path: Path) -> None:
    config = tmp_path / "custom.toml"
    config.write_text('on-open = "kill"\ntail = ["logs/*.log"]\n')
    s = build_run_settings(["-w", str(tmp_path), "--config", str(config), "--", "true"], env={})
    assert s.on_open == "kill" and s.tail == ("logs/*.log",)


def test_unknown_config_key_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / ".ralph-supervise.toml").write_text("grace = 1\nno_progess = 3\n")
    with pytest.raises(SettingsError, match=r"\.toml:2: unknown key 'no_progess'"):
        load_settings(workspace=str(tmp_path), env={})


def test_repeatable_flags_collect(tmp_path: Path) -> None:
    s = build_run_settings(["-w", str(tmp_path), "--tail", "a/*.log", "--tail", "b.log", "--ignore", "dist/",
                            "--", "true"], env={})
    assert s.tail == ("a/*.log", "b.log") and s.ignore == ("dist/",)


def test_ralph_tail_default_only_in_a_ralph_project(tmp_path: Path) -> None:
    assert load_settings(workspace=str(tmp_path), env={}).tail_globs() == ()
    (tmp_path / ".ralph").mkdir()
    assert load_settings(workspace=str(tmp_path), env={}).tail_globs() == (".ralph/logs/claude_output_*.log",)


@pytest.mark.parametrize("size,expected", [("50MB", 50_000_000), ("64KiB", 65536), ("4096", 4096), ("1.5MB", 1_500_000)])
def test_sizes_accept_units(tmp_path: Path, size: str, expected: int) -> None:
    s = build_run_settings(["-w", str(tmp_path), "--log-max-bytes", size, "--log-total-bytes", "1GB", "--", "x"], env={})
    assert s.log_max_bytes == expected


def test_total_log_budget_must_hold_one_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--log-total-bytes"):
        build_run_settings(["-w", str(tmp_path), "--log-max-bytes", "10MB", "--log-total-bytes", "1MB", "--", "x"], env={})


# ----------------------------------------------------------------------------- line splitter


def lines(block: bytes | None) -> list[bytes]:
    """A splitter's block of complete lines, as the lines."""
    return [] if block is None else block.split(b"\n")


def test_splitter_keeps_lines_across_chunks() -> None:
    s = LineSplitter(100)
    assert s.feed(b"hel") is None
    assert s.feed(b"lo\nwor") == b"hello"
    assert lines(s.feed(b"ld\n\n")) == [b"world", b""]
    assert s.flush() is None


def test_splitter_cuts_an_over_long_line_and_counts_it() -> None:
    s = LineSplitter(10)
    assert s.feed(b"x" * 7) is None
    assert s.feed(b"y" * 1_000_000) is None
    assert len(s._partial) == 10  # never holds more than the cap
    assert lines(s.feed(b"z\nok\n")) == [b"x" * 7 + b"yyy", b"ok"]
    assert s.cut_lines == 1
    assert lines(s.feed(b"a" * 11 + b"\nshort\n" + b"b" * 30 + b"\n")) == [b"a" * 10, b"short", b"b" * 10]
    assert s.cut_lines == 3


@given(st.lists(st.binary(max_size=50), max_size=30), st.integers(min_value=1, max_value=40))
@hsettings(max_examples=300, deadline=None)
def test_splitter_equals_split_then_cap_however_the_stream_is_chunked(chunks: list[bytes], cap: int) -> None:
    s = LineSplitter(cap)
    got: list[bytes] = []
    for chunk in chunks:
        got.extend(lines(s.feed(chunk)))
    last = s.flush()
    got.extend(lines(last))
    data = b"".join(chunks)
    whole = data.split(b"\n")
    expected = [line[:cap] for line in whole]
    if data.endswith(b"\n") or not data:
        expected = expected[:-1]
        whole = whole[:-1]
    assert got == expected
    assert s.cut_lines == sum(1 for line in whole if len(line) > cap)


# ----------------------------------------------------------------------------- rotating file


def test_rotating_file_keeps_the_budget_and_every_recent_byte(tmp_path: Path) -> None:
    f = RotatingFile(tmp_path / "child.log", max_bytes=100, total_bytes=300)
    data = bytes(range(256)) * 4
    for i in range(0, len(data), 37):
        f.write(data[i:i + 37])
    f.close()
    files = f.files()
    assert [p.name for p in files] == ["child.log", "child.log.1", "child.log.2"]
    assert all(p.stat().st_size <= 100 for p in files)
    joined = b"".join(p.read_bytes() for p in reversed(files))
    assert data.endswith(joined) and len(joined) > 200


def test_rotating_file_whole_lines_are_never_split(tmp_path: Path) -> None:
    f = RotatingFile(tmp_path / "h.jsonl", max_bytes=50, total_bytes=500, whole_lines=True)
    for i in range(40):
        f.write(f'{{"n": {i}}}\n'.encode())
    f.close()
    for path in f.files():
        for line in path.read_text().splitlines():
            assert line.startswith("{") and line.endswith("}")


def test_rotating_file_survives_an_unwritable_folder(tmp_path: Path) -> None:
    errors: list[OSError] = []
    f = RotatingFile(tmp_path / "missing" / "child.log", 100, 300, on_error=errors.append)
    f.write(b"abc")
    f.write(b"def")
    assert f.dropped_bytes == 6 and len(errors) == 1


def test_every_breaker_threshold_comes_from_its_option(tmp_path: Path) -> None:
    """No threshold the breaker has may be left at its default when the user set its option."""
    import dataclasses

    from ralph_supervisor.breaker import Thresholds
    from ralph_supervisor.settings import thresholds_from

    s = load_settings(workspace=str(tmp_path), env={}, flags={
        "no_progress": 7, "same_error": 8, "output_decline": 9.0, "max_failures": 10, "stall": 11.0,
        "paraphrase": 0.5, "max_iterations": 12, "token_budget": 13, "daily_token_budget": 14,
        "cost_budget": 1.5, "daily_cost_budget": 2.5, "cooldown": 2.0, "max_opens": 15})
    t = thresholds_from(s)
    unset = {f.name for f in dataclasses.fields(Thresholds) if getattr(t, f.name) == getattr(Thresholds(), f.name)}
    assert unset == {"trial_timeout_s", "same_error_similarity"}  # the two that are not options
    assert (t.cost_budget, t.daily_cost_budget, t.cooldown_s) == (1.5, 2.5, 120.0)

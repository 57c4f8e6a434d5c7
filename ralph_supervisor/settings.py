"""Settings: built-in default <- config file <- environment <- flag (later wins).

Every option is described once, in `OPTIONS`; the command line, the TOML file and the environment
are all read through that one table, so a name, a default or a check cannot drift between them.
Every bad value is one `SettingsError` naming the flag, the variable or the file and line.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from ralph_supervisor.breaker import Thresholds
from ralph_supervisor.state_folder import default_state_dir
from ralph_supervisor.text import clip

STATE_DIR_NAME = ".ralph-supervise"
"""The state folder's name in the workspace in earlier versions (now outside it: state_folder.py)."""
CONFIG_FILE_NAME = ".ralph-supervise.toml"
RALPH_TAIL_DEFAULT = ".ralph/logs/claude_output_*.log"
SNAPSHOT_SKIP_DEFAULT = (
    "node_modules", ".venv", "venv", "__pycache__", "target", "dist", "build", ".cache", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox", ".nox", ".next", ".nuxt", ".gradle", ".turbo",
    ".parcel-cache", ".terraform")
"""Ignored trees a tool regenerates: listed in snapshots, not stored (`--snapshot-skip`)."""
AGENT_NAMES = ("claude", "codex", "gemini", "opencode", "cursor-agent", "amp")
"""The agent CLIs a call is recognised by when `--iteration-process` is not given. Cursor's newer command
name `agent` (its adapter knows it) is left out: too common a name to take every such process for a paid
call; `--iteration-process ...,agent` adds it."""


class SettingsError(Exception):
    """A bad flag, variable or config value: the message is the one line the user sees."""


# ---------------------------------------------------------------------------------------------
# Parsers: each takes the raw value (a str from the command line or environment, or a TOML value)
# and returns the typed value or raises ValueError with what would be valid.


def _int(minimum: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"expected a whole number >= {minimum}")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ValueError(f"expected a whole number >= {minimum}, got {raw!r}")
            value = int(text)
        if value < minimum:
            raise ValueError(f"expected a whole number >= {minimum}, got {value}")
        return value

    return parse


def _number(minimum: float, maximum: float | None = None, *, above: bool = False) -> Callable[[Any], float]:
    def describe() -> str:
        low = f"> {minimum:g}" if above else f">= {minimum:g}"
        return f"a number {low}" + (f" and <= {maximum:g}" if maximum is not None else "")

    def parse(raw: Any) -> float:
        if isinstance(raw, bool):
            raise ValueError(f"expected {describe()}")
        try:
            value = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"expected {describe()}, got {_short(raw)}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"expected {describe()}, got {raw!r}")
        if (value <= minimum if above else value < minimum) or (maximum is not None and value > maximum):
            raise ValueError(f"expected {describe()}, got {raw!r}")
        return value

    return parse


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 2**20,
               "g": 10**9, "gb": 10**9, "gib": 2**30}


def _size(minimum: int) -> Callable[[Any], int]:
    """Byte sizes: 50000000, "50MB", "64KiB"."""

    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError("expected a size like 50MB")
        if isinstance(raw, int):
            value = raw
        else:
            match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(raw))
            if not match or match.group(2).lower() not in _SIZE_UNITS:
                raise ValueError(f"expected a size like 50MB or 1048576, got {raw!r}")
            number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
            if not math.isfinite(number):
                raise ValueError(f"expected a size like 50MB or 1048576, got {_short(raw)}")
            value = int(number)
        if value < minimum:
            raise ValueError(f"expected a size of at least {minimum} bytes, got {value}")
        return value

    return parse


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r}")
    return raw


def _agent(raw: Any) -> str:
    """`--agent`: auto, or the name of an adapter (ralph_supervisor/agents)."""
    from ralph_supervisor.agents import AUTO, NAMES  # the adapters are the list of valid names

    value = _text(raw).strip().lower()
    if value != AUTO and value not in NAMES:
        raise ValueError(f"expected {AUTO} or one of {', '.join(NAMES)}, got {raw!r}")
    return value


def _optional_text(raw: Any) -> str | None:
    value = _text(raw).strip()
    return value or None


def _names(raw: Any) -> tuple[str, ...]:
    """A comma list (or a TOML list) of process names."""
    items = raw if isinstance(raw, list) else str(raw).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if not names:
        raise ValueError("expected at least one process name")
    return names


def _agent_names(raw: Any) -> tuple[str, ...]:
    """Agent process names: each a plain program name (it names a shim file, so no path, no metacharacters)."""
    from ralph_supervisor.evidence.shims import bad_agent_name

    names = _names(raw)
    for name in names:
        reason = bad_agent_name(name)
        if reason is not None:
            raise ValueError(reason)
    return names


def _skip_names(raw: Any) -> tuple[str, ...]:
    """Folder names for --snapshot-skip: a comma list (or a TOML list) of plain names; `none` stores every tree."""
    if isinstance(raw, str) and raw.strip().lower() == "none":
        return ()
    items = raw if isinstance(raw, list) else str(raw).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if not names:
        raise ValueError("expected folder names (comma list), or none")
    for name in names:
        if "/" in name or name in (".", ".."):
            raise ValueError(f"{name!r} is not a folder name (no paths: a name matches at any depth)")
    return names


def _strings(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"expected a list of strings, got {raw!r}")
    return tuple(items)


def _paths(raw: Any) -> tuple[Path, ...]:
    """Paths (`~` expanded): a string, or a TOML list of them."""
    return tuple(_expand(item.strip()) for item in _strings(raw) if item.strip())


def _variable_names(raw: Any) -> tuple[str, ...]:
    """Environment variable names, `PREFIX_*` for all that start so (a comma list, or a TOML list)."""
    items = raw if isinstance(raw, list) else str(raw).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", name):
            raise ValueError(f"{name!r} is not a variable name (or PREFIX_*)")
    return names


def _regex(raw: Any) -> str | None:
    text = _text(raw)
    if not text:
        return None
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None
    return text


def _webhook(raw: Any) -> str | None:
    """An http(s) URL (a Slack-style incoming webhook), or an apprise URL. Not repeated in errors: a secret."""
    text = _text(raw).strip()
    if not text:
        return None
    if re.match(r"https?://[^\s/]+", text):
        return text
    if re.match(r"https?:", text):
        raise ValueError("expected an http:// or https:// URL with a host")
    from ralph_supervisor.notify import validate_notify_url

    problem = validate_notify_url(text)
    if problem:
        raise ValueError(f"expected an http(s) URL or an apprise URL: {problem}")
    return text


def _notify_urls(raw: Any) -> tuple[str, ...]:
    """apprise URLs, each checked with apprise now: a URL it cannot use is an error before anything starts."""
    from ralph_supervisor.notify import parse_notify_urls

    return parse_notify_urls(raw)


def _port(raw: Any) -> int | None:
    value = _int(0)(raw)
    if value > 65535:
        raise ValueError(f"expected a TCP port 0-65535, got {value}")
    return value


def _expand(text: str) -> Path:
    """`~` expanded; an unknown `~user` is a ValueError, not a crash."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise ValueError(f"cannot expand {text!r} (no such user)") from None


def expand_path(text: str, what: str) -> Path:
    """`_expand` for a flag given outside the options table: the error names the flag."""
    try:
        return _expand(text)
    except ValueError as exc:
        raise SettingsError(f"{what}: {exc}") from None


def _short(raw: Any, limit: int = 60) -> str:
    return clip(repr(raw), limit)


def _path(raw: Any) -> Path | None:
    text = _text(raw).strip()
    return _expand(text) if text else None


@dataclass(frozen=True)
class Option:
    """One setting: its name (the TOML key and dataclass field), flag, environment variable and parser."""

    name: str
    flag: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    env: tuple[str, ...] = ()
    repeatable: bool = False
    metavar: str | None = None
    switch: bool = False
    """A flag without a value (`--worktree`): given, it is "true"; the environment and the file take a boolean."""


_BREAKER = Thresholds()
"""The breaker's own defaults are the defaults of its options."""

OPTIONS: tuple[Option, ...] = (
    Option("no_progress", "--no-progress", _int(1), _BREAKER.no_progress, "open after N iterations in a row without progress",
           ("CB_NO_PROGRESS_THRESHOLD",), metavar="N"),
    Option("same_error", "--same-error", _int(1), _BREAKER.same_error, "open after the same error set in N iterations in a row",
           ("CB_SAME_ERROR_THRESHOLD",), metavar="N"),
    Option("output_decline", "--output-decline", _number(0, 100), _BREAKER.output_decline,
           "open when an iteration without progress prints PCT %% less than the mean of the 3 before it (0 = off)",
           ("CB_OUTPUT_DECLINE_THRESHOLD",), metavar="PCT"),
    Option("max_failures", "--max-failures", _int(1), _BREAKER.max_failures, "open after N failed agent calls in a row",
           ("RALPH_SUPERVISE_MAX_FAILURES",), metavar="N"),
    Option("stall", "--stall", _number(0, above=True), _BREAKER.stall_s,
           "open when the current call is silent (no output, no file change, no CPU) for SECONDS",
           ("RALPH_SUPERVISE_STALL",), metavar="SECONDS"),
    Option("paraphrase", "--paraphrase", _number(0, 1), _BREAKER.paraphrase,
           "open when the last 3 replies have mean pairwise word-set Jaccard >= RATIO (0 = off)",
           ("RALPH_SUPERVISE_PARAPHRASE",), metavar="RATIO"),
    Option("max_iterations", "--max-iterations", _int(0), _BREAKER.max_iterations, "iteration cap (0 = off)",
           ("RALPH_SUPERVISE_MAX_ITERATIONS",), metavar="N"),
    Option("token_budget", "--token-budget", _int(0), _BREAKER.token_budget, "tokens for this run (0 = off)",
           ("RALPH_SUPERVISE_TOKEN_BUDGET",), metavar="N"),
    Option("daily_token_budget", "--daily-token-budget", _int(0), _BREAKER.daily_token_budget, "tokens per UTC day across runs (0 = off)",
           ("RALPH_SUPERVISE_DAILY_TOKEN_BUDGET",), metavar="N"),
    Option("on_open", "--on-open", _choice("pause", "kill", "stop"), "pause", "what OPEN does to the tree",
           ("RALPH_SUPERVISE_ON_OPEN",), metavar="pause|kill|stop"),
    Option("cooldown", "--cooldown", _number(0, above=True), _BREAKER.cooldown_s / 60.0,
           "minutes from OPEN to HALF_OPEN; doubles after each failed trial, capped at 8x",
           ("CB_COOLDOWN_MINUTES",), metavar="MINUTES"),
    Option("max_opens", "--max-opens", _int(1), _BREAKER.max_opens, "the Nth open is final: the tree is stopped and run exits 2",
           ("RALPH_SUPERVISE_MAX_OPENS",), metavar="N"),
    Option("grace", "--grace", _number(0), 10.0, "seconds from SIGTERM to SIGKILL when stopping the tree",
           ("RALPH_SUPERVISE_GRACE",), metavar="SECONDS"),
    Option("cost_budget", "--cost-budget", _number(0), 0.0, "dollars for this run, from the cost the agent reports (0 = off)",
           ("RALPH_SUPERVISE_COST_BUDGET",), metavar="USD"),
    Option("daily_cost_budget", "--daily-cost-budget", _number(0), 0.0,
           "dollars per UTC day across runs, counted once per call (0 = off)",
           ("RALPH_SUPERVISE_DAILY_COST_BUDGET",), metavar="USD"),
    Option("limit_wait", "--limit-wait", _choice("on", "off"), "on",
           "freeze the tree while an agent's usage limit lasts (off: the loop waits it out itself, as Ralph can)",
           ("RALPH_SUPERVISE_LIMIT_WAIT",), metavar="on|off"),
    Option("limit_wait_margin", "--limit-wait-margin", _number(0), 60.0,
           "after a usage limit with a known reset time, keep the tree frozen this much longer",
           ("RALPH_SUPERVISE_LIMIT_WAIT_MARGIN",), metavar="SECONDS"),
    Option("usage_ceiling", "--usage-ceiling", _number(0, 100), 0.0,
           "once a call reports a usage window at PCT %% or more, freeze the tree after it until that window "
           "resets (plus --limit-wait-margin), as for a usage limit (0 = off; 90 leaves you a tenth)",
           ("RALPH_SUPERVISE_USAGE_CEILING",), metavar="PCT"),
    Option("no_overage", "--no-overage", _bool, False,
           "freeze the same way when a call reports that it is spending paid overage",
           ("RALPH_SUPERVISE_NO_OVERAGE",)),
    Option("outage_max", "--outage-max", _number(0, above=True), 60.0,
           "an API outage (the agent's own retry reports) longer than this freezes the tree for a back-off; "
           "after three back-offs the open is final (trigger outage)",
           ("RALPH_SUPERVISE_OUTAGE_MAX",), metavar="MINUTES"),
    Option("cgroup", "--cgroup", _choice("auto", "off"), "auto",
           "run the loop in a cgroup of its own where one can be made: pause is its freeze, a stop ends with "
           "cgroup.kill, its figures and bounds (off: none; signals pause and stop the tree)",
           ("RALPH_SUPERVISE_CGROUP",), metavar="auto|off"),
    Option("memory_max", "--memory-max", _size(1 << 20), None,
           "bound the memory of the loop's cgroup, and of the verify's (an OOM kill inside it fails the call it "
           "hit; needs a cgroup)",
           ("RALPH_SUPERVISE_MEMORY_MAX",), metavar="SIZE"),
    Option("cpu_max", "--cpu-max", _number(0, above=True), None,
           "bound the CPU of the loop's cgroup, in percent of one CPU (200: two CPUs' worth; needs a cgroup)",
           ("RALPH_SUPERVISE_CPU_MAX",), metavar="PCT"),
    Option("tasks_max", "--tasks-max", _int(1), None,
           "bound the number of processes in the loop's cgroup (a fork bomb stops there; needs a cgroup)",
           ("RALPH_SUPERVISE_TASKS_MAX",), metavar="N"),
    Option("destructive_files", "--destructive-files", _int(0), 25,
           "open (destructive) when one iteration leaves more than N files deleted, emptied or reverted (0 = off)",
           ("RALPH_SUPERVISE_DESTRUCTIVE_FILES",), metavar="N"),
    Option("destructive_share", "--destructive-share", _number(0, 100), 30.0,
           "... or more than PCT %% of the files that existed at its start (0 = off)",
           ("RALPH_SUPERVISE_DESTRUCTIVE_SHARE",), metavar="PCT"),
    Option("snapshot_budget", "--snapshot-budget", _size(0), 2_000_000_000,
           "disk budget of the workspace snapshots (0 = no snapshots)",
           ("RALPH_SUPERVISE_SNAPSHOT_BUDGET",), metavar="SIZE"),
    Option("snapshot_max_file", "--snapshot-max-file", _size(0), 50_000_000,
           "files larger than this are listed in a snapshot but not stored (0 = no limit)",
           ("RALPH_SUPERVISE_SNAPSHOT_MAX_FILE",), metavar="SIZE"),
    Option("verify", "--verify", _optional_text, None,
           "the project's test command, run by the supervisor on each changed iteration's snapshot, outside the "
           "workspace (auto: picked from the project's files)", ("RALPH_SUPERVISE_VERIFY",), metavar="CMD"),
    Option("verify_timeout", "--verify-timeout", _number(0, above=True), 600.0,
           "a verify that runs longer is ended and counts as unverified", ("RALPH_SUPERVISE_VERIFY_TIMEOUT",),
           metavar="SECONDS"),
    Option("regression", "--regression", _int(0), 2,
           "open when a test that passed earlier fails in N verified iterations in a row (0 = off)",
           ("RALPH_SUPERVISE_REGRESSION",), metavar="N"),
    Option("no_verified_progress", "--no-verified-progress", _int(0), 0,
           "with --verify: open (no-progress) after N verifies in a row of changed iterations that made no failing "
           "test pass and no new test pass (0 = off)", ("RALPH_SUPERVISE_NO_VERIFIED_PROGRESS",), metavar="N"),
    Option("tampering", "--tampering", _choice("trip", "warn", "off"), "trip",
           "an iteration that weakened the tests instead of the code: open and wait for a human, or only warn",
           ("RALPH_SUPERVISE_TAMPERING",), metavar="trip|warn|off"),
    Option("false_completion", "--false-completion", _choice("on", "off"), "on",
           "open when the agent says the work is done while that iteration's verify fails",
           ("RALPH_SUPERVISE_FALSE_COMPLETION",), metavar="on|off"),
    Option("snapshot_skip", "--snapshot-skip", _skip_names, SNAPSHOT_SKIP_DEFAULT,
           "ignored trees of these names (dependencies, virtual environments, build output, caches) are listed "
           "in a snapshot by their root, not stored (comma list; none = store them too)",
           ("RALPH_SUPERVISE_SNAPSHOT_SKIP",), metavar="NAMES"),
    Option("agent", "--agent", _agent, "auto",
           "read every call with this agent's adapter instead of the one its process name selects",
           ("RALPH_SUPERVISE_AGENT_FORMAT",), metavar="NAME"),
    Option("sandbox", "--sandbox", _choice("none", "bwrap"), "none",
           "run the loop in a bubblewrap box: workspace read-write, system read-only, a private /tmp, the home "
           "folder hidden but for what the agents need", ("RALPH_SUPERVISE_SANDBOX",), metavar="none|bwrap"),
    Option("sandbox_ro", "--sandbox-ro", _paths, (), "one more path in the box, read-only",
           repeatable=True, metavar="PATH"),
    Option("sandbox_rw", "--sandbox-rw", _paths, (), "one more path in the box, read-write",
           repeatable=True, metavar="PATH"),
    Option("sandbox_network", "--sandbox-network", _choice("on", "off"), "on",
           "the box's network (off: loopback of its own only)", ("RALPH_SUPERVISE_SANDBOX_NETWORK",),
           metavar="on|off"),
    Option("sandbox_env", "--sandbox-env", _variable_names, (),
           "more environment variables kept in the box (names or PREFIX_*, comma list)",
           repeatable=True, metavar="NAMES"),
    Option("verify_network", "--verify-network", _choice("on", "off"), "off",
           "with --sandbox: the network of the verify's box (off: it runs the agent's code with none)",
           ("RALPH_SUPERVISE_VERIFY_NETWORK",), metavar="on|off"),
    Option("worktree", "--worktree", _bool, False,
           "run the loop in a new git worktree of the workspace's HEAD, on a branch ralph/<name>-<date>-<time> that "
           "stays for review; the checkout is never touched", ("RALPH_SUPERVISE_WORKTREE",), switch=True),
    Option("name", "--name", _optional_text, None, "a short name for this loop (metrics label, ls, notices)",
           ("RALPH_SUPERVISE_NAME",), metavar="NAME"),
    Option("notify", "--notify", _notify_urls, (), "an apprise URL notified on open, final stop, limit wait and child exit (repeatable)",
           ("RALPH_SUPERVISE_NOTIFY",), repeatable=True, metavar="URL"),
    Option("iteration_process", "--iteration-process", _agent_names, AGENT_NAMES,
           "an iteration is the life of a descendant process with one of these names (comma list)",
           ("RALPH_SUPERVISE_AGENT",), metavar="NAMES"),
    Option("iteration_marker", "--iteration-marker", _regex, None,
           "instead: an iteration starts at each output line matching REGEX", metavar="REGEX"),
    Option("tail", "--tail", _strings, (), "more files to read as agent output (glob, repeatable)",
           repeatable=True, metavar="GLOB"),
    Option("ignore", "--ignore", _strings, (), "paths whose changes are not progress (gitignore pattern, repeatable)",
           repeatable=True, metavar="PATTERN"),
    Option("on_open_hook", "--on-open-hook", _optional_text, None,
           "shell command run on every open, the decision JSON on its stdin", metavar="CMD"),
    Option("hook_timeout", "--hook-timeout", _number(0, above=True), 30.0,
           "seconds an --on-open-hook may run before it is killed", metavar="SECONDS"),
    Option("log_format", "--log-format", _choice("auto", "json", "console"), "auto",
           "supervisor log on stderr: console on a terminal, JSON otherwise", metavar="auto|json|console"),
    Option("log_detail", "--log-detail", _choice("normal", "quiet", "verbose"), "normal",
           "what the console log says: a line per iteration and the transitions (normal), the transitions and "
           "the end only (quiet, or --quiet), every event with all its fields (verbose, or --verbose)",
           ("RALPH_SUPERVISE_LOG_DETAIL",), metavar="normal|quiet|verbose"),
    Option("countdown_every", "--countdown-every", _number(0, above=True), 300.0,
           "while the loop waits (a usage limit, the usage ceiling, an outage back-off, a cooldown) and the console is "
           "not a terminal: a line with the "
           "time left this often (on a terminal one line counts down in place)", metavar="SECONDS"),
    Option("log_max_bytes", "--log-max-bytes", _size(4096), 50_000_000, "child.log size before it is rotated",
           metavar="SIZE"),
    Option("log_total_bytes", "--log-total-bytes", _size(4096), 500_000_000,
           "disk budget of child.log and its rotated files together", metavar="SIZE"),
    Option("line_cap", "--line-cap", _size(1024), 1 << 20,
           "longest line kept whole for analysis; longer lines are cut (and counted)", metavar="SIZE"),
    Option("notify_webhook", "--notify-webhook", _webhook, None,
           "POST a Slack-compatible message to URL (or notify an apprise URL) on open, close, final stop and child exit",
           metavar="URL"),
    Option("notify_desktop", "--notify-desktop", _bool, True, "desktop notifications with notify-send when present",
           metavar="true|false"),
    Option("metrics_port", "--metrics-port", _port, None, "serve Prometheus metrics on this port", metavar="PORT"),
    Option("metrics_host", "--metrics-host", _text, "127.0.0.1", "address the metrics server binds", metavar="HOST"),
    Option("metrics_textfile", "--metrics-textfile", _path, None,
           "write metrics to this node-exporter textfile", metavar="FILE"),
)

OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}


def _default(name: str) -> Any:
    """A Settings field's default: its option's (one set of defaults, in OPTIONS)."""
    return OPTIONS_BY_NAME[name].default


@dataclass(frozen=True)
class Settings:
    """Everything a run needs, fully validated. Built only by `load_settings`."""

    workspace: Path
    state_dir: Path
    workspace_given: str = ""
    """`-w` as typed (or the shell's $PWD): a symlink in it is named at start, since the state follows the real path."""
    command: tuple[str, ...] = ()
    echo: bool | None = None
    no_progress: int = _default("no_progress")
    same_error: int = _default("same_error")
    output_decline: float = _default("output_decline")
    max_failures: int = _default("max_failures")
    stall: float = _default("stall")
    paraphrase: float = _default("paraphrase")
    max_iterations: int = _default("max_iterations")
    token_budget: int = _default("token_budget")
    daily_token_budget: int = _default("daily_token_budget")
    on_open: str = _default("on_open")
    cooldown: float = _default("cooldown")
    max_opens: int = _default("max_opens")
    grace: float = _default("grace")
    cost_budget: float = _default("cost_budget")
    daily_cost_budget: float = _default("daily_cost_budget")
    limit_wait: str = _default("limit_wait")
    limit_wait_margin: float = _default("limit_wait_margin")
    usage_ceiling: float = _default("usage_ceiling")
    no_overage: bool = _default("no_overage")
    outage_max: float = _default("outage_max")
    cgroup: str = _default("cgroup")
    memory_max: int | None = _default("memory_max")
    cpu_max: float | None = _default("cpu_max")
    tasks_max: int | None = _default("tasks_max")
    destructive_files: int = _default("destructive_files")
    destructive_share: float = _default("destructive_share")
    snapshot_budget: int = _default("snapshot_budget")
    snapshot_max_file: int = _default("snapshot_max_file")
    verify: str | None = _default("verify")
    verify_timeout: float = _default("verify_timeout")
    regression: int = _default("regression")
    no_verified_progress: int = _default("no_verified_progress")
    tampering: str = _default("tampering")
    false_completion: str = _default("false_completion")
    snapshot_skip: tuple[str, ...] = _default("snapshot_skip")
    agent: str = _default("agent")
    sandbox: str = _default("sandbox")
    sandbox_ro: tuple[Path, ...] = _default("sandbox_ro")
    sandbox_rw: tuple[Path, ...] = _default("sandbox_rw")
    sandbox_network: str = _default("sandbox_network")
    sandbox_env: tuple[str, ...] = _default("sandbox_env")
    verify_network: str = _default("verify_network")
    worktree: bool = _default("worktree")
    name: str | None = _default("name")
    notify: tuple[str, ...] = _default("notify")
    iteration_process: tuple[str, ...] = _default("iteration_process")
    iteration_marker: str | None = _default("iteration_marker")
    tail: tuple[str, ...] = _default("tail")
    ignore: tuple[str, ...] = _default("ignore")
    on_open_hook: str | None = _default("on_open_hook")
    hook_timeout: float = _default("hook_timeout")
    log_format: str = _default("log_format")
    log_detail: str = _default("log_detail")
    countdown_every: float = _default("countdown_every")
    log_max_bytes: int = _default("log_max_bytes")
    log_total_bytes: int = _default("log_total_bytes")
    line_cap: int = _default("line_cap")
    notify_webhook: str | None = _default("notify_webhook")
    notify_desktop: bool = _default("notify_desktop")
    metrics_port: int | None = _default("metrics_port")
    metrics_host: str = _default("metrics_host")
    metrics_textfile: Path | None = _default("metrics_textfile")
    sources: Mapping[str, str] = field(default_factory=dict)
    """Where each non-default value came from (for `status` and the escalation summary)."""

    @property
    def cooldown_s(self) -> float:
        return self.cooldown * 60.0

    def tail_globs(self) -> tuple[str, ...]:
        """`--tail` globs, or Ralph's per-call logs when the workspace is a Ralph project."""
        if self.tail:
            return self.tail
        if (self.workspace / ".ralph").is_dir():
            return (RALPH_TAIL_DEFAULT,)
        return ()


def _toml_line(text: str, key: str) -> int | None:
    """The line of `key = ...` in a TOML text (tomllib reports no positions for values)."""
    pattern = re.compile(rf"^[ \t]*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')[ \t]*=", re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse and validate a TOML config file; keys are OPTIONS names (`no_progress`, also `no-progress`)."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw_bytes.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise SettingsError(f"config file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc).replace("(at end of document)", f"(at line {max(1, len(text.rstrip().splitlines()))}, end of document)")
        raise SettingsError(f"config file {path}: {message}") from None
    values: dict[str, Any] = {}
    for key, raw in data.items():
        name = key.replace("-", "_")
        line = _toml_line(text, key)
        where = f"{path}:{line}" if line else str(path)
        option = OPTIONS_BY_NAME.get(name)
        if option is None:
            known = ", ".join(sorted(OPTIONS_BY_NAME))
            raise SettingsError(f"config file {where}: unknown key {key!r} (known keys: {known})")
        try:
            values[name] = option.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"config file {where}: {key}: {exc}") from None
    return values


def read_environment(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Values from environment variables (Ralph's `CB_*` names included): name -> (value, variable)."""
    values: dict[str, tuple[Any, str]] = {}
    for option in OPTIONS:
        for var in option.env:
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            try:
                values[option.name] = (option.parse(raw), var)
            except ValueError as exc:
                raise SettingsError(f"environment variable {var}: {exc}") from None
    return values


def parse_flag(option: Option, raw: str) -> Any:
    try:
        return option.parse(raw)
    except ValueError as exc:
        raise SettingsError(f"{option.flag}: {exc}") from None


def load_settings(
    *,
    workspace: str | None,
    state_dir: str | None = None,
    config: str | None = None,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    command: tuple[str, ...] = (),
    echo: bool | None = None,
) -> Settings:
    """Merge default <- config file <- environment <- flags into one validated Settings.

    `flags` holds already-parsed flag values (see `parse_flag`), keyed by option name.
    """
    env = os.environ if env is None else env
    root = expand_path(workspace or ".", "-w/--workspace")
    if not root.is_dir():
        raise SettingsError(f"-w/--workspace: {str(root)!r} is not a directory")
    root = root.resolve()
    merged: dict[str, Any] = {option.name: option.default for option in OPTIONS}
    sources: dict[str, str] = {}

    config_path: Path | None
    if config is not None:
        config_path = expand_path(config, "--config")
        if not config_path.is_file():
            raise SettingsError(f"--config: {str(config_path)!r} is not a readable file")
    else:
        candidate = root / CONFIG_FILE_NAME
        config_path = candidate if candidate.is_file() else None
    if config_path is not None:
        for name, value in read_config_file(config_path).items():
            merged[name] = value
            sources[name] = f"config {config_path}"
    for name, (value, var) in read_environment(env).items():
        merged[name] = value
        sources[name] = f"environment {var}"
    for name, value in (flags or {}).items():
        merged[name] = value
        sources[name] = f"flag {OPTIONS_BY_NAME[name].flag}"

    state = expand_path(state_dir, "--state-dir") if state_dir else default_state_dir(root, env)
    if not state.is_absolute():
        state = (root / state).resolve()
    if merged["verify"] is not None and merged["verify"].strip().lower() == "auto":
        from ralph_supervisor.verify.command import pick_in

        picked = pick_in(root)
        if picked is None:
            raise SettingsError(f"--verify auto: no test command found in {root} (looked for a Makefile test target, "
                                "package.json's test script, pytest settings or test files, Cargo.toml, go.mod): "
                                "give the command, e.g. --verify 'pytest -q'")
        merged["verify"] = picked.command
        sources["verify"] = f"{sources.get('verify', 'default')} (auto: {picked.why})"
    if merged["log_total_bytes"] < merged["log_max_bytes"]:
        raise SettingsError("--log-total-bytes: must be at least --log-max-bytes")
    known = {f.name for f in fields(Settings)}
    return Settings(
        workspace=root,
        state_dir=state,
        workspace_given=env.get("PWD", "") if workspace is None else workspace,
        command=command,
        echo=echo,
        sources=sources,
        **{k: v for k, v in merged.items() if k in known},
    )


def thresholds_from(settings: Settings) -> Thresholds:
    """The breaker's thresholds from the validated settings."""
    return Thresholds(
        no_progress=settings.no_progress,
        same_error=settings.same_error,
        output_decline=settings.output_decline,
        max_failures=settings.max_failures,
        stall_s=settings.stall,
        paraphrase=settings.paraphrase,
        max_iterations=settings.max_iterations,
        token_budget=settings.token_budget,
        daily_token_budget=settings.daily_token_budget,
        cost_budget=settings.cost_budget,
        daily_cost_budget=settings.daily_cost_budget,
        cooldown_s=settings.cooldown_s,
        max_opens=settings.max_opens,
    )

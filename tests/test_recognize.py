"""Which processes are agent calls: by name or path, through an interpreter, a package runner or a container
front-end; only prompt-mode invocations; never a crash on odd command lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.agents.recognize import Container, known, recognise, stem
from ralph_supervisor.settings import AGENT_NAMES

CALLS = [
    # (process name, command line, agent, via, the agent's own arguments)
    ("claude", ("/root/.local/bin/claude", "-p", "go", "--output-format", "json"), "claude", "command",
     ("-p", "go", "--output-format", "json")),
    ("claude", ("/root/.claude/local/claude", "--print", "go"), "claude", "command", ("--print", "go")),
    ("claude.exe", ("/usr/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", "-p", "x"), "claude", "command",
     ("-p", "x")),
    ("node", ("node", "/w/node_modules/@anthropic-ai/claude-code/cli.js", "-p", "go"), "claude", "interpreter",
     ("-p", "go")),
    ("node", ("/usr/bin/node", "--no-warnings", "/usr/local/bin/claude", "-p", "go"), "claude", "interpreter",
     ("-p", "go")),
    ("node", ("node", "/usr/lib/node_modules/@openai/codex/bin/codex.js", "exec", "--json", "fix it"), "codex",
     "interpreter", ("exec", "--json", "fix it")),
    ("bun", ("bun", "/x/node_modules/@google/gemini-cli/dist/index.js", "-p", "hi"), "gemini", "interpreter",
     ("-p", "hi")),
    ("python3", ("python3", "/repo/examples/bin/claude", "--output-format", "json", "-p", "x"), "claude",
     "interpreter", ("--output-format", "json", "-p", "x")),
    ("npx", ("npx", "-y", "@anthropic-ai/claude-code@latest", "-p", "go"), "claude", "runner", ("-p", "go")),
    ("node", ("node", "/usr/bin/npx", "@anthropic-ai/claude-code", "-p", "go"), "claude", "runner", ("-p", "go")),
    ("node", ("npm exec @anthropic-ai/claude-code -p go",), "claude", "runner", ("-p", "go")),
    ("bunx", ("bunx", "opencode-ai", "run", "x"), "opencode", "runner", ("run", "x")),
    ("pnpm", ("pnpm", "dlx", "@openai/codex", "exec", "x"), "codex", "runner", ("exec", "x")),
    ("npx", ("npx", "--package", "@sourcegraph/amp", "amp", "-x", "go"), "amp", "runner", ("-x", "go")),
    ("docker", ("docker", "run", "--rm", "-v", "/w:/w", "-e", "K=1", "--name", "box", "img:1", "claude", "-p", "go"),
     "claude", "container", ("-p", "go")),
    ("podman", ("podman", "exec", "-i", "box", "codex", "exec", "go"), "codex", "container", ("exec", "go")),
    ("codex", ("codex", "exec", "--json", "x"), "codex", "command", ("exec", "--json", "x")),
    ("opencode", ("opencode", "run", "--format", "json", "x"), "opencode", "command", ("run", "--format", "json", "x")),
    ("cursor-agent", ("cursor-agent", "-p", "--output-format", "json", "x"), "cursor-agent", "command",
     ("-p", "--output-format", "json", "x")),
    ("amp", ("amp", "-x", "hi"), "amp", "command", ("-x", "hi")),
    ("claude", ("/bin/sh", "/opt/tools/claude", "-p", "go"), "claude", "interpreter", ("-p", "go")),
    ("npx", ("/bin/sh", "/opt/tools/npx", "@anthropic-ai/claude-code", "-p", "go"), "claude", "runner", ("-p", "go")),
]

NOT_CALLS = [
    ("claude", ("claude", "mcp", "list")),
    ("claude", ("claude", "--version")),
    ("claude", ("/root/.local/bin/claude", "--help")),
    ("claude", ("claude",)),  # interactive
    ("codex", ("codex", "login")),
    ("node", ("node", "/usr/bin/npm", "i", "-g", "@anthropic-ai/claude-code")),
    ("npm", ("npm", "install", "-g", "@anthropic-ai/claude-code")),
    ("npx", ("npx", "prettier", "--write", ".")),
    ("node", ("node", "/w/node_modules/left-pad/index.js", "-p")),
    ("docker", ("docker", "run", "--name", "claude", "img", "bash")),
    ("docker", ("docker", "ps")),
    ("docker", ("docker", "run", "img")),
    ("bash", ("bash", "-c", "claude -p go")),  # the shell is not the call: the claude it starts is
    ("bash", ("bash", "-c", "claude -p go", "claude")),
    ("bash", ("bash", "/w/ralph_loop.sh", "-p")),
    ("timeout", ("timeout", "60", "claude", "-p", "go")),
    ("opencode", ("opencode", "auth", "login")),
    ("gemini", ("gemini",)),
]


@pytest.mark.parametrize(("name", "cmdline", "agent", "via", "args"), CALLS)
def test_an_agent_call_is_recognised_however_it_is_started(name, cmdline, agent, via, args) -> None:
    found = recognise(name, cmdline, AGENT_NAMES)
    assert found is not None, cmdline
    assert (found.agent, found.via, found.args) == (agent, via, args)


@pytest.mark.parametrize(("name", "cmdline"), NOT_CALLS)
def test_what_is_not_a_prompt_mode_call_is_no_call(name, cmdline) -> None:
    assert recognise(name, cmdline, AGENT_NAMES) is None


def test_a_container_call_names_its_container_where_the_arguments_tell() -> None:
    run = recognise("docker", ("docker", "run", "--cidfile", "/tmp/c.id", "--name", "box", "img", "claude", "-p", "x"),
                    AGENT_NAMES)
    assert run is not None and run.container == Container("docker", "run", "box", "/tmp/c.id")
    exec_ = recognise("podman", ("podman", "exec", "box2", "claude", "-p", "x"), AGENT_NAMES)
    assert exec_ is not None and exec_.container == Container("podman", "exec", "box2", None)


def test_the_resolved_executable_or_script_names_the_agent_when_the_command_line_does_not() -> None:
    cmdline = ("node", "/home/u/bin/cc", "-p", "go")
    assert recognise("node", cmdline, AGENT_NAMES) is None
    found = recognise("node", cmdline, AGENT_NAMES, script="/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js")
    assert found is not None and found.agent == "claude"
    by_exe = recognise("cc", ("cc", "-p", "go"), AGENT_NAMES,
                       exe="/usr/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe")
    assert by_exe is not None and by_exe.agent == "claude"


def test_a_watched_name_no_adapter_knows_counts_on_every_invocation_but_version_and_help() -> None:
    assert recognise("myagent", ("myagent", "do", "it"), ("myagent",)) is not None
    assert recognise("myagent", ("/opt/myagent",), ("myagent",)) is not None
    assert recognise("myagent", ("myagent", "--version"), ("myagent",)) is None
    assert recognise("claude", ("claude", "-p", "x"), ("myagent",)) is None  # not watched


def test_package_paths_count_only_for_the_agents_watched() -> None:
    cmdline = ("node", "/x/node_modules/@openai/codex/bin/codex.js", "exec", "x")
    assert recognise("node", cmdline, ("claude",)) is None
    assert recognise("node", cmdline, ("codex",)) is not None


def test_bundled_short_flags_and_long_flags_with_values_are_prompt_mode() -> None:
    assert recognise("claude", ("claude", "-pc", "x"), AGENT_NAMES) is not None
    assert recognise("gemini", ("gemini", "--prompt=fix it"), AGENT_NAMES) is not None


def test_stem_drops_script_and_exe_suffixes_only() -> None:
    assert [stem(p) for p in ("/a/claude.exe", "cli.js", "/x/codex", ".js", "a.b")] == ["claude", "cli", "codex", ".js", "a.b"]


@given(st.text(max_size=20), st.lists(st.text(max_size=40), max_size=30))
def test_any_command_line_is_read_without_a_crash(name: str, cmdline: list[str]) -> None:
    found = recognise(name, tuple(cmdline), AGENT_NAMES)
    assert found is None or found.agent in AGENT_NAMES


def test_a_huge_command_line_is_read_in_bounded_time() -> None:
    cmdline = ("node", "/x/node_modules/@anthropic-ai/claude-code/cli.js", *(["--flag"] * 100_000), "-p")
    # the arguments looked at are bounded: a -p past them does not make it a call, and nothing hangs
    assert recognise("node", cmdline, AGENT_NAMES) is None
    assert recognise("node", cmdline[:3] + ("-p",), AGENT_NAMES) is not None


def test_knowledge_is_built_once_per_set_of_names() -> None:
    from ralph_supervisor.agents import ADAPTERS

    assert known(AGENT_NAMES, ADAPTERS.values()) is known(AGENT_NAMES, ADAPTERS.values())


def test_a_symlinked_script_names_its_agent_through_the_real_process(tmp_path) -> None:
    """A real `python3` running a symlink to an agent package's script: /proc tells where the link points."""
    import os
    import subprocess
    import sys

    from ralph_supervisor.evidence.call_identity import resolved_paths

    cli = tmp_path / "node_modules" / "@anthropic-ai" / "claude-code" / "cli.py"
    cli.parent.mkdir(parents=True)
    cli.write_text("import time; time.sleep(30)\n")
    link = tmp_path / "cc"
    link.symlink_to(cli)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # a symlink loop resolves to itself, never hangs
    proc = subprocess.Popen([sys.executable, "cc", "-p", "go"], cwd=tmp_path)
    try:
        cmdline = (sys.executable, "cc", "-p", "go")
        exe, script = resolved_paths(proc.pid, cmdline)
        assert script == str(cli.resolve()) and os.path.basename(exe).startswith("python")
        found = recognise("python3", cmdline, AGENT_NAMES, exe=exe, script=script)
        assert found is not None and found.agent == "claude"
        assert resolved_paths(proc.pid, (sys.executable, str(loop))) [1] == str(loop)
        assert resolved_paths(proc.pid, ("bash", "-c", "claude -p x")) == ("", "")
    finally:
        proc.kill()
        proc.wait()
    assert resolved_paths(proc.pid, cmdline) == ("", ""), "a process gone mid-read is no call"

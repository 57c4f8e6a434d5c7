"""Which processes are agent calls, and whose: recognised from the process, not only from its name.

A loop starts its agent in many ways, and each must count as the same call:

- by name or by path (`claude`, `~/.local/bin/claude`, `/opt/…/claude.exe`): argv[0], the kernel's process
  name, or the executable it runs (`/proc/PID/exe`, symlinks resolved);
- through an interpreter (`node …/node_modules/@anthropic-ai/claude-code/cli.js`, `bun x.js`, `deno run`,
  `python3 agent.py`): the script it runs, by its name or the npm package it lives in;
- through a package runner (`npx`, `bunx`, `pnpm dlx`, `npm exec`, `yarn dlx`, `uvx`): the package it names;
- in a container (`docker run … IMAGE claude -p …`, `docker exec box codex exec …`, podman, nerdctl): the
  agent named among the front-end's arguments. Its lifetime is the call; signals to the client do not reach
  the container, which is why such a call says which container it runs in where it can tell.

Only prompt-mode invocations are calls (an iteration of the loop), as each adapter knows them:
`claude -p`, `codex exec`, `gemini -p`, `opencode run`, `cursor-agent -p`, `amp -x`. `claude mcp list`,
`codex login`, `npm i -g @anthropic-ai/claude-code`, `--version` and `--help` are not. A watched name that no
adapter knows (`--iteration-process myagent`) counts on every invocation but `--version` and `--help`.

Everything here is pure: the shell reads `/proc` and passes what it found.

    >>> recognise("node", ("node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js", "-p", "go"),
    ...           ("claude", "codex"))
    Recognised(agent='claude', via='interpreter', args=('-p', 'go'), container=None)
    >>> recognise("claude", ("claude", "mcp", "list"), ("claude",)) is None
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
INTERPRETERS = frozenset({"node", "nodejs", "bun", "deno", "python", "python3", "pypy3"}) | SHELLS
"""Programs whose first operand is the script they run (a shell counts: `#!/bin/sh` agents run as `sh PATH`)."""
NOT_A_CALL_FLAGS = frozenset({"--version", "-v", "-V", "--help", "-h"})
RUNNERS = frozenset({"npx", "bunx", "pnpx", "uvx", "pipx"})
"""Programs whose first operand is a package to run."""
RUNNER_VERBS = {"pnpm": frozenset({"dlx", "exec"}), "yarn": frozenset({"dlx", "exec"}), "npm": frozenset({"exec", "x"}),
                "bun": frozenset({"x"}), "pipx": frozenset({"run"})}
"""Programs that run a package after a sub-command (`pnpm dlx PKG`)."""
CONTAINER_FRONTENDS = frozenset({"docker", "podman", "nerdctl"})
CONTAINER_VERBS = frozenset({"run", "exec"})
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".exe", ".py")
MAX_ARGS = 4096
"""Arguments looked at (a command line of 100 KB is read, not walked to its end)."""


@dataclass(frozen=True)
class PromptMode:
    """How one agent CLI is run for a one-shot call: a flag (`-p`) or a sub-command (`exec`)."""

    flags: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()

    def is_call(self, args: Sequence[str]) -> bool:
        """Are these arguments (after the program) a prompt-mode call? Pure."""
        args = args[:MAX_ARGS]
        if any(arg in NOT_A_CALL_FLAGS for arg in args):
            return False
        if not self.flags and not self.commands:
            return True
        for arg in args:
            if arg == "--":
                break
            if arg in self.flags or (arg.startswith("--") and arg.split("=", 1)[0] in self.flags):
                return True
            if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
                # bundled short flags: `-pc` holds `-p`
                if any(f"-{c}" in self.flags for c in arg[1:] if c.isalpha()):
                    return True
        if self.commands:
            operands = [arg for arg in args if not arg.startswith("-")][:2]
            return any(op in self.commands for op in operands)
        return False


ANY = PromptMode()


@dataclass(frozen=True)
class Recognised:
    """An agent call, and how it was started."""

    agent: str
    """The watched name it is a call of (`claude`)."""
    via: str
    """`command` (by name or path), `interpreter`, `runner` or `container`."""
    args: tuple[str, ...]
    """The agent's own arguments."""
    container: Container | None = None


@dataclass(frozen=True)
class Container:
    """Where a containerised call runs, as far as the front-end's arguments tell."""

    engine: str
    """docker, podman or nerdctl (the program to ask)."""
    verb: str
    """run or exec."""
    target: str | None
    """exec: the container; run: its `--name`, when given."""
    cidfile: str | None = None
    """run: the `--cidfile` the engine writes the container's id to."""


@dataclass(frozen=True)
class Known:
    """What recognition knows of the watched names: each name's prompt mode and the packages that hold it."""

    names: frozenset[str]
    modes: Mapping[str, PromptMode]
    packages: Mapping[str, str]
    """npm/PyPI package name -> the watched name it runs."""

    def mode(self, agent: str) -> PromptMode:
        return self.modes.get(agent, ANY)


def known(names: Iterable[str], adapters: Iterable[object] = ()) -> Known:
    """The knowledge for these watched names, taken from the adapters (`commands`, `packages`, `prompt`)."""
    return _known(tuple(names), tuple(adapters))


@lru_cache(maxsize=32)
def _known(names: tuple[str, ...], adapters: tuple[object, ...]) -> Known:
    wanted = frozenset(names)
    modes: dict[str, PromptMode] = {}
    packages: dict[str, str] = {}
    for adapter in adapters:
        commands = tuple(getattr(adapter, "commands", ()))
        mode = getattr(adapter, "prompt", ANY)
        for command in commands:
            if command in wanted:
                modes.setdefault(command, mode)
        chosen = next((c for c in commands if c in wanted), None)
        if chosen is not None:
            for package in getattr(adapter, "packages", ()):
                packages.setdefault(package, chosen)
    return Known(wanted, modes, packages)


def stem(path: str) -> str:
    """A program's name from its path: the basename without a script or `.exe` suffix."""
    base = os.path.basename(path.rstrip("/"))
    for suffix in SCRIPT_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


def is_interpreter(base: str) -> bool:
    return base in INTERPRETERS or re.fullmatch(r"python3(\.\d+)?|node\d*", base) is not None


def name_matches(name: str, cmdline: Sequence[str], names: Iterable[str]) -> bool:
    """Is this process one of `names` by its name alone (its process name, argv[0], or argv[1] after an
    interpreter)? The rule of `--iteration-process` for a name no adapter knows."""
    wanted = names if isinstance(names, (set, frozenset)) else set(names)
    if name in wanted:
        return True
    if not cmdline:
        return False
    first = os.path.basename(cmdline[0])
    if first in wanted or stem(first) in wanted:
        return True
    if is_interpreter(first) and len(cmdline) > 1:
        return os.path.basename(cmdline[1]) in wanted or stem(cmdline[1]) in wanted
    return False


def script_operand(cmdline: Sequence[str]) -> str | None:
    """The script an interpreter runs (`node --no-warnings /x/cli.js -p` -> `/x/cli.js`), or None. Pure."""
    if not cmdline or not is_interpreter(stem(cmdline[0])):
        return None
    start = 2 if stem(cmdline[0]) == "deno" and len(cmdline) > 1 and cmdline[1] == "run" else 1
    i = _operand(cmdline, start, INTERPRETER_VALUED)
    return cmdline[i] if i is not None else None


def _package_agent(path: str, k: Known) -> str | None:
    """The watched name whose package holds this path (`…/node_modules/@openai/codex/bin/codex.js`)."""
    if "node_modules" not in path and "site-packages" not in path:
        return None
    for package, agent in k.packages.items():
        if f"/{package}/" in path or path.endswith(f"/{package}"):
            return agent
    return None


def _by_path(path: str, k: Known) -> str | None:
    if not path:
        return None
    base = stem(path)
    if base in k.names:
        return base
    return _package_agent(path, k)


def _spec_agent(spec: str, k: Known) -> str | None:
    """A package runner's operand (`@anthropic-ai/claude-code@latest`, `claude`) -> the agent it runs."""
    if not spec or spec.startswith("-"):
        return None
    body = spec[1:] if spec.startswith("@") else spec
    if "@" in body:
        spec = spec[: len(spec) - len(body)] + body.split("@", 1)[0]
    spec = re.split(r"[=<>~!]", spec, maxsplit=1)[0]  # uvx pkg==1.0
    if spec in k.packages:
        return k.packages[spec]
    return spec if spec in k.names else None


def _operand(args: Sequence[str], start: int, valued: frozenset[str] = frozenset()) -> int | None:
    """Index of the first operand at or after `start` (options skipped; those in `valued` take a value)."""
    i = start
    while i < len(args) and i < MAX_ARGS:
        arg = args[i]
        if arg == "--":
            return i + 1 if i + 1 < len(args) else None
        if not arg.startswith("-") or arg == "-":
            return i
        i += 2 if arg in valued else 1
    return None


NPX_VALUED = frozenset({"-p", "--package", "-c", "--call", "--cache", "--registry", "--userconfig", "--from",
                        "--python", "--with", "--spec"})
INTERPRETER_VALUED = frozenset({"-c", "-r", "--require", "--import", "--loader", "--experimental-loader", "-m", "-W",
                                "-X", "--config", "--conditions", "-C", "--env-file", "--title"})
CONTAINER_VALUED = frozenset({
    "-e", "--env", "--env-file", "-v", "--volume", "--mount", "-w", "--workdir", "-u", "--user", "--name",
    "--network", "--net", "-p", "--publish", "--entrypoint", "-h", "--hostname", "--label", "-l", "--cidfile",
    "--platform", "--pull", "--memory", "-m", "--cpus", "--add-host", "--device", "--gpus", "--ipc", "--pid",
    "--restart", "--runtime", "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout", "--tmpfs",
    "--ulimit", "--cap-add", "--cap-drop", "--group-add", "--log-driver", "--log-opt", "--detach-keys",
    "--context", "-c", "--host", "-H", "--config", "--log-level", "--userns", "--uts", "--dns", "--expose",
    "--link", "--volumes-from", "--init-path", "--cgroupns", "--cgroup-parent", "--health-cmd", "--env-host",
})


def _option_value(args: Sequence[str], names: Iterable[str]) -> str | None:
    wanted = tuple(names)
    for i, arg in enumerate(args[:MAX_ARGS]):
        if arg == "--":
            return None
        for name in wanted:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def recognise(name: str, cmdline: Sequence[str], names: Iterable[str] | Known, *, exe: str = "",
              script: str = "", adapters: Iterable[object] | None = None) -> Recognised | None:
    """The agent call this process is, or None. Pure.

    `name` is the kernel's process name, `cmdline` its arguments; `exe` the executable it runs and `script`
    the interpreter's script, both with symlinks resolved, where the caller read them. `names` the watched
    names (or a `known(...)` value); the adapters default to the package's own."""
    if isinstance(names, Known):
        k = names
    else:
        if adapters is None:
            from ralph_supervisor.agents import ADAPTERS

            adapters = ADAPTERS.values()
        k = known(names, adapters)
    if not cmdline:
        if name in k.names:
            return _checked(Recognised(name, "command", ()), k)
        return None
    cmdline = tuple(cmdline[:MAX_ARGS])
    if len(cmdline) == 1 and " " in cmdline[0] and not os.path.exists(cmdline[0]):
        cmdline = tuple(cmdline[0].split())  # a process that set its title (npm: "npm exec PKG ...")
    first = os.path.basename(cmdline[0])
    base = stem(first)
    # 1. the program itself, by name or by path
    agent = next((a for a in (name if name in k.names else None, base if base in k.names else None,
                              _package_agent(cmdline[0], k), _by_path(exe, k) if exe else None) if a), None)
    if agent is not None and not is_interpreter(base) and base not in RUNNERS and base not in CONTAINER_FRONTENDS:
        return _checked(Recognised(agent, "command", cmdline[1:]), k)
    # 2. an interpreter running the agent's script
    if is_interpreter(base):
        start = 1
        if base == "deno" and len(cmdline) > 1 and cmdline[1] == "run":
            start = 2
        i = _operand(cmdline, start, INTERPRETER_VALUED)
        if i is not None:
            agent = _by_path(cmdline[i], k) or (_by_path(script, k) if script else None)
            if agent is not None:
                return _checked(Recognised(agent, "interpreter", cmdline[i + 1:]), k)
            front = stem(cmdline[i])
            if front in RUNNERS or front in RUNNER_VERBS or front in CONTAINER_FRONTENDS:
                return recognise(front, (front, *cmdline[i + 1:]), k)  # `node /usr/bin/npx PKG`: the runner decides
        if agent is None and name in k.names:  # a script whose shebang names an interpreter: comm is the script
            return _checked(Recognised(name, "interpreter", cmdline[2:] if len(cmdline) > 1 else ()), k)
        return None
    # 3. a package runner
    at: int | None = None
    if base in RUNNERS:
        at = 1
    elif base in RUNNER_VERBS and len(cmdline) > 1:
        verb = _operand(cmdline, 1)
        if verb is not None and cmdline[verb] in RUNNER_VERBS[base]:
            at = verb + 1
    if at is not None:
        given = _option_value(cmdline[at:], ("--package", "-p", "--from", "--spec"))
        i = _operand(cmdline, at, NPX_VALUED)
        agent = _spec_agent(given, k) if given else None
        if i is not None:
            agent = agent or _spec_agent(cmdline[i], k)
            if agent is not None:
                return _checked(Recognised(agent, "runner", cmdline[i + 1:]), k)
        return None
    # 4. a container front-end
    if base in CONTAINER_FRONTENDS:
        verb_at = _operand(cmdline, 1, CONTAINER_VALUED)
        if verb_at is not None and cmdline[verb_at] == "container":
            verb_at = _operand(cmdline, verb_at + 1, CONTAINER_VALUED)
        if verb_at is None or cmdline[verb_at] not in CONTAINER_VERBS:
            return None
        verb = cmdline[verb_at]
        rest = cmdline[verb_at + 1:]
        target_at = _operand(rest, 0, CONTAINER_VALUED)
        if target_at is None or target_at + 1 >= len(rest):
            return None
        command = rest[target_at + 1:]
        inner = recognise(stem(command[0]), command, k)
        if inner is None or inner.via == "container":
            return None
        options = rest[:target_at]
        container = Container(base, verb, rest[target_at] if verb == "exec" else _option_value(options, ("--name",)),
                              _option_value(options, ("--cidfile",)) if verb == "run" else None)
        return Recognised(inner.agent, "container", inner.args, container)
    return None


def _checked(found: Recognised, k: Known) -> Recognised | None:
    return found if k.mode(found.agent).is_call(found.args) else None

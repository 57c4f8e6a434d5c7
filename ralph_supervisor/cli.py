"""Command line: parse arguments, build Settings, dispatch subcommands, map outcomes to exit codes.

`ralph-supervise [run] [OPTIONS] -- COMMAND` is the default command. Every usage or configuration
error is exit 1 with one line on stderr naming the flag, variable or file (docs/reference.md),
before anything is spawned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from ralph_supervisor import __version__
from ralph_supervisor.settings import (
    OPTIONS,
    Settings,
    SettingsError,
    expand_path,
    load_settings,
    parse_flag,
)

USAGE = """\
ralph-supervise [run] [OPTIONS] -- COMMAND [ARG...]   spawn COMMAND and supervise it
ralph-supervise status [--json | --tmux] [-w DIR]     breaker and child status
ralph-supervise reset [-w DIR]                        breaker to CLOSED, a paused tree resumed
ralph-supervise pause | resume | stop [-w DIR]        ask the running supervisor of DIR
ralph-supervise watch [--all] [-w DIR]                live view of a supervised loop (of every loop with --all)
ralph-supervise report [-w DIR] [--html FILE] [--json] [--since ISO|DURATION]   what happened, for a human
ralph-supervise ls [--json] [--prune]                 every supervisor of this user on this machine
ralph-supervise ls --orphans [--json]                 state folders whose workspace is gone
ralph-supervise forget [--yes] [-w DIR]               remove a workspace's state folder (asks first)
ralph-supervise check --ledger FILE [FLAGS]           loop-context compatible ledger check
ralph-supervise snapshots [--json] [-w DIR]          the workspace snapshots, one per iteration
ralph-supervise restore ITERATION [--to DIR] [PATH...] [-w DIR]   bring a snapshot's files back
ralph-supervise serve [--listen HOST:PORT] [--allowed-host NAME] [--public-url URL] [--rotate-token]
                                                      a live web page of every loop, with pause/resume/stop
ralph-supervise restore --commits | --commit C --branch NAME [-w DIR]   the commits kept, one put back
ralph-supervise --circuit-status | --reset-circuit    the same as status / reset
ralph-supervise --version | --help"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 1 (not usage text and exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise SettingsError(" ".join(message.split()))  # one line, whatever the arguments held


def _workspace_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-w", "--workspace", metavar="DIR", default=None, help="the watched project folder (default: .)")
    parser.add_argument("--state-dir", metavar="DIR", default=None,
                        help="where the supervisor keeps its files (default: a folder of DIR's own under "
                             "$XDG_STATE_HOME/ralph-supervise/workspaces/, outside DIR)")


def _run_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ralph-supervise run", usage="ralph-supervise [run] [OPTIONS] -- COMMAND [ARG...]",
                     description="Spawn COMMAND and supervise it.", argument_default=argparse.SUPPRESS)
    _workspace_args(parser)
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML config file (default: DIR/.ralph-supervise.toml when present)")
    parser.add_argument("--echo", dest="echo", action="store_const", const=True, default=None,
                        help="echo the child's output on stdout (default: when stdout is a terminal)")
    parser.add_argument("--no-echo", dest="echo", action="store_const", const=False)
    for option in OPTIONS:
        kwargs: dict[str, Any] = {"dest": f"opt_{option.name}", "metavar": option.metavar, "help": option.help}
        if option.repeatable:
            kwargs["action"] = "append"
        if option.switch:
            kwargs.update(action="store_const", const="true", metavar=None)
            del kwargs["metavar"]
        elif option.metavar is None and option.default is False:  # a switch: `--no-overage` (a value is optional)
            kwargs.update(nargs="?", const="true", metavar="true|false")
        parser.add_argument(option.flag, **kwargs)
    parser.add_argument("--verbose", dest="opt_log_detail", action="store_const", const="verbose",
                        help="the same as --log-detail verbose")
    parser.add_argument("--quiet", dest="opt_log_detail", action="store_const", const="quiet",
                        help="the same as --log-detail quiet")
    return parser


def _state_dir(workspace: str | None, state_dir: str | None) -> Path:
    root = expand_path(workspace or ".", "-w/--workspace")
    if not root.is_dir():
        raise SettingsError(f"-w/--workspace: {str(root)!r} is not a directory")
    if state_dir:
        path = expand_path(state_dir, "--state-dir")
        return path if path.is_absolute() else (root / path).resolve()
    from ralph_supervisor.state_folder import find_state_dir

    return find_state_dir(root.resolve())


def build_run_settings(argv: Sequence[str], env: dict[str, str] | None = None) -> Settings:
    """Parse `run` arguments (everything after `--` is the command) into validated Settings."""
    argv = list(argv)
    if "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1:]
    else:
        options, command = argv, []
    args = _run_parser().parse_args(options)
    if not command:
        raise SettingsError("run: no COMMAND given (usage: ralph-supervise [run] [OPTIONS] -- COMMAND [ARG...])")
    flags: dict[str, Any] = {}
    for option in OPTIONS:
        raw = getattr(args, f"opt_{option.name}", None)
        if raw is None:
            continue
        if option.repeatable:
            flags[option.name] = tuple(v for item in raw for v in parse_flag(option, item))
        else:
            flags[option.name] = parse_flag(option, raw)
    return load_settings(
        workspace=getattr(args, "workspace", None),
        state_dir=getattr(args, "state_dir", None),
        config=getattr(args, "config", None),
        flags=flags,
        env=os.environ if env is None else env,
        command=tuple(command),
        echo=getattr(args, "echo", None),
    )


def cmd_run(argv: Sequence[str]) -> int:
    settings = build_run_settings(argv)
    from ralph_supervisor.daemon import run_supervisor

    return run_supervisor(settings)


def _simple_parser(name: str, extra: Sequence[tuple[str, str]] = ()) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"ralph-supervise {name}")
    _workspace_args(parser)
    for flag, help_text in extra:
        parser.add_argument(flag, action="store_true", help=help_text)
    return parser


def cmd_status(argv: Sequence[str]) -> int:
    args = _simple_parser("status", [("--json", "machine-readable (the keys are in docs/reference.md)"),
                                     ("--tmux", "one short line for a tmux status bar")]).parse_args(argv)
    from ralph_supervisor import status
    from ralph_supervisor.masking import Masker

    report = status.collect(_state_dir(args.workspace, args.state_dir))
    from ralph_supervisor.worktree import running_in_worktrees

    report["worktrees"] = running_in_worktrees(expand_path(args.workspace or ".", "-w/--workspace"))
    masker = Masker.for_workspace(expand_path(args.workspace or ".", "-w/--workspace"))  # it quotes the agent
    if args.json:
        print(masker.mask(json.dumps(report, indent=2)))
    elif args.tmux:
        print(masker.mask(status.tmux_line(report)))
    else:
        print(masker.mask(status.human(report)))
    return 0


def cmd_reset(argv: Sequence[str]) -> int:
    args = _simple_parser("reset").parse_args(argv)
    from ralph_supervisor import status

    print(status.reset(_state_dir(args.workspace, args.state_dir)))
    return 0


def cmd_control(name: str, argv: Sequence[str]) -> int:
    args = _simple_parser(name).parse_args(argv)
    from ralph_supervisor.control import ControlError, NoSupervisor, request
    from ralph_supervisor.settings import OPTIONS_BY_NAME

    state_dir = _state_dir(args.workspace, args.state_dir)
    timeout = 30.0
    if name == "stop":  # the supervisor answers once the tree is gone: TERM, its --grace, KILL
        timeout = float(OPTIONS_BY_NAME["grace"].default) + 60.0
    try:
        result = request(state_dir, name, timeout=timeout)
    except NoSupervisor:
        where = expand_path(args.workspace or ".", "-w/--workspace").resolve()
        print(f"ralph-supervise {name}: no supervisor is running for {where} (state folder {state_dir})",
              file=sys.stderr)
        return 1
    except ControlError as exc:
        print(f"ralph-supervise {name}: {exc}", file=sys.stderr)
        return 1
    message = result.get("message") if isinstance(result, dict) else None
    if message:
        print(message)
    if name == "stop":
        _wait_for_exit(state_dir, timeout)
    return 0


def _wait_for_exit(state_dir: Path, timeout: float) -> None:
    """`stop` returns once the supervisor has exited (it holds the folder's lock until then)."""
    import time

    from ralph_supervisor.files.lock import running_supervisor_pid

    deadline = time.monotonic() + timeout
    while running_supervisor_pid(state_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


def cmd_watch(argv: Sequence[str]) -> int:
    parser = _simple_parser("watch", [("--once", "print one frame and exit"),
                                      ("--all", "every registered loop, one line each (see ls)")])
    args = parser.parse_args(argv)
    if args.all:
        from ralph_supervisor import fleet_view

        return fleet_view.main(once=args.once)
    from ralph_supervisor import watch

    root = expand_path(args.workspace or ".", "-w/--workspace").resolve()
    return watch.main(root, _state_dir(args.workspace, args.state_dir), once=args.once)


def cmd_report(argv: Sequence[str]) -> int:
    parser = _simple_parser("report", [("--json", "the account as JSON, for scripts")])
    parser.add_argument("--html", metavar="FILE", default=None, help="also write the self-contained HTML report")
    parser.add_argument("--since", metavar="ISO|DURATION", default=None,
                        help="every run since then (2026-12-01T08:00Z, 12h, 2d) instead of the latest")
    args = parser.parse_args(argv)
    from ralph_supervisor import report

    html = expand_path(args.html, "--html") if args.html else None
    return report.main(_state_dir(args.workspace, args.state_dir), html=html, as_json=args.json, since=args.since)


def cmd_ls(argv: Sequence[str]) -> int:
    parser = _Parser(prog="ralph-supervise ls", description="Every supervisor of this user on this machine.")
    parser.add_argument("--json", action="store_true", help="one JSON object per loop, in a list")
    parser.add_argument("--prune", action="store_true",
                        help="remove the entries of loops that ended or died (and unreadable ones)")
    parser.add_argument("--orphans", action="store_true", help="state folders whose workspace is gone")
    args = parser.parse_args(argv)
    if args.orphans:
        if args.prune:
            raise SettingsError("ls: --orphans and --prune do not go together (forget removes a state folder)")
        from ralph_supervisor.forget import orphans_main

        return orphans_main(as_json=args.json)
    from ralph_supervisor import fleet

    return fleet.main(as_json=args.json, prune=args.prune)


def cmd_snapshots(argv: Sequence[str]) -> int:
    args = _simple_parser("snapshots", [("--json", "machine-readable")]).parse_args(argv)
    from ralph_supervisor.snapshots import restore

    root = expand_path(args.workspace or ".", "-w/--workspace").resolve()
    return restore.list_snapshots(root, _state_dir(args.workspace, args.state_dir), as_json=args.json)


def cmd_restore_commits(argv: Sequence[str]) -> int:
    """`restore --commits [--json]` lists the kept commits; `restore --commit C --branch NAME` puts one back."""
    parser = _Parser(prog="ralph-supervise restore", usage="ralph-supervise restore --commits [--json] [-w DIR] | "
                     "--commit COMMIT --branch NAME [-w DIR]")
    _workspace_args(parser)
    parser.add_argument("--commits", action="store_true", help="list the commits the store keeps")
    parser.add_argument("--json", action="store_true", help="machine-readable")
    parser.add_argument("--commit", metavar="COMMIT", default=None, help="a kept commit (4 or more hex digits)")
    parser.add_argument("--branch", metavar="NAME", default=None, help="the new branch to put it on")
    args = parser.parse_args(argv)
    from ralph_supervisor.snapshots import kept_commits
    from ralph_supervisor.snapshots.git import SnapshotError
    from ralph_supervisor.snapshots.store import SnapshotStore

    root = expand_path(args.workspace or ".", "-w/--workspace").resolve()
    state_dir = _state_dir(args.workspace, args.state_dir)
    try:
        store = SnapshotStore(root, state_dir)
        if args.commit is not None:
            if not args.branch:
                raise SettingsError("restore --commit: --branch NAME is needed (your own branches are never moved)")
            sha = kept_commits.bring_back(store, args.commit, args.branch)
            print(f"branch {args.branch} of {root} is at {sha[:12]} again (with its history)")
            return 0
        listed = kept_commits.kept(store)
    except (SnapshotError, ValueError) as exc:
        print(f"ralph-supervise restore: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([k.to_dict() for k in listed], indent=2))
    elif not listed:
        print(f"no commits kept for {root} (kept while ralph-supervise runs in a git repository)")
    else:
        for k in listed:
            print(f"{k.commit[:12]}  {k.at}  {'' if k.in_repository else '(gone from the repository) '}{k.subject}")
        print("put one back with `ralph-supervise restore --commit COMMIT --branch NAME`")
    return 0


def cmd_restore(argv: Sequence[str]) -> int:
    if any(arg in ("--commits", "--commit") or arg.startswith("--commit=") for arg in argv):
        return cmd_restore_commits(argv)
    parser = _Parser(prog="ralph-supervise restore", usage="ralph-supervise restore ITERATION [--to DIR] [PATH...] [-w DIR]",
                     description="Bring a snapshot's files back (all, or those under the given paths).")
    _workspace_args(parser)
    parser.add_argument("--to", metavar="DIR", default=None,
                        help="write the files into DIR instead of the workspace (nothing else is touched)")
    parser.add_argument("iteration", metavar="ITERATION", help="the iteration whose snapshot to restore")
    parser.add_argument("paths", metavar="PATH", nargs="*", help="files or folders, relative to the workspace")
    args = parser.parse_intermixed_args(argv)
    text = str(args.iteration).strip()
    if not text.isdigit():
        raise SettingsError(f"restore: ITERATION must be a whole number >= 0, got {args.iteration!r}")
    from ralph_supervisor.snapshots import restore

    root = expand_path(args.workspace or ".", "-w/--workspace").resolve()
    state_dir = _state_dir(args.workspace, args.state_dir)
    return restore.restore(root, state_dir, int(text), args.paths, args.to)


def cmd_forget(argv: Sequence[str]) -> int:
    args = _simple_parser("forget", [("--yes", "remove without asking")]).parse_args(argv)
    from ralph_supervisor.forget import forget

    root = expand_path(args.workspace or ".", "-w/--workspace").resolve()
    return forget(root, _state_dir(args.workspace, args.state_dir), yes=args.yes)


def cmd_check(argv: Sequence[str]) -> int:
    from ralph_supervisor import check

    return check.main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv:
            print(USAGE, file=sys.stderr)
            return 1
        head, rest = argv[0], argv[1:]
        if head in ("-h", "--help"):
            print(USAGE)
            print("\nrun options (see `ralph-supervise run --help`)")
            return 0
        if head in ("-V", "--version"):
            print(f"ralph-supervise {__version__}")
            return 0
        if head == "--circuit-status":
            return cmd_status(rest)
        if head == "--reset-circuit":
            return cmd_reset(rest)
        if head == "check":
            return cmd_check(rest)
        if head == "run":
            return cmd_run(rest)
        if head == "status":
            return cmd_status(rest)
        if head == "reset":
            return cmd_reset(rest)
        if head in ("pause", "resume", "stop"):
            return cmd_control(head, rest)
        if head == "watch":
            return cmd_watch(rest)
        if head == "report":
            return cmd_report(rest)
        if head == "ls":
            return cmd_ls(rest)
        if head == "snapshots":
            return cmd_snapshots(rest)
        if head == "restore":
            return cmd_restore(rest)
        if head == "serve":
            from ralph_supervisor import serve

            return serve.main(rest)
        if head == "forget":
            return cmd_forget(rest)
        return cmd_run(argv)
    except SettingsError as exc:
        print(f"ralph-supervise: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130

"""Command line: parse arguments, dispatch subcommands, map outcomes to exit codes."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print("ralph-supervise: not yet implemented", file=sys.stderr)
    return 1

"""What the loop's command asks for that cannot work under the supervisor, said once before it starts.

Ralph's `--monitor` (`-m`) starts a tmux session of its own, runs the loop in it and attaches to it. Under the
supervisor the loop has no terminal (its output is the tap's pipe, its input a pipe or nothing), so the attach
fails at once, `ralph_loop.sh` ends with code 0, and the supervisor stops the tree with the loop inside that
session (measured with ralph_loop.sh e8533cc). The run goes ahead: the words say why it ends.

    >>> terminal_only(["bash", "ralph_loop.sh", "--monitor"]) is not None, terminal_only(["ralph", "--live"])
    (True, None)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

RALPH_COMMANDS = frozenset({"ralph", "ralph_loop.sh"})
"""Ralph's loop as installed (`ralph`) and as checked out."""
MONITOR_FLAGS = frozenset({"--monitor", "-m"})
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "env"})
"""What may stand before the loop's script (`bash ralph_loop.sh`, `/usr/bin/env bash ./ralph_loop.sh`)."""


def terminal_only(command: Sequence[str]) -> str | None:
    """The warning for a loop command that needs a terminal the supervisor does not give it, else None. Pure."""
    args = list(command)
    while args and os.path.basename(args[0]) in SHELLS:
        args.pop(0)
        while args and args[0].startswith("-"):
            if args[0] == "-c":  # a script given inline: not Ralph's command line
                return None
            args.pop(0)
    if not args or os.path.basename(args[0]) not in RALPH_COMMANDS or not MONITOR_FLAGS & set(args[1:]):
        return None
    flag = next(arg for arg in args[1:] if arg in MONITOR_FLAGS)
    return (f"{os.path.basename(args[0])} {flag} attaches tmux to a terminal, and the loop has none under the "
            f"supervisor: the attach fails, the script ends at once and its tmux session is stopped with it. "
            f"Run it without {flag} (plain, or --live); for panes beside it see 'Running in tmux' in the guide")

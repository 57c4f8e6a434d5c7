"""The terminal: nothing written there can hold up supervision, and it is left as it was found.

The supervisor writes two things to its terminal: the loop's output (the echo, on stdout) and its own
log lines (on stderr). A terminal can stop taking bytes at any moment: Ctrl-S (XOFF), a stalled SSH
link, a tmux pane nobody reads; and a write from the background of a terminal with `stty tostop`
raises SIGTTOU, which stops the whole process. So the thread that supervises never writes there: each
destination is an `Outlet` with a writer thread of its own, and every call from outside only queues.

- `facade.py`: `Terminal`, the supervisor's stdout and stderr (one outlet when they are the same file);
- `outlet.py`: `Outlet`, one destination and its writer thread (what may wait, and for how long);
- `echo_budget.py`: about a second of the echo kept while the terminal is behind, the rest dropped,
  counted and said once;
- `our_lines.py`: our own lines (written first, bounded) and the status line at the bottom;
- `modes.py`: the terminal's modes and job control, and putting them back when the tree is paused or
  stopped (the tree's own again on resume);
- `sink.py`: the non-blocking open of the terminal the outlet writes through;
- `stream.py`: `LineStream`, a text stream of whole lines for logging, `sys.stderr` and rich.

Usage (the supervisor):

    terminal = Terminal.take_over(echo=None)    # echo when stdout is a terminal; sys.stderr goes through it
    configure_logging(path, "auto", stream=terminal.stderr)
    tap = OutputTap(log, queue, echo=terminal.echo)
    terminal.tree_paused(); terminal.tree_resumed(); terminal.tree_stopped()
    terminal.status("⧗ LIMIT wait: 2:59:12 left")   # one line at the bottom, in place; erased around the rest
    log.info("supervisor_stopped", **terminal.settle())  # the echo's last second; what it showed and dropped
    terminal.close()                            # our last lines: at most CLOSE_SECONDS for a stuck terminal

and a full-screen view (`watch`):

    outlet = Outlet(1); console = Console(file=outlet.stream())
    if outlet.drained(): live.update(frame, refresh=True)   # a new frame only when the last one is out
    outlet.close(1.0)
"""

from __future__ import annotations

from ralph_supervisor.terminal.facade import Terminal
from ralph_supervisor.terminal.outlet import Outlet

__all__ = ["Outlet", "Terminal"]

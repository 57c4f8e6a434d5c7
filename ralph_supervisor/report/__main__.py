"""`python -m ralph_supervisor.report STATE_DIR`: write `STATE_DIR/report.html`, in a process of its own.

The supervisor renders its report here rather than in itself: a long run's records take tens of MiB for a
moment (about 60 MiB at 10,000 iterations) and a render holds the GIL for a second or more; in a helper
process neither touches supervision, and the memory goes back to the system when the helper exits.

    $ python -m ralph_supervisor.report proj/.ralph-supervise      # exit 0: report.html written
"""

from __future__ import annotations

import sys
from pathlib import Path

from ralph_supervisor.files import report_html
from ralph_supervisor.report import write_report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ralph_supervisor.report STATE_DIR", file=sys.stderr)
        return 2
    try:
        write_report(Path(argv[0]))
    except Exception as exc:  # noqa: BLE001 - one line for the supervisor's warning
        print(f"cannot write {report_html.path(Path(argv[0]))}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

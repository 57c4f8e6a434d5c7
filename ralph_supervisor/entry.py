"""The `ralph-supervise` command's entry point: `check` goes straight to its module.

A loop may run `ralph-supervise check` before every iteration, where start-up is most of the time: this path
imports ralph_supervisor.check alone (the ledger rules), not the command line module with its settings,
logging and supervisor imports, and the process ends as soon as the answer is written (check.main's
`exit_when_done`). Every other command goes to ralph_supervisor.cli.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc alone would cost `check` a tenth of its start-up
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"]:
        from ralph_supervisor import check

        try:
            return check.main(args[1:], exit_when_done=argv is None)
        except KeyboardInterrupt:
            return 130
    from ralph_supervisor import cli

    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())

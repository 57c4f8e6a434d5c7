"""`python -m ralph_supervisor.report STATE_DIR`: write STATE_DIR/report.html (what `ReportWriter` runs)."""

from __future__ import annotations

import sys
from pathlib import Path

from ralph_supervisor.report import write_report

if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m ralph_supervisor.report STATE_DIR", file=sys.stderr)
        sys.exit(1)
    write_report(Path(sys.argv[1]))

"""`python -m ralph_supervisor` is the same program as `ralph-supervise`."""

from __future__ import annotations

import sys

from ralph_supervisor.entry import main

if __name__ == "__main__":
    sys.exit(main())

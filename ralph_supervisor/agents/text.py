"""Any other agent CLI: its output is plain text, read by the rules every adapter falls back on.

The whole output is the reply (without its RALPH_STATUS block); the call failed when one of its last lines is
an error line (or it printed nothing); a usage limit or a blocked error is believed only on error-shaped lines
among the last few. Tokens and dollars are unknown.
"""

from __future__ import annotations

from ralph_supervisor.agents.base import Adapter


class Text(Adapter):
    name = "text"

#!/usr/bin/env python3
"""Keep `docs/reference.md` in step with the code: its options table and trigger list come from here.

    python scripts/reference.py           # rewrite the generated parts of docs/reference.md
    python scripts/reference.py --check   # exit 1 (and say where) when the document is out of date

The options tables are generated from `settings.OPTIONS` and `serve.options.SERVE_OPTIONS` (the one table that feeds flags, TOML and the
environment) and the precedence line from `triggers.PRECEDENCE`, so the reference cannot drift from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ralph_supervisor.serve.options import SERVE_OPTIONS  # noqa: E402
from ralph_supervisor.settings import OPTIONS, Option  # noqa: E402
from ralph_supervisor.triggers import PRECEDENCE  # noqa: E402

DOC = ROOT / "docs" / "reference.md"
PIPE = "\\|"
"""A `|` inside a Markdown table cell."""


def _default(option: Option) -> str:
    value = option.default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(f"`{item}`" for item in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def options_table(options: tuple[Option, ...] = OPTIONS) -> str:
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for option in options:
        flag = f"`{option.flag} {option.metavar}`" if option.metavar else f"`{option.flag}`"
        if option.repeatable:
            flag += " (repeatable)"
        env = ", ".join(f"`{name}`" for name in option.env)
        meaning = option.help.replace("%%", "%").replace("|", PIPE)
        rows.append(f"| {flag.replace('|', PIPE)} | {env} | {_default(option)} | {meaning} |")
    return "\n".join(rows)


def precedence() -> str:
    return ", ".join(f"`{trigger}`" for trigger in PRECEDENCE)


PARTS = {"options": options_table, "precedence": precedence, "serve-options": lambda: options_table(SERVE_OPTIONS)}


def render(text: str) -> str:
    """`text` with every generated part (between `<!-- NAME:begin -->` and `<!-- NAME:end -->`) rewritten."""
    for name, make in PARTS.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        head, found, rest = text.partition(begin)
        if not found:
            raise SystemExit(f"{DOC}: no {begin} marker")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"{DOC}: no {end} marker")
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str]) -> int:
    current = DOC.read_text(encoding="utf-8")
    wanted = render(current)
    if "--check" in argv:
        if wanted != current:
            print(f"{DOC} is out of date with the code: run python scripts/reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The report's "Tests" section: what the supervisor's own verifies found (`--verify`), from `verify.jsonl`.

A plot of passed, failed and skipped tests per verified iteration beside the files each iteration changed
(drawn as inline SVG on the server side: it needs no script, and prints), and a table of the tests each
verify found fixed and broken and the weakening it found. Nothing when the run had no verify.

    section(read_points(state_dir), account.iterations)   # HTML, or "" without verify.jsonl
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from ralph_supervisor.files import verify_jsonl
from ralph_supervisor.format import md_cell, sparkline

POINTS_MAX = 5000
"""Verifies read for the report (the newest)."""
ROWS_MAX = 300
NAMES_SHOWN = 8
WIDTH, HEIGHT, PAD = 960, 220, 36


@dataclass(frozen=True)
class VerifyPoint:
    iteration: int
    passed: int
    failed: int
    skipped: int
    unverified: str | None
    fixed: tuple[str, ...]
    broke: tuple[str, ...]
    weakened: tuple[str, ...]
    covers: tuple[int, ...]


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(v for v in values if isinstance(v, int)) if isinstance(values, list) else ()


def _strs(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values) if isinstance(values, list) else ()


def point(line: Mapping[str, Any]) -> VerifyPoint | None:
    """One `verify.jsonl` line as a point (None when it is not one)."""
    iteration = line.get("iteration")
    if not isinstance(iteration, int):
        return None

    def count(key: str) -> int:
        value = line.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    unverified = line.get("unverified")
    return VerifyPoint(
        iteration=iteration, passed=count("passed"), failed=count("failed") + count("errors"), skipped=count("skipped"),
        unverified=str(unverified) if unverified else None, fixed=_strs(line.get("fixed")),
        broke=_strs(line.get("broke")), weakened=_strs(line.get("weakened")), covers=_ints(line.get("covers")),
    )


def read_points(state_dir: Path) -> tuple[VerifyPoint, ...]:
    return tuple(p for line in verify_jsonl.tail(state_dir, POINTS_MAX) if (p := point(line)) is not None)


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def plot_svg(points: Sequence[VerifyPoint], files: Mapping[int, int]) -> str:
    """Stacked bars of passed (green), failed (red) and skipped (grey) per verify, files changed as dots."""
    shown = [p for p in points if p.unverified is None]
    if not shown:
        return ""
    top = max(1, max(p.passed + p.failed + p.skipped for p in shown))
    most_files = max([1, *files.values()])
    step = (WIDTH - 2 * PAD) / max(1, len(shown))
    bar = max(1.0, step * 0.7)
    scale = (HEIGHT - 2 * PAD) / top
    parts = [f'<svg class="tests-plot" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
             f'aria-label="tests passed, failed and skipped per verified iteration">',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#9ca3af"/>',
             f'<text x="{PAD - 4}" y="{PAD}" text-anchor="end" font-size="11">{top}</text>',
             f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" text-anchor="end" font-size="11">0</text>']
    for index, p in enumerate(shown):
        x = PAD + index * step + (step - bar) / 2
        y = HEIGHT - PAD
        for value, colour, what in ((p.passed, "#2e9d4f", "passed"), (p.failed, "#d33a2c", "failed"),
                                    (p.skipped, "#9ca3af", "skipped")):
            if value <= 0:
                continue
            height = value * scale
            y -= height
            parts.append(f'<rect class="t-{what}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{height:.1f}" '
                         f'fill="{colour}"><title>iteration {p.iteration}: {value} {what}</title></rect>')
        changed = files.get(p.iteration)
        if changed is not None:
            cy = HEIGHT - PAD - (changed / most_files) * (HEIGHT - 2 * PAD)
            parts.append(f'<circle class="t-files" cx="{x + bar / 2:.1f}" cy="{cy:.1f}" r="3" fill="#2878c8">'
                         f'<title>iteration {p.iteration}: {changed} files changed</title></circle>')
        if len(shown) <= 40 or index % max(1, len(shown) // 20) == 0:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - PAD + 14}" text-anchor="middle" '
                         f'font-size="10">{p.iteration}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return _e(shown + (f" (+{len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else ""))


def table(points: Sequence[VerifyPoint]) -> str:
    """One row per verify that fixed, broke or weakened tests, or could not run."""
    rows = [p for p in points if p.fixed or p.broke or p.weakened or p.unverified][-ROWS_MAX:]
    if not rows:
        return "<p class=dim>No verify fixed, broke or weakened a test.</p>"
    body = []
    for p in rows:
        covered = (f"{p.covers[0]}–{p.covers[-1]}" if len(p.covers) > 1 else str(p.iteration))
        counts = "unverified: " + p.unverified if p.unverified else f"{p.passed} passed, {p.failed} failed, {p.skipped} skipped"
        body.append(f"<tr><td>{_e(covered)}</td><td>{_e(counts)}</td><td>{_names(p.fixed)}</td>"
                    f"<td>{_names(p.broke)}</td><td>{_names(p.weakened)}</td></tr>")
    return ('<div class="scroll"><table class="tests"><thead><tr><th>iteration</th><th>tests</th><th>fixed</th>'
            f'<th>broke</th><th>weakened</th></tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def section(points: Sequence[VerifyPoint], iterations: Sequence[Any]) -> str:
    """The whole section, or "" when there was no verify."""
    if not points:
        return ""
    files = {row.number: row.files_changed for row in iterations}
    last = points[-1]
    summary = (f"{len(points)} verifies; the last, of iteration {last.iteration}: "
               + (f"unverified ({last.unverified})" if last.unverified
                  else f"{last.passed} passed, {last.failed} failed, {last.skipped} skipped"))
    key = ('<div class="key"><span><i style="background:#2e9d4f"></i>passed</span>'
           '<span><i style="background:#d33a2c"></i>failed</span><span><i style="background:#9ca3af"></i>skipped</span>'
           '<span><i style="background:#2878c8"></i>files changed (scaled)</span></div>')
    return ("<section class=\"tests-section\"><h2>Tests</h2>" f"<p>{_e(summary)}</p>" + key + plot_svg(points, files) + table(points)
            + "</section>")


def markdown(points: Sequence[VerifyPoint], rows: int = 20) -> list[str]:
    """The Markdown report's lines: passed per verify as a sparkline, and the verifies that changed something."""
    if not points:
        return []

    out = ["", "## Tests (the supervisor's own verifies)", ""]
    shown = [p for p in points if p.unverified is None]
    if shown:
        out += ["```", f"passed  {sparkline([float(p.passed) for p in shown], 60)}",
                f"failing {sparkline([float(p.failed) for p in shown], 60)}",
                f"        verifies of iterations {shown[0].iteration} to {shown[-1].iteration}", "```", ""]
    notable = [p for p in points if p.fixed or p.broke or p.weakened or p.unverified][-rows:]
    if notable:
        out += ["| iteration | tests | fixed | broke | weakened |", "|---|---|---|---|---|"]
        for p in notable:
            counts = f"unverified: {p.unverified}" if p.unverified else f"{p.passed} passed, {p.failed} failed, {p.skipped} skipped"
            cells = [str(p.iteration), counts, ", ".join(p.fixed[:NAMES_SHOWN]), ", ".join(p.broke[:NAMES_SHOWN]),
                     "; ".join(p.weakened[:3])]
            out.append("| " + " | ".join(md_cell(c, 200, empty="") for c in cells) + " |")
    return out

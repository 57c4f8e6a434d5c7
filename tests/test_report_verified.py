"""The report's Tests section: the supervisor's own verifies, plotted per iteration and listed as tests fixed
and broken, in the HTML (read back as a browser draws it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ralph_supervisor import report
from ralph_supervisor.files.verify_jsonl import VerifyLog
from ralph_supervisor.report.verified import point, read_points, section
from ralph_supervisor.verify.results import TestResults
from ralph_supervisor.verify.runner import VerifyRun
from ralph_supervisor.verify.tampering import SKIP_ADDED, Finding
from tests.helpers.debian import installed

FIXTURES = Path(__file__).parent / "fixtures" / "report"
NOW = 1796200000.0


def state_with_verifies(tmp_path: Path) -> Path:
    state = tmp_path / "proj" / ".ralph-supervise"
    shutil.copytree(FIXTURES / "stuck", state)
    log = VerifyLog(state)
    history = [(0, 0, 3, 0, (), (), ()), (1, 1, 2, 0, ("test_calc::test_add",), (), ()),
               (2, 3, 0, 0, ("test_calc::test_sub", "test_calc::test_mul"), (), ()),
               (3, 1, 0, 2, (), (), (Finding(SKIP_ADDED, "test_calc.py", 11, "@pytest.mark.skip", "test_sub"),)),
               (4, 1, 2, 0, (), ("test_calc::test_sub", "test_calc::test_mul"), ())]
    for iteration, passed, failed, skipped, fixed, broke, findings in history:
        log.record(VerifyRun(iteration=iteration, snapshot=iteration + 1, covers=(iteration,), started=NOW - 100 + iteration,
                             seconds=1.5, exit_code=1 if failed else 0,
                             results=TestResults("junit", passed=passed, failed=failed, skipped=skipped),
                             fixed=fixed, broke=broke, findings=findings).line())
    log.record(VerifyRun(iteration=5, snapshot=6, covers=(5,), started=NOW - 90, seconds=600, exit_code=None,
                         results=None, unverified="the test command did not finish in 600 s (--verify-timeout)").line())
    log.close()
    return state


def test_the_tests_section_plots_each_verify_and_lists_what_it_fixed_broke_and_weakened(tmp_path: Path) -> None:
    state = state_with_verifies(tmp_path)
    points = read_points(state)
    assert [p.iteration for p in points] == [0, 1, 2, 3, 4, 5]
    html = report.html.render_html(report.collect(state, now=NOW, git=False))
    assert "<h2>Tests</h2>" in html and "6 verifies; the last, of iteration 5: unverified" in html
    tests = html.split("<h2>Tests</h2>", 1)[1].split("</section>", 1)[0]
    assert tests.count('class="t-passed"') == 4 and tests.count('class="t-failed"') == 3  # 0 passed, unverified: no bar
    assert tests.count('class="t-skipped"') == 1
    assert "test_calc::test_sub, test_calc::test_mul" in tests and "test_calc.py:11 skip marker added" in tests
    assert "unverified: the test command did not finish in 600 s" in tests


def test_the_markdown_report_has_the_tests_too(tmp_path: Path) -> None:
    state = state_with_verifies(tmp_path)
    text = report.markdown.render_markdown(report.collect(state, now=NOW, git=False))
    part = text.split("## Tests (the supervisor's own verifies)", 1)[1].split("\n## ", 1)[0]
    assert "passed  " in part and "verifies of iterations 0 to 4" in part
    assert "| 2 | 3 passed, 0 failed, 0 skipped | test_calc::test_sub, test_calc::test_mul |  |  |" in part
    assert "| 5 | unverified: the test command did not finish in 600 s (--verify-timeout) |" in part


def test_no_verify_means_no_tests_section(tmp_path: Path) -> None:
    state = tmp_path / "proj" / ".ralph-supervise"
    shutil.copytree(FIXTURES / "stuck", state)
    account = report.collect(state, now=NOW, git=False)
    assert "<h2>Tests</h2>" not in report.html.render_html(account)
    assert "## Tests" not in report.markdown.render_markdown(account)
    assert section((), ()) == ""


def test_damaged_lines_are_skipped_not_fatal() -> None:
    assert point({"iteration": "x"}) is None
    p = point({"iteration": 3, "passed": -1, "failed": "many", "fixed": "not a list", "covers": [1, "2", 3]})
    assert p is not None and (p.passed, p.failed, p.fixed, p.covers) == (0, 0, (), (1, 3))


@pytest.fixture(scope="module")
def chromium() -> str:
    found, why = installed("chromium", "chromium")
    if found is None:
        pytest.skip(f"headless Chromium: {why}")
    return found


@pytest.mark.slow
def test_a_browser_draws_the_tests_plot(tmp_path: Path, chromium: str) -> None:
    from PIL import Image

    state = state_with_verifies(tmp_path)
    page = tmp_path / "report.html"
    report.write_html(report.collect(state, now=NOW, git=False), page)
    probe = tmp_path / "probe.html"  # the Tests section alone at the top, its plot's box in the title
    probe.write_text(page.read_text().replace("</body>", (
        "<script>for(const e of document.querySelectorAll('main > *'))"
        "{if(!e.classList.contains('tests-section'))e.style.display='none';}"
        "var r=document.querySelector('.tests-plot').getBoundingClientRect();"
        "document.title='BOX '+JSON.stringify([r.left,r.top,r.width,r.height]);</script></body>")))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1280,900",
             "--virtual-time-budget=3000"]

    def browse(*args: str) -> subprocess.CompletedProcess[bytes]:
        with tempfile.TemporaryDirectory() as profile:
            return subprocess.run([chromium, *flags, f"--user-data-dir={profile}", *args, probe.as_uri()],
                                  capture_output=True, timeout=120)

    dom = browse("--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    left, top, width, height = json.loads(dom.stdout.decode().split("<title>BOX ", 1)[1].split("</title>", 1)[0])
    assert width > 300 and height > 50
    shot = tmp_path / "shot.png"
    done = browse(f"--screenshot={shot}")
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    plot = Image.open(shot).convert("RGB").crop((int(left), int(top), int(left + width), int(top + height)))
    counts = {colour: n for n, colour in (plot.getcolors(maxcolors=1 << 20) or [])}

    def near(target: tuple[int, int, int]) -> int:
        return sum(n for colour, n in counts.items() if max(abs(a - b) for a, b in zip(colour, target)) <= 14)

    plot.save(tmp_path / "plot.png")
    assert near((46, 157, 79)) > 500 and near((211, 58, 44)) > 200  # green passed bars, red failed bars

"""The `serve` page in a real Chromium (Debian's package, driven by Playwright, never a downloaded browser),
against real supervisors running real loops: the buttons act on the real tree, an open arrives without a
reload, the page is one column on a phone, and nothing a loop prints runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import state_dir_of
from tests.helpers.serve import frozen, start_serve, tree_pids
from tests.helpers.supervise import LOOP, REPO, events, loop_env, start, supervise_argv, wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false")
XSS = ("</script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
       "<svg onload=\"window.__pwned = 3\"></svg> and <b onmouseover=alert(1)>bold</b>")


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (Debian's package chromium; scripts/setup.d/26-serve-browser.sh)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is missing (the test extra in pyproject.toml)")
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "no-downloaded-browsers"))  # never its own
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def supervise(workspace: Path, scenario: str = "progress", *extra: str, command: list[str] | None = None,
              env: dict[str, str] | None = None):
    workspace.mkdir(parents=True, exist_ok=True)
    return start(workspace, *FAST, *extra, "--", *(command or ["bash", str(LOOP)]),
                 env={**loop_env(scenario), **(env or {})})


def child_pid(workspace: Path) -> int:
    started = wait_for(lambda: events(state_dir_of(workspace), "child_started"), what="the loop to start")
    return int(started[-1]["pid"])


def finish(serve: Any, *procs: Any) -> None:
    serve.stop()
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        proc.communicate(timeout=30)


def expect(locator: Any) -> Any:
    """Playwright's waiting assertions (its wait_for_function evaluates a string, which the page's CSP forbids)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def card(page: Any, name: str) -> Any:
    return page.locator("article.card", has=page.locator("h2 a", has_text=name))


def test_the_page_pauses_resumes_and_stops_a_loop_and_shows_an_open_live(tmp_path: Path, browser: Any):
    busy = supervise(tmp_path / "busy")
    stuck = supervise(tmp_path / "stuck", "stuck", "--no-progress", "3", "--cooldown", "60")
    serve = start_serve(tmp_path / "home")
    try:
        page = browser.new_page()
        page.goto(serve.code_url)
        assert page.url == f"{serve.base}/"                        # the code is gone from the address
        expect(page.locator("article.card")).to_have_count(2, timeout=30_000)
        page.evaluate("window.__notReloaded = true")
        busy_card, stuck_card = card(page, "busy"), card(page, "stuck")
        pids = tree_pids(child_pid(tmp_path / "busy"))

        busy_card.locator("button[data-action=pause]").click()
        busy_card.locator("[data-answer]", has_text="pause: paused").wait_for()
        assert frozen(tree_pids(child_pid(tmp_path / "busy"))), "pause left some of the tree running"
        busy_card.locator("[data-state=OPEN]").wait_for()

        busy_card.locator("button[data-action=resume]").click()
        busy_card.locator("[data-answer]", has_text="resume: resumed").wait_for()
        assert not any(frozen([pid]) for pid in tree_pids(child_pid(tmp_path / "busy")))

        stuck_card.locator("[data-state=OPEN]").wait_for(timeout=90_000)   # the breaker opened: no reload
        assert "no-progress" in stuck_card.inner_text()
        assert page.evaluate("window.__notReloaded") is True

        busy_card.locator("button[data-action=stop]").click()
        confirm = busy_card.locator("button[data-action=stop-confirm]")
        assert busy.poll() is None                                   # asking is not stopping
        with page.expect_response(lambda r: r.url.endswith("/stop")) as answer:
            confirm.click()
        assert answer.value.json() == {"ok": True, "message": "the tree is stopped; the supervisor exits"}
        assert busy.wait(timeout=60) == 0
        wait_for(lambda: not [pid for pid in pids if os.path.exists(f"/proc/{pid}")], what="the stopped tree gone")
        busy_card.locator("[data-ended=ended]").wait_for(timeout=30_000)    # marked ended, no reload, still listed
        expect(page.locator("article.card")).to_have_count(2)
        assert "exit 0" in busy_card.inner_text() and "ls --prune" in busy_card.inner_text()
        assert "stop: the tree is stopped" in busy_card.locator("[data-answer]").inner_text()
        assert busy_card.locator("button[data-action=pause]").is_disabled()
        assert busy_card.locator("button[data-action=reset]").is_enabled()   # reset works without a supervisor
        page.screenshot(path=str(tmp_path / "ended.png"), full_page=True)
        pruned = subprocess.run(supervise_argv("ls", "--prune"), capture_output=True, text=True, timeout=30,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert "removed 1 ended" in pruned.stderr, pruned.stderr
        expect(page.locator("article.card")).to_have_count(1, timeout=30_000)  # pruned: gone, no reload
        assert "busy has ended. stop: the tree is stopped" in page.locator("p[data-ended]").inner_text()
        assert page.evaluate("window.__notReloaded") is True

        stuck_card.locator("h2 a").click()                           # the loop's own page: the report's content
        page.locator("[data-verdict]", has_text="no-progress").wait_for(timeout=30_000)
        page.locator("details summary", has_text="escalation.md").click()
        assert "the circuit breaker opened" in page.locator("[data-escalation]").inner_text()
        assert page.locator("a", has_text="report.html").get_attribute("href").endswith("/report.html")
        assert page.locator("#events li").count() > 3
    finally:
        finish(serve, busy, stuck)


def test_on_a_phone_the_page_is_one_column_and_nothing_a_loop_prints_runs(tmp_path: Path, browser: Any):
    agent_bin = tmp_path / "bin"
    agent_bin.mkdir()
    agent = agent_bin / "claude"
    result = {"type": "result", "subtype": "success", "is_error": False, "result": XSS,
              "usage": {"input_tokens": 10, "output_tokens": 10}}
    agent.write_text(f"#!{sys.executable}\nimport json, sys, time\ntime.sleep(0.2)\n"
                     f"print({json.dumps(json.dumps(result))})\n")
    agent.chmod(0o755)
    loop = tmp_path / "xss-loop.sh"
    loop.write_text("while true; do claude -p go; sleep 0.3; done\n")
    path = f"{agent_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    hostile = supervise(tmp_path / "hostile", command=["bash", str(loop)], env={"PATH": path})
    calm = supervise(tmp_path / "calm")
    serve = start_serve(tmp_path / "home")
    try:
        context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
        page = context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.goto(serve.code_url)
        expect(page.locator("article.card")).to_have_count(2, timeout=30_000)
        card(page, "hostile").locator(".reply", has_text="</script><script>").wait_for(timeout=60_000)

        boxes = page.evaluate("Array.from(document.querySelectorAll('article.card'), (e) => {"
                              "const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; })")
        assert len(boxes) == 2 and boxes[0]["x"] == boxes[1]["x"], boxes          # one column
        assert boxes[1]["y"] >= boxes[0]["y"] + boxes[0]["h"] and boxes[0]["x"] + boxes[0]["w"] <= 390, boxes
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(tmp_path / "serve-list-390.png"), full_page=True)

        reply = card(page, "hostile").locator(".reply").inner_text()
        assert reply == XSS
        hostile_id = card(page, "hostile").get_attribute("data-loop")
        page.goto(f"{serve.base}/loop/{hostile_id}")
        page.locator("section .reply", has_text="onerror").wait_for(timeout=30_000)
        page.locator("#plot canvas").first.wait_for(timeout=30_000)   # the vendored plot runs under the CSP
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(tmp_path / "serve-loop-390.png"), full_page=True)
        page.wait_for_timeout(500)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("#main img, #main svg[onload], #main b").count() == 0
        assert dialogs == []
        assert console == []          # the page's own script and styles run under its CSP without a violation
        assert (tmp_path / "serve-list-390.png").stat().st_size > 1000
        shutil.copy(tmp_path / "serve-list-390.png", tmp_path / "kept-serve-list-390.png")
        context.close()
    finally:
        finish(serve, hostile, calm)

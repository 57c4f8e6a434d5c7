"""The web side of `serve`: an aiohttp application with its guard, pages, JSON, live streams and actions.

Every request passes the guard first (`_guard`): the Host header must name this server, the session
cookie must be the one made from the token (or the request redeems the one-time code), and an action
must also come from this page's own Origin with a valid per-page token. What the guard refuses changes
nothing. The pages are small shells; the script (`static/page.js`) fills them from JSON with
`textContent` only, so nothing a loop printed can become markup, and the Content-Security-Policy lets
only the page's own files run. Live updates are server-sent events, fed by one poller that stats the
loops' files (`loops.Loops`) only while somebody listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from ralph_supervisor.files import escalation_md as escalation_file
from ralph_supervisor.files import report_html
from ralph_supervisor.serve import auth
from ralph_supervisor.serve.actions import ACTIONS, ask_supervisor
from ralph_supervisor.serve.loop_page import loop_report
from ralph_supervisor.serve.loops import Loop, Loops
from ralph_supervisor.serve.options import ServeSettings
from ralph_supervisor.text import one_line

CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
SANDBOX_CSP = ("sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
               "style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'")
"""report.html inlines its script: it runs, but sandboxed (an opaque origin: no cookie, no API, no forms)."""
POLL_S = 0.25
"""How often the files are statted while somebody listens (a breaker open reaches the page within this)."""
HEARTBEAT_S = 15.0
REPORT_MIN_S = 1.0
"""A loop's report is rebuilt at most this often while its page is open."""
MAX_BODY = 1024
NOT_SIGNED_IN = ("not signed in: open the address `ralph-supervise serve` printed last (each code works "
                 "once; it prints the next one)")
MAX_STREAMS = 64
"""Live streams open at once (a page holds one); more get 503: bounded, like everything else."""
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}
VENDOR = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def say(line: str) -> None:
    """One line on stderr: what serve refused or could not do (it has no state folder of its own)."""
    print(f"ralph-supervise serve: {one_line(line, 300)}", file=sys.stderr, flush=True)


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(data, default=str), content_type="application/json")


def secure(headers: Any) -> None:
    """The headers every answer carries: the CSP (the page's own unless the handler set a sandbox), no
    sniffing, no referrer (the address may have held the one-time code), no framing, no caching."""
    headers.setdefault("Content-Security-Policy", CSP)
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Frame-Options"] = "DENY" if headers["Content-Security-Policy"] == CSP else "SAMEORIGIN"
    headers.setdefault("Cache-Control", "no-store")


class Hub:
    """The live streams: each listener has a bounded queue; one that does not keep up is dropped."""

    def __init__(self) -> None:
        self.listeners: dict[asyncio.Queue[tuple[str, str] | None], str | None] = {}
        self.wake = asyncio.Event()

    def add(self, loop_id: str | None) -> asyncio.Queue[tuple[str, str] | None]:
        queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue(maxsize=256)
        self.listeners[queue] = loop_id
        self.wake.set()
        return queue

    def remove(self, queue: asyncio.Queue[tuple[str, str] | None]) -> None:
        self.listeners.pop(queue, None)

    def send(self, loop_id: str | None, kind: str, data: Any) -> None:
        text = json.dumps(data, default=str)
        for queue, wanted in list(self.listeners.items()):
            if wanted != loop_id:
                continue
            try:
                queue.put_nowait((kind, text))
            except asyncio.QueueFull:
                self.remove(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)

    def watched(self) -> set[str | None]:
        return set(self.listeners.values())


class Server:
    """The application and what it holds: the token, the one-time code, the loops and the listeners."""

    def __init__(self, settings: ServeSettings, token: str, code: auth.OneTimeCode, loops: Loops | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.token = token
        self.code = code
        self.on_new_code: Callable[[str, auth.OneTimeCode], None] | None = None
        """Told (the client that signed in, the next code) whenever the code is used."""
        self.loops = loops if loops is not None else Loops()
        self.clock = clock
        self.limiter = auth.FailureLimiter()
        self._noted = auth.FailureLimiter()
        self.hub = Hub()
        self._last_poll = 0.0
        self._reports: dict[str, float] = {}
        self._reports_due: set[str] = set()
        self._polling = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None
        self.allowed_hosts = settings.allowed_hosts + ((settings.public_host,) if settings.public_host else ())

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY)
        app.router.add_get("/", self.list_page)
        app.router.add_get("/loop/{id}", self.loop_page)
        app.router.add_get("/loop/{id}/report.html", self.report_html)
        app.router.add_get("/loop/{id}/escalation.md", self.escalation_md)
        app.router.add_get("/static/{name}", self.static)
        app.router.add_get("/favicon.ico", lambda _request: self._no_icon())
        app.router.add_get("/api/loops", self.api_loops)
        app.router.add_get("/api/loop/{id}", self.api_loop)
        app.router.add_get("/api/stream", self.stream)
        app.router.add_get("/api/loop/{id}/stream", self.stream)
        app.router.add_post("/api/loop/{id}/{action}", self.action)
        app.on_startup.append(self._start_poller)
        app.on_shutdown.append(self._close_streams)
        app.on_cleanup.append(self._stop_poller)
        return app

    # ------------------------------------------------------------------ the guard

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await self._checked(request, handler)
        if not response.prepared:  # a stream sent its headers itself, before its first event
            secure(response.headers)
        return response

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        client = request.remote or "?"
        host = request.headers.get("Host")
        if not auth.host_allowed(host, self.settings.host, self.allowed_hosts):
            self._note(client, f"refused a request from {client} for Host {host!r} (not this server's name; "
                               "--allowed-host adds one)")
            return _text(403, "refused: this server does not answer to that Host name (see --allowed-host)")
        now = self.clock()
        code = request.query.get("code")
        if code is not None and request.method == "GET" and request.path == "/":
            if self.limiter.blocked(client, now):
                return _text(429, "too many failed attempts: wait a minute")
            if self.code.redeem(code):
                self.code = auth.OneTimeCode()   # the used one is dead; the terminal gets the next one
                if self.on_new_code is not None:
                    self.on_new_code(client, self.code)
                response = web.Response(status=303, headers={"Location": "/"})
                response.set_cookie(auth.COOKIE_NAME, auth.cookie_value(self.token), httponly=True,
                                    samesite="Strict", path="/")
                return response
            return self._failed(client, now, request, "a wrong or used one-time code")
        if auth.COOKIE_NAME not in request.cookies:  # no token tried: refused, but not counted as a failure
            self._note(client, f"refused {request.method} {request.path} from {client}: no session cookie")
            return _text(401, NOT_SIGNED_IN)
        if not auth.cookie_valid(self.token, request.cookies.get(auth.COOKIE_NAME)):
            if self.limiter.blocked(client, now):
                return _text(429, "too many failed attempts: wait a minute")
            return self._failed(client, now, request, "a wrong or old session cookie")
        if request.method not in ("GET", "HEAD"):
            if not auth.origin_allowed(request.headers.get("Origin"), host, self.settings.public_url):
                self._note(client, f"refused a {request.method} {request.path} from {client}: Origin "
                                   f"{request.headers.get('Origin')!r} is not this page's")
                return _text(403, "refused: the request does not come from this page (Origin)")
            if not auth.page_token_valid(self.token, request.headers.get("X-Page-Token")):
                return self._failed(client, now, request, "a wrong or missing page token",
                                    "refused: the page token is wrong or missing (reload the page)", 403)
        try:
            return await handler(request)
        except web.HTTPException as exc:  # 404s and the like: a short line, with the same headers
            return _text(exc.status, (exc.text or exc.reason or "").strip())

    def _note(self, client: str, line: str) -> None:
        """A refusal's line on stderr, at most `limit` a minute per client (a flood is not a flood of lines)."""
        if self._noted.failed(client, self.clock()) <= self._noted.limit:
            say(line)

    def _failed(self, client: str, now: float, request: web.Request, why: str,
                message: str = "", status: int = 401) -> web.Response:
        """A failed token: counted against the client (the limiter), logged while under the limit."""
        count = self.limiter.failed(client, now)
        if count <= self.limiter.limit:
            say(f"refused {request.method} {request.path} from {client}: {why} ({count} in the last minute)")
        return _text(status, message or NOT_SIGNED_IN)

    # ------------------------------------------------------------------ pages

    def _shell(self, kind: str, loop_id: str = "") -> web.Response:
        page_token = auth.make_page_token(self.token)
        title = "ralph-supervise" if kind == "list" else f"ralph-supervise · {loop_id}"
        body = (
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta name=\"page-token\" content=\"{escape(page_token)}\">"
            f"<title>{escape(title)}</title>"
            "<link rel=\"stylesheet\" href=\"/static/uPlot.min.css\">"
            "<link rel=\"stylesheet\" href=\"/static/page.css\">"
            "<script src=\"/static/uPlot.iife.min.js\" defer></script>"
            "<script src=\"/static/page.js\" defer></script></head>"
            f"<body data-page=\"{escape(kind)}\" data-loop=\"{escape(loop_id)}\">"
            "<header><a href=\"/\" class=\"home\">ralph-supervise</a> <span id=\"live\">connecting…</span></header>"
            "<main id=\"main\"><p class=\"muted\">Loading…</p></main>"
            "<noscript>This page needs JavaScript (its own script only).</noscript></body></html>\n"
        )
        return web.Response(text=body, content_type="text/html")

    async def _no_icon(self) -> web.StreamResponse:
        return web.Response(status=204)   # browsers ask for one; a 404 would be an error in their console

    async def list_page(self, request: web.Request) -> web.StreamResponse:
        return self._shell("list")

    async def loop_page(self, request: web.Request) -> web.StreamResponse:
        loop = await self._loop(request)
        return self._shell("loop", loop.id)

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name in VENDOR:
            folder = resources.files("ralph_supervisor.report") / "vendor"
            kind = VENDOR[name]
        else:
            folder = resources.files("ralph_supervisor.serve") / "static"
            kind = STATIC_TYPES.get(Path(name).suffix, "")
            if not kind or "/" in name or name.startswith("."):
                raise web.HTTPNotFound(text="no such file")
        try:
            data = (folder / name).read_bytes()
        except OSError:
            raise web.HTTPNotFound(text="no such file") from None
        return web.Response(body=data, content_type=kind, charset="utf-8",
                            headers={"Cache-Control": "private, max-age=300"})

    async def _loop(self, request: web.Request) -> Loop:
        await self._poll_if_stale()
        loop = self.loops.get(request.match_info.get("id", ""))
        if loop is None:
            raise web.HTTPNotFound(text="no such loop (it may have ended; see the list)")
        return loop

    async def report_html(self, request: web.Request) -> web.StreamResponse:
        loop = await self._loop(request)
        try:
            data = report_html.path(loop.state_dir).read_bytes()
        except OSError:
            raise web.HTTPNotFound(text="this loop has no report.html yet (it is written at an open and at exit)")
        return web.Response(body=data, content_type="text/html", charset="utf-8",
                            headers={"Content-Security-Policy": SANDBOX_CSP})

    async def escalation_md(self, request: web.Request) -> web.StreamResponse:
        loop = await self._loop(request)
        try:
            data = escalation_file.path(loop.state_dir).read_bytes()
        except OSError:
            raise web.HTTPNotFound(text="this loop has no escalation.md (its breaker has not opened)")
        return web.Response(body=data, content_type="text/plain", charset="utf-8",
                            headers={"Content-Security-Policy": "sandbox; default-src 'none'"})

    # ------------------------------------------------------------------ data

    async def _poll_if_stale(self) -> None:
        """A request reads fresh files (at most one poll per POLL_S), and what it finds reaches the streams."""
        async with self._polling:
            if time.monotonic() - self._last_poll >= POLL_S:
                await self._poll_once()

    def _list_data(self) -> dict[str, Any]:
        return {"loops": self.loops.rows(), "problems": self.loops.problems, "public_url": self.settings.public_url}

    async def api_loops(self, request: web.Request) -> web.StreamResponse:
        await self._poll_if_stale()
        return _json(self._list_data())

    async def api_loop(self, request: web.Request) -> web.StreamResponse:
        loop = await self._loop(request)
        report = await asyncio.to_thread(loop_report, loop.state_dir)
        return _json({"row": loop.row, "events": loop.events(), "report": report})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        loop_id = request.match_info.get("id")
        if len(self.hub.listeners) >= MAX_STREAMS:
            return _text(503, f"too many open pages ({MAX_STREAMS}): close some and reload")
        first: list[tuple[str, Any]]
        if loop_id is None:
            await self._poll_if_stale()
            first = [("loops", self._list_data())]
        else:
            loop = await self._loop(request)
            first = [("row", loop.row)]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        secure(response.headers)
        await response.prepare(request)
        queue = self.hub.add(loop_id)
        try:
            for kind, data in first:
                await response.write(f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n".encode())
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                except asyncio.TimeoutError:
                    await response.write(b": still here\n\n")
                    continue
                if item is None:
                    break
                kind, text = item
                await response.write(f"event: {kind}\ndata: {text}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.hub.remove(queue)
        return response

    # ------------------------------------------------------------------ the poller

    async def _start_poller(self, _app: web.Application) -> None:
        self._poller = asyncio.create_task(self._poll_forever())

    async def _stop_poller(self, _app: web.Application) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _close_streams(self, _app: web.Application) -> None:
        """At shutdown the open streams end at once (a browser reconnects to whatever serves next)."""
        for queue in list(self.hub.listeners):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)

    async def _poll_forever(self) -> None:
        """Stat the files while somebody listens; sleep without a timer while nobody does."""
        while True:
            if not self.hub.listeners:
                self.hub.wake.clear()
                await self.hub.wake.wait()
            await asyncio.sleep(POLL_S)
            try:
                async with self._polling:
                    await self._poll_once()
            except Exception as exc:  # noqa: BLE001 - a bad file must never end the live page
                say(f"could not read the loops: {one_line(exc, 200)}")

    async def _poll_once(self) -> None:
        """Read what changed and tell every listener of it (whoever asked for the poll: the poller or a
        request, so no change is read without being sent); a report held back by REPORT_MIN_S follows."""
        self._last_poll = time.monotonic()
        changed = self.loops.poll()
        watched = self.hub.watched()
        for ident in list(self._reports_due):
            loop = self.loops.loops.get(ident)
            if loop is None or ident not in watched:
                self._reports_due.discard(ident)
            elif ident not in changed:
                await self._push_report(loop)
        if not changed:
            return
        if None in watched:
            self.hub.send(None, "loops", self._list_data())
        for ident in changed & watched:
            loop = self.loops.loops.get(ident)
            if loop is None:
                self.hub.send(ident, "gone", {"id": ident})
                continue
            self.hub.send(ident, "row", loop.row)
            if loop.fresh_events:
                self.hub.send(ident, "events", loop.fresh_events)
            await self._push_report(loop)
        for loop in self.loops.loops.values():
            loop.fresh_events = []

    async def _push_report(self, loop: Loop) -> None:
        now = time.monotonic()
        if now - self._reports.get(loop.id, 0.0) < REPORT_MIN_S:
            self._reports_due.add(loop.id)
            return
        self._reports_due.discard(loop.id)
        self._reports[loop.id] = now
        report = await asyncio.to_thread(loop_report, loop.state_dir)
        self.hub.send(loop.id, "report", report)

    # ------------------------------------------------------------------ actions

    async def action(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["action"]
        if name not in ACTIONS:
            raise web.HTTPNotFound(text=f"no such action (expected one of: {', '.join(ACTIONS)})")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _text(413, f"the request body is too big (at most {MAX_BODY} bytes)")
        if body.strip():
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):
                return _text(400, "the request body must be empty or a JSON object")
            if not isinstance(parsed, dict):
                return _text(400, "the request body must be empty or a JSON object")
        loop = await self._loop(request)
        status, answer = await asyncio.to_thread(ask_supervisor, loop.state_dir, name)
        say(f"{name} for {loop.row.get('name', loop.id)} from {request.remote}: {answer.get('message') or answer.get('error')}")
        return _json(answer, status)

"""`ralph-supervise serve`: a live page of every loop of this user on this machine, with pause, resume,
stop and reset, for the person checking from another room, a phone or the next morning's laptop.

It reads what `ls` reads (the registry and each state folder), asks a loop's supervisor over its control
socket only when somebody presses a button, and holds no state of its own but its token
(`$XDG_STATE_HOME/ralph-supervise/serve.token`, mode 0600). Why aiohttp: one well-kept package gives
an HTTP server and server-sent events on asyncio, which the supervisor already uses; no ASGI stack.

    ralph-supervise serve                      # http://127.0.0.1:8765/?code=... (the code works once)
    ralph-supervise serve --listen 127.0.0.1:0 --rotate-token
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import signal
import socket
import sys
from typing import Any, Sequence

from ralph_supervisor.settings import SettingsError

__all__ = ["main", "page_address"]


def page_address(public_url: str | None, loop_id: str | None = None) -> str | None:
    """The address of the list (or of one loop's page) people reach: for notices. Never carries a token."""
    if not public_url:
        return None
    return public_url.rstrip("/") + (f"/loop/{loop_id}" if loop_id else "/")


def _parser() -> argparse.ArgumentParser:
    from ralph_supervisor.cli import _Parser
    from ralph_supervisor.serve.options import SERVE_OPTIONS

    parser = _Parser(prog="ralph-supervise serve", argument_default=argparse.SUPPRESS,
                     description="A live web page of every loop, with pause/resume/stop/reset.")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML file (default: $XDG_CONFIG_HOME/ralph-supervise/serve.toml when present)")
    parser.add_argument("--rotate-token", action="store_true", default=False,
                        help="make a new token first: every browser signed in with the old one is signed out")
    for option in SERVE_OPTIONS:
        kwargs: dict[str, Any] = {"dest": f"opt_{option.name}", "metavar": option.metavar, "help": option.help}
        if option.repeatable:
            kwargs["action"] = "append"
        parser.add_argument(option.flag, **kwargs)
    return parser


def main(argv: Sequence[str]) -> int:
    """Parse, make or read the token, listen, print the address with its one-time code, serve until a
    signal. 1 with one line for bad options, a port in use or a token file that cannot be kept."""
    from ralph_supervisor.serve import auth
    from ralph_supervisor.serve.options import SERVE_OPTIONS, load_serve_settings

    args = _parser().parse_args(list(argv))
    flags = {o.name: getattr(args, f"opt_{o.name}") for o in SERVE_OPTIONS if hasattr(args, f"opt_{o.name}")}
    settings = load_serve_settings(flags, config=getattr(args, "config", None), rotate_token=args.rotate_token)
    try:
        token, note = auth.load_or_make_token(auth.token_path(), rotate=settings.rotate_token)
    except auth.TokenError as exc:
        raise SettingsError(f"serve: {exc}") from None
    if note:
        print(f"ralph-supervise serve: {note}", file=sys.stderr)
    if settings.rotate_token:
        print("ralph-supervise serve: made a new token; every earlier sign-in has stopped working", file=sys.stderr)
    if not auth.is_loopback(settings.host):
        print(f"ralph-supervise serve: warning: listening on {settings.host}, beyond this machine; anyone who "
              "can reach it sees the sign-in page. Prefer an SSH tunnel (ssh -L 8765:127.0.0.1:8765 HOST) or a "
              "private network, and TLS through a reverse proxy (docs/guide.md)", file=sys.stderr)
    try:
        return asyncio.run(_serve(settings, token))
    except KeyboardInterrupt:
        return 0


async def _serve(settings: Any, token: str) -> int:
    from aiohttp import web

    from ralph_supervisor.serve import auth
    from ralph_supervisor.serve.app import Server

    code = auth.OneTimeCode()
    server = Server(settings, token, code)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, shutdown_timeout=2.0,
                           handler_cancellation=True)  # a closed page ends its stream at once
    await runner.setup()
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        await runner.cleanup()
        what = "is in use (another serve?)" if exc.errno == errno.EADDRINUSE else f"cannot be used: {exc.strerror or exc}"
        print(f"ralph-supervise serve: --listen {settings.host}:{settings.port} {what}", file=sys.stderr)
        return 1
    site = web.SockSite(runner, sock, shutdown_timeout=2.0)
    await site.start()
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if auth.is_wildcard(settings.host) else settings.host
    shown = f"[{shown}]" if ":" in shown else shown
    print(f"ralph-supervise serve: open http://{shown}:{port}/?code={code.value}", flush=True)
    print("ralph-supervise serve: the code works once (it signs that browser in); then a new one is printed here",
          flush=True)

    def next_code(client: str, fresh: auth.OneTimeCode) -> None:
        print(f"ralph-supervise serve: a browser at {client} signed in; for another one: "
              f"open http://{shown}:{port}/?code={fresh.value}", flush=True)

    server.on_new_code = next_code
    if settings.public_url:
        print(f"ralph-supervise serve: people reach it at {settings.public_url}/", flush=True)
    from ralph_supervisor.serve import announce

    try:  # so the supervisors' notices link to the loops' pages (the address only, never the token)
        announce.announce(settings.public_url or f"http://{shown}:{port}")
    except OSError as exc:
        print(f"ralph-supervise serve: notices will not link here: cannot write {announce.path()}: "
              f"{exc.strerror or exc}", file=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        announce.withdraw()
        await runner.cleanup()
    return 0

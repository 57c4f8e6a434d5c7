"""Who may use the page: the token, the cookie made from it, the one-time code, the per-page token, the
Host and Origin checks and the limit on failed attempts.

Why this shape: the token itself never travels. `serve` keeps it in a mode-0600 file; the address it
prints carries a one-time code that, once used, sets a cookie derived from the token (HttpOnly,
SameSite=Strict) and stops working. Actions also need a per-page token (an HMAC of a fresh nonce) and an
Origin equal to the page's own, so a link or a form on another site can do nothing. Every check here is
a pure function of its inputs (the clock included), so it is tested without a server.

    token = load_or_make_token(token_path())          # 64 hex digits, kept across starts
    cookie = cookie_value(token)
    page = make_page_token(token); assert page_token_valid(token, page)
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ralph_supervisor import store

TOKEN_FILE = "serve.token"
COOKIE_NAME = "ralph_serve"
TOKEN_RE = re.compile(r"[0-9a-f]{64}")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class TokenError(Exception):
    """The token file cannot be read or written: one line naming the file."""


def token_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/ralph-supervise/serve.token` (`~/.local/state/...` when the variable is unset)."""
    env = os.environ if env is None else env
    state_home = env.get("XDG_STATE_HOME")
    base = Path(state_home) if state_home and os.path.isabs(state_home) else Path.home() / ".local" / "state"
    return base / "ralph-supervise" / TOKEN_FILE


def load_or_make_token(path: Path, *, rotate: bool = False) -> tuple[str, str | None]:
    """The token (made at first start, or anew with `rotate`), and a note when something was repaired
    (a garbage file replaced, loose permissions tightened). TokenError when the file cannot be kept."""
    note: str | None = None
    if not rotate:
        try:
            info = path.stat()
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            text, info = "", None
        except OSError as exc:
            raise TokenError(f"cannot read {path}: {exc.strerror or exc}") from None
        if info is not None and TOKEN_RE.fullmatch(text):
            if info.st_mode & 0o077:
                try:
                    path.chmod(0o600)
                except OSError as exc:
                    raise TokenError(f"{path} is readable by others and cannot be made private: "
                                     f"{exc.strerror or exc}") from None
                note = f"{path} was readable by others: made private (mode 0600)"
            return text, note
        if info is not None:
            note = f"{path} did not hold a token: a new one was made"
    token = secrets.token_hex(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        store.atomic_write_bytes(path, (token + "\n").encode("ascii"), mode=0o600)
    except OSError as exc:
        raise TokenError(f"cannot write {path}: {exc.strerror or exc}") from None
    return token, note


def _mac(token: str, purpose: str) -> str:
    return hmac.new(token.encode("ascii"), purpose.encode("utf-8"), hashlib.sha256).hexdigest()


def cookie_value(token: str) -> str:
    """The session cookie: made from the token (a new token ends every session), never the token itself."""
    return _mac(token, "cookie")


def cookie_valid(token: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(cookie_value(token), presented or "")


def make_page_token(token: str, nonce: str | None = None) -> str:
    """A token for one page's actions: `nonce.mac`, checked without server-side state."""
    nonce = nonce or secrets.token_hex(12)
    return f"{nonce}.{_mac(token, 'page|' + nonce)}"


def page_token_valid(token: str, presented: str | None) -> bool:
    if not presented or presented.count(".") != 1:
        return False
    nonce, mac = presented.split(".")
    if not re.fullmatch(r"[0-9a-f]{8,64}", nonce):
        return False
    return hmac.compare_digest(_mac(token, "page|" + nonce), mac)


@dataclass
class OneTimeCode:
    """The code the printed address carries: good for one use, then gone."""

    value: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    used: bool = False

    def redeem(self, presented: str | None) -> bool:
        if self.used or not presented or not hmac.compare_digest(self.value, presented):
            return False
        self.used = True
        return True


# ---------------------------------------------------------------------------------------------
# Host and Origin


def split_host(header: str | None) -> str | None:
    """The host name of a Host header (`[::1]:8765` -> `::1`, `Box.local:80` -> `box.local`); None if bad."""
    if not header or len(header) > 255 or any(c.isspace() for c in header):
        return None
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1:] and not re.fullmatch(r":\d{1,5}", text[end + 1:])):
            return None
        return text[1:end]
    name, _, port = text.partition(":")
    if (port and not port.isdigit()) or not name or ":" in port:
        return None
    return name.rstrip(".")


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def host_allowed(header: str | None, listen_host: str, allowed: Sequence[str] = ()) -> bool:
    """No DNS rebinding: the Host header must name this server. Loopback names on any port (an `ssh -L`
    tunnel's port is not ours to know), the listening address, the names given with --allowed-host; with a
    wildcard listen, any IP literal (a rebinding attack always sends its own domain name)."""
    name = split_host(header)
    if name is None:
        return False
    if is_loopback(name) or name == listen_host.lower().strip("[]"):
        return True
    if is_wildcard(listen_host) and is_ip_literal(name):
        return True
    return name in {a.lower().rstrip(".") for a in allowed}


def origin_allowed(origin: str | None, host_header: str | None, public_url: str | None = None) -> bool:
    """Actions need an Origin that is this page's own: the scheme and host:port the request was sent to
    (or the public address a reverse proxy serves). A missing or `null` Origin is refused."""
    if not origin or origin == "null" or not host_header:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query or parts.username:
        return False
    if parts.netloc.lower() == host_header.strip().lower():
        return True
    if public_url:
        public = urlsplit(public_url)
        return (parts.scheme, parts.netloc.lower()) == (public.scheme, public.netloc.lower())
    return False


# ---------------------------------------------------------------------------------------------
# Failed attempts


@dataclass
class FailureLimiter:
    """At most `limit` failed token attempts per client in `window_s` seconds; past that the client's
    unauthenticated requests are refused until the window has moved on. Bounded: `max_clients` kept."""

    limit: int = 10
    window_s: float = 60.0
    max_clients: int = 1024
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.get(client)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            self._failures.pop(client, None)
        return times

    def blocked(self, client: str, now: float) -> bool:
        return len(self._recent(client, now)) >= self.limit

    def failed(self, client: str, now: float) -> int:
        """Count one failure; returns how many the client has in the window now."""
        times = self._recent(client, now)
        if client not in self._failures:
            if len(self._failures) >= self.max_clients:
                oldest = min(self._failures, key=lambda c: self._failures[c][-1] if self._failures[c] else 0.0)
                self._failures.pop(oldest, None)
            self._failures[client] = times
        times.append(now)
        while len(times) > self.limit * 2:
            times.popleft()
        return len(times)

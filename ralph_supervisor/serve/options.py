"""`serve`'s options: default <- config file <- environment <- flag, like every option of `run`.

One table (`SERVE_OPTIONS`, of the same `Option` values as `settings.OPTIONS`) feeds the flags, the TOML
file and the environment, and `scripts/reference.py` renders it into docs/reference.md. One rule is
serve's own: a non-loopback `--listen` is taken only from the command line (a config file or a variable
left behind must never open the page to a network by itself).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ralph_supervisor.serve.auth import is_loopback, split_host
from ralph_supervisor.settings import Option, SettingsError

DEFAULT_LISTEN = "127.0.0.1:8765"
CONFIG_NAME = "serve.toml"


def parse_listen(raw: Any) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8765` for IPv6; port 0 picks a free one) -> (host, port)."""
    if not isinstance(raw, str):
        raise ValueError(f"expected HOST:PORT, got {raw!r}")
    text = raw.strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9.-]*):(\d{1,5})", text)
    if not match:
        raise ValueError(f"expected HOST:PORT like 127.0.0.1:8765 or [::1]:8765, got {raw!r}")
    host = match.group(1) if match.group(1) is not None else match.group(3)
    port = int(match.group(2) or match.group(4))
    if port > 65535:
        raise ValueError(f"port must be 0..65535, got {port}")
    return (host or "0.0.0.0"), port


def _listen(raw: Any) -> str:
    host, port = parse_listen(raw)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _hosts(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected a host name, got {item!r}")
        for part in item.split(","):
            name = part.strip().lower().rstrip(".")
            if not name:
                continue
            if split_host(name) != name.strip("[]"):
                raise ValueError(f"expected a host name without port or scheme, got {part.strip()!r}")
            names.append(name.strip("[]"))
    return tuple(names)


def _public_url(raw: Any) -> str | None:
    if not isinstance(raw, str):
        raise ValueError(f"expected a URL, got {raw!r}")
    text = raw.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username or parts.password:
        raise ValueError(f"expected an http(s) address like https://ralph.example.net/, got {raw!r}")
    return text.rstrip("/")


SERVE_OPTIONS: tuple[Option, ...] = (
    Option("listen", "--listen", _listen, DEFAULT_LISTEN,
           "address the page listens on (a non-loopback address only from the command line)",
           ("RALPH_SUPERVISE_LISTEN",), metavar="HOST:PORT"),
    Option("allowed_host", "--allowed-host", _hosts, (),
           "a Host name the page also answers to, e.g. a reverse proxy's (repeatable)",
           ("RALPH_SUPERVISE_ALLOWED_HOST",), repeatable=True, metavar="NAME"),
    Option("public_url", "--public-url", _public_url, None,
           "the address people reach the page at (behind a proxy); notices link there, never with the token",
           ("RALPH_SUPERVISE_PUBLIC_URL",), metavar="URL"),
)
SERVE_OPTIONS_BY_NAME = {option.name: option for option in SERVE_OPTIONS}


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    allowed_hosts: tuple[str, ...] = ()
    public_url: str | None = None
    rotate_token: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def public_host(self) -> str | None:
        return urlsplit(self.public_url).hostname if self.public_url else None


def config_path(env: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/ralph-supervise/serve.toml` (`~/.config/...` when the variable is unset)."""
    home = env.get("XDG_CONFIG_HOME")
    base = Path(home) if home and os.path.isabs(home) else Path.home() / ".config"
    return base / "ralph-supervise" / CONFIG_NAME


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"config file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path}: {exc}") from None
    values: dict[str, Any] = {}
    for key, raw in data.items():
        option = SERVE_OPTIONS_BY_NAME.get(key.replace("-", "_"))
        if option is None:
            raise SettingsError(f"config file {path}: unknown key {key!r} "
                                f"(known keys: {', '.join(sorted(SERVE_OPTIONS_BY_NAME))})")
        try:
            values[option.name] = option.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"config file {path}: {key}: {exc}") from None
    return values


def load_serve_settings(flags: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
                        config: str | None = None, rotate_token: bool = False) -> ServeSettings:
    """Merge the layers; `flags` holds raw flag strings (lists for repeatable ones), keyed by option name."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {o.name: o.default for o in SERVE_OPTIONS}
    sources: dict[str, str] = {}
    path = Path(config).expanduser() if config else config_path(env)
    if config and not path.is_file():
        raise SettingsError(f"--config: {str(path)!r} is not a readable file")
    if path.is_file():
        for name, value in _read_config(path).items():
            merged[name], sources[name] = value, f"config file {path}"
    for option in SERVE_OPTIONS:
        for var in option.env:
            raw = env.get(var)
            if raw is None or not raw.strip():
                continue
            try:
                merged[option.name], sources[option.name] = option.parse(raw), f"environment variable {var}"
            except ValueError as exc:
                raise SettingsError(f"environment variable {var}: {exc}") from None
    for name, raw in flags.items():
        option = SERVE_OPTIONS_BY_NAME[name]
        try:
            if option.repeatable:
                merged[name] = tuple(v for item in raw for v in option.parse(item))
            else:
                merged[name] = option.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{option.flag}: {exc}") from None
        sources[name] = "command line"
    host, port = parse_listen(merged["listen"])
    if not is_loopback(host) and sources.get("listen", "command line") != "command line":
        raise SettingsError(f"{sources['listen']}: listen = {merged['listen']!r} is not a loopback address; "
                            "a network address is taken only from --listen on the command line")
    return ServeSettings(host=host, port=port, allowed_hosts=merged["allowed_host"], public_url=merged["public_url"],
                         rotate_token=rotate_token, sources=sources)

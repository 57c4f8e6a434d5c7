"""`serve`'s rules, without a server: who gets in (token, cookie, one-time code, page token), which Host and
Origin are this page's, the limit on failed attempts, and its options' layers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.serve import auth, page_address
from ralph_supervisor.serve.options import load_serve_settings, parse_listen
from ralph_supervisor.settings import SettingsError


def test_the_token_is_made_once_private_and_kept(tmp_path: Path):
    path = tmp_path / "state" / "ralph-supervise" / "serve.token"
    token, note = auth.load_or_make_token(path)
    assert note is None and auth.TOKEN_RE.fullmatch(token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth.load_or_make_token(path) == (token, None)
    rotated, _ = auth.load_or_make_token(path, rotate=True)
    assert rotated != token and path.read_text().strip() == rotated


def test_a_loose_or_garbage_token_file_is_repaired_with_a_note(tmp_path: Path):
    path = tmp_path / "serve.token"
    token, _ = auth.load_or_make_token(path)
    path.chmod(0o644)
    again, note = auth.load_or_make_token(path)
    assert again == token and "made private" in (note or "")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("not a token\n")
    fresh, note = auth.load_or_make_token(path)
    assert fresh != token and "did not hold a token" in (note or "")


def test_an_unwritable_token_folder_is_one_clear_error(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(auth.TokenError, match="cannot (read|write) .*serve.token"):
        auth.load_or_make_token(blocker / "serve.token")


def test_the_token_path_follows_xdg_state_home(tmp_path: Path):
    assert auth.token_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "ralph-supervise" / "serve.token"
    assert auth.token_path({}).parts[-3:] == ("state", "ralph-supervise", "serve.token")


def test_the_cookie_and_page_tokens_are_made_from_the_token_and_die_with_it():
    token, other = "a" * 64, "b" * 64
    cookie = auth.cookie_value(token)
    assert cookie != token and auth.cookie_valid(token, cookie)
    assert not auth.cookie_valid(other, cookie) and not auth.cookie_valid(token, None)
    page = auth.make_page_token(token)
    assert auth.page_token_valid(token, page)
    assert not auth.page_token_valid(other, page)
    nonce, mac = page.split(".")
    assert not auth.page_token_valid(token, f"{nonce}.{'0' * len(mac)}")
    for bad in ("", "x", "a.b.c", f"{nonce}", f"../{nonce}.{mac}"):
        assert not auth.page_token_valid(token, bad)


def test_the_one_time_code_works_once():
    code = auth.OneTimeCode()
    assert not code.redeem("wrong") and not code.redeem(None)
    assert code.redeem(code.value)
    assert not code.redeem(code.value)


@pytest.mark.parametrize("header, listen, allowed, ok", [
    ("127.0.0.1:8765", "127.0.0.1", (), True),
    ("localhost:9000", "127.0.0.1", (), True),          # an ssh -L tunnel's own port
    ("[::1]:8765", "127.0.0.1", (), True),
    ("127.0.0.2", "127.0.0.1", (), True),
    ("evil.example:8765", "127.0.0.1", (), False),       # DNS rebinding sends the attacker's name
    ("ralph.example.net", "127.0.0.1", ("ralph.example.net",), True),
    ("RALPH.example.net.", "127.0.0.1", ("ralph.example.net",), True),
    ("192.168.1.5:8765", "192.168.1.5", (), True),
    ("192.168.1.6:8765", "192.168.1.5", (), False),
    ("192.168.1.6:8765", "0.0.0.0", (), True),           # a wildcard listen: any IP literal, never a name
    ("box.lan:8765", "0.0.0.0", (), False),
    (None, "127.0.0.1", (), False),
    ("", "127.0.0.1", (), False),
    ("127.0.0.1:port", "127.0.0.1", (), False),
    ("a b", "127.0.0.1", (), False),
])
def test_only_this_servers_names_are_answered(header, listen, allowed, ok):
    assert auth.host_allowed(header, listen, allowed) is ok


@pytest.mark.parametrize("origin, host, public, ok", [
    ("http://127.0.0.1:8765", "127.0.0.1:8765", None, True),
    ("http://localhost:9000", "localhost:9000", None, True),
    ("http://evil.example", "127.0.0.1:8765", None, False),
    ("http://127.0.0.1:8766", "127.0.0.1:8765", None, False),
    ("null", "127.0.0.1:8765", None, False),
    (None, "127.0.0.1:8765", None, False),
    ("https://ralph.example.net", "127.0.0.1:8765", "https://ralph.example.net", True),
    ("http://ralph.example.net", "127.0.0.1:8765", "https://ralph.example.net", False),
    ("http://127.0.0.1:8765/path", "127.0.0.1:8765", None, False),
])
def test_actions_need_this_pages_own_origin(origin, host, public, ok):
    assert auth.origin_allowed(origin, host, public) is ok


@given(st.text(max_size=300))
def test_any_host_header_is_judged_without_raising(text: str):
    assert isinstance(auth.host_allowed(text, "127.0.0.1", ("a.example",)), bool)
    assert isinstance(auth.origin_allowed(text, text), bool)


def test_failed_attempts_are_limited_per_client_within_the_window():
    limiter = auth.FailureLimiter(limit=3, window_s=60.0)
    for i in range(3):
        assert not limiter.blocked("1.2.3.4", 100.0 + i)
        limiter.failed("1.2.3.4", 100.0 + i)
    assert limiter.blocked("1.2.3.4", 103.0)
    assert not limiter.blocked("5.6.7.8", 103.0)
    assert not limiter.blocked("1.2.3.4", 161.0)   # the first failures have left the window


def test_the_limiter_keeps_a_bounded_number_of_clients():
    limiter = auth.FailureLimiter(limit=2, window_s=60.0, max_clients=10)
    for i in range(100):
        limiter.failed(f"10.0.0.{i}", 1.0 + i / 1000)
    assert len(limiter._failures) <= 10


def test_listen_addresses_parse_or_say_what_is_valid():
    assert parse_listen("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":9000") == ("0.0.0.0", 9000)
    for bad in ("8765", "127.0.0.1", "host:99999", "http://x:1", "a b:1"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_options_come_from_defaults_config_environment_and_flags(tmp_path: Path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "none")}
    plain = load_serve_settings({}, env=env)
    assert (plain.host, plain.port, plain.allowed_hosts, plain.public_url) == ("127.0.0.1", 8765, (), None)
    config = tmp_path / "serve.toml"
    config.write_text('listen = "127.0.0.1:9001"\nallowed_host = ["ralph.example.net"]\n')
    from_file = load_serve_settings({}, env=env, config=str(config))
    assert from_file.port == 9001 and from_file.allowed_hosts == ("ralph.example.net",)
    from_env = load_serve_settings({}, env={**env, "RALPH_SUPERVISE_LISTEN": "localhost:9002",
                                            "RALPH_SUPERVISE_PUBLIC_URL": "https://ralph.example.net/"})
    assert (from_env.host, from_env.port, from_env.public_url) == ("localhost", 9002, "https://ralph.example.net")
    flagged = load_serve_settings({"listen": "0.0.0.0:9003", "allowed_host": ["a.example,b.example"]}, env=env)
    assert flagged.host == "0.0.0.0" and flagged.allowed_hosts == ("a.example", "b.example")


@pytest.mark.parametrize("where", ["env", "config"])
def test_a_network_listen_is_taken_only_from_the_command_line(tmp_path: Path, where: str):
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    if where == "env":
        env["RALPH_SUPERVISE_LISTEN"] = "0.0.0.0:8765"
    else:
        (tmp_path / "ralph-supervise").mkdir()
        (tmp_path / "ralph-supervise" / "serve.toml").write_text('listen = "0.0.0.0:8765"\n')
    with pytest.raises(SettingsError, match="only from --listen on the command line"):
        load_serve_settings({}, env=env)


@pytest.mark.parametrize("flags, env, message", [
    ({"listen": "nowhere"}, {}, "--listen: expected HOST:PORT"),
    ({"public_url": "ftp://x"}, {}, "--public-url: expected an http"),
    ({"allowed_host": ["http://x.example"]}, {}, "--allowed-host: expected a host name"),
    ({}, {"RALPH_SUPERVISE_LISTEN": "x"}, "environment variable RALPH_SUPERVISE_LISTEN"),
])
def test_bad_options_are_one_line_naming_the_flag_or_variable(tmp_path: Path, flags, env, message):
    with pytest.raises(SettingsError, match=message):
        load_serve_settings(flags, env={"XDG_CONFIG_HOME": str(tmp_path), **env})


def test_a_bad_config_key_names_the_file(tmp_path: Path):
    config = tmp_path / "serve.toml"
    config.write_text('port = 1\n')
    with pytest.raises(SettingsError, match=f"config file {config}: unknown key 'port'"):
        load_serve_settings({}, env={}, config=str(config))


def test_notices_link_to_the_public_address_without_any_token():
    assert page_address(None) is None
    assert page_address("https://ralph.example.net") == "https://ralph.example.net/"
    assert page_address("https://ralph.example.net/", "proj-0123") == "https://ralph.example.net/loop/proj-0123"


def test_the_token_file_is_never_group_or_world_readable_whatever_the_umask(tmp_path: Path):
    old = os.umask(0)
    try:
        auth.load_or_make_token(tmp_path / "t" / "serve.token")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t" / "serve.token").stat().st_mode) == 0o600

"""Secrets stay secret: what looks like a credential is masked in everything the supervisor shows or sends.

An agent's output carries what it read: an API key from `.env`, a token in an error message, a private key
it printed. The supervisor copies lines of that output into events, the escalation summary, notices (to
Slack, say), the report and `status`. So every such text goes through `mask` first: values in the known
credential formats, private key blocks, and the values of the workspace's own `.env` entries become
`[masked]`. `child.log` keeps the bytes as printed (mode 0600): it is the record, not something shown.

    >>> Masker(frozenset({"hunter2hunter2"})).mask("token sk-ant-api03-abcdefghijklmnopqrstuv and hunter2hunter2")
    'token [masked] and [masked]'
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MASK = "[masked]"
PATTERNS = re.compile("|".join([
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"\bsk-ant-[A-Za-z0-9_-]{16,}",  # Anthropic
    r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_-]{20,}",  # OpenAI
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"\bhooks\.slack\.com/services/[A-Za-z0-9/]+",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{20,}",
    r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JSON web tokens
]))
MUST_HOLD = ("PRIVATE KEY", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox",
             "hooks.slack.com/services/", "AKIA", "ASIA", "AIza", "npm_", "earer", "eyJ")
"""A text that PATTERNS can match holds one of these (each pattern's own literal part): a line with none is
not searched. The search tries every pattern at every position (70 µs for an event line); these are a few µs."""
SECRET_KEY = re.compile(r"(?i)(key|token|secret|passw|pwd|auth|credential|private|dsn|url)")
ENV_FILES = (".env", ".env.local", ".env.development", ".env.production", ".env.test")
MIN_VALUE = 12
"""A .env value whose name does not say it is a secret is masked when it looks like one: this long at least,
letters and digits mixed (masking every `production` or `3000` would garble the text). A secret's name
(KEY, TOKEN, SECRET, PASSWORD, ..._URL) masks any value of 4 characters or more."""


def env_values(text: str) -> set[str]:
    """The values worth masking in a `.env` file's text (KEY=VALUE lines, `export`, quotes). Pure."""
    found: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        looks_random = len(value) >= MIN_VALUE and re.search(r"\d", value) and re.search(r"[A-Za-z]", value)
        if looks_random or (len(value) >= 4 and SECRET_KEY.search(key)):
            found.add(value)
    return found


@dataclass(frozen=True)
class Masker:
    """Masks the known formats and these exact values."""

    values: frozenset[str] = field(default_factory=frozenset)

    longest_first: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The values, longest first: one may contain another."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "longest_first", tuple(sorted(self.values, key=len, reverse=True)))

    def mask(self, text: str) -> str:
        if not text:
            return text
        for value in self.longest_first:
            if value in text:
                text = text.replace(value, MASK)
        if not any(literal in text for literal in MUST_HOLD):
            return text
        return PATTERNS.sub(MASK, text)

    @classmethod
    def for_workspace(cls, workspace: Path | str) -> Masker:
        """The workspace's `.env` values (files that cannot be read add none)."""
        values: set[str] = set()
        for name in ENV_FILES:
            try:
                with open(os.path.join(workspace, name), "rb") as fh:
                    values |= env_values(fh.read(1 << 20).decode("utf-8", "replace"))
            except OSError:
                continue
        return cls(frozenset(values))


_current = Masker()


def configure(workspace: Path | str) -> Masker:
    """Mask this workspace's `.env` values from now on in this process (and the known formats always)."""
    global _current
    _current = Masker.for_workspace(workspace)
    return _current


def mask(text: str) -> str:
    return _current.mask(text)

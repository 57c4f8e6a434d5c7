"""The image check's result, handed from before the suite to the suite: `scripts/container-check.sh --result`.

Building the image takes minutes (a Debian base by debootstrap, then the build), far too long for the timed
suite, so `scripts/setup.d/90-container-image.sh` runs the check before pytest starts, in CI (`CI` set) or when
asked (`RALPH_TEST_IMAGE=1`), and leaves its result here; tests/test_container_image.py reads it, so what was
built and run is a test result like any other: passed, failed, or skipped with the reason (the machine could not
build or run it, the check did not run before this suite, or it ran for other sources).

    python -m tests.helpers.container_image digest      # what the script records: the sources the image holds
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import REPO

INPUTS = ("deploy/docker", "ralph_supervisor", "examples", "pyproject.toml")
"""What the image is built from (the Dockerfile copies the repository; these are the parts it uses)."""


def result_path(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ralph-supervise" / "container-check" / "result.json"


def inputs_digest(root: Path = REPO) -> str:
    """SHA-256 over the paths and contents of the image's sources (tracked and untracked, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *INPUTS],
                            cwd=root, capture_output=True, timeout=60)
    names = sorted({n for n in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if n})
    digest = hashlib.sha256()
    for name in names:
        path = root / name
        if not path.is_file():
            continue  # deleted in the work tree
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Row:
    metric: str
    ours: str
    target: str
    met: str
    """yes, **NO**, or empty (for reference)."""


@dataclass(frozen=True)
class Result:
    status: str
    """passed (everything it ran passed), failed (something it ran failed), cannot (this machine cannot build)."""
    reason: str
    rows: tuple[Row, ...]
    not_run: tuple[str, ...]
    digest: str

    def row(self, prefix: str) -> Row | None:
        return next((r for r in self.rows if r.metric.startswith(prefix)), None)


def read_result(path: Path) -> Result | None:
    """The result the script left, or None when there is none (or it is not one)."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        rows = tuple(Row(*(str(r.get(k, "")) for k in ("metric", "ours", "target", "met"))) for r in data["rows"])
        return Result(str(data["status"]), str(data.get("reason", "")), rows,
                      tuple(str(n) for n in data.get("not_run", [])), str(data.get("digest", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_result(path: Path, status: str, reason: str, rows: list[str], not_run: list[str]) -> None:
    """What the script calls: rows as `metric|ours|target|met` lines."""
    parsed = []
    for line in rows:
        metric, ours, target, met = (line.split("|") + ["", "", "", ""])[:4]
        parsed.append({"metric": metric, "ours": ours, "target": target, "met": met})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"status": status, "reason": reason, "rows": parsed, "not_run": not_run,
                                "digest": inputs_digest()}, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    if argv == ["digest"]:
        print(inputs_digest())
        return 0
    if len(argv) >= 3 and argv[0] == "write":
        # write FILE STATUS REASON ROW... -- NOT_RUN...
        rest = argv[4:]
        cut = rest.index("--") if "--" in rest else len(rest)
        write_result(Path(argv[1]), argv[2], argv[3] if len(argv) > 3 else "", rest[:cut], rest[cut + 1:])
        return 0
    print("usage: python -m tests.helpers.container_image digest | write FILE STATUS REASON ROW... -- NOT_RUN...",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

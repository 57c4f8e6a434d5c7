"""The Grafana dashboard schema, checked offline: Grafana's own published types and the TypeScript compiler.

Grafana keeps its dashboard schema in CUE and publishes what it generates from it as the npm package
`@grafana/schema` (Apache-2.0): TypeScript types only, no JSON Schema (neither that package, nor the Python
`grafana-foundation-sdk`, whose models decode known keys and ignore the rest, nor any Debian package ships
one). So the check is the one Grafana's own front end gets: the dashboard JSON, verbatim, as an object literal
of the type `Dashboard`, compiled with `tsc --strict --noEmit`. The compiler refuses a key the schema does not
know (excess property checks, at every level down to panels, field configs and variables), a value of the
wrong type, an enum value the schema does not list, a required field that is missing. What the schema leaves
open stays open: a panel's `options` and a query target's fields are `Record<string, unknown>` there, so the
panel plugins' own options are not checked (and the PromQL is checked against a real Prometheus elsewhere).

String enums in the generated types are nominal in TypeScript (`ThresholdsMode.Absolute`), where the JSON holds
their values (`"absolute"`): `AsJson<T>` turns each enum into the union of its values, and changes nothing else.

The two packages (pinned) are installed with npm into a cache folder outside the repository (never the
repository's node_modules, where another `npm install --no-save` would prune them):

    python -m tests.helpers.grafana_schema install      # what scripts/setup.d/28-grafana-schema.sh runs
    python -m tests.helpers.grafana_schema check FILE   # exit 0 when FILE passes; the compiler's lines otherwise
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.debian_binaries import cache_dir

PACKAGES = ("typescript@5.9.3", "@grafana/schema@13.2.3")
"""Pinned: a new Grafana schema is taken on purpose (bump, run the test, fix the dashboard)."""

PRELUDE = (
    'import type { Dashboard } from "@grafana/schema";\n'
    "type AsJson<T> = T extends string ? `${T}` : T extends number | boolean | null | undefined ? T"
    " : T extends ReadonlyArray<infer U> ? Array<AsJson<U>>"
    " : T extends object ? { [K in keyof T]: AsJson<T[K]> } : T;\n"
    "export const dashboard: AsJson<Dashboard> =\n"
)
PRELUDE_LINES = PRELUDE.count("\n")
TSC_ARGS = ("--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
            "--skipLibCheck", "--pretty", "false")


def tool_dir() -> Path:
    return cache_dir() / "grafana-schema"


def _tsc(folder: Path) -> Path:
    return folder / "node_modules" / "typescript" / "bin" / "tsc"


def _installed(folder: Path) -> bool:
    versions = {name.rpartition("@")[0]: name.rpartition("@")[2] for name in PACKAGES}
    for name, version in versions.items():
        manifest = folder / "node_modules" / name / "package.json"
        try:
            if f'"version": "{version}"' not in manifest.read_text():
                return False
        except OSError:
            return False
    return _tsc(folder).is_file()


def install(folder: Path | None = None) -> tuple[Path | None, str]:
    """(the folder holding both packages, how) or (None, why not): npm and node must be there."""
    folder = tool_dir() if folder is None else folder
    if _installed(folder):
        return folder, f"cached in {folder}"
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "node and npm are needed (Debian: apt-get install nodejs npm)"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["npm", "install", "--prefix", str(folder), "--no-save", "--no-package-lock",
                               "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES],
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"npm install {' '.join(PACKAGES)} failed: {exc}"
    if done.returncode != 0 or not _installed(folder):
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return None, f"npm install {' '.join(PACKAGES)} failed: {tail or 'nothing installed'}"
    return folder, f"installed into {folder}"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    problems: tuple[str, ...]
    """The compiler's lines, each pointing at the dashboard's own line (`FILE:LINE`)."""


def check(dashboard: Path, folder: Path) -> Verdict:
    """Compile the dashboard as a `Dashboard` literal; its problems with line numbers of the JSON file."""
    source = folder / "check-dashboard.ts"
    text = dashboard.read_text(encoding="utf-8")
    source.write_text(PRELUDE + text.rstrip() + ";\n", encoding="utf-8")
    done = subprocess.run(["node", str(_tsc(folder)), *TSC_ARGS, source.name], cwd=folder, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    problems = []
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith(f"{source.name}("):
            place, _, message = line.partition("): ")
            row = max(1, int(place[len(source.name) + 1:].split(",")[0]) - PRELUDE_LINES)  # 0: the whole object
            line = f"{dashboard.name}:{row}: {message}"
        if line.strip():
            problems.append(line)
    return Verdict(done.returncode == 0 and not problems, tuple(problems))


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        folder, how = install()
        print(f"grafana_schema: {how}", file=sys.stderr if folder is None else sys.stdout)
        return 0 if folder is not None else 1
    if len(argv) == 2 and argv[0] == "check":
        folder, how = install()
        if folder is None:
            print(f"grafana_schema: {how}", file=sys.stderr)
            return 1
        verdict = check(Path(argv[1]), folder)
        print("\n".join(verdict.problems) or f"{argv[1]}: passes the Grafana dashboard schema")
        return 0 if verdict.passed else 2
    print("usage: python -m tests.helpers.grafana_schema install | check FILE", file=sys.stderr)
    return 1


if __name__ == "__main__":
    os.environ.setdefault("NO_UPDATE_NOTIFIER", "1")
    sys.exit(main(sys.argv[1:]))

"""The shipped Grafana dashboard against Grafana's own dashboard schema, offline: the types Grafana publishes
from its CUE schema (`@grafana/schema`), checked by the TypeScript compiler (tests/helpers/grafana_schema.py
says why that and not a JSON Schema: none is published). The check proves it has teeth on broken copies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.helpers.grafana_schema import PACKAGES, check, install

DASHBOARD = REPO / "deploy" / "grafana" / "ralph-supervise-dashboard.json"


@pytest.fixture(scope="module")
def schema() -> Path:
    folder, how = install()
    if folder is None:
        pytest.skip(f"no Grafana schema to check against ({' '.join(PACKAGES)}): {how}")
    return folder


def test_the_shipped_dashboard_passes_grafanas_dashboard_schema(schema: Path):
    verdict = check(DASHBOARD, schema)
    assert verdict.passed, "\n".join(verdict.problems)


def _first_stat(board: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in board["panels"] if p["type"] == "stat")


def _unknown_panel_key(board: dict[str, Any]) -> str:
    _first_stat(board)["colour"] = "red"
    return "'\"colour\"' does not exist"


def _wrong_type(board: dict[str, Any]) -> str:
    _first_stat(board)["gridPos"]["w"] = "4"
    return "'string' is not assignable to type 'number'"


def _unlisted_enum_value(board: dict[str, Any]) -> str:
    _first_stat(board)["fieldConfig"]["defaults"]["thresholds"]["mode"] = "absolut"
    return "'\"absolut\"' is not assignable"


def _missing_required(board: dict[str, Any]) -> str:
    del board["schemaVersion"]
    return "'schemaVersion' is missing"


@pytest.mark.parametrize("break_it", [_unknown_panel_key, _wrong_type, _unlisted_enum_value, _missing_required],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_check_refuses_a_broken_copy_naming_the_line(schema: Path, tmp_path: Path, break_it):
    board = json.loads(DASHBOARD.read_text())
    expected = break_it(board)
    broken = tmp_path / DASHBOARD.name
    broken.write_text(json.dumps(board, indent=2) + "\n")
    verdict = check(broken, schema)
    assert not verdict.passed and any(expected in line for line in verdict.problems), verdict.problems
    place = next(line for line in verdict.problems if expected in line).split(":")
    assert place[0] == DASHBOARD.name and 1 <= int(place[1]) <= len(broken.read_text().splitlines())

#!/usr/bin/env python3
"""Make the JSON schemas of the two Prometheus Operator resources in deploy/kubernetes/ (PodMonitor,
PrometheusRule) that the tests validate them against, offline, in deploy/kubernetes/schemas/.

    python scripts/crd_schemas.py

The schemas come from PyPI's cloudcoil-models-prometheus-operator (pydantic models generated from the
operator's CRDs, version below), installed into a throw-away virtual environment; none of it is a
dependency of the project. Unknown fields are made errors (`additionalProperties: false` on every object
with named fields), as a cluster's strict field validation rejects them, so a misspelt field fails the tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "deploy" / "kubernetes" / "schemas"
PACKAGE = "cloudcoil-models-prometheus-operator==0.80.1.0"
"""Models of prometheus-operator v0.80.1's CRDs (monitoring.coreos.com/v1)."""
KINDS = ("PodMonitor", "PrometheusRule")


def strict(node: Any) -> Any:
    """Every object schema with `properties` rejects other keys."""
    if isinstance(node, dict):
        if "properties" in node and node.get("type") == "object":
            node.setdefault("additionalProperties", False)
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)
    return node


def inside() -> int:
    from cloudcoil.models.prometheus_operator import v1  # type: ignore[import-not-found]

    OUT.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        schema = strict(getattr(v1, kind).model_json_schema(by_alias=True))
        schema["$comment"] = (f"monitoring.coreos.com/v1 {kind}, from PyPI's {PACKAGE} (prometheus-operator's "
                              "CRD); made by scripts/crd_schemas.py, unknown fields rejected")
        (OUT / f"{kind.lower()}.schema.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"{OUT.relative_to(ROOT)}/{kind.lower()}.schema.json")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--inside"]:
        return inside()
    with tempfile.TemporaryDirectory(prefix="ralph-crd-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", PACKAGE], check=True)
        return subprocess.run([str(venv / "bin" / "python"), __file__, "--inside"]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

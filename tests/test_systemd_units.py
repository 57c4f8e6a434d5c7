"""The systemd units: the keys our contract relies on, `systemd-analyze verify`, and the installer."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ralph_supervisor import registry
from tests.helpers import REPO
UNITS = REPO / "systemd"
INSTALL = REPO / "scripts" / "install-systemd.sh"
TEMPLATE = "ralph-supervise@.service"
PLAIN = "ralph-supervise.service"
PLACEHOLDER = "%h/.local/bin/ralph-supervise"
DEFAULT_GRACE_S = 10


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections to (key, value) lists; keys may repeat (Environment=), comments and blanks skipped."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"key outside a section: {line!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def values(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def one(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    found = values(unit, section, key)
    assert len(found) == 1, f"[{section}] {key}= expected once, found {found}"
    return found[0]


def seconds(text: str) -> float:
    return float(text[:-1]) if text.endswith("s") else float(text)


@pytest.fixture(params=[TEMPLATE, PLAIN])
def unit(request: pytest.FixtureRequest) -> dict[str, list[tuple[str, str]]]:
    return parse_unit((UNITS / request.param).read_text())


def test_units_declare_the_service_contract(unit):
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"
    assert seconds(one(unit, "Service", "WatchdogSec")) > 0
    assert one(unit, "Service", "KillMode") == "mixed"
    assert seconds(one(unit, "Service", "TimeoutStopSec")) > DEFAULT_GRACE_S
    assert one(unit, "Service", "Restart") == "on-failure"
    assert 1 <= seconds(one(unit, "Service", "RestartSec")) <= 60
    assert "2" in one(unit, "Service", "RestartPreventExitStatus").split()
    assert {"130", "143"} <= set(one(unit, "Service", "SuccessExitStatus").split())
    assert "PYTHONUNBUFFERED=1" in values(unit, "Service", "Environment")
    assert one(unit, "Service", "WorkingDirectory")
    assert one(unit, "Service", "StandardOutput") == "journal"
    assert one(unit, "Service", "StandardError") == "journal"
    assert one(unit, "Install", "WantedBy") == "default.target"


def test_units_run_the_supervisor_with_the_workspace_and_a_command(unit):
    exec_start = one(unit, "Service", "ExecStart")
    assert exec_start.startswith(f"{PLACEHOLDER} run -w ")
    workspace = exec_start.split(" run -w ", 1)[1].split()[0]
    assert workspace == one(unit, "Service", "WorkingDirectory")
    assert " -- " in exec_start and exec_start.split(" -- ", 1)[1].strip()


def test_template_takes_the_workspace_from_the_escaped_instance_and_the_command_from_an_env_file():
    unit = parse_unit((UNITS / TEMPLATE).read_text())
    assert one(unit, "Service", "WorkingDirectory") == "%f"  # %f = "/" + unescaped instance name
    assert one(unit, "Service", "EnvironmentFile") == "-%E/ralph-supervise/%i.env"  # optional
    assert "RALPH_SUPERVISE_COMMAND=ralph" in values(unit, "Service", "Environment")
    assert one(unit, "Service", "ExecStart").endswith("-- $RALPH_SUPERVISE_COMMAND")


def test_units_explain_themselves_in_a_comment_header():
    for name in (TEMPLATE, PLAIN):
        head = (UNITS / name).read_text().splitlines()[0]
        assert head.startswith(f"# {name}")
    assert "systemd-escape --path" in (UNITS / TEMPLATE).read_text()


# -- systemd-analyze verify -------------------------------------------------------------------


def real_program() -> str:
    venv_bin = REPO / ".venv" / "bin" / "ralph-supervise"
    return str(venv_bin) if os.access(venv_bin, os.X_OK) else sys.executable


def verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", *map(str, paths)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})


@pytest.fixture(scope="module")
def systemd_analyze(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip (with the reason) only when systemd-analyze itself cannot run here."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    probe = tmp_path_factory.mktemp("probe") / "probe.service"
    probe.write_text(f"[Service]\nType=oneshot\nExecStart={sys.executable} -c pass\n")
    result = verify(probe)
    if result.returncode != 0:
        pytest.skip(f"systemd-analyze verify does not work here: {(result.stderr or result.stdout).strip()}")


def copy_units_with_real_program(dest: Path) -> list[Path]:
    """The repo units as a user would install them: a real program in ExecStart, an instance of the template."""
    dest.mkdir(parents=True, exist_ok=True)
    program = real_program()
    paths = []
    for name, as_name in ((TEMPLATE, "ralph-supervise@home-u-my\\x2dproj.service"), (PLAIN, PLAIN)):
        text = (UNITS / name).read_text().replace(PLACEHOLDER, program)
        (dest / as_name).write_text(text)
        paths.append(dest / as_name)
    return paths


def test_systemd_analyze_verify_accepts_both_units_without_a_warning(systemd_analyze, tmp_path: Path):
    result = verify(*copy_units_with_real_program(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).strip() == ""


def test_systemd_analyze_verify_catches_a_broken_unit(systemd_analyze, tmp_path: Path):
    """The check above has teeth: a misspelt key and a missing program are reported."""
    template, _ = copy_units_with_real_program(tmp_path)
    text = template.read_text().replace("KillMode=mixed", "KillMod=mixed")
    template.write_text(text.replace(real_program(), "/nonexistent/ralph-supervise"))
    result = verify(template)
    assert "Unknown key" in result.stderr and "KillMod" in result.stderr
    assert result.returncode != 0 and "/nonexistent/ralph-supervise" in result.stderr


# -- scripts/install-systemd.sh ----------------------------------------------------------------


def fake_program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "ralph-supervise"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return program


def install(home: Path, *args: str, cwd: Path | None = None, path: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME",)}
    env["HOME"] = str(home)
    env["XDG_RUNTIME_DIR"] = str(home)  # no user bus here: a reload attempt cannot touch a real session
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd or home, stdin=subprocess.DEVNULL)


def test_installer_puts_user_units_in_place_with_the_real_program(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    program = fake_program(tmp_path / "bin")
    result = install(home, "--bin", str(program), "--no-reload")
    assert result.returncode == 0, result.stderr
    user_units = home / ".config" / "systemd" / "user"
    for name in (TEMPLATE, PLAIN):
        installed = (user_units / name).read_text()
        assert PLACEHOLDER not in installed
        original = (UNITS / name).read_text()
        assert installed == original.replace(PLACEHOLDER, str(program))
    assert (home / ".config" / "ralph-supervise").is_dir()
    assert sorted(p.name for p in user_units.iterdir()) == sorted([TEMPLATE, PLAIN])  # no temp files


def test_installer_prints_how_to_enable_a_loop_for_the_current_workspace(tmp_path: Path):
    home = tmp_path / "home"
    workspace = tmp_path / "my-proj"
    home.mkdir()
    workspace.mkdir()
    result = install(home, "--bin", str(fake_program(tmp_path / "bin")), "--no-reload", cwd=workspace)
    assert result.returncode == 0, result.stderr
    if shutil.which("systemd-escape"):
        instance = subprocess.run(["systemd-escape", "--path", str(workspace)], capture_output=True,
                                  text=True, check=True).stdout.strip()
        assert f'systemctl --user enable --now "ralph-supervise@{instance}.service"' in result.stdout
        assert f"{home}/.config/ralph-supervise/{instance}.env" in result.stdout
    assert "loginctl enable-linger" in result.stdout


def test_installer_finds_the_program_on_path(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    program = fake_program(tmp_path / "somewhere" / "bin")
    result = install(home, "--no-reload", path=f"{program.parent}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stderr
    installed = (home / ".config" / "systemd" / "user" / TEMPLATE).read_text()
    assert f"ExecStart={program} run -w %f" in installed


def test_installer_quotes_and_escapes_an_awkward_program_path_so_systemd_accepts_it(
    systemd_analyze, tmp_path: Path
):
    home = tmp_path / "home"
    home.mkdir()
    program = fake_program(tmp_path / "my tools%1")
    result = install(home, "--bin", str(program), "--no-reload")
    assert result.returncode == 0, result.stderr
    user_units = home / ".config" / "systemd" / "user"
    escaped = '"' + str(program).replace("%", "%%") + '"'
    assert f"ExecStart={escaped} run" in (user_units / PLAIN).read_text()
    instance = user_units / "ralph-supervise@srv-proj.service"
    shutil.copy(user_units / TEMPLATE, instance)
    checked = verify(instance, user_units / PLAIN)
    assert checked.returncode == 0, checked.stderr
    assert (checked.stdout + checked.stderr).strip() == ""


def test_installer_without_a_reachable_user_systemd_still_succeeds_with_a_warning(tmp_path: Path):
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed, the reload branch is not taken")
    home = tmp_path / "home"
    home.mkdir()
    result = install(home, "--bin", str(fake_program(tmp_path / "bin")))
    assert result.returncode == 0, result.stderr
    assert (home / ".config" / "systemd" / "user" / TEMPLATE).exists()
    assert "daemon-reload" in result.stdout + result.stderr


def test_installer_refuses_a_missing_program_with_one_line(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    result = install(home, "--bin", str(tmp_path / "nope" / "ralph-supervise"), "--no-reload")
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "--bin" in result.stderr and "nope" in result.stderr
    assert not (home / ".config" / "systemd").exists()


def test_installer_refuses_an_unknown_argument(tmp_path: Path):
    result = install(tmp_path, "--frobnicate")
    assert result.returncode == 1
    assert "--frobnicate" in result.stderr


# -- many loops: one instance of the template per workspace --------------------------------------


def escape_path(path: Path, *, unescape: bool = False) -> str:
    args = ["systemd-escape", "--path", *(["--unescape"] if unescape else []), str(path)]
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def exec_start_argv(unit: dict[str, list[tuple[str, str]]], workspace: Path, env: dict[str, str]) -> list[str]:
    """ExecStart as systemd runs it for this instance: %f the unescaped path, $VAR split into words."""
    words = one(unit, "Service", "ExecStart").replace(PLACEHOLDER, "RALPH-SUPERVISE").split()
    argv: list[str] = []
    for word in words:
        if word == "RALPH-SUPERVISE":
            argv += [sys.executable, "-m", "ralph_supervisor"]
        elif word.startswith("$"):
            argv += env[word[1:]].split()
        else:
            argv.append(word.replace("%f", str(workspace)))
    return argv


@pytest.mark.slow
def test_two_instances_of_the_template_run_side_by_side_and_ls_reads_both(
    systemd_analyze, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """What the guide shows: one instance per workspace (systemd-escape --path), both listed by `ls`,
    which reads the registry in XDG_RUNTIME_DIR as a systemd user service has it."""
    import json
    import signal as signals

    from tests.helpers.supervise import wait_for

    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.delenv("RALPH_SUPERVISE_REGISTRY")  # the user manager's environment: XDG_RUNTIME_DIR only
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    units = tmp_path / "units"
    units.mkdir()
    template = (UNITS / TEMPLATE).read_text().replace(PLACEHOLDER, real_program())
    workspaces = [tmp_path / "src" / "alpha", tmp_path / "src" / "beta-2"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for workspace in workspaces:
            workspace.mkdir(parents=True)
            instance = escape_path(workspace)
            assert escape_path(Path(instance), unescape=True) == str(workspace)  # what %f gives back
            unit_file = units / f"ralph-supervise@{instance}.service"
            unit_file.write_text(template)
            checked = verify(unit_file)
            assert checked.returncode == 0 and (checked.stdout + checked.stderr).strip() == "", checked.stderr
            unit = parse_unit((UNITS / TEMPLATE).read_text())
            # The instance's env file, as the guide writes it (the loop and the flags for this workspace).
            env = {"RALPH_SUPERVISE_COMMAND": "sleep 600", "RALPH_SUPERVISE_ARGS": "--grace 1 --log-format json"}
            argv = exec_start_argv(unit, workspace, env)
            assert argv[3:6] == ["run", "-w", str(workspace)]
            procs.append(subprocess.Popen(argv, cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL,
                                          env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}))

        def both() -> list[dict[str, str]]:
            shown = subprocess.run([sys.executable, "-m", "ralph_supervisor", "ls", "--json"], capture_output=True,
                                   text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})
            # Only ours: `ls` also reads ~/.local/state, where the user's other loops may be registered.
            rows = [r for r in json.loads(shown.stdout or "[]") if r["workspace"] in {str(w) for w in workspaces}]
            return rows if len(rows) == 2 and all(r["alive"] for r in rows) else []

        rows = wait_for(both, timeout=30, what="both instances in ls")
        assert sorted(r["workspace"] for r in rows) == [str(w) for w in workspaces]
        assert sorted(r["name"] for r in rows) == ["alpha", "beta-2"]
        assert len(list((runtime / "ralph-supervise").glob("*.json"))) == 2  # the registry's entries
        assert len(list((runtime / "ralph-supervise" / "runs").iterdir())) == 2  # each run's shims
        for proc in procs:
            proc.send_signal(signals.SIGTERM)  # systemctl --user stop (KillMode=mixed: the supervisor first)
        assert [proc.wait(timeout=30) for proc in procs] == [143, 143]  # in SuccessExitStatus
        entries = registry.read_registry(runtime / "ralph-supervise").entries  # marked ended, until ls --prune
        assert sorted((e.ended, e.exit_code) for e in entries) == [(True, 143), (True, 143)]
        assert list((runtime / "ralph-supervise" / "runs").iterdir()) == []
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

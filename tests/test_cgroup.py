"""Finding where a cgroup can be made, from the kernel's own tables (pure readers), and the one line that says
why none can be."""

from __future__ import annotations

from pathlib import Path

from ralph_supervisor.process.cgroup import Figures, LoopCgroup, own_unified_path, sweep, unified_mount

HYBRID = """\
25 31 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
41 25 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 25 0:39 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""
PURE_V2 = "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_ONLY = "42 25 0:39 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"


def test_the_unified_hierarchy_is_found_beside_v1_or_alone_and_not_where_there_is_none() -> None:
    assert unified_mount(HYBRID) == Path("/sys/fs/cgroup/unified")
    assert unified_mount(PURE_V2) == Path("/sys/fs/cgroup")
    assert unified_mount(V1_ONLY) is None and unified_mount("") is None


def test_the_supervisors_own_cgroup_is_the_0_line() -> None:
    assert own_unified_path("4:memory:/x\n0::/user.slice/user-1000.slice/session-2.scope\n") == \
        "/user.slice/user-1000.slice/session-2.scope"
    assert own_unified_path("0::/\n") == "/"
    assert own_unified_path("4:memory:/x\n") is None  # cgroup v1 only


def test_a_folder_that_is_gone_has_no_figures_and_kills_nothing(tmp_path: Path) -> None:
    gone = LoopCgroup(tmp_path / "ralph-loop-0")
    assert gone.figures() is None and gone.kill() == 0 and gone.pids() == []
    assert gone.remove(tmp_path, timeout=0.1) is True
    assert Figures(1.5, None, None, 3).to_dict() == {"cpu_s": 1.5, "memory_bytes": None, "memory_peak_bytes": None,
                                                     "tasks": 3}


def test_a_record_that_names_no_loop_cgroup_is_never_swept(tmp_path: Path) -> None:
    assert sweep(tmp_path) is None  # no record
    (tmp_path / "cgroup.json").write_text('{"path": "/etc"}')
    assert sweep(tmp_path) is None and Path("/etc").exists()
    (tmp_path / "cgroup.json").write_text("not json")
    assert sweep(tmp_path) is None


def test_a_bound_that_cannot_be_set_is_one_line_naming_the_flag_and_what_is_missing(tmp_path: Path) -> None:
    from ralph_supervisor.process.cgroup import Limits, own_v1_paths, v1_mounts

    assert v1_mounts("42 25 0:39 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                     "43 25 0:40 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n") == {
        "memory": Path("/sys/fs/cgroup/memory"), "cpu": Path("/sys/fs/cgroup/cpu,cpuacct"),
        "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct"), "rw": Path("/sys/fs/cgroup/memory")}
    assert own_v1_paths("4:memory:/x\n2:cpu,cpuacct:/\n0::/\n") == {"memory": "/x", "cpu": "/", "cpuacct": "/"}
    cgroup = LoopCgroup(tmp_path / "ralph-loop-1")
    said = cgroup._bound(Limits(memory_max=64 << 20), "ralph-loop-1", {}, {})
    assert said is not None and said.startswith("--memory-max: no memory controller")
    assert cgroup._bound(Limits(), "ralph-loop-1", {}, {}) is None  # no bound asked: nothing missing
    said = cgroup._bound(Limits(tasks_max=5), "ralph-loop-1", {}, {})
    assert said is not None and said.startswith("--tasks-max: no pids controller")

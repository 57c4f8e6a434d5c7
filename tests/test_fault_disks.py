"""The small filesystems the fault tests make for themselves (tests/helpers/disks.py): real mounts, as root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.disks import loop_mounted_ext4


def mounted_at(path: Path) -> str | None:
    """The filesystem type mounted at `path`, from /proc/self/mounts."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == str(path):
            return fields[2]
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop device needs root")
def test_a_loop_mounted_ext4_holds_the_immutable_flag_and_is_gone_afterwards(tmp_path: Path) -> None:
    with loop_mounted_ext4(tmp_path / "ext4", size_mib=16) as root:
        assert mounted_at(root) == "ext4"
        folder = root / "frozen"
        folder.mkdir()
        assert subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        with pytest.raises(PermissionError):
            (folder / "new").write_text("x")  # even root cannot create an entry in it
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert mounted_at(tmp_path / "ext4") is None
    assert not (tmp_path / "ext4.img").exists()


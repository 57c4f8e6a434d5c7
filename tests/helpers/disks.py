"""Small real filesystems for the fault tests: a loop-mounted ext4 image where the test folder's own
filesystem lacks a feature a test needs (tmpfs and overlayfs keep no `chattr +i` flag), as root.

    with loop_mounted_ext4(tmp_path / "ext4", size_mib=32) as root:
        ...  # root is the mount point; unmounted (lazily, should a process still hold it) and removed after
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


class DiskUnavailable(RuntimeError):
    """No such filesystem can be made here; the message says why (for the test's skip)."""


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def loop_mounted_ext4(mount_point: Path, size_mib: int = 32) -> Iterator[Path]:
    """An empty ext4 filesystem of `size_mib` MiB mounted at `mount_point` (made if missing)."""
    if os.geteuid() != 0:
        raise DiskUnavailable("mounting a loop device needs root")
    mkfs = shutil.which("mkfs.ext4")
    if mkfs is None:
        raise DiskUnavailable("mkfs.ext4 is not installed (Debian: e2fsprogs)")
    image = mount_point.with_name(mount_point.name + ".img")
    with open(image, "wb") as fh:
        fh.truncate(size_mib << 20)
    made = _run(mkfs, "-q", "-F", "-O", "^has_journal", str(image))
    if made.returncode != 0:
        image.unlink()
        raise DiskUnavailable(f"mkfs.ext4 failed: {made.stderr.strip()[-200:]}")
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-o", "loop", str(image), str(mount_point))
    if mounted.returncode != 0:
        image.unlink()
        raise DiskUnavailable(f"cannot loop-mount an ext4 image here: {mounted.stderr.strip()[-200:]}")
    try:
        yield mount_point
    finally:
        if _run("umount", str(mount_point)).returncode != 0:
            _run("umount", "-l", str(mount_point))
        image.unlink(missing_ok=True)

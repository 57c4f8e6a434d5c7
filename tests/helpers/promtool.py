"""promtool for the tests: the one on PATH, else Debian's, fetched with apt and cached, else a reason to skip.

Why not `apt-get install prometheus`: the package's postinst starts a Prometheus server (invoke-rc.d on a
machine without systemd, as CI's is) and pulls in a dozen JavaScript packages; the tests need only the
`promtool` binary inside it. So the set-up downloads the package with apt (the ordinary client, from
the machine's own Debian sources; `apt-get update` first when root and the lists lack it) and unpacks
just `usr/bin/promtool` into a cache folder. Measured on a fresh machine: about 5 s (update 2 s,
download 1.5 s, unpack 1.5 s); with the package lists present, 3 s; cached, nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from tests.helpers.debian import apt_get, apt_lock

MEMBER = "./usr/bin/promtool"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ralph-supervise" / "test-tools"


def _works(path: Path | str) -> bool:
    try:
        return subprocess.run([str(path), "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _apt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    with apt_lock():
        return apt_get(*args, cwd=cwd)


def find_promtool() -> tuple[str | None, str]:
    """(path to a working promtool, how it was found) or (None, why there is none)."""
    on_path = shutil.which("promtool")
    if on_path and _works(on_path):
        return on_path, f"{on_path} (on PATH)"
    cached = cache_dir() / "promtool"
    if cached.exists() and _works(cached):
        return str(cached), f"{cached} (cached)"
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return None, "promtool is not on PATH and this machine has no apt-get/dpkg-deb to fetch Debian's prometheus package"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ralph-promtool-") as tmp:
        work = Path(tmp)
        got = _apt("download", "prometheus", cwd=work)
        if got.returncode != 0 and os.geteuid() == 0:
            updated = _apt("update", cwd=work)
            if updated.returncode != 0:
                return None, f"apt-get update failed: {(updated.stderr or updated.stdout).strip()[-300:]}"
            got = _apt("download", "prometheus", cwd=work)
        if got.returncode != 0:
            hint = "" if os.geteuid() == 0 else " (not root: cannot run apt-get update)"
            return None, f"apt-get download prometheus failed{hint}: {(got.stderr or got.stdout).strip()[-300:]}"
        debs = sorted(work.glob("prometheus_*.deb"))
        if not debs:
            return None, "apt-get download prometheus left no .deb"
        unpack = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])], stdout=subprocess.PIPE)
        assert unpack.stdout is not None
        try:
            with tarfile.open(fileobj=unpack.stdout, mode="r|") as archive:
                for member in archive:
                    if member.name == MEMBER and member.isfile():
                        source = archive.extractfile(member)
                        assert source is not None
                        cached.parent.mkdir(parents=True, exist_ok=True)
                        partial = cached.with_suffix(f".{os.getpid()}.part")
                        with open(partial, "wb") as out:
                            shutil.copyfileobj(source, out)
                        partial.chmod(0o755)
                        os.replace(partial, cached)
                        break
        finally:
            unpack.stdout.close()
            unpack.wait(timeout=60)
    if not _works(cached):
        return None, f"{debs[0].name} holds no working {MEMBER}"
    return str(cached), f"{cached} (fetched with apt in {time.monotonic() - started:.1f} s)"

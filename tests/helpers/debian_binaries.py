"""Server binaries for the tests (Prometheus, promtool, Alertmanager) out of Debian's packages, never installed.

Why not `apt-get install prometheus`: the packages' postinst scripts start the servers as system services
(invoke-rc.d where there is no systemd, as on CI) and pull in a dozen JavaScript packages for web pages no test
opens. The tests need the binaries only, run as plain processes on 127.0.0.1. So the package is downloaded with
apt (the ordinary client, from the machine's own Debian sources; `apt-get update` first when root and the lists
lack it) and only `usr/bin/BINARY` is unpacked into a cache folder (and, as root, the odd data file a binary
reads from a fixed path: `DATA`). A binary on PATH wins.

    python -m tests.helpers.debian_binaries prometheus:prometheus prometheus:promtool \
        prometheus-alertmanager:prometheus-alertmanager

(what scripts/setup.d/40-prometheus-stack.sh runs) fetches them ahead of the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tests.helpers.debian import apt_get, apt_lock


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


DATA: dict[str, tuple[str, ...]] = {
    # Debian's Alertmanager reads its default notification templates from this fixed path, and exits without.
    "prometheus-alertmanager": ("/usr/share/prometheus/alertmanager/default.tmpl",
                                "/usr/share/prometheus/alertmanager/email.tmpl"),
}
"""Files a binary needs at their place in the system, unpacked from its package too (as root, where missing)."""


def find_binary(binary: str, package: str) -> tuple[str | None, str]:
    """(path to a working `binary`, how it was found) or (None, why there is none).

    Looks on PATH, then in the cache, then unpacks it from Debian's `package` (downloaded, not installed),
    with the files `DATA` names for it.
    """
    missing = [path for path in DATA.get(binary, ()) if not Path(path).exists()]
    if missing and os.geteuid() != 0:
        return None, f"{binary} needs {missing[0]} (from Debian's {package}), which only root can unpack there"
    on_path = shutil.which(binary)
    if on_path and _works(on_path) and not missing:
        return on_path, f"{on_path} (on PATH)"
    cached = cache_dir() / binary
    if cached.exists() and _works(cached) and not missing:
        return str(cached), f"{cached} (cached)"
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return None, (f"{binary} is not on PATH and this machine has no apt-get/dpkg-deb to fetch Debian's "
                      f"{package} package")
    started = time.monotonic()
    member = f"./usr/bin/{binary}"
    data = {f".{path}": Path(path) for path in missing}
    with tempfile.TemporaryDirectory(prefix=f"ralph-{package}-") as tmp:
        work = Path(tmp)
        got = _apt("download", package, cwd=work)
        if got.returncode != 0 and os.geteuid() == 0:
            updated = _apt("update", cwd=work)
            if updated.returncode != 0:
                return None, f"apt-get update failed: {(updated.stderr or updated.stdout).strip()[-300:]}"
            got = _apt("download", package, cwd=work)
        if got.returncode != 0:
            hint = "" if os.geteuid() == 0 else " (not root: cannot run apt-get update)"
            return None, f"apt-get download {package} failed{hint}: {(got.stderr or got.stdout).strip()[-300:]}"
        debs = sorted(work.glob(f"{package}_*.deb"))
        if not debs:
            return None, f"apt-get download {package} left no .deb"
        unpack = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)  # it complains of the pipe we close early
        assert unpack.stdout is not None
        try:
            with tarfile.open(fileobj=unpack.stdout, mode="r|") as archive:
                for entry in archive:
                    if entry.name in data and entry.isfile():
                        source = archive.extractfile(entry)
                        assert source is not None
                        target = data.pop(entry.name)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        with open(target.with_suffix(".part"), "wb") as out:
                            shutil.copyfileobj(source, out)
                        os.replace(target.with_suffix(".part"), target)
                    elif entry.name == member and entry.isfile():
                        source = archive.extractfile(entry)
                        assert source is not None
                        cached.parent.mkdir(parents=True, exist_ok=True)
                        partial = cached.with_suffix(f".{os.getpid()}.part")
                        with open(partial, "wb") as out:
                            shutil.copyfileobj(source, out)
                        partial.chmod(0o755)
                        os.replace(partial, cached)
        finally:
            unpack.stdout.close()
            unpack.wait(timeout=60)
        if not _works(cached):
            return None, f"{debs[0].name} holds no working {member}"
        if data:
            return None, f"{debs[0].name} holds no {', '.join(str(path) for path in data.values())}"
    return str(cached), f"{cached} (fetched with apt in {time.monotonic() - started:.1f} s)"


def main(argv: list[str]) -> int:
    """Fetch each PACKAGE:BINARY; one line per binary; 1 if any could not be had."""
    missing = 0
    for spec in argv:
        package, _, binary = spec.partition(":")
        path, how = find_binary(binary or package, package)
        print(f"{binary or package}: {how}")
        missing += path is None
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Debian's packages of a kernel release: `apt-get download` into the release's cache directory, `dpkg-deb -x`,
and the kernel source tarball of linux-source-6.1. Nothing is installed on the host."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from smartio.errors import MissingToolError, SmartioError
from smartio.testbed.kernelrelease import KernelRelease


def run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise MissingToolError(cmd[0], "install Debian's apt and dpkg (this needs a Debian 12 host)") from None
    if p.returncode != 0:
        raise SmartioError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def download(rel: KernelRelease, packages: list[str], versions: dict[str, str] | None = None) -> list[Path]:
    """Each package at rel's version, or at the one `versions` names for it."""
    debs = rel.dir / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    version = {p: (versions or {}).get(p, rel.version) for p in packages}
    deb = {p: f"{p}_{version[p].replace(':', '%3a')}_*.deb" for p in packages}     # apt's file name of it
    todo = [f"{p}={version[p]}" for p in packages if not any(debs.glob(deb[p]))]
    if todo:
        print(f"smartio: downloading {' '.join(todo)}", file=sys.stderr)
        run(["apt-get", "download", "-q", *todo], cwd=debs)
    return [next(debs.glob(deb[p])) for p in packages]


def extract(debs: list[Path], dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(dest)])


def source_tarball(rel: KernelRelease, tmp: Path) -> Path:
    """linux-source-6.1 of rel's version unpacked into tmp: the kernel source tarball in it (the .deb, 140 MB, is
    deleted; the caller removes tmp)."""
    deb = download(rel, ["linux-source-6.1"])[0]
    extract([deb], tmp)
    deb.unlink()
    return next(tmp.glob("usr/src/linux-source-6.1.tar.xz"))



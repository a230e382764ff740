"""Debian's packages of a kernel release: `apt-get download` into the release's cache directory, `dpkg-deb -x`,
and the kernel source tarball of linux-source-<series>. Nothing is installed on the host.

The host's apt (Debian 12) serves 6.1's amd64 packages, as it always has. Everything else (6.12 from trixie, the
newest kernel from sid, and the arm64 headers of each) comes through a private apt configuration per suite, kept in
the cache; the machine's own apt sources are never changed:

    <cache>/apt/<suite>/sources.list        the suite (and its security suite), signed-by Debian's archive keyring
    <cache>/apt/<suite>/lists/               Dir::State::Lists: what `apt-get update` fetched
    <cache>/apt/<suite>/cache/               Dir::Cache
    <cache>/apt/<suite>/status               an empty dpkg status: nothing is installed in this configuration
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from smartio.errors import MissingToolError, SmartioError
from smartio.testbed.kernelrelease import KERNELS, Kernel, KernelRelease, cache_root

MIRROR = "http://deb.debian.org/"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# A suite's lists are refreshed when older than this (sid moves daily); a failed refresh keeps the old lists.
LISTS_MAX_AGE_S = 12 * 3600


def run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise MissingToolError(cmd[0], "install Debian's apt and dpkg (this needs a Debian 12 host)") from None
    if p.returncode != 0:
        raise SmartioError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def apt_dir(kernel: Kernel) -> Path:
    return cache_root() / "apt" / kernel.suite


def apt_options(kernel: Kernel) -> list[str]:
    """apt's -o options of the suite's private configuration (amd64 and arm64 packages)."""
    d = apt_dir(kernel)
    opts = {"Dir::Etc::sourcelist": d / "sources.list", "Dir::Etc::sourceparts": "-",
            "Dir::Etc::preferencesparts": "-", "Dir::State::Lists": d / "lists", "Dir::Cache": d / "cache",
            "Dir::State::status": d / "status", "APT::Architecture": "amd64"}
    out = [f"-o{k}={v}" for k, v in opts.items()] + ["-oAPT::Architectures::=amd64", "-oAPT::Architectures::=arm64"]
    if os.geteuid() == 0:   # the cache may be under /root, where apt's _apt user cannot write
        out.append("-oAPT::Sandbox::User=root")
    return out


def _write_config(kernel: Kernel) -> None:
    d = apt_dir(kernel)
    (d / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (d / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    lines = [f"deb [arch=amd64,arm64 signed-by={KEYRING}] {MIRROR}{archive.split()[0]} {archive.split()[1]} main\n"
             for archive in kernel.archive]
    sources = d / "sources.list"
    if not sources.exists() or sources.read_text() != "".join(lines):
        sources.write_text("".join(lines))
        (d / ".updated").unlink(missing_ok=True)
    (d / "status").touch()


def lists_ready(kernel: Kernel) -> bool:
    return (apt_dir(kernel) / ".updated").exists()


def update(kernel: Kernel, force: bool = False) -> None:
    """`apt-get update` of the suite's private configuration when its lists are missing or stale. Offline, stale lists
    are kept (with a note); missing ones are an error."""
    _write_config(kernel)
    stamp = apt_dir(kernel) / ".updated"
    if not force and stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE_S:
        return
    print(f"smartio: apt-get update of {kernel.suite} (private configuration in {apt_dir(kernel)})", file=sys.stderr)
    try:
        run(["apt-get", *apt_options(kernel), "-q", "update"])
    except SmartioError as e:
        if not stamp.exists():
            raise
        print(f"smartio: note: keeping {kernel.suite}'s lists of "
              f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(stamp.stat().st_mtime))} UTC: {e}", file=sys.stderr)
        return
    stamp.touch()


def apt_command(kernel_name: str, arch: str, tool: str) -> list[str]:
    """`apt-cache` or `apt-get` for a kernel's packages of an architecture: the host's for 6.1 on amd64, else the
    suite's private configuration (its lists refreshed first when stale)."""
    kernel = KERNELS[kernel_name]
    if kernel.host_apt and arch == "amd64":
        return [tool]
    update(kernel)
    return [tool, *apt_options(kernel)]


def download(rel: KernelRelease, packages: list[str], versions: dict[str, str] | None = None) -> list[Path]:
    """Each package at rel's version, or at the one `versions` names for it. A package may name its architecture
    ("linux-headers-6.12.118+deb13-arm64:arm64")."""
    debs = rel.dir / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    version = {p: (versions or {}).get(p, rel.version) for p in packages}
    deb = {p: f"{p.split(':')[0]}_{version[p].replace(':', '%3a')}_*.deb" for p in packages}  # apt's file name of it
    todo = [f"{p}={version[p]}" for p in packages if not any(debs.glob(deb[p]))]
    if todo:
        print(f"smartio: downloading {' '.join(todo)}", file=sys.stderr)
        run([*apt_command(rel.kernel, rel.arch, "apt-get"), "download", "-q", *todo], cwd=debs)
    return [next(debs.glob(deb[p])) for p in packages]


def extract(debs: list[Path], dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(dest)])


def source_tarball(rel: KernelRelease, tmp: Path) -> Path:
    """linux-source-<series> of rel's version unpacked into tmp: the kernel source tarball in it (the .deb, 140 MB,
    is deleted; the caller removes tmp)."""
    deb = download(rel, [rel.source_package])[0]
    extract([deb], tmp)
    deb.unlink()
    return next(tmp.glob(f"usr/src/{rel.source_package}.tar.xz"))

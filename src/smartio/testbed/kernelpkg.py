"""Debian's Linux 6.1 kernel packages (cloud flavour, and the generic one), fetched with `apt-get download` and
cached by version.

Layout of the cache (default ~/.cache/smartio/kernel, overridable with SMARTIO_CACHE):

    <cache>/kernel/<abi>-<version>/debs/*.deb          the downloaded packages
    <cache>/kernel/<abi>-<version>/image/               `dpkg -x` of linux-image (boot/vmlinuz-*, lib/modules/*)
    <cache>/kernel/<abi>-<version>/headers/             `dpkg -x` of the headers, common headers and kbuild
    <cache>/kernel/<abi>-<version>/private-headers/block/*.h   block-layer headers from linux-source-6.1
    <cache>/kernel/<abi>-<version>/.complete-<part>     stamp: that part was fetched and checked

The version is what apt resolves `linux-image-cloud-amd64` to (e.g. abi 6.1.0-56, version 6.1.192-2); a part is
re-fetched only when that version changes. Nothing is installed on the host. The generic flavour
(`linux-image-6.1.0-*-amd64`, behind `linux-image-amd64`) has what the cloud one lacks, f2fs and nilfs2 among it;
it is cached the same way in `<abi>-<version>-amd64/` and shares the private headers of its version. Usable as a
script:

    python -m smartio.testbed.kernelpkg [--flavour cloud-amd64|amd64] {image,headers,source,all,info}

prints the directory of the part (e.g. the kernel build directory for `headers`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tarfile

from smartio.errors import SmartioError
from smartio.testbed import debugkernel
from smartio.testbed.debian import download as _download, extract as _extract, run as _run, source_tarball
from smartio.testbed.kernelrelease import (
    DEBUG,
    FLAVOUR,
    FLAVOURS,
    GENERIC,
    KernelRelease,
    cache_root,
)

# Filesystems the cloud flavour lacks (docs/design/testbed.md); testbed users pick the generic flavour for them.
GENERIC_ONLY_FS = ("f2fs", "nilfs2")
# Private block-layer headers an out-of-tree elevator needs; the headers package lacks them.
PRIVATE_HEADERS = ("block/elevator.h", "block/blk.h", "block/blk-mq.h", "block/blk-mq-sched.h",
                   "block/blk-mq-tag.h", "block/blk-mq-debugfs.h", "block/blk-stat.h",
                   "block/blk-rq-qos.h", "block/blk-wbt.h", "block/blk-ioprio.h", "block/blk-cgroup.h",
                   "block/blk-crypto-internal.h")


def resolve(pinned: str | None = None, flavour: str = FLAVOUR) -> KernelRelease:
    """The kernel of `flavour` apt offers now, or the cached one if apt cannot tell (offline)."""
    pinned = pinned or os.environ.get("SMARTIO_KERNEL_ABI")
    if flavour not in FLAVOURS:
        raise SmartioError(f"unknown kernel flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    if flavour == DEBUG:    # the cloud kernel's version, built from source
        return dataclasses.replace(resolve(pinned, FLAVOUR), flavour=DEBUG)
    meta = FLAVOURS[flavour]
    try:
        deps = _run(["apt-cache", "depends", meta])
        m = re.search(r"linux-image-(6\.1\.0-\d+)-" + re.escape(flavour) + r"\b", deps)
        if not m:
            raise SmartioError(f"apt-cache knows no 6.1 kernel behind {meta}; run apt-get update")
        abi = pinned or m.group(1)
        pol = _run(["apt-cache", "policy", f"linux-image-{abi}-{flavour}"])
        vm = re.search(r"Candidate:\s*(\S+)", pol)
        if not vm or vm.group(1) == "(none)":
            raise SmartioError(f"apt has no candidate for linux-image-{abi}-{flavour}; run apt-get update")
        return KernelRelease(abi, vm.group(1), flavour)
    except SmartioError:
        for d in sorted((cache_root() / "kernel").glob("6.1.0-*"), reverse=True):
            generic = d.name.endswith(f"-{GENERIC}")
            if (d / ".complete-image").exists() and generic == (flavour == GENERIC):
                parts = d.name.removesuffix(f"-{GENERIC}").split("-")
                return KernelRelease("-".join(parts[:2]), "-".join(parts[2:]), flavour)
        raise


def kbuild_version(rel: KernelRelease) -> str:
    """The linux-kbuild-6.1 to build against rel's headers. The headers ask for `linux-kbuild-6.1 (>= version)`, and
    the archive keeps only its newest kbuild, which may be a Debian revision ahead of the signed image (6.1.192-3
    beside an image of 6.1.192-2, seen 2026-11-29): rel's own version if apt still offers it, else the oldest newer
    one (kbuild is the host's build tools, fixdep and modpost, which do not change within an upstream release)."""
    offered = [line.split("|")[1].strip() for line in _run(["apt-cache", "madison", "linux-kbuild-6.1"]).splitlines()
               if line.count("|") >= 2]
    if rel.version in offered:
        return rel.version
    upstream = rel.version.rsplit("-", 1)[0]
    newer = [v for v in offered if v.rsplit("-", 1)[0] == upstream and _version_ge(v, rel.version)]
    if not newer:
        raise SmartioError(f"apt offers no linux-kbuild-6.1 >= {rel.version} of upstream {upstream} (offered: "
                           f"{', '.join(offered) or 'none'}); run apt-get update, or pin another kernel with "
                           f"SMARTIO_KERNEL_ABI")
    oldest = newer[0]
    for v in newer[1:]:
        if not _version_ge(v, oldest):
            oldest = v
    return oldest


def _version_ge(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "ge", b]).returncode == 0


def fetch_image(rel: KernelRelease) -> KernelRelease:
    if rel.flavour == DEBUG:
        return debugkernel.build(rel)
    stamp = rel.dir / ".complete-image"
    if not stamp.exists():
        _extract(_download(rel, [f"linux-image-{rel.abi}-{rel.flavour}"]), rel.dir / "image")
        if not rel.vmlinuz.exists():
            raise SmartioError(f"{rel.vmlinuz} missing after unpacking the image package")
        _run(["depmod", "-b", str(rel.dir / "image"), rel.uname])
        stamp.touch()
    return rel


def fetch_headers(rel: KernelRelease) -> KernelRelease:
    if rel.flavour == DEBUG:    # external modules build against the built tree
        return fetch_image(rel)
    stamp = rel.dir / ".complete-headers"
    if not stamp.exists():
        pkgs = [f"linux-headers-{rel.abi}-{rel.flavour}", f"linux-headers-{rel.abi}-common", "linux-kbuild-6.1"]
        dest = rel.dir / "headers"
        _extract(_download(rel, pkgs, {"linux-kbuild-6.1": kbuild_version(rel)}), dest)
        # The headers' Makefiles and symlinks name absolute /usr/src and /usr/lib paths: point them here.
        src = dest / "usr" / "src"
        for mk in src.glob("linux-headers-*/Makefile"):
            text = mk.read_text()
            mk.write_text(text.replace("/usr/src/", f"{src}/"))
        for link in [*src.glob("linux-headers-*/scripts"), *src.glob("linux-headers-*/tools")]:
            if link.is_symlink() and os.readlink(link).startswith("/usr/lib/"):
                target = dest / os.readlink(link).lstrip("/")
                link.unlink()
                link.symlink_to(target)
        if not (rel.build_dir / "Makefile").exists():
            raise SmartioError(f"{rel.build_dir}/Makefile missing after unpacking the headers")
        stamp.touch()
    return rel


def fetch_source_headers(rel: KernelRelease) -> KernelRelease:
    """Extract only the private block headers from linux-source-6.1; no kernel source is kept."""
    stamp = rel.private_headers.parent / ".complete-source"
    if not stamp.exists():
        tmp = rel.private_headers.parent / "source-tmp"
        tarball = source_tarball(rel, tmp)
        out = rel.private_headers
        if out.exists():
            shutil.rmtree(out)
        wanted = {f"linux-source-6.1/{h}" for h in PRIVATE_HEADERS}
        with tarfile.open(tarball, "r:xz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    target = out / member.name.split("/", 1)[1]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as f:  # type: ignore[union-attr]  # a file: isfile() above
                        target.write_bytes(f.read())
        shutil.rmtree(tmp)
        if not (out / "block" / "elevator.h").exists():
            raise SmartioError("block/elevator.h not found in linux-source-6.1")
        stamp.touch()
    return rel


def flavour_for(filesystems: list[str] | tuple[str, ...]) -> str:
    """The flavour whose modules have every one of these filesystems: the cloud one unless one needs the generic."""
    return GENERIC if any(fs in GENERIC_ONLY_FS for fs in filesystems) else FLAVOUR


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m smartio.testbed.kernelpkg", description=__doc__.split("\n")[0])
    ap.add_argument("--flavour", choices=list(FLAVOURS), default=FLAVOUR,
                    help=f"{FLAVOUR} (default), {GENERIC}, the generic flavour (f2fs, nilfs2), or {DEBUG}, built "
                         f"here from linux-source with lockdep and KASAN")
    ap.add_argument("part", choices=["image", "headers", "source", "all", "info"])
    a = ap.parse_args(argv)
    try:
        rel = resolve(flavour=a.flavour)
        if a.part in ("image", "all"):
            fetch_image(rel)
        if a.part in ("headers", "all"):
            fetch_headers(rel)
        if a.part in ("source", "all"):
            fetch_source_headers(rel)
    except SmartioError as e:
        print(f"smartio: error: {e}", file=sys.stderr)
        return e.exit_code
    print({"image": rel.dir / "image", "headers": rel.build_dir, "source": rel.private_headers,
           "all": rel.dir, "info": f"{rel.uname} {rel.version} {rel.dir}"}[a.part])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Debian's kernel packages (cloud flavour, the generic one, and arm64 headers) of the project's kernels, 6.1
(bookworm, through the host's apt), 6.12 (trixie) and the newest (sid; both through a private apt configuration
in the cache, see smartio.testbed.debian), fetched with `apt-get download` and cached by version.

Layout of the cache (default ~/.cache/smartio/kernel, overridable with SMARTIO_CACHE):

    <cache>/kernel/<abi>-<version>/debs/*.deb          the downloaded packages
    <cache>/kernel/<abi>-<version>/image/               `dpkg -x` of linux-image (boot/vmlinuz-*, lib/modules/*)
    <cache>/kernel/<abi>-<version>/headers/             `dpkg -x` of the headers, common headers and kbuild
    <cache>/kernel/<abi>-<version>/private-headers/block/*.h   block-layer headers from linux-source-<series>
    <cache>/kernel/<abi>-<version>/.complete-<part>     stamp: that part was fetched and checked
    <cache>/kernel/<abi>-<version>/release.json         which kernel (6.1, 6.12, newest) and release it is

The version is what apt resolves `linux-image-cloud-amd64` to in the kernel's suite (e.g. abi 6.1.0-56, version
6.1.192-2; abi 6.12.118+deb13, version 6.12.118-1); a part is re-fetched only when that version changes, and when apt
cannot tell (offline, or the archive has moved on and no longer has it) the newest cached release of that kernel is
used. Nothing is installed on the host. The generic flavour (`linux-image-6.1.0-*-amd64`, behind `linux-image-amd64`)
has what the cloud one lacks, f2fs and nilfs2 among it; it is cached the same way in `<abi>-<version>-amd64/` and
shares the private headers of its version, as do the arm64 headers in `<abi>-<version>-arm64/`. Usable as a script:

    python -m smartio.testbed.kernelpkg [--kernel 6.1|6.12|newest] [--flavour cloud-amd64|amd64|arm64|debug]
                                        {image,headers,source,all,info}

prints the directory of the part (e.g. the kernel build directory for `headers`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

from smartio.errors import SmartioError
from smartio.testbed import debugkernel
from smartio.testbed.debian import (
    apt_command as _apt,
    download as _download,
    extract as _extract,
    run as _run,
    source_tarball,
)
from smartio.testbed.kernelrelease import (
    ARM64,
    DEBUG,
    DEBUG_KERNELS,
    DEFAULT_KERNEL,
    FLAVOUR,
    FLAVOURS,
    GENERIC,
    KERNELS,
    KernelRelease,
    cache_root,
)

# Filesystems the cloud flavour lacks (docs/design/testbed.md); testbed users pick the generic flavour for them.
GENERIC_ONLY_FS = ("f2fs", "nilfs2")
# Private block-layer headers an out-of-tree elevator needs; the headers package lacks them. Those a series lacks
# (block/blk-mq-tag.h is gone from 6.12 on) are skipped.
PRIVATE_HEADERS = ("block/elevator.h", "block/blk.h", "block/blk-mq.h", "block/blk-mq-sched.h",
                   "block/blk-mq-tag.h", "block/blk-mq-debugfs.h", "block/blk-stat.h",
                   "block/blk-rq-qos.h", "block/blk-wbt.h", "block/blk-ioprio.h", "block/blk-cgroup.h",
                   "block/blk-crypto-internal.h")


def resolve(pinned: str | None = None, flavour: str = FLAVOUR, kernel: str = DEFAULT_KERNEL,
            offline: bool = False) -> KernelRelease:
    """The release of `kernel` (6.1, 6.12, newest) and `flavour` apt offers now, or the newest cached one if apt cannot
    tell (offline, or SMARTIO_OFFLINE set, or offline=True). SMARTIO_KERNEL_ABI pins 6.1's ABI. `kernel` may also be
    an exact release (exact_release()): that one, from the cache or else from apt, never another."""
    if kernel not in KERNELS:
        if not RELEASE_RE.fullmatch(kernel):
            raise SmartioError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}, or an exact release such as "
                               f"6.12.118+deb13 or 6.1.0-57-cloud-amd64")
        return exact_release(kernel, flavour, offline)
    if kernel == DEFAULT_KERNEL:
        pinned = pinned or os.environ.get("SMARTIO_KERNEL_ABI")
    if flavour not in FLAVOURS and flavour != ARM64:
        raise SmartioError(f"unknown kernel flavour {flavour!r}; known: {', '.join([*FLAVOURS, ARM64])}")
    if flavour == DEBUG and kernel not in DEBUG_KERNELS:
        raise SmartioError(f"the debug kernel is built for {' and '.join(DEBUG_KERNELS)} only, not {kernel}")
    if flavour in (DEBUG, ARM64):    # the cloud kernel's version: built from source, or its arm64 build's headers
        return dataclasses.replace(resolve(pinned, FLAVOUR, kernel, offline), flavour=flavour)
    meta = FLAVOURS[flavour]
    try:
        if offline or os.environ.get("SMARTIO_OFFLINE"):
            raise SmartioError(f"offline: using the cached {kernel} kernel")
        apt_cache = _apt(kernel, "amd64", "apt-cache")
        deps = _run([*apt_cache, "depends", meta])
        m = re.search(r"linux-image-(\d\S*?)-" + re.escape(flavour) + r"(?=\s|$)", deps, re.M)
        if not m:
            raise SmartioError(f"apt-cache knows no {kernel} kernel behind {meta}; run apt-get update")
        abi = pinned or m.group(1)
        pol = _run([*apt_cache, "policy", f"linux-image-{abi}-{flavour}"])
        vm = re.search(r"Candidate:\s*(\S+)", pol)
        if not vm or vm.group(1) == "(none)":
            raise SmartioError(f"apt has no candidate for linux-image-{abi}-{flavour}; run apt-get update")
        rel = KernelRelease(abi, vm.group(1), flavour, kernel)
        if kernel != "newest" and rel.series != kernel:
            raise SmartioError(f"{meta} of {KERNELS[kernel].suite} is Linux {rel.series}, not {kernel}")
        return rel
    except SmartioError:
        rel_cached = cached(kernel, flavour)
        if rel_cached is None:
            raise
        return rel_cached


# An exact release as `uname -r` prints it or as Debian's ABI: 6.1.0-57, 6.12.118+deb13, 7.2.13+deb14-cloud-amd64.
RELEASE_RE = re.compile(r"\d+\.\d+(\.\d+)?[-+][\w.+-]*")


def kernel_of(abi: str) -> str:
    """Which of KERNELS an ABI belongs to: 6.1's (6.1.0-<n>), 6.12's, else the newest."""
    series = ".".join(abi.split("-")[0].split("+")[0].split(".")[:2])
    return series if series in KERNELS else "newest"


def exact_release(release: str, flavour: str = FLAVOUR, offline: bool = False) -> KernelRelease:
    """The release named by its ABI or its `uname -r` (the flavour's suffix is dropped): the cached one of that ABI and
    flavour (its newest Debian revision), else the one apt offers of that ABI. Never another release."""
    abi = release.removesuffix(f"-{flavour}") if flavour != DEBUG else release
    for other in (FLAVOUR, GENERIC):
        abi = abi.removesuffix(f"-{other}")
    kernel = kernel_of(abi)
    rel = cached_abi(abi, flavour, kernel)
    if rel is not None:
        return rel
    if offline or os.environ.get("SMARTIO_OFFLINE"):
        raise SmartioError(f"kernel release {release} is not in the cache ({cache_root() / 'kernel'}) and this run is "
                           "offline")
    rel = resolve(abi, flavour, kernel)
    if rel.abi != abi:
        raise SmartioError(f"apt offers no linux-image-{abi}-{flavour} (nor is it cached); "
                           f"{KERNELS[kernel].suite} has {rel.abi}")
    return rel


def cached_abi(abi: str, flavour: str, kernel: str) -> KernelRelease | None:
    """The cached release of exactly this ABI and flavour with its image fetched (the newest revision), or None."""
    if flavour in (DEBUG, ARM64):
        cloud = cached_abi(abi, FLAVOUR, kernel)
        return dataclasses.replace(cloud, flavour=flavour) if cloud else None
    root = cache_root() / "kernel"
    found = []
    for d in root.glob(f"{abi}-*"):
        rest = d.name[len(abi) + 1:]
        suffix = "" if flavour == FLAVOUR else f"-{flavour}"
        if suffix and not rest.endswith(suffix) or not suffix and rest.endswith((f"-{GENERIC}", f"-{DEBUG}",
                                                                                  f"-{ARM64}")):
            continue
        version = rest.removesuffix(suffix) if suffix else rest
        rel = KernelRelease(abi, version, flavour, kernel)
        if rel.dir == d and (d / ".complete-image").exists():
            found.append(rel)
    return max(found, key=lambda r: r.dir.stat().st_mtime) if found else None


def cached(kernel: str, flavour: str = FLAVOUR) -> KernelRelease | None:
    """The newest complete release of `kernel` and `flavour` in the cache, or None."""
    root = cache_root() / "kernel"
    if kernel == DEFAULT_KERNEL:    # 6.1's cache predates release.json: its directories are named for the ABI
        for d in sorted(root.glob("6.1.0-*"), reverse=True):
            if d.name.endswith((f"-{ARM64}", f"-{DEBUG}")):    # no image of its own: found through the cloud one
                continue
            generic = d.name.endswith(f"-{GENERIC}")
            if (d / ".complete-image").exists() and generic == (flavour == GENERIC):
                parts = d.name.removesuffix(f"-{GENERIC}").split("-")
                return KernelRelease("-".join(parts[:2]), "-".join(parts[2:]), flavour)
    found: list[tuple[float, KernelRelease]] = []
    for rec in root.glob("*/release.json"):
        try:
            r = json.loads(rec.read_text())
            rel = KernelRelease(r["abi"], r["version"], r["flavour"], r["kernel"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if rel.kernel == kernel and rel.flavour == flavour and rel.dir == rec.parent \
                and any(rec.parent.glob(".complete-*")):
            found.append((float(r.get("fetched", 0)), rel))
    return max(found, key=lambda f: f[0])[1] if found else None


def _record(rel: KernelRelease) -> None:
    """release.json in rel's directory: which kernel it is, so that an offline resolve() finds it again."""
    rec = rel.dir / "release.json"
    data = {"kernel": rel.kernel, "suite": KERNELS[rel.kernel].suite, "abi": rel.abi, "version": rel.version,
            "flavour": rel.flavour, "uname": rel.uname, "fetched": time.time(),
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rec.write_text(json.dumps(data, indent=1) + "\n")


def kbuild_version(rel: KernelRelease) -> str:
    """The linux-kbuild-<6.1|abi> to build against rel's headers. The headers ask for `linux-kbuild-6.1 (>= version)`,
    and the archive keeps only its newest kbuild, which may be a Debian revision ahead of the signed image (6.1.192-3
    beside an image of 6.1.192-2, seen 2026-11-29): rel's own version if apt still offers it, else the oldest newer
    one (kbuild is the host's build tools, fixdep and modpost, which do not change within an upstream release)."""
    pkg = rel.kbuild_package
    offered = [line.split("|")[1].strip()
               for line in _run([*_apt(rel.kernel, rel.arch, "apt-cache"), "madison", pkg]).splitlines()
               if line.count("|") >= 2]
    offered = list(dict.fromkeys(offered))      # once each, whatever the architectures listed
    if rel.version in offered:
        return rel.version
    upstream = rel.version.rsplit("-", 1)[0]
    newer = [v for v in offered if v.rsplit("-", 1)[0] == upstream and _version_ge(v, rel.version)]
    if not newer:
        raise SmartioError(f"apt offers no {pkg} >= {rel.version} of upstream {upstream} (offered: "
                           f"{', '.join(offered) or 'none'}); run apt-get update, or pin another kernel with "
                           f"SMARTIO_KERNEL_ABI")
    oldest = newer[0]
    for v in newer[1:]:
        if not _version_ge(v, oldest):
            oldest = v
    return oldest


def _version_ge(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "ge", b]).returncode == 0


def split_image_parts(rel: KernelRelease, depends: str) -> list[str]:
    """The packages a split linux-image depends on at its own version, which hold the kernel and its modules
    (Debian unstable from 7.x on: linux-binary-*, linux-modules-*, linux-base-*; the image package itself is empty
    of them); none for an image that holds them itself (6.1, 6.12)."""
    suffix = re.escape(f"{rel.abi}-{rel.flavour}")
    return list(dict.fromkeys(re.findall(r"\b(linux-(?:binary|modules|base)-" + suffix + r")\s*\(=", depends)))


def fetch_image(rel: KernelRelease) -> KernelRelease:
    if rel.flavour == DEBUG:
        return debugkernel.build(rel)
    stamp = rel.dir / ".complete-image"
    if not stamp.exists():
        image = _download(rel, [f"linux-image-{rel.abi}-{rel.flavour}"])
        parts = split_image_parts(rel, _run(["dpkg-deb", "-f", str(image[0]), "Depends"]))
        _extract([*image, *(_download(rel, parts) if parts else [])], rel.dir / "image")
        if not rel.vmlinuz.exists():
            raise SmartioError(f"{rel.vmlinuz} missing after unpacking the image package")
        _run(["depmod", "-b", str(rel.modules_dir.parents[2]), rel.uname])   # image/ or image/usr/
        stamp.touch()
        _record(rel)
    return rel


def fetch_headers(rel: KernelRelease) -> KernelRelease:
    if rel.flavour == DEBUG:    # external modules build against the built tree
        return fetch_image(rel)
    stamp = rel.dir / ".complete-headers"
    if not stamp.exists():
        arch = f":{ARM64}" if rel.flavour == ARM64 else ""    # the kbuild (host tools) stays amd64
        pkgs = [f"linux-headers-{rel.abi}-{rel.flavour}{arch}", f"linux-headers-{rel.abi}-common", rel.kbuild_package]
        dest = rel.dir / "headers"
        _extract(_download(rel, pkgs, {rel.kbuild_package: kbuild_version(rel)}), dest)
        # The headers' Makefiles (the include of the common headers; from 7.2 on also KBUILD_OUTPUT) and symlinks name
        # absolute /usr/src and /usr/lib paths: point them here.
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
        _record(rel)
    return rel


def fetch_source_headers(rel: KernelRelease) -> KernelRelease:
    """Extract only the private block headers from linux-source-<series>; no kernel source is kept. Those of
    PRIVATE_HEADERS the series lacks are skipped (listed in private-headers/MISSING)."""
    stamp = rel.private_headers.parent / ".complete-source"
    if not stamp.exists():
        src_rel = dataclasses.replace(rel, flavour=FLAVOUR) if rel.flavour == ARM64 else rel   # the amd64 archive's
        tmp = rel.private_headers.parent / "source-tmp"
        tarball = source_tarball(src_rel, tmp)
        out = rel.private_headers
        if out.exists():
            shutil.rmtree(out)
        top = rel.source_package
        wanted = {f"{top}/{h}" for h in PRIVATE_HEADERS}
        print(f"smartio: extracting {len(wanted)} block headers from {tarball.name}", file=sys.stderr)
        with tarfile.open(tarball, "r:xz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    target = out / member.name.split("/", 1)[1]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as f:  # type: ignore[union-attr]  # a file: isfile() above
                        target.write_bytes(f.read())
        shutil.rmtree(tmp)
        if not (out / "block" / "elevator.h").exists():
            raise SmartioError(f"block/elevator.h not found in {top}")
        missing = [h for h in PRIVATE_HEADERS if not (out / h).exists()]
        (out / "MISSING").write_text("".join(f"{h}\n" for h in missing))
        stamp.touch()
    return rel


def flavour_for(filesystems: list[str] | tuple[str, ...]) -> str:
    """The flavour whose modules have every one of these filesystems: the cloud one unless one needs the generic."""
    return GENERIC if any(fs in GENERIC_ONLY_FS for fs in filesystems) else FLAVOUR


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m smartio.testbed.kernelpkg", description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", choices=list(KERNELS), default=DEFAULT_KERNEL,
                    help=f"{DEFAULT_KERNEL} (default, Debian 12), 6.12 (Debian 13) or newest (Debian unstable)")
    ap.add_argument("--flavour", choices=[*FLAVOURS, ARM64], default=FLAVOUR,
                    help=f"{FLAVOUR} (default), {GENERIC}, the generic flavour (f2fs, nilfs2), {ARM64} (headers only, "
                         f"for a cross build), or {DEBUG}, built here from linux-source with lockdep and KASAN")
    ap.add_argument("--offline", action="store_true", help="use the cached release; do not ask apt")
    ap.add_argument("part", choices=["image", "headers", "source", "all", "info"])
    a = ap.parse_args(argv)
    try:
        rel = resolve(flavour=a.flavour, kernel=a.kernel, offline=a.offline)
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

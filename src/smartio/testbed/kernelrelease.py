"""A testbed kernel release: Debian's version of it, its flavour (cloud, generic, or the debug kernel built from the
same source; arm64 for the module's cross build), which of the project's kernels it is (6.1, 6.12 or the newest),
and where its files live in the cache (see smartio.testbed.kernelpkg for the layout)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from smartio.cache import cache_dir

META_IMAGE = "linux-image-cloud-amd64"
FLAVOUR = "cloud-amd64"
GENERIC = "amd64"
# Built here from the same version's linux-source with lockdep and KASAN (smartio.testbed.debugkernel).
DEBUG = "debug"
FLAVOURS = {FLAVOUR: META_IMAGE, GENERIC: "linux-image-amd64", DEBUG: META_IMAGE}
# Debian's arm64 flavour: only its headers are fetched, to cross-build the module (the cloud one's source version).
ARM64 = "arm64"


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One of the kernels the module is built for: the Debian suite that ships it and the archive suites to ask."""
    name: str                   # "6.1", "6.12", "newest"
    suite: str                  # the Debian release: bookworm, trixie, sid
    archive: tuple[str, ...]    # "<archive> <suite>" of each sources.list line: "debian-security trixie-security"

    @property
    def host_apt(self) -> bool:
        """6.1 is the host's own release (Debian 12): its amd64 packages come through the host's apt, as always."""
        return self.suite == "bookworm"


KERNELS = {
    "6.1": Kernel("6.1", "bookworm",
                  ("debian bookworm", "debian bookworm-updates", "debian-security bookworm-security")),
    "6.12": Kernel("6.12", "trixie", ("debian trixie", "debian trixie-updates", "debian-security trixie-security")),
    "newest": Kernel("newest", "sid", ("debian sid",)),     # resolved when fetched: sid moves
}
DEFAULT_KERNEL = "6.1"
# Until Debian 12 the ABI was "6.1.0-<n>" and the kbuild package "linux-kbuild-6.1"; from Debian 13 on it is
# "<upstream>+deb<N>" (6.12.118+deb13) and the kbuild package carries it (linux-kbuild-6.12.118+deb13).
OLD_ABI = re.compile(r"\d+\.\d+\.0-\d+")
# The debug kernel's local version (its release is the upstream version plus this).
LOCALVERSION = "-smartio-debug"
# The kernels a debug kernel is built for: 6.1, and 6.12, whose queue freeze is a lockdep map (so lockdep sees a
# GFP_KERNEL allocation or a lock taken while the queue is frozen). The newest moves too fast to build each release.
DEBUG_KERNELS = ("6.1", "6.12")


def debug_uname(version: str) -> str:
    """The debug kernel's release for a Debian package version: upstream version plus our local version."""
    return version.split("-")[0].split(":")[-1] + LOCALVERSION


def cache_root() -> Path:
    return cache_dir()


@dataclasses.dataclass(frozen=True)
class KernelRelease:
    abi: str        # "6.1.0-56"
    version: str    # Debian package version, "6.1.192-2"
    flavour: str = FLAVOUR
    kernel: str = DEFAULT_KERNEL    # a name in KERNELS

    @property
    def upstream(self) -> str:
        """Linux's own version of the package version: "6.12.118" of "6.12.118-1"."""
        return self.version.split("-")[0].split(":")[-1]

    @property
    def series(self) -> str:
        """"6.1", "6.12", "7.2": what linux-source-<series> is named for."""
        return ".".join(self.upstream.split(".")[:2])

    @property
    def source_package(self) -> str:
        return f"linux-source-{self.series}"

    @property
    def kbuild_package(self) -> str:
        return f"linux-kbuild-{self.series}" if OLD_ABI.fullmatch(self.abi) else f"linux-kbuild-{self.abi}"

    @property
    def arch(self) -> str:
        """Debian's architecture of the flavour's packages."""
        return ARM64 if self.flavour == ARM64 else "amd64"

    @property
    def uname(self) -> str:
        if self.flavour == DEBUG:
            return debug_uname(self.version)
        return f"{self.abi}-{self.flavour}"

    @property
    def dir(self) -> Path:
        suffix = "" if self.flavour == FLAVOUR else f"-{self.flavour}"
        return cache_root() / "kernel" / f"{self.abi}-{self.version}{suffix}"

    @property
    def vmlinuz(self) -> Path:
        """boot/vmlinuz-<uname> of the image; from Debian 14 on the kernel is <modules_dir>/vmlinuz (the image is
        split into linux-binary-*, linux-modules-*, and the kernel sits beside its modules)."""
        boot = self.dir / "image" / "boot" / f"vmlinuz-{self.uname}"
        beside = self.modules_dir / "vmlinuz"
        return beside if not boot.exists() and beside.exists() else boot

    @property
    def system_map(self) -> Path | None:
        """The kernel's symbol table (names the vCPUs' addresses, testbed.vcpus): beside vmlinuz as the image ships
        it, or the debug kernel's build tree's; None if there is none."""
        for path in (self.vmlinuz.parent / f"System.map-{self.uname}", self.vmlinuz.parent / "System.map",
                     self.build_dir / "System.map"):
            if path.is_file():
                return path
        return None

    @property
    def modules_dir(self) -> Path:
        """lib/modules/<uname> of the image; usr/lib/modules/<uname> from Debian 13 on (merged /usr)."""
        usr = self.dir / "image" / "usr" / "lib" / "modules" / self.uname
        return usr if usr.is_dir() else self.dir / "image" / "lib" / "modules" / self.uname

    @property
    def build_dir(self) -> Path:
        """Where `make -C ... M=$PWD` builds an external module."""
        if self.flavour == DEBUG:
            return self.dir / "src" / self.source_package
        return self.dir / "headers" / "usr" / "src" / f"linux-headers-{self.uname}"

    @property
    def private_headers(self) -> Path:
        """Flavour-independent, so kept with the cloud flavour's files of the same version."""
        return cache_root() / "kernel" / f"{self.abi}-{self.version}" / "private-headers"



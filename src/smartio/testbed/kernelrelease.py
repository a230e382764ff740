"""A testbed kernel release: Debian's version of it, its flavour (cloud, generic, or the debug kernel built from the
same source), and where its files live in the cache (see smartio.testbed.kernelpkg for the layout)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from smartio.cache import cache_dir

META_IMAGE = "linux-image-cloud-amd64"
FLAVOUR = "cloud-amd64"
GENERIC = "amd64"
# Built here from the same version's linux-source with lockdep and KASAN (smartio.testbed.debugkernel).
DEBUG = "debug"
FLAVOURS = {FLAVOUR: META_IMAGE, GENERIC: "linux-image-amd64", DEBUG: META_IMAGE}
# The debug kernel's local version (its release is the upstream version plus this) and its source tree's directory.
LOCALVERSION = "-smartio-debug"
SOURCE_DIR = "linux-source-6.1"


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
        return self.dir / "image" / "boot" / f"vmlinuz-{self.uname}"

    @property
    def modules_dir(self) -> Path:
        return self.dir / "image" / "lib" / "modules" / self.uname

    @property
    def build_dir(self) -> Path:
        """Where `make -C ... M=$PWD` builds an external module."""
        if self.flavour == DEBUG:
            return self.dir / "src" / SOURCE_DIR
        return self.dir / "headers" / "usr" / "src" / f"linux-headers-{self.uname}"

    @property
    def private_headers(self) -> Path:
        """Flavour-independent, so kept with the cloud flavour's files of the same version."""
        return cache_root() / "kernel" / f"{self.abi}-{self.version}" / "private-headers"



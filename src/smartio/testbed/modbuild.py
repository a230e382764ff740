"""The module's build matrix: smartio-iosched.ko for each of the project's kernels (6.1, 6.12, newest) and
architectures (amd64, arm64), with W=1 and warnings as errors, each cell in a directory of its own:

    <out>/<kernel>-<arch>/smartio-iosched.ko     the module (the sources are symlinks to the source directory's)
    <out>/<kernel>-<arch>/build.log              the make command and everything it printed
    <out>/<kernel>-<arch>/result.json            kernel, release, rc, warnings, vermagic, seconds

6.1 builds on the host (Debian 12: its gcc-12, and gcc-aarch64-linux-gnu for arm64), 6.12 and the newest in a chroot
of their suite (smartio.testbed.toolchain; root is needed). The kernel packages come from smartio.testbed.kernelpkg;
when apt cannot fetch (offline, or the archive no longer has the version the lists name) the cached release is used.
Usable as a script:

    python -m smartio.testbed.modbuild [--kernel K]... [--arch A]... [--src DIR] [--out DIR] [--offline]

exits 0 only when every cell built without a warning and its vermagic names its kernel's release.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from smartio.errors import SmartioError
from smartio.signals import sigterm_as_interrupt
from smartio.testbed import debian, kernelpkg, toolchain
from smartio.testbed.kernelrelease import ARM64, DEFAULT_KERNEL, FLAVOUR, KERNELS, KernelRelease, cache_root

ARCHES = {"amd64": FLAVOUR, "arm64": ARM64}
ALIASES = {"x86-64": "amd64", "x86_64": "amd64", "aarch64": "arm64"}
KERNEL_DIR = Path(__file__).resolve().parents[3] / "kernel"
MODULE = "smartio-iosched.ko"
# Compiler and modpost diagnostics; "warning:" also matches a note turned into an error by -Werror.
# An outer make's variables (ARCH=... on its command line) must not reach the kernel's make.
MAKE_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
WARNING = re.compile(r"\b(warning|error):", re.I)


@dataclasses.dataclass(frozen=True)
class Cell:
    kernel: str     # a name in KERNELS
    arch: str       # a key of ARCHES

    @property
    def name(self) -> str:
        return f"{self.kernel}-{self.arch}"

    @property
    def flavour(self) -> str:
        return ARCHES[self.arch]

    @property
    def chroot(self) -> str | None:
        """The suite whose chroot builds this cell; None: the host."""
        k = KERNELS[self.kernel]
        return None if k.host_apt else k.suite


@dataclasses.dataclass
class Result:
    cell: Cell
    release: str = ""       # the kernel release (uname -r) the module is for
    version: str = ""       # Debian's package version
    rc: int = -1
    diagnostics: list[str] = dataclasses.field(default_factory=list)
    vermagic: str = ""
    seconds: float = 0.0
    error: str = ""
    ko: Path | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.diagnostics and self.vermagic.split(" ")[:1] == [self.release] \
            and self.ko is not None

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["cell"] = self.cell.name
        d["ko"] = str(self.ko) if self.ko else None
        d["ok"] = self.ok
        return d


def cells(kernels: list[str] | None = None, arches: list[str] | None = None) -> list[Cell]:
    arches = [ALIASES.get(a, a) for a in (arches or list(ARCHES))]
    for a in arches:
        if a not in ARCHES:
            raise SmartioError(f"unknown architecture {a!r}; known: {', '.join(ARCHES)}")
    for k in kernels or []:
        if k not in KERNELS:
            raise SmartioError(f"unknown kernel {k!r}; known: {', '.join(KERNELS)}")
    return [Cell(k, a) for k in (kernels or list(KERNELS)) for a in arches]


def release(cell: Cell, offline: bool = False) -> KernelRelease:
    """The cell's kernel release with its headers and private block headers in the cache. A failed fetch falls back
    to the newest complete cached release of the kernel."""
    def fetch(rel: KernelRelease) -> KernelRelease:
        kernelpkg.fetch_headers(rel)
        kernelpkg.fetch_source_headers(rel)
        return rel

    rel = kernelpkg.resolve(flavour=cell.flavour, kernel=cell.kernel, offline=offline)
    try:
        try:
            return fetch(rel)
        except SmartioError:
            if offline or cell.chroot is None:
                raise
            # The private lists may be hours old and name a version the archive has dropped: refresh, ask again.
            debian.update(KERNELS[cell.kernel], force=True)
            rel = kernelpkg.resolve(flavour=cell.flavour, kernel=cell.kernel)
            return fetch(rel)
    except SmartioError as e:
        old = kernelpkg.cached(cell.kernel, cell.flavour)
        if old is None or old == rel or not (old.private_headers.parent / ".complete-source").exists():
            raise
        print(f"smartio: note: {rel.uname} {rel.version} could not be fetched ({str(e)[:200]}); "
              f"using the cached {old.uname} {old.version}", file=sys.stderr)
        rel = old
    return rel


def sources(src: Path = KERNEL_DIR) -> list[Path]:
    """The module's own source files in `src`, not what Kbuild generated there (<module>.mod.c)."""
    return sorted([*(f for f in src.glob("*.c") if not f.name.endswith(".mod.c")), *src.glob("*.h"), src / "Kbuild"])


def _link_sources(src: Path, out: Path) -> None:
    """out gets symlinks to the module's sources (as `make generic` does) and loses what an earlier build left.
    Never a link to a generated file: modpost writes <module>.mod.c through it, into the source directory's build."""
    out.mkdir(parents=True, exist_ok=True)
    for f in out.iterdir():
        if f.is_file() or f.is_symlink():
            f.unlink()
    for f in sources(src):
        (out / f.name).symlink_to(os.path.relpath(f, out))


def make_command(rel: KernelRelease, out: Path) -> list[str]:
    cmd = ["make", "-C", str(rel.build_dir), f"M={out}", "W=1", "KCFLAGS=-Werror",
           f"SIO_BLOCK_INC={rel.private_headers / 'block'}", f"-j{os.cpu_count() or 1}"]
    if rel.flavour == ARM64:
        cmd += ["ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"]
    return [*cmd, "modules"]


def vermagic(ko: Path) -> str:
    p = subprocess.run(["modinfo", "-F", "vermagic", str(ko)], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def build(cell: Cell, src: Path, out_root: Path, offline: bool = False) -> Result:
    res = Result(cell)
    out = out_root / cell.name
    start = time.monotonic()
    try:
        rel = release(cell, offline)
        res.release, res.version = rel.uname, rel.version
        _link_sources(src, out)
        log = out / "build.log"
        cmd = make_command(rel, out)
        log.write_text(f"# {cell.name}: {rel.uname} {rel.version}\n$ {' '.join(cmd)}\n")
        print(f"smartio: building {cell.name} against {rel.uname} ({rel.version})", file=sys.stderr)
        if cell.chroot is None:
            env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV}
            with open(log, "a") as f:
                res.rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        else:
            toolchain.ensure(cell.chroot, toolchain.gcc_major(rel.build_dir))
            res.rc = toolchain.run(cell.chroot, cmd, [cache_root() / "kernel", src, out], log)
        res.diagnostics = [line for line in log.read_text().splitlines() if WARNING.search(line)]
        ko = out / MODULE
        if res.rc == 0 and ko.exists():
            res.ko = ko
            res.vermagic = vermagic(ko)
    except SmartioError as e:
        res.error = str(e)
    res.seconds = round(time.monotonic() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res.to_json(), indent=1) + "\n")
    return res


def needs_root(todo: list[Cell]) -> list[Cell]:
    return [c for c in todo if c.chroot is not None] if os.geteuid() != 0 else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m smartio.testbed.modbuild", description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", action="append", choices=list(KERNELS),
                    help=f"a kernel to build for (repeatable; default: all of {', '.join(KERNELS)})")
    ap.add_argument("--arch", action="append", help="amd64 (x86-64) or arm64 (repeatable; default: both)")
    ap.add_argument("--src", type=Path, default=KERNEL_DIR, help="the module's source directory (default: kernel/)")
    ap.add_argument("--out", type=Path, help="where the cells' directories go (default: <src>/build)")
    ap.add_argument("--offline", action="store_true", help="use the cached kernel packages; do not ask apt")
    a = ap.parse_args(argv)
    try:
        todo = cells(a.kernel, a.arch)
        if root_cells := needs_root(todo):
            raise SmartioError(f"building for {', '.join(sorted({c.kernel for c in root_cells}))} needs root (a "
                               f"debootstrap chroot of {', '.join(sorted({str(c.chroot) for c in root_cells}))} "
                               f"holds the compiler); run as root, or build only {DEFAULT_KERNEL} with --kernel "
                               f"{DEFAULT_KERNEL}")
    except SmartioError as e:
        print(f"smartio: error: {e}", file=sys.stderr)
        return 3 if "needs root" in str(e) else 2
    src = a.src.resolve()
    out = (a.out or src / "build").resolve()
    start = time.monotonic()
    results = []
    try:
        with sigterm_as_interrupt():    # a build in a chroot ends with its mount namespace: nothing stays mounted
            for cell in todo:
                results.append(build(cell, src, out, a.offline))
    except KeyboardInterrupt:
        print("smartio: interrupted", file=sys.stderr)
        return 130
    print(f"{'cell':<14} {'release':<30} {'rc':>3} {'warn':>4} {'vermagic ok':<11} {'s':>6}")
    for r in results:
        good = r.vermagic.split(" ")[:1] == [r.release]
        print(f"{r.cell.name:<14} {r.release or '-':<30} {r.rc:>3} {len(r.diagnostics):>4} {str(good):<11} "
              f"{r.seconds:>6}" + (f"  {r.error[:300]}" if r.error else ""))
        if r.rc > 0:
            print(f"  see {out / r.cell.name / 'build.log'}")
    print(f"smartio: matrix of {len(results)} cells in {time.monotonic() - start:.0f} s; output in {out}",
          file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

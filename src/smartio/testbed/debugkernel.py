"""The testbed's debug kernels: Debian's linux-source-6.1 and -6.12 built with lockdep, KASAN and the atomic-sleep
check.

Debian's kernels have no lock checking, so none of the module's `lockdep_assert_held()` calls can fire there, and
nothing catches a use-after-free or a sleep in a kprobe handler. This builds, once per Debian kernel version and per
version of `kernel/debug.config` (and of `kernel/debug-<series>.config`, the options only that series has), the
same source as the cloud kernel from `allnoconfig` plus that fragment (everything the testbed guest needs is built
in; scsi_debug is a module), and caches it beside the Debian packages:

    <cache>/kernel/<abi>-<version>-debug/src/linux-source-<series>/   the built tree (external modules build here)
    <cache>/kernel/<abi>-<version>-debug/image/boot/vmlinuz-<uname>
    <cache>/kernel/<abi>-<version>-debug/image/lib/modules/<uname>/   modules_install: modules.builtin, modules.dep
    <cache>/kernel/<abi>-<version>-debug/.complete-image          the fragment's sha256 and the kernel release
    <cache>/kernel/<abi>-<version>-debug/build.log                 the last build's output

`python -m smartio.testbed.kernelpkg [--kernel 6.12] --flavour debug image` builds one; `make -C kernel debug
[DEBUG_KERNEL=6.12]` builds it and the module against it (kernel/debug/smartio-iosched.ko for 6.1,
kernel/debug-6.12/ for 6.12); `vm.run(..., flavour="debug")` boots it. 4 to 8 minutes on 2 cores the first time; a
changed fragment rebuilds what its options touch (most of the tree for a debug option).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from smartio.errors import SmartioError
from smartio.testbed.debian import run, source_tarball
from smartio.testbed.kernelrelease import KernelRelease

CONFIG_FRAGMENT = Path(__file__).resolve().parents[3] / "kernel" / "debug.config"


def fragments(rel: KernelRelease, fragment: Path = CONFIG_FRAGMENT) -> list[Path]:
    """The fragment, and the series' own beside it (kernel/debug-6.12.config) for options only that series has."""
    own = fragment.with_name(f"{fragment.stem}-{rel.series}{fragment.suffix}")
    return [fragment, own] if own.is_file() else [fragment]


def wanted_options(fragment: Path) -> dict[str, str]:
    """CONFIG_NAME -> value of every option the fragment sets (comments and `is not set` lines left out)."""
    opts = {}
    for line in fragment.read_text().splitlines():
        m = re.fullmatch(r"(CONFIG_\w+)=(.+)", line.strip())
        if m:
            opts[m.group(1)] = m.group(2)
    return opts


def missing_options(config_text: str, wanted: dict[str, str]) -> list[str]:
    """The options of the fragment that the resolved .config does not have as asked (unmet dependencies)."""
    have = dict(re.findall(r"^(CONFIG_\w+)=(.+)$", config_text, re.MULTILINE))
    return [f"{k}={v} (got {have.get(k, 'not set')})" for k, v in wanted.items() if have.get(k) != v]


def _stamp(config: str, rel: KernelRelease) -> str:
    digest = hashlib.sha256(config.encode()).hexdigest()
    return f"{rel.version} {rel.uname} {digest}\n"


def _unpack_source(rel: KernelRelease, src: Path) -> None:
    tmp = rel.dir / "source-tmp"
    tarball = source_tarball(rel, tmp)
    print(f"smartio: unpacking {tarball.name} into {src.parent}", file=sys.stderr, flush=True)
    if src.exists():
        shutil.rmtree(src)
    src.parent.mkdir(parents=True, exist_ok=True)
    run(["tar", "-xJf", str(tarball), "-C", str(src.parent)])
    shutil.rmtree(tmp)


def _make(src: Path, args: list[str], log: Path, what: str) -> None:
    """Run make in the tree, its output into `log`, with a progress line every 30 s (a first build is long)."""
    cmd = ["make", "-C", str(src), f"-j{os.cpu_count() or 1}", "LOCALVERSION=", *args]
    started = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                rc = proc.wait(30)
                break
            except subprocess.TimeoutExpired:
                compiled = log.read_bytes().count(b"\n  CC ")
                print(f"smartio: building the debug {what}: {time.monotonic() - started:.0f} s, "
                      f"{compiled} files compiled", file=sys.stderr, flush=True)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SmartioError(f"building the debug {what} failed (make {' '.join(args)}, exit {rc}); "
                           f"end of {log}:\n{tail}")


def build(rel: KernelRelease, fragment: Path = CONFIG_FRAGMENT) -> KernelRelease:
    """Build (or bring up to date) the debug kernel for rel's Debian version; returns rel."""
    if not fragment.is_file():
        raise SmartioError(f"{fragment} missing: the debug kernel's configuration lives in the repository")
    config = "".join(f.read_text() for f in fragments(rel, fragment))
    stamp = rel.dir / ".complete-image"
    want = _stamp(config, rel)
    if stamp.exists() and stamp.read_text() == want and rel.vmlinuz.exists():
        return rel
    rel.dir.mkdir(parents=True, exist_ok=True)
    src = rel.dir / "src" / rel.source_package
    if not (src / "Makefile").exists():
        _unpack_source(rel, src)
    log = rel.dir / "build.log"
    log.write_text("")
    print(f"smartio: building the debug kernel {rel.uname} (lockdep, KASAN) in {src}; log in {log}",
          file=sys.stderr, flush=True)
    combined = rel.dir / "debug.config"
    combined.write_text(config)
    _make(src, ["allnoconfig", f"KCONFIG_ALLCONFIG={combined}"], log, "kernel configuration")
    missing = missing_options((src / ".config").read_text(), wanted_options(combined))
    if missing:
        names = " and ".join(str(f) for f in fragments(rel, fragment))
        raise SmartioError(f"{names}: options the {rel.series} kernel configuration could not take (a dependency "
                           f"is missing): {', '.join(missing)}")
    _make(src, ["bzImage", "modules"], log, "kernel")
    release = (src / "include" / "config" / "kernel.release").read_text().strip()
    if release != rel.uname:
        raise SmartioError(f"the debug kernel built as {release!r}, expected {rel.uname!r}")
    image = rel.dir / "image"
    if image.exists():
        shutil.rmtree(image)
    (image / "boot").mkdir(parents=True)
    shutil.copy2(src / "arch" / "x86" / "boot" / "bzImage", rel.vmlinuz)
    _make(src, ["modules_install", f"INSTALL_MOD_PATH={image}"], log, "kernel's modules")
    stamp.write_text(want)
    return rel

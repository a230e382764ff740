"""What the testbed boots (GuestSpec) and what the guest is given: the modules to insmod, the kernel command line,
the command's environment and the script that runs it.

    spec = GuestSpec(profile="s5-emmc", disks=1, disk_size=256 << 20, boot=Boot(cpus=1), timeout=300)
    vm.run(["uname", "-r"], spec)         # UsageError on a bad value when the spec is made, before anything boots
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from smartio.errors import UsageError
from smartio.flashdev import Profile, load_profile
from smartio.testbed import initramfs, kernelpkg
from smartio.testbed.boot import DEFAULT_BOOT, Boot

DEFAULT_MODULE = "kernel/smartio-iosched.ko"  # relative to the repository; loaded when built
DEFAULT_MODULE_GENERIC = "kernel/amd64/smartio-iosched.ko"  # the same for the generic flavour (make -C kernel generic)
DEFAULT_MODULE_DEBUG = "kernel/debug/smartio-iosched.ko"     # and for the debug kernel (make -C kernel debug)
# The module for another kernel's debug build (make -C kernel debug DEBUG_KERNEL=6.12).
DEBUG_MODULE = "kernel/debug-{kernel}/smartio-iosched.ko"
MODULE_FOR_FLAVOUR = {kernelpkg.FLAVOUR: DEFAULT_MODULE, kernelpkg.GENERIC: DEFAULT_MODULE_GENERIC,
                      kernelpkg.DEBUG: DEFAULT_MODULE_DEBUG}
# The module of the other kernels' cloud flavour: the build matrix's cell (make -C kernel matrix), whose result.json
# names the release it was built against.
MATRIX_MODULE = "kernel/build/{kernel}-amd64/smartio-iosched.ko"
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SETUP_EXIT = 125  # command.sh: the working directory is not visible in the guest


# nbdkit's largest export (INT64_MAX), rounded down to whole 4 KiB blocks; the disks live in host RAM, sparse.
MAX_DISK_SIZE = (1 << 63) - 4096


@dataclasses.dataclass(frozen=True)
class GuestSpec:
    """What to boot and how long to give it: the kernel and its modules, the disks and the flash device they emulate,
    vCPUs, RAM and kernel arguments, and where the run's artifacts go. Checked when made (UsageError naming the
    flag); a profile given by name is loaded when the run starts (device())."""

    # The flash device the disks emulate (a name: see `smartio flashdev`); None: fast memory disks.
    profile: Profile | str | None = None
    disks: int = 1                        # /dev/vda, /dev/vdb, ... (0 to 20)
    disk_size: int = 1 << 30              # bytes, each: a multiple of 4 KiB from 1 MiB to MAX_DISK_SIZE
    # The .ko files to insmod; None: the project's module for the flavour if it is built (MODULE_FOR_FLAVOUR), (): none.
    modules: Sequence[str | Path] | None = None
    # The kernel: 6.1 (Debian 12's, default), 6.12 (Debian 13's) or newest (Debian unstable's), or an exact release
    # (6.12.118+deb13, 6.1.0-57-cloud-amd64; kernelpkg.resolve).
    kernel: str = kernelpkg.DEFAULT_KERNEL
    # Its flavour: Debian's cloud-amd64 (default) or amd64 (generic: f2fs, nilfs2, ...), or debug (6.1's source
    # built here with lockdep and KASAN, see smartio.testbed.debugkernel).
    flavour: str = kernelpkg.FLAVOUR
    boot: Boot = DEFAULT_BOOT             # vCPUs and kernel arguments (smartio.testbed.boot)
    memory_mib: int = 2048                # guest RAM
    accel: str | None = None              # tcg or kvm; None: the best this host has (vm.choose_accel)
    timeout: float | None = 600.0         # seconds for each boot, boot included; None: no limit (a shell)
    # How many times to boot again, from the start, when the emulator stopped a vCPU (console.emulator_stall) or the
    # boot hung before the command started (console.boot_stall); never for an interactive shell.
    retries: int = 1
    artifacts: Path | None = None         # a new or empty directory; None: ./artifacts/<timestamp>

    def __post_init__(self) -> None:
        if self.modules is not None:
            object.__setattr__(self, "modules", tuple(self.modules))
        if self.disks < 0 or self.disks > 20:
            raise UsageError("--disks", self.disks, "must be between 0 and 20")
        if self.disk_size < 1 << 20 or self.disk_size > MAX_DISK_SIZE or self.disk_size % 4096:
            raise UsageError("--disk-size", self.disk_size, "must be a multiple of 4 KiB from 1 MiB to 8 EiB")
        if self.timeout is not None and not 0 < self.timeout < math.inf:      # also refuses nan
            raise UsageError("--timeout", self.timeout, "must be a positive number of seconds")
        if self.retries < 0:
            raise UsageError("--retries", self.retries, "must be 0 or more")
        check_kernel(self.kernel, self.flavour)

    def device(self) -> Profile | None:
        """The emulated flash device (the profile loaded if given by name), or None for memory disks."""
        return load_profile(self.profile) if isinstance(self.profile, str) else self.profile


def check_kernel(kernel: str, flavour: str = kernelpkg.FLAVOUR) -> None:
    """A UsageError naming --kernel (or --flavour) unless `kernel` is one of kernelpkg.KERNELS or an exact release,
    and the flavour one it comes in (debug: kernelpkg.DEBUG_KERNELS)."""
    if kernel not in kernelpkg.KERNELS and not kernelpkg.RELEASE_RE.fullmatch(kernel):
        raise UsageError("--kernel", kernel, f"must be {', '.join(kernelpkg.KERNELS)} or an exact release such as "
                                             "6.12.118+deb13")
    if flavour not in kernelpkg.FLAVOURS:
        raise UsageError("--flavour", flavour, f"must be one of {', '.join(kernelpkg.FLAVOURS)}")
    if flavour == kernelpkg.DEBUG and not {kernel, kernelpkg.kernel_of(kernel)} & set(kernelpkg.DEBUG_KERNELS):
        raise UsageError("--kernel", kernel,
                         f"the debug kernel is built for {' and '.join(kernelpkg.DEBUG_KERNELS)} only")


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (it holds pyproject.toml and the .venv)."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").exists() else None


def default_module(repo: Path, flavour: str = kernelpkg.FLAVOUR, kernel: str = kernelpkg.DEFAULT_KERNEL) -> Path:
    """Where the project's module for the kernel (a name or an exact release) is built: for 6.1 MODULE_FOR_FLAVOUR's
    (kernel/smartio-iosched.ko for the cloud flavour), for 6.12 and the newest the build matrix's cell
    (MATRIX_MODULE), for 6.12's debug kernel DEBUG_MODULE."""
    kernel = kernel if kernel in kernelpkg.KERNELS else kernelpkg.kernel_of(kernel)
    if flavour == kernelpkg.DEBUG and kernel != kernelpkg.DEFAULT_KERNEL:
        return repo / DEBUG_MODULE.format(kernel=kernel)
    if kernel == kernelpkg.DEFAULT_KERNEL or flavour != kernelpkg.FLAVOUR:
        return repo / MODULE_FOR_FLAVOUR[flavour]
    return repo / MATRIX_MODULE.format(kernel=kernel)


def built_for(ko: Path) -> str | None:
    """The release a matrix cell's module was built against (its result.json), or None if it does not say."""
    try:
        return json.loads((ko.parent / "result.json").read_text()).get("release") or None
    except (OSError, ValueError, AttributeError):
        return None


def resolve_modules(modules: Sequence[str | Path] | None, repo: Path | None,
                    flavour: str = kernelpkg.FLAVOUR, rel: kernelpkg.KernelRelease | None = None) -> list[Path]:
    """Absolute paths of the modules to insmod; None means the project's module (for that flavour and release,
    default_module()) if it is built, and, for a matrix cell, built against that release (else a note and none)."""
    if modules is None:
        default = default_module(repo, flavour, rel.kernel if rel else kernelpkg.DEFAULT_KERNEL) if repo else None
        if not default or not default.is_file():
            return []
        if rel is not None and rel.kernel != kernelpkg.DEFAULT_KERNEL and (was := built_for(default)) \
                and was != rel.uname:
            print(f"smartio testbed: note: not loading {default}: it was built for {was}, this boot is {rel.uname} "
                  f"(make -C kernel matrix KERNELS={rel.kernel} ARCHS=amd64)", file=sys.stderr)
            return []
        return [default]
    out = []
    for m in modules:
        p = Path(m).resolve()
        if not p.is_file():
            raise UsageError("--module", m, "no such file")
        if p.suffix != ".ko":
            raise UsageError("--module", m, "not a kernel module (expected a .ko file)")
        out.append(p)
    return out


def kernel_cmdline(nonce: str, mode: str, queue_depth: int | None, extra: Sequence[str]) -> str:
    """The guest kernel's command line: the testbed's plumbing, then `extra` (Boot.args(): the testbed's own
    arguments and the user's). loglevel=5 puts warnings and worse on the console log, not info."""
    args = ["console=ttyS0", "loglevel=5", "panic=-1", "rdinit=/init", f"smartio.nonce={nonce}",
            f"smartio.mode={mode}"]
    if queue_depth is not None:
        args.append(f"virtio_blk.queue_depth={queue_depth}")
    return " ".join([*args, *extra])


def guest_env(*, repo: Path | None, rel: kernelpkg.KernelRelease, disk_count: int, profile: Profile | None,
              interactive: bool) -> dict[str, str]:
    """The command's environment in the guest (also read by PID 1 for the paths it mounts)."""
    venv_bin = repo / ".venv" / "bin" if repo else None
    env = {k: v for k, v in os.environ.items() if k.startswith("SMARTIO_")}
    env.update({
        "PATH": (f"{venv_bin}:" if venv_bin and venv_bin.is_dir() else "") + GUEST_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": os.environ.get("TERM", "vt100") if interactive else "dumb",
        "SMARTIO_IN_VM": "1",
        "SMARTIO_OUT": initramfs.GUEST_OUT,
        # The guest's home is in RAM: results stored there would vanish at power-off, so they go to the out dir.
        "SMARTIO_DB": f"{initramfs.GUEST_OUT}/results.db",
        "SMARTIO_DISKS": " ".join(f"/dev/vd{chr(ord('a') + i)}" for i in range(disk_count)),
        "SMARTIO_PROFILE": profile.name if profile else "",
        # PID 1 sets each flash disk's max_sectors_kb to it (the virtio disk alone would take 1280 KiB).
        "SMARTIO_MAX_REQUEST_KB": str(profile.max_request_kb) if profile and disk_count else "",
        "SMARTIO_REPO": str(repo) if repo else "",
        "SMARTIO_KERNEL": rel.uname,
        "SMARTIO_KERNEL_MODULES": str(rel.modules_dir),
    })
    if interactive:
        size = shutil.get_terminal_size()
        env.update(SMARTIO_ROWS=str(size.lines or 24), SMARTIO_COLS=str(size.columns or 80))
    return env


def command_script(command: Sequence[str], cwd: Path) -> str:
    q = shlex.quote(str(cwd))
    return (f"cd {q} 2>/dev/null || {{ echo \"smartio testbed: {q} is not visible in the guest\" >&2; "
            f"exit {SETUP_EXIT}; }}\nexec {shlex.join(command)}\n")

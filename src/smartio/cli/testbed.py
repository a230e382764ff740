"""`smartio testbed run|shell`: parse the options into a GuestSpec and hand it to smartio.testbed.vm."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from smartio.errors import UsageError
from smartio.testbed import boot, guest, kernelpkg, vm
from smartio.units import parse_size


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME",
                   help="emulated flash profile of the disks (see `smartio flashdev`); default: fast memory disks")
    p.add_argument("--disks", type=int, default=1, metavar="N", help="number of disks, /dev/vda... (default 1)")
    p.add_argument("--disk-size", default="1G", metavar="SIZE", help="size of each disk (default 1G)")
    p.add_argument("--artifacts", type=Path, metavar="DIR",
                   help="new or empty directory for the run's artifacts (default ./artifacts/<timestamp>)")
    p.add_argument("--module", action="append", metavar="PATH.ko", dest="modules",
                   help=f"kernel module to insmod before the command; repeatable "
                        f"(default: {guest.DEFAULT_MODULE} if built)")
    p.add_argument("--no-module", action="store_true", help="load no module, not even the default one")
    p.add_argument("--kernel-arg", action="append", default=[], metavar="ARG", dest="kernel_args",
                   help=f"extra kernel parameter, e.g. panic_on_warn=1, after the testbed's own "
                        f"({' '.join(boot.DEFAULT_ARGS)}); repeatable")
    p.add_argument("--kernel", default=kernelpkg.DEFAULT_KERNEL, metavar="K",
                   help=f"the kernel to boot: {kernelpkg.DEFAULT_KERNEL} (default, Debian 12), 6.12 (Debian 13), "
                        f"newest (Debian unstable), or an exact release such as 6.12.118+deb13; fetched once and "
                        f"cached. The module loaded by default is the one built for it (6.12, newest: "
                        f"{guest.MATRIX_MODULE.format(kernel='<K>')}, make -C kernel matrix)")
    p.add_argument("--flavour", choices=list(kernelpkg.FLAVOURS), default=None,
                   help=f"Debian's {kernelpkg.FLAVOUR} (default) or {kernelpkg.GENERIC} (f2fs, nilfs2), or "
                        f"{kernelpkg.DEBUG}: the kernel's source (6.1 or 6.12) built here with lockdep and KASAN (4 "
                        f"to 8 minutes the first time; the module for it: make -C kernel debug [DEBUG_KERNEL=6.12]). "
                        f"`--kernel FLAVOUR` still means --flavour FLAVOUR")
    p.add_argument("--cpus", type=int, default=boot.DEFAULT_CPUS, metavar="N",
                   help=f"vCPUs (default {boot.DEFAULT_CPUS})")
    p.add_argument("--memory", default="2G", metavar="SIZE", help="guest RAM (default 2G)")


def register(subparsers: argparse._SubParsersAction) -> None:
    tb = subparsers.add_parser("testbed",
                               help="run commands in a Linux VM (6.1, 6.12 or newest) with emulated flash disks",
                               description="Boot Debian's Linux 6.1 cloud kernel (or 6.12's, or the newest: "
                                           "--kernel) in QEMU, with the host's tools, "
                                           "the repository and emulated disks, and run a command as root.")
    sub = tb.add_subparsers(dest="testbed_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="run COMMAND in the VM and return its exit code",
                         description="Run COMMAND as root in the VM; its output streams here and the exit code is "
                                     "returned. It can write files to $SMARTIO_OUT (/smartio/out), which land in "
                                     "<artifacts>/out. Exit codes: COMMAND's, or 1 if the VM failed (timeout, "
                                     "kernel panic/oops/WARN), 2 for bad input, 3 when not run as root.",
                         epilog="example: smartio testbed run --profile s5-emmc -- smartio bench ...")
    _common(run)
    run.add_argument("--timeout", type=float, default=600.0, metavar="S",
                     help="kill the VM after S seconds, boot included; each boot has that long when it boots "
                          "again after a stall (--retries) (default 600)")
    run.add_argument("--retries", type=int, default=1, metavar="N",
                     help="boot again from the start, up to N times, when the emulator (not the guest) stopped a "
                          "vCPU (QEMU TCG's stale-translation stall, told from the guest's own hangs by its RCU "
                          "stall reports) or the boot hung before COMMAND started (150 s); the stopped boot's "
                          "files go to <artifacts>/stalled-<n>/ (default 1)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    run.set_defaults(func=cmd_run)
    sh = sub.add_parser("shell", help="an interactive root shell in the VM (exit it to power off)",
                        description="Interactive root shell in the VM. Exit the shell to power off; "
                                    "Ctrl-A X kills the VM.")
    _common(sh)
    sh.set_defaults(func=cmd_shell)


def _spec(args: argparse.Namespace, **more: Any) -> guest.GuestSpec:
    """The guest the options describe, with `more` (run's --timeout and --retries)."""
    memory = parse_size("--memory", args.memory) >> 20
    if memory < 256:
        raise UsageError("--memory", args.memory, "must be at least 256M")
    if args.no_module and args.modules:
        raise UsageError("--no-module", "", "conflicts with --module")
    kernel, flavour = kernel_choice(args.kernel, args.flavour)
    return guest.GuestSpec(profile=args.profile, disks=args.disks,
                           disk_size=parse_size("--disk-size", args.disk_size), artifacts=args.artifacts,
                           modules=[] if args.no_module else args.modules,
                           boot=boot.Boot(cpus=args.cpus, kernel_args=tuple(args.kernel_args)), memory_mib=memory,
                           kernel=kernel, flavour=flavour, **more)


def kernel_choice(kernel: str, flavour: str | None) -> tuple[str, str]:
    """(kernel, flavour) of --kernel and --flavour; --kernel naming a flavour (its meaning before there was a choice
    of kernels) is --flavour with 6.1."""
    if kernel in kernelpkg.FLAVOURS:
        if flavour is not None and flavour != kernel:
            raise UsageError("--kernel", kernel, f"is a flavour and conflicts with --flavour {flavour}")
        return kernelpkg.DEFAULT_KERNEL, kernel
    return kernel, flavour or kernelpkg.FLAVOUR


def _report(result: vm.VmResult) -> int:
    if result.failure:
        print(f"smartio: error: {result.failure}", file=sys.stderr)
        return 1
    print(f"smartio testbed: exit code {result.rc} after {result.duration_s:.1f} s; "
          f"artifacts in {result.artifacts_dir}", file=sys.stderr)
    return result.rc if result.rc is not None else 1


def cmd_run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError(None, "COMMAND", "missing; usage: smartio testbed run [options] -- COMMAND...")
    return _report(vm.run(command, _spec(args, timeout=args.timeout, retries=args.retries)))


def cmd_shell(args: argparse.Namespace) -> int:
    return _report(vm.shell(_spec(args)))

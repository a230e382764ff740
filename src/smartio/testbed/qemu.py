"""QEMU for the testbed: finding the binaries, choosing TCG or KVM, building the command line, virtiofsd.

The guest gets two serial ports: ttyS0 is the kernel console (written to a file on the host), ttyS1 carries the
command's output (QEMU's stdout, which the host streams). Host directories reach the guest through
vhost-user-fs (virtiofsd), which needs the guest's RAM in a shared memfd. Disks are virtio-blk devices whose
backing is an NBD export on a unix socket (nbdkit), reached through one of two transports:

  fuse (default)  nbdfuse presents the export as a file; QEMU opens it with O_DIRECT and Linux AIO (aio=native),
                  so every request is in flight on its own and completes when its NBD reply arrives.
  nbd             QEMU's NBD client. In QEMU 7.2 (Debian 12) it delays completions: in block/nbd.c,
                  nbd_co_receive_one_chunk() clears s->reply.handle and only then takes receive_mutex (in
                  nbd_recv_coroutines_wake) to wake the next receiver. The mutex has meanwhile been handed to the
                  next request's coroutine, which finds no reply pending and blocks in nbd_receive_reply() reading
                  the next header while holding it. So a finished request completes only when the next reply
                  arrives: an early-acknowledged write waits for the read behind it, and with two outstanding
                  requests every pair completes together. Later QEMU clears the handle under the mutex.
                  `-t none` qemu-io, nbdkit --filter=delay rdelay=80ms wdelay=10ms, aio_write then aio_read:
                  nbd reports the write after 0.08 s, fuse after 0.01 s. An iothread runs the same client code.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from smartio.errors import MissingToolError, NeedsRootError, SmartioError
from smartio.testbed.boot import DEFAULT_CPUS

QEMU = "qemu-system-x86_64"
VIRTIOFSD_DIRS = ("/usr/lib/qemu", "/usr/libexec", "/usr/lib/virtiofsd", "/usr/bin")
DISK_TRANSPORTS = ("fuse", "nbd")


def find_qemu() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise MissingToolError(QEMU, "install Debian's qemu-system-x86 (scripts/install-deps --vm)")
    return path


def find_virtiofsd() -> str:
    for d in VIRTIOFSD_DIRS:
        if os.access(p := os.path.join(d, "virtiofsd"), os.X_OK):
            return p
    raise MissingToolError("virtiofsd", "install Debian's qemu-system-x86 (it ships /usr/lib/qemu/virtiofsd)")


@dataclasses.dataclass(frozen=True)
class Share:
    """A host directory exported to the guest under a virtiofs tag."""

    tag: str
    source: Path
    socket: Path
    # "always" lets the guest cache names and attributes for good: right for a tree that does not change while
    # the VM runs (the host's /), and it saves many slow lookups under TCG. "auto" revalidates after a second.
    cache: str = "auto"


@dataclasses.dataclass(frozen=True)
class VmConfig:
    """Everything that decides QEMU's command line."""

    kernel: Path
    initrd: Path
    append: str
    console_log: Path
    shares: tuple[Share, ...]
    disks: tuple[Path, ...] = ()  # NBD unix sockets (transport nbd) or nbdfuse files (transport fuse)
    disk_transport: str = "fuse"
    accel: str = "tcg"
    cpus: int = DEFAULT_CPUS
    memory_mib: int = 2048
    interactive: bool = False
    monitor: Path | None = None   # a unix socket for QEMU's monitor (HMP): where the vCPUs are (testbed.vcpus)


def command_line(cfg: VmConfig, qemu: str = QEMU) -> list[str]:
    """QEMU's argv for cfg; pure, so it can be checked without booting."""
    accel = "tcg,thread=multi" if cfg.accel == "tcg" else cfg.accel
    cmd = [
        qemu, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", "q35,memory-backend=mem", "-accel", accel, "-cpu", "max" if cfg.accel == "tcg" else "host",
        "-smp", str(cfg.cpus), "-m", f"{cfg.memory_mib}M",
        # vhost-user-fs needs guest RAM that virtiofsd can map.
        "-object", f"memory-backend-memfd,id=mem,size={cfg.memory_mib}M,share=on",
        "-kernel", str(cfg.kernel), "-initrd", str(cfg.initrd), "-append", cfg.append,
        "-chardev", f"file,id=console,path={cfg.console_log}", "-serial", "chardev:console",
    ]
    if cfg.interactive:
        # mux: Ctrl-A X quits QEMU from the terminal; signal=off: Ctrl-C goes to the guest's shell.
        cmd += ["-chardev", "stdio,id=cmd,signal=off,mux=on", "-serial", "chardev:cmd", "-mon", "chardev=cmd"]
    else:
        cmd += ["-chardev", "stdio,id=cmd,signal=off", "-serial", "chardev:cmd"]
        if cfg.monitor is not None:
            cmd += ["-monitor", f"unix:{cfg.monitor},server=on,wait=off"]
    for i, share in enumerate(cfg.shares):
        cmd += ["-chardev", f"socket,id=fs{i},path={share.socket}",
                "-device", f"vhost-user-fs-pci,chardev=fs{i},tag={share.tag}"]
    for i, path in enumerate(cfg.disks):
        if cfg.disk_transport == "fuse":
            # O_DIRECT: no host page cache between the guest and the device model.
            node = f"driver=file,node-name=disk{i},filename={path},aio=native,cache.direct=on"
        else:
            node = f"driver=nbd,node-name=disk{i},server.type=unix,server.path={path}"
        # One hardware queue, as on a phone's eMMC/UFS host controller; the depth is virtio_blk.queue_depth.
        cmd += ["-blockdev", node,
                "-device", f"virtio-blk-pci,drive=disk{i},serial=smartio-disk{i},num-queues=1"]
    return cmd


def kvm_flags_present(cpuinfo: str | None = None) -> bool:
    """vmx or svm among the CPU flags: the first condition for KVM (a boot probe is the second)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            return "vmx" in flags or "svm" in flags
    return False


def wait_for_socket(path: Path, proc: subprocess.Popen, what: str, log: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise SmartioError(f"{what} exited ({proc.returncode}) before listening: {tail(log)}")
        if time.monotonic() > deadline:
            raise SmartioError(f"{what} did not create {path} within {timeout:.0f} s: {tail(log)}")
        time.sleep(0.02)


def tail(path: Path, n: int = 800) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip() or "(no output)"
    except OSError:
        return "(no log)"


def die_with_parent() -> None:
    """preexec_fn: the kernel kills the child when smartio dies, even by SIGKILL, so no VM is left running."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Terminate a child we started and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def virtiofsd(share: Share, log: IO[bytes]) -> Iterator[subprocess.Popen]:
    """Run virtiofsd for one share until the block exits. It serves a single QEMU connection."""
    if os.geteuid() != 0:
        raise NeedsRootError("sharing host directories with the guest (virtiofsd)")
    cmd = [find_virtiofsd(), f"--socket-path={share.socket}", "-o", f"source={share.source}",
           "-o", f"cache={share.cache}",
           # The namespace sandbox cannot pivot_root in containers; chroot works there and on plain hosts.
           "-o", "sandbox=chroot"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent)
    try:
        wait_for_socket(share.socket, proc, f"virtiofsd for {share.source}", Path(log.name))
        yield proc
    finally:
        stop(proc)

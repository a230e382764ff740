"""The guest's disks: NBD exports on unix sockets, one per disk, served by nbdkit on the host.

With a flash profile each disk is the emulated flash device (smartio.flashdev.FlashServer); without one it is a
plain, fast `nbdkit memory` disk. Either way the data lives in host RAM and vanishes with the run.

How QEMU reaches an export is the transport (see qemu.py for why "fuse" is the default):
  fuse  nbdfuse (libnbd) presents the export as a file, which QEMU opens with O_DIRECT and Linux AIO;
  nbd   QEMU's own NBD client connects to the socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from smartio.errors import MissingToolError, SmartioError, UsageError
from smartio.flashdev import FlashServer, Profile
from smartio.testbed.qemu import DISK_TRANSPORTS, die_with_parent, stop, tail, wait_for_socket

TRANSPORT_ENV = "SMARTIO_DISK_TRANSPORT"  # fuse or nbd; default: fuse where it works, else nbd
FUSE_START_TIMEOUT_S = 10.0


def fuse_unavailable_reason() -> str | None:
    """Why the fuse transport cannot work on this host, or None."""
    if shutil.which("nbdfuse") is None:
        return "nbdfuse is not installed (Debian's libnbd-bin)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian's fuse3)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is missing or not accessible"
    return None


def choose_transport() -> str:
    """The disk transport: SMARTIO_DISK_TRANSPORT if set, else fuse where it works, else nbd."""
    forced = os.environ.get(TRANSPORT_ENV)
    if forced:
        if forced not in DISK_TRANSPORTS:
            raise UsageError(TRANSPORT_ENV, forced, f"must be one of {', '.join(DISK_TRANSPORTS)}")
        if forced == "fuse" and (why := fuse_unavailable_reason()):
            raise MissingToolError("nbdfuse", f"{TRANSPORT_ENV}=fuse, but {why}; scripts/install-deps --vm")
        return forced
    return "nbd" if fuse_unavailable_reason() else "fuse"


@contextlib.contextmanager
def fuse_file(sock: Path, workdir: Path, index: int) -> Iterator[Path]:
    """The NBD export at `sock` as a file (nbdfuse on a "naked" mountpoint); yields the file's path."""
    path = workdir / f"disk{index}.img"
    path.touch()
    pidfile = workdir / f"nbdfuse-disk{index}.pid"
    log_path = workdir / f"nbdfuse-disk{index}.log"
    # auto_unmount: a helper unmounts the file if nbdfuse dies, so no dead mount is left behind.
    cmd = ["nbdfuse", "-P", str(pidfile), "-o", "auto_unmount", str(path), "--unix", str(sock)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
        try:
            # nbdfuse writes the pid file once the file is mounted and connected.
            deadline = time.monotonic() + FUSE_START_TIMEOUT_S
            while not (pidfile.is_file() and pidfile.read_text().strip()):
                if proc.poll() is not None:
                    raise SmartioError(f"nbdfuse exited ({proc.returncode}) before serving {path}: "
                                       f"{tail(log_path)}")
                if time.monotonic() > deadline:
                    raise SmartioError(f"nbdfuse did not serve {path} within {FUSE_START_TIMEOUT_S:.0f} s: "
                                       f"{tail(log_path)}")
                time.sleep(0.02)
            yield path
        finally:
            # Unmounting makes nbdfuse exit cleanly; stop() covers an nbdfuse that hangs.
            subprocess.run(["fusermount3", "-u", "-q", str(path)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                stop(proc)


@contextlib.contextmanager
def memory_disk(size_bytes: int, workdir: Path, index: int) -> Iterator[Path]:
    """A fast RAM disk exported by `nbdkit memory`; yields its unix socket."""
    nbdkit = shutil.which("nbdkit")
    if nbdkit is None:
        raise MissingToolError("nbdkit", "install Debian's nbdkit (scripts/install-deps --vm)")
    sock = workdir / f"disk{index}.sock"
    log_path = workdir / f"nbdkit-disk{index}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([nbdkit, "--foreground", "--exit-with-parent", "--unix", str(sock),
                                 "memory", f"size={size_bytes}"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_socket(sock, proc, "nbdkit", log_path)
            yield sock
        finally:
            stop(proc)


@contextlib.contextmanager
def flash_disk(profile: Profile, size_bytes: int, workdir: Path, index: int) -> Iterator[Path]:
    """The emulated flash device of `profile`; yields its unix socket."""
    diskdir = workdir / f"disk{index}"
    diskdir.mkdir()
    with FlashServer(profile, size_bytes, diskdir) as server:
        assert server.socket is not None    # no port given: it serves a unix socket
        yield server.socket


@contextlib.contextmanager
def serve(count: int, size_bytes: int, workdir: Path, profile: Profile | None = None,
          transport: str = "nbd") -> Iterator[list[Path]]:
    """Serve `count` disks for the length of the block; yields what QEMU opens, in guest order (vda, vdb, ...):
    the NBD sockets (transport nbd) or the nbdfuse files (transport fuse)."""
    if transport not in DISK_TRANSPORTS:
        raise UsageError(TRANSPORT_ENV, transport, f"must be one of {', '.join(DISK_TRANSPORTS)}")
    with contextlib.ExitStack() as stack:
        paths = []
        for i in range(count):
            sock = stack.enter_context(flash_disk(profile, size_bytes, workdir, i) if profile is not None
                                       else memory_disk(size_bytes, workdir, i))
            if transport == "fuse":
                sock = stack.enter_context(fuse_file(sock, workdir, i))
            paths.append(sock)
        yield paths

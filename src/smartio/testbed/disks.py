"""The guest's disks: NBD exports on unix sockets, one per disk, served by nbdkit on the host.

With a flash profile each disk is the emulated flash device (smartio.flashdev.FlashServer); without one it is a
plain, fast `nbdkit memory` disk. Either way the data lives in host RAM and vanishes with the run.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from smartio.errors import MissingToolError
from smartio.flashdev import FlashServer, Profile
from smartio.testbed.qemu import stop, wait_for_socket


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
        yield Path(server.socket)


@contextlib.contextmanager
def serve(count: int, size_bytes: int, workdir: Path, profile: Profile | None = None) -> Iterator[list[Path]]:
    """Serve `count` disks for the length of the block; yields their sockets in guest order (vda, vdb, ...)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(flash_disk(profile, size_bytes, workdir, i) if profile is not None
                                     else memory_disk(size_bytes, workdir, i))
                 for i in range(count)]
        yield socks

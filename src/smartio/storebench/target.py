"""Where an experiment's I/O goes: scratch files in a directory, regions of a file, or regions of a device.

Each stream asks for a named slot of a given size and gets (filename, offset). In a directory every slot is its own
scratch file, removed by `cleanup()` (called from a `finally`, so also on Ctrl-C). In a file or on a device, slots
are consecutive 1 MiB-aligned regions. A read-only target (--read-only) is never changed: a file is read only as far
as it goes, never extended, and a directory, which has nothing to read, is refused.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import secrets
import stat
from collections.abc import Sequence

from smartio.blockdev import Backing, Device, backing_of, device_of_node, memory_backed, write_hazards
from smartio.errors import UsageError
from smartio.units import mib

ALIGN = 1 << 20
# Free space left to the filesystem beside a run's data: 1/16 of it, at least 1 MiB, at most 64 MiB, so that a
# small filesystem can take a small run while a big run never fills a shared filesystem to the brim.
RESERVE_MIN, RESERVE_MAX = 1 << 20, 64 << 20


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


@dataclasses.dataclass
class Target:
    path: str
    kind: str                          # "dir" | "file" | "device"
    device: Device | None              # the block device (for dir/file: underneath; None on tmpfs etc.)
    backing: Backing | None = None
    writes: bool = True                # False: --read-only, the target must not change at all
    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(4))
    _slots: dict[str, tuple[str, int, int]] = dataclasses.field(default_factory=dict)
    _next: int = 0

    def slot(self, name: str, size: int) -> tuple[str, int]:
        if name in self._slots:
            filename, offset, have = self._slots[name]
            if size > have:
                raise ValueError(f"slot {name} asked for {size} bytes, has {have}")
            return filename, offset
        if self.kind == "dir":
            filename, offset = os.path.join(self.path, f".smartio-{self.token}-{name}.dat"), 0
        else:
            filename, offset = self.path, self._next
            if not self.writes and self.kind == "file" and offset + size > os.path.getsize(self.path):
                # check_space() refuses this up front; reading past the end would make fio extend the file.
                raise UsageError("--target", self.path, f"--read-only: the run reads to byte {offset + size}, "
                                 f"the file ends at {os.path.getsize(self.path)}")
            self._next += _aligned(size)
        self._slots[name] = (filename, offset, size)
        return filename, offset

    def span(self, names: list[str]) -> tuple[str | tuple[str, ...], int]:
        """One job's (filename, offset) covering several slots of the same size, in order: the scratch files
        for a directory; for a file or device, the region from the first slot to the end of the last."""
        slots = [self._slots[n] for n in names]
        if self.kind == "dir":
            return tuple(f for f, _, _ in slots), 0
        return self.path, slots[0][1]

    def describe(self) -> str:
        if self.kind == "device":
            return f"block device {self.path}"
        where = f"{self.backing.fstype} on {self.backing.source}" if self.backing else "?"
        return f"{'directory' if self.kind == 'dir' else 'file'} {self.path} ({where})"

    def region(self, slot_sizes: Sequence[int]) -> int:
        """How far into a file or device slots of these sizes reach, taken in this order (see slot())."""
        start = end = 0
        for size in slot_sizes:
            end = start + size
            start += _aligned(size)
        return end

    def check_space(self, slot_sizes: Sequence[int]) -> None:
        """Refuse up front when slots of these sizes do not fit, or (read-only) are not all there to be read."""
        if self.kind == "device":
            needed, have = self.region(slot_sizes), self.device.size if self.device else 0
            if needed > have:
                raise UsageError("--target", self.path, f"too little space: the run needs {mib(needed)}, the "
                                 f"device holds {mib(have)} (lower --size or --levels)")
            return
        if self.kind == "file" and not self.writes:
            needed, have = self.region(slot_sizes), os.path.getsize(self.path)
            if needed > have:
                raise UsageError("--target", self.path, f"--read-only reads {mib(needed)} of it, the file holds "
                                 f"{mib(have)} and is never extended (lower --size or --levels)")
            return
        needed = sum(slot_sizes) if self.kind == "dir" else self.region(slot_sizes)
        st = os.statvfs(self.path if self.kind == "dir" else os.path.dirname(os.path.abspath(self.path)))
        free = st.f_bavail * st.f_frsize
        if self.kind == "file":
            free += os.stat(self.path).st_blocks * 512     # the blocks it has already (none where it is sparse)
        reserve = min(max(needed // 16, RESERVE_MIN), RESERVE_MAX)
        if needed + reserve > free:
            raise UsageError("--target", self.path, f"too little space: the run writes {mib(needed)} and leaves "
                             f"{mib(reserve)} to the filesystem, {mib(free)} available (lower --size or --levels)")

    def cleanup(self) -> None:
        if self.kind != "dir":
            return
        for name in os.listdir(self.path):
            if name.startswith(f".smartio-{self.token}-"):
                try:
                    os.unlink(os.path.join(self.path, name))
                except FileNotFoundError:
                    pass


def open_target(path: str | None, *, writes: bool, destroy_data: bool) -> Target:
    """Resolve --target and check it is usable and safe for what will be done to it."""
    if not path:
        raise UsageError("--target", "(missing)", "a target is required: a directory, a file or a block device")
    if not os.path.exists(path):
        raise UsageError("--target", path, "does not exist")
    st = os.stat(path)
    if stat.S_ISBLK(st.st_mode):
        dev = device_of_node(path)
        if not os.access(path, os.R_OK | (os.W_OK if writes else 0)):
            raise UsageError("--target", path, "permission denied; run as root or get access to the device")
        if writes:
            hazards = write_hazards(dev)
            if hazards.in_use:
                # Raw writes under a live filesystem or swap corrupt it at once: no flag overrides this.
                raise UsageError("--target", path, f"{'; '.join(hazards.in_use + hazards.data)}; refusing to "
                                 "write to a device in use (--read-only runs the read experiments)")
            if hazards.data and not destroy_data:
                raise UsageError("--target", path, f"{'; '.join(hazards.data)}; refusing to write "
                                 "(pass --destroy-data to allow, or --read-only for read experiments)")
        return Target(path, "device", dev, writes=writes)
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        memory = memory_backed(path)
        if memory:
            raise UsageError("--target", path, f"is on {memory}, which keeps files in memory: the run would measure "
                             "RAM, not storage; choose a directory or file on a disk, or a block device")
    if stat.S_ISDIR(st.st_mode):
        if not writes:
            raise UsageError("--target", path, "a directory has nothing to read without writing scratch files into "
                             "it, which --read-only rules out; give a file or block device that holds the data")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError("--target", path, "directory is not writable")
        _check_direct_io(path)
        b = backing_of(path)
        return Target(os.path.abspath(path), "dir", b.device, b)
    if stat.S_ISREG(st.st_mode):
        if not os.access(path, os.R_OK | (os.W_OK if writes else 0)):
            raise UsageError("--target", path, "file is not " + ("writable" if writes else "readable"))
        b = backing_of(path)
        return Target(os.path.abspath(path), "file", b.device, b, writes=writes)
    raise UsageError("--target", path, "not a directory, regular file or block device")


def _check_direct_io(directory: str) -> None:
    probe = os.path.join(directory, f".smartio-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        os.close(fd)
    except OSError as e:
        if e.errno == errno.EINVAL:
            raise UsageError("--target", directory, "its filesystem does not support direct I/O; "
                             "choose a directory on a disk") from e
        raise UsageError("--target", directory, f"cannot create files: {e.strerror}") from e
    finally:
        if os.path.exists(probe):
            os.unlink(probe)



"""Block devices: what lies under a path, whether it is safe to write, its I/O scheduler and tunables."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import stat
import subprocess
from pathlib import Path

from smartio.errors import NeedsRootError, UsageError

SYS = Path("/sys")


@dataclasses.dataclass(frozen=True)
class Device:
    name: str          # kernel name of the device itself, e.g. "vda1"
    disk: str          # the whole disk whose request queue serves it, e.g. "vda"
    size: int          # bytes
    major_minor: str

    @property
    def path(self) -> str:
        return f"/dev/{self.name}"

    @property
    def queue(self) -> Path:
        return SYS / "block" / self.disk / "queue"


def device_from_devnum(devnum: int) -> Device | None:
    mm = f"{os.major(devnum)}:{os.minor(devnum)}"
    link = SYS / "dev" / "block" / mm
    if not link.exists():
        return None
    real = link.resolve()
    name = real.name
    disk = real.parent.name if (real / "partition").exists() else name
    size = int((real / "size").read_text()) * 512
    return Device(name=name, disk=disk, size=size, major_minor=mm)


def device_of_node(path: str) -> Device:
    st = os.stat(path)
    if not stat.S_ISBLK(st.st_mode):
        raise UsageError("--target", path, "not a block device")
    dev = device_from_devnum(st.st_rdev)
    if dev is None:
        raise UsageError("--target", path, "block device not found in /sys/dev/block")
    return dev


@dataclasses.dataclass(frozen=True)
class Backing:
    """What a file or directory lives on."""

    device: Device | None
    fstype: str
    source: str


@dataclasses.dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo."""

    point: str
    fstype: str
    source: str
    options: tuple[str, ...]     # the superblock's options, e.g. ("rw", "lowerdir=/a:/b", "upperdir=/c", ...)


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline, backslash (and overlayfs also ',' and ':') as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str) -> Mount | None:
    """The mount that holds `path` (the last one mounted on the longest matching mount point)."""
    real = os.path.realpath(path)
    best: Mount | None = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = _unescape(left.split()[4])
            if real == point or real.startswith(point.rstrip("/") + "/"):
                if best is None or len(point) >= len(best.point):
                    fstype, source, *opts = right.split()
                    best = Mount(point, fstype, _unescape(source), tuple(opts[0].split(",")) if opts else ())
    return best


def backing_of(path: str) -> Backing:
    """The mount holding `path`, and its block device if it has one (tmpfs and overlay have none)."""
    mount = mount_of(path)
    dev = device_from_devnum(os.stat(os.path.realpath(path)).st_dev)
    if mount is None:
        return Backing(dev, "unknown", "unknown")
    return Backing(dev, mount.fstype, mount.source)


# statfs(2) f_type of the filesystems that keep their files in RAM (linux/magic.h); devtmpfs reports tmpfs's.
MEMORY_FS_MAGIC = {0x01021994: "tmpfs", 0x858458F6: "ramfs"}
OVERLAYFS_MAGIC = 0x794C7630
_libc = ctypes.CDLL(None, use_errno=True)


def fs_magic(path: str) -> int:
    """The f_type that statfs(2) reports for the filesystem holding `path`."""
    buf = ctypes.create_string_buffer(256)      # struct statfs is 120 bytes on 64-bit Linux; f_type comes first
    if _libc.statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def memory_backed(path: str, _depth: int = 0) -> str | None:
    """What keeps `path`'s files in memory ("tmpfs", "overlay with upperdir X on tmpfs"), or None.

    Decided by the filesystem's type, not by whether it refuses O_DIRECT: tmpfs accepts O_DIRECT since Linux 6.6.
    An overlay is memory-backed when any of its layers is (its upper layer takes the writes, its lower layers
    serve the files that were there); layers this process cannot see (another mount namespace) are not judged.
    """
    magic = fs_magic(path)
    if magic in MEMORY_FS_MAGIC:
        return MEMORY_FS_MAGIC[magic]
    if magic != OVERLAYFS_MAGIC or _depth > 8:
        return None
    mount = mount_of(path)
    for opt in mount.options if mount else ():
        key, _, value = opt.partition("=")
        if key not in ("upperdir", "lowerdir", "lowerdir+", "datadir+"):
            continue
        for layer in filter(None, re.split(r"(?<!\\):+", value) if key == "lowerdir" else [value]):
            layer = _unescape(layer.replace("\\:", ":"))
            if os.path.exists(layer):
                under = memory_backed(layer, _depth + 1)
                if under:
                    return f"overlay with {key.rstrip('+')} {layer} on {under}"
    return None


@dataclasses.dataclass(frozen=True)
class Hazards:
    """Why writing to a block device could do harm.

    in_use: the system uses it now (mounted, swap, held by another device such as dm or md); never written, not even
    with --destroy-data, since raw writes under a live filesystem or swap corrupt memory and files at once.
    data: it holds data that the writes would destroy (partitions, a partition table, a filesystem or other
    signature); written only with --destroy-data.
    """

    in_use: tuple[str, ...]
    data: tuple[str, ...]


def write_hazards(dev: Device) -> Hazards:
    """What stands against writing to this device; both empty if it looks blank and unused."""
    in_use: list[str] = []
    data: list[str] = []
    base = SYS / "class" / "block" / dev.name
    parts = sorted(p.name for p in base.iterdir() if (p / "partition").exists()) if base.exists() else []
    members = {dev.name: base, **{p: base / p for p in parts}}       # the device and its partitions
    mm_all = {dev.major_minor} | {(base / p / "dev").read_text().strip() for p in parts}
    nodes = {f"/dev/{n}" for n in members}
    if parts:
        data.append(f"holds partitions ({', '.join(parts)})")
    mounted = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            source = right.split()[1:2]
            # By device number, or by source for filesystems whose st_dev is not the device's (btrfs).
            if left.split()[2] in mm_all or (source and _unescape(source[0]) in nodes):
                mounted.add(_unescape(left.split()[4]))
    if mounted:
        in_use.append(f"is mounted at {', '.join(sorted(mounted))}")
    with open("/proc/swaps") as f:
        swaps = {os.path.realpath(line.split()[0]) for line in list(f)[1:] if line.strip()}
    swapping = sorted(n for n in members if os.path.realpath(f"/dev/{n}") in swaps)
    if swapping:
        in_use.append("is in use as swap" + (f" ({', '.join(swapping)})" if swapping != [dev.name] else ""))
    holders = sorted({h.name for d in members.values() if (d / "holders").is_dir() for h in (d / "holders").iterdir()})
    if holders:
        in_use.append(f"is held by {', '.join(holders)}")
    try:
        out = subprocess.run(["blkid", "-p", "-o", "export", dev.path], capture_output=True, text=True,
                             timeout=30)
        info = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        if "PTTYPE" in info:
            data.append(f"holds a {info['PTTYPE']} partition table")
        if "TYPE" in info:
            data.append(f"holds a {info['TYPE']} signature")
        if out.returncode not in (0, 2) and not info:   # 2: nothing found
            data.append(f"could not be probed (blkid: {out.stderr.strip() or out.returncode})")
    except FileNotFoundError:
        data.append("could not be probed: blkid (util-linux) is not installed")
    return Hazards(tuple(in_use), tuple(data))


def is_root() -> bool:
    return os.geteuid() == 0


def read_scheduler(dev: Device) -> tuple[str, list[str]]:
    """(current, available) from the queue's scheduler file, e.g. ("mq-deadline", ["none", "mq-deadline"])."""
    f = dev.queue / "scheduler"
    if not f.exists():
        return "none", ["none"]
    words = f.read_text().split()
    current = next((w[1:-1] for w in words if w.startswith("[")), "none")
    return current, [w.strip("[]") for w in words]


def read_tunables(dev: Device) -> dict[str, str]:
    d = dev.queue / "iosched"
    if not d.is_dir():
        return {}
    out = {}
    for p in sorted(d.iterdir()):
        try:
            out[p.name] = p.read_text().strip()
        except OSError:
            pass
    return out


def write_tunables(dev: Device, values: dict[str, int | str]) -> dict[str, str]:
    """Write iosched tunables; return the previous values of those written."""
    if not is_root():
        raise NeedsRootError(f"writing I/O scheduler tunables of {dev.disk}")
    d = dev.queue / "iosched"
    old = {}
    for k, v in values.items():
        f = d / k
        if not f.exists():
            current, _ = read_scheduler(dev)
            raise UsageError(None, k, f"no such tunable of scheduler {current} on {dev.disk} ({d})")
        old[k] = f.read_text().strip()
        try:
            f.write_text(f"{v}\n")
        except OSError as e:
            raise UsageError(None, f"{k}={v}", f"rejected by the kernel: {e.strerror}") from e
    return old


class SchedulerSwitch:
    """Switch a device's I/O scheduler for the duration of a `with` block, then restore it."""

    def __init__(self, dev: Device, name: str) -> None:
        self.dev, self.name = dev, name
        self.previous: str | None = None

    def __enter__(self) -> SchedulerSwitch:
        current, available = read_scheduler(self.dev)
        if self.name == current:
            return self
        if not is_root():
            raise NeedsRootError(f"switching the I/O scheduler of {self.dev.disk} to {self.name}")
        try:
            # A scheduler built as a module (bfq, kyber) is loaded on demand, so it may not be listed yet.
            (self.dev.queue / "scheduler").write_text(self.name)
        except OSError as e:
            raise UsageError("--scheduler", self.name, f"not accepted by {self.dev.disk} ({e.strerror}); "
                             f"available: {', '.join(available)}") from e
        self.previous = current
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            (self.dev.queue / "scheduler").write_text(self.previous)

"""Block devices: what lies under a path, whether it is safe to write, its I/O scheduler and tunables."""

from __future__ import annotations

import dataclasses
import os
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


def backing_of(path: str) -> Backing:
    """The mount holding `path`, and its block device if it has one (tmpfs and overlay have none)."""
    real = os.path.realpath(path)
    best: tuple[int, str, str, str] | None = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            mnt = fields[4].replace("\\040", " ")
            if real == mnt or real.startswith(mnt.rstrip("/") + "/"):
                if best is None or len(mnt) >= best[0]:
                    fstype, source = right.split()[:2]
                    best = (len(mnt), fields[2], fstype, source)
    dev = device_from_devnum(os.stat(real).st_dev)
    if best is None:
        return Backing(dev, "unknown", "unknown")
    return Backing(dev, best[2], best[3])


def write_hazards(dev: Device) -> list[str]:
    """Why writing to this device could destroy data; empty if it looks blank and unused."""
    hazards = []
    mm_all = {dev.major_minor}
    base = SYS / "class" / "block" / dev.name
    parts = [p.name for p in base.iterdir() if (p / "partition").exists()] if base.exists() else []
    for p in parts:
        mm_all.add((base / p / "dev").read_text().strip())
    if parts:
        hazards.append(f"holds partitions ({', '.join(sorted(parts))})")
    with open("/proc/self/mountinfo") as f:
        mounted = sorted({line.split()[4] for line in f if line.split()[2] in mm_all})
    if mounted:
        hazards.append(f"is mounted at {', '.join(mounted)}")
    with open("/proc/swaps") as f:
        swaps = [line.split()[0] for line in list(f)[1:]]
    if any(os.path.realpath(s) == os.path.realpath(dev.path) for s in swaps):
        hazards.append("is in use as swap")
    holders = base / "holders"
    if holders.exists() and any(holders.iterdir()):
        hazards.append(f"is held by {', '.join(p.name for p in holders.iterdir())}")
    try:
        out = subprocess.run(["blkid", "-p", "-o", "export", dev.path], capture_output=True, text=True,
                             timeout=30)
        info = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        if "PTTYPE" in info:
            hazards.append(f"holds a {info['PTTYPE']} partition table")
        if "TYPE" in info:
            hazards.append(f"holds a {info['TYPE']} signature")
        if out.returncode not in (0, 2) and not info:   # 2: nothing found
            hazards.append(f"could not be probed (blkid: {out.stderr.strip() or out.returncode})")
    except FileNotFoundError:
        hazards.append("could not be probed: blkid (util-linux) is not installed")
    return hazards


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
            raise UsageError(None, f"{k}={v}", f"rejected by the kernel: {e.strerror}")
    return old


class SchedulerSwitch:
    """Switch a device's I/O scheduler for the duration of a `with` block, then restore it."""

    def __init__(self, dev: Device, name: str) -> None:
        self.dev, self.name = dev, name
        self.previous: str | None = None

    def __enter__(self) -> "SchedulerSwitch":
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
                             f"available: {', '.join(available)}")
        self.previous = current
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            (self.dev.queue / "scheduler").write_text(self.previous)

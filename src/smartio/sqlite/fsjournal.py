"""Where a filesystem keeps its own journal, as ranges of disk sectors, so block writes there can be told apart.

- ext4: the journal inode (8), mapped with debugfs, or an external journal device (`mke2fs -O journal_dev`).
- xfs: the internal log (logstart/logblocks from xfs_db), or the external log device (`logdev=` mount option).
- btrfs, f2fs, nilfs2 have no separate journal: their log tree, checkpoints and segment summaries are written
  among the rest of their metadata, and count as metadata.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess

from smartio.trace import events as ev


@dataclasses.dataclass(frozen=True)
class FsJournal:
    description: str
    ranges: tuple[tuple[int, int, int], ...]     # (kernel dev_t of the disk, first sector, end sector)
    devices: tuple[str, ...] = ()                  # device nodes to record besides the filesystem's own

    def contains(self, dev: int, sector: int) -> bool:
        return any(d == dev and s <= sector < e for d, s, e in self.ranges)


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else None


def disk_of_node(node: str) -> tuple[int, int, int]:
    """(kernel dev_t of the whole disk, first sector of node on it, size in sectors) of a block device node."""
    st = os.stat(node)
    if not stat.S_ISBLK(st.st_mode):
        raise ValueError(f"{node} is not a block device")
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    sys = f"/sys/dev/block/{major}:{minor}"
    size = int(open(f"{sys}/size").read())
    if os.path.exists(f"{sys}/partition"):
        start = int(open(f"{sys}/start").read())
        dmaj, dmin = open(os.path.join(os.path.realpath(sys), "..", "dev")).read().strip().split(":")
        return ev.kdev(int(dmaj), int(dmin)), start, size
    return ev.kdev(major, minor), 0, size


def _whole_device(node: str, what: str) -> FsJournal:
    disk, start, size = disk_of_node(node)
    return FsJournal(f"{what} on {node}", ((disk, start, start + size),), (node,))


def _node_of_devnum(devnum: int) -> str | None:
    major, minor = os.major(devnum), os.minor(devnum)
    link = f"/sys/dev/block/{major}:{minor}"
    if not os.path.exists(link):
        return None
    return "/dev/" + os.path.basename(os.path.realpath(link))


def ext4(source: str) -> FsJournal | None:
    head = _run(["dumpe2fs", "-h", source])
    if head is None:
        return None
    m = re.search(r"^Journal device:\s+(0x[0-9a-f]+)", head, re.M)
    if m:
        old = int(m.group(1), 16)             # old_encode_dev: major << 8 | minor (small numbers)
        node = _node_of_devnum(os.makedev((old >> 8) & 0xFFF, (old & 0xFF) | ((old >> 12) & 0xFFF00)))
        return _whole_device(node, "ext4 external journal") if node else None
    m = re.search(r"^Journal inode:\s+(\d+)", head, re.M)
    bs = re.search(r"^Block size:\s+(\d+)", head, re.M)
    if not m or not bs:
        return None
    out = _run(["debugfs", "-R", f"stat <{m.group(1)}>", source])
    if out is None:
        return None
    disk, offset, _ = disk_of_node(source)
    per = int(bs.group(1)) // 512
    ranges = []
    for a, b in re.findall(r"\(\d+(?:-\d+)?\):(\d+)(?:-(\d+))?", out.split("EXTENTS:", 1)[-1]):
        first, last = int(a), int(b or a)
        ranges.append((disk, offset + first * per, offset + (last + 1) * per))
    return FsJournal(f"ext4 journal inode {m.group(1)}", tuple(ranges)) if ranges else None


def xfs(source: str, mount_options: str) -> FsJournal | None:
    m = re.search(r"(?:^|,)logdev=([^,]+)", mount_options)
    if m:
        return _whole_device(m.group(1), "xfs external log")
    out = _run(["xfs_db", "-r", "-c", "sb 0", "-c", "print logstart logblocks agblocks agblklog blocksize", source])
    if out is None:
        return None
    v = dict(re.findall(r"^(\w+) = (\d+)", out, re.M))
    try:
        logstart, logblocks, agblocks, agblklog, bs = (int(v[k]) for k in
                                                       ("logstart", "logblocks", "agblocks", "agblklog", "blocksize"))
    except KeyError:
        return None
    if logstart == 0:
        return None
    disk, offset, _ = disk_of_node(source)
    block = (logstart >> agblklog) * agblocks + (logstart & ((1 << agblklog) - 1))
    start = offset + block * bs // 512
    return FsJournal("xfs internal log", ((disk, start, start + logblocks * bs // 512),))


def locate(source: str, fstype: str, mount_options: str = "") -> FsJournal | None:
    """The journal of the filesystem on `source`, or None (none, or the tools to find it are missing)."""
    if not source.startswith("/dev/"):
        return None
    if fstype in ("ext4", "ext3"):
        return ext4(source)
    if fstype == "xfs":
        return xfs(source, mount_options)
    return None


def mount_of(path: str) -> tuple[str, str, str, str]:
    """(source, mount point, fstype, options) of the filesystem holding path (longest mount point wins)."""
    path = os.path.realpath(path)
    best = None
    with open("/proc/self/mounts") as f:
        for line in f:
            src, mnt, fstype, opts = line.split()[:4]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and (best is None or len(mnt) >= len(best[1])):
                best = (src, mnt, fstype, opts)
    if best is None:
        raise ValueError(f"no mount holds {path}")
    return best

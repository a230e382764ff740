"""Attributing block requests to files (FIEMAP) and to file and block types, as MOST does (seed 002, §3).

File types follow MOST's six: database (.db), journal (SQLite rollback journal, -journal), WAL
(-wal and its -shm index), executable (.so, .apk, .dex, ..., or any file with an execute bit),
resource (.dat, .xml, ...) and other. Block types: data (inside a file under DIR), journal (written by
the filesystem's journal thread, jbd2) and metadata (everything else the filesystem wrote or read).

Limits: extents are read when analysing, so files deleted since the recording (SQLite's DELETE-mode
journal is deleted at every commit) count as metadata; a request is attributed by its first sector.
"""

from __future__ import annotations

import array
import fcntl
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from smartio.errors import UsageError
from smartio.trace import events as ev

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_UNKNOWN = 0x2     # no physical location yet (delayed allocation)
FIEMAP_EXTENT_INLINE = 0x200    # data inside the inode: no blocks of its own
HEADER = struct.Struct("=QQIIII")
EXTENT = struct.Struct("=QQQQQIIII")
BATCH = 256

FILE_TYPES = ("database", "journal", "wal", "executable", "resource", "other")
BLOCK_TYPES = ("data", "journal", "metadata")
_EXE = {".so", ".apk", ".dex", ".odex", ".oat", ".jar", ".vdex", ".art"}
_RES = {".dat", ".xml", ".json", ".png", ".jpg", ".jpeg", ".webp", ".gif", ".arsc", ".ttf", ".otf", ".txt"}
_DB = {".db", ".sqlite", ".sqlite3", ".db3"}


def file_type(path: Path, mode: int) -> str:
    name = path.name.lower()
    if name.endswith("-journal"):
        return "journal"
    if name.endswith(("-wal", "-shm")):
        return "wal"
    suffix = path.suffix.lower()
    if suffix in _DB:
        return "database"
    if suffix in _EXE or mode & 0o111:
        return "executable"
    if suffix in _RES:
        return "resource"
    return "other"


def fiemap(fd: int) -> list[tuple[int, int, int]]:
    """(logical, physical, length) in bytes of every extent of the open file, after syncing it."""
    out: list[tuple[int, int, int]] = []
    start = 0
    while True:
        buf = bytearray(HEADER.size + BATCH * EXTENT.size)
        HEADER.pack_into(buf, 0, start, 2**64 - 1 - start, FIEMAP_FLAG_SYNC, 0, BATCH, 0)
        arr = array.array("B", buf)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, arr, True)
        mapped = HEADER.unpack_from(arr, 0)[3]
        last = False
        for i in range(mapped):
            logical, physical, length, _r1, _r2, flags, *_ = EXTENT.unpack_from(arr, HEADER.size + i * EXTENT.size)
            if not flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_INLINE):
                out.append((logical, physical, length))
            start = logical + length
            last = bool(flags & FIEMAP_EXTENT_LAST)
        if mapped == 0 or last:
            return out


@dataclass
class Attribution:
    """Extents of the files under a directory, in sectors of the whole disk they live on."""

    root: Path
    disk: int                                   # kernel dev_t of the whole disk
    paths: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))   # sorted extent starts
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # index into paths
    skipped: int = 0

    def lookup(self, sector: np.ndarray) -> np.ndarray:
        """Index of the file holding each sector, or -1."""
        i = np.searchsorted(self.start, sector, side="right") - 1
        ok = (i >= 0) & (sector < self.end[np.maximum(i, 0)])
        return np.where(ok, self.owner[np.maximum(i, 0)], -1)

    def summarise(self, reqs, trace, top_n: int) -> dict:
        from smartio.trace.analyze import READ, WRITE

        data = (reqs.kind == READ) | (reqs.kind == WRITE)
        if self.disk not in set(np.unique(trace.events["device"]).tolist()):
            seen = ", ".join(ev.dev_name(int(d)) for d in np.unique(trace.events["device"]))
            raise UsageError("--files", self.root, f"lives on device {ev.dev_name(self.disk)}, which the trace "
                             f"does not contain ({seen})")
        sel = np.flatnonzero(data)
        owner = self.lookup(reqs.sector[sel])
        write = reqs.kind[sel] == WRITE
        kib = reqs.nbytes[sel] / 1024
        comm_of = trace.comms
        jbd2 = np.array([comm_of.get(int(p), "").startswith("jbd2/") for p in reqs.pid[sel]], dtype=bool)
        ftype = np.array(self.types + ["(none)"])[np.where(owner >= 0, owner, len(self.types))]
        types = {}
        for t in FILE_TYPES:
            s = ftype == t
            types[t] = _rw(s, write, kib)
        btype = np.where(owner >= 0, "data", np.where(jbd2, "journal", "metadata"))
        blocks = {t: _rw(btype == t, write, kib) for t in BLOCK_TYPES}
        top = []
        if len(owner):
            ids, counts = np.unique(owner[owner >= 0], return_counts=True)
            for i in ids[np.argsort(-counts, kind="stable")][:top_n]:
                s = owner == i
                top.append({"path": self.paths[i], "type": self.types[i], **_rw(s, write, kib)})
        return {"dir": str(self.root), "device": ev.dev_name(self.disk), "files": len(self.paths),
                "extents": int(len(self.start)), "unmappable_files": self.skipped,
                "types": types, "block_types": blocks, "top_files": top}


def _rw(sel: np.ndarray, write: np.ndarray, kib: np.ndarray) -> dict:
    return {"reads": int((sel & ~write).sum()), "writes": int((sel & write).sum()),
            "read_kib": float(kib[sel & ~write].sum()), "write_kib": float(kib[sel & write].sum())}


def attribute(trace, root: Path) -> Attribution:
    """Maps every regular file under `root` (one filesystem; others are skipped) to disk sectors."""
    st = os.stat(root)
    disk, offset = _disk_of(st.st_dev)
    att = Attribution(root, disk)
    starts, ends, owners = [], [], []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            try:
                fst = os.lstat(p)
                if not stat.S_ISREG(fst.st_mode) or fst.st_dev != st.st_dev:
                    continue
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                att.skipped += 1
                continue
            try:
                extents = fiemap(fd)
            except OSError:
                att.skipped += 1
                continue
            finally:
                os.close(fd)
            idx = len(att.paths)
            att.paths.append(str(p.relative_to(root)))
            att.types.append(file_type(p, fst.st_mode))
            for _logical, physical, length in extents:
                starts.append(offset + physical // 512)
                ends.append(offset + (physical + length + 511) // 512)
                owners.append(idx)
    order = np.argsort(np.array(starts, dtype=np.uint64), kind="stable")
    att.start = np.array(starts, dtype=np.uint64)[order]
    att.end = np.array(ends, dtype=np.uint64)[order]
    att.owner = np.array(owners, dtype=np.int64)[order]
    return att


def _disk_of(st_dev: int) -> tuple[int, int]:
    """(kernel dev_t of the whole disk, start sector of the filesystem on it) for a filesystem's st_dev."""
    major, minor = os.major(st_dev), os.minor(st_dev)
    sys = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys / "partition").exists():
        start = int((sys / "start").read_text())
        disk_major, disk_minor = (sys.resolve().parent / "dev").read_text().strip().split(":")
        return ev.kdev(int(disk_major), int(disk_minor)), start
    return ev.kdev(major, minor), 0

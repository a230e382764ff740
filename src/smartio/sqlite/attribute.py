"""Block writes per SQLite transaction, split by what they hit (seed 002, Figure 4 as a table).

Inputs, all recorded during one `smartio bench sqlite --trace` run (and stored together by `--trace-file`):
- the block trace (tracefs issue events: what reached the device, after merging);
- each transaction's start and end (CLOCK_MONOTONIC ns, the trace's clock);
- every fsync()/fdatasync() the worker made, with the synced file's FIEMAP extents right after it returned
  (shim.py), and the extents of the files still there at the end;
- where the filesystem's own journal is (fsjournal.py) and where the filesystem starts on its disk.

A transaction owns the requests issued from its start to the next transaction's start (the last one: to its
end). A write belongs to the database, the rollback journal or the WAL if its first sector lies in that file's
extents as mapped during the same transaction (a DELETE-mode journal gets new blocks every time), else as mapped
at the end; to the filesystem journal if it lies in the journal's range; otherwise it is other metadata (inodes,
bitmaps, directories, and for btrfs/f2fs/nilfs2 their logs and checkpoints). Block I/Os are write requests that
carry data; flushes (empty or as a preflush) and FUA writes are counted apart, reads too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smartio.sqlite.shim import SyncCall
from smartio.storebench.stats import Stat
from smartio.trace import events as ev

CLASSES = ("database", "journal", "wal", "fs_journal", "metadata")
LABELS = {"database": "database file", "journal": "rollback journal", "wal": "WAL", "fs_journal": "fs journal",
          "metadata": "other metadata"}
SKIP_FIRST = 1     # transactions at the start of each repeat left out of the averages (first allocations)


def file_class(path: str, db: str) -> str | None:
    if path.endswith("-journal"):
        return "journal"
    if path.endswith(("-wal", "-shm")):
        return "wal"
    if path == db:
        return "database"
    return None     # the directory (DELETE mode syncs it after creating the journal): no extents


@dataclasses.dataclass
class Repeat:
    """What one repeat of the workload left for the attribution."""

    db: str
    starts_ns: list[int]
    ends_ns: list[int]
    syncs: list[SyncCall]
    final_extents: dict[str, list[list[int]]]

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["syncs"] = [dataclasses.asdict(s) for s in self.syncs]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Repeat:
        syncs = [SyncCall(**{**s, "extents": tuple(tuple(e) for e in s["extents"])}) for s in d["syncs"]]
        return cls(d["db"], d["starts_ns"], d["ends_ns"], syncs, d["final_extents"])


@dataclasses.dataclass
class Layout:
    """Where the filesystem lives: its disk, its first sector there, and its journal's sector ranges."""

    disk: int
    offset: int
    journal: list[tuple[int, int, int]]
    journal_description: str
    fstype: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Layout:
        return cls(d["disk"], d["offset"], [tuple(r) for r in d["journal"]], d["journal_description"], d["fstype"])


def _extent_map(items: Sequence[tuple[str, Sequence[Sequence[int]]]], db: str,
                offset: int) -> list[tuple[int, int, str]]:
    out = []
    for path, extents in items:
        kind = file_class(path, db)
        if kind is None:
            continue
        for _logical, physical, length in extents:
            out.append((offset + physical // 512, offset + (physical + length + 511) // 512, kind))
    return out


def _lookup(maps: list[list[tuple[int, int, str]]], layout: Layout, dev: int, sector: int) -> str:
    if dev == layout.disk:
        for m in maps:
            for s, e, kind in m:
                if s <= sector < e:
                    return kind
    for d, s, e in layout.journal:
        if d == dev and s <= sector < e:
            return "fs_journal"
    return "metadata"


def per_transaction(events: np.ndarray, repeats: list[Repeat], layout: Layout) -> list[dict[str, Any]]:
    """One record per transaction: its block writes by class, flushes, FUA writes, reads, syncs, and the writes
    in order (time from the transaction's start, class, sector, KiB, flags)."""
    codes = events["action"] & 0xFFFF
    tc = events["action"] >> ev.TC_SHIFT
    devs = {layout.disk, *(d for d, _, _ in layout.journal)}
    sel = (codes == ev.ISSUE) & np.isin(events["device"], list(devs))
    issued = events[sel]
    tc = tc[sel]
    t = issued["time"]
    out = []
    for r, rep in enumerate(repeats):
        final = _extent_map(list(rep.final_extents.items()), rep.db, layout.offset)
        n = len(rep.starts_ns)
        for i in range(n):
            lo = rep.starts_ns[i]
            hi = rep.starts_ns[i + 1] if i + 1 < n else rep.ends_ns[i]
            syncs = [s for s in rep.syncs if lo <= s.start_ns < hi]
            local = _extent_map([(s.path, s.extents) for s in syncs], rep.db, layout.offset)
            a, b = np.searchsorted(t, lo, "left"), np.searchsorted(t, hi, "left")
            counts = {c: {"writes": 0, "kib": 0.0} for c in CLASSES}
            seq = []
            flushes = fua = reads = 0
            for k in range(a, b):
                e, c = issued[k], int(tc[k])
                nbytes = int(e["bytes"])
                if c & ev.TC_FLUSH:
                    flushes += 1
                if c & ev.TC_READ or (nbytes and not c & ev.TC_WRITE):
                    reads += 1
                    continue
                if not c & ev.TC_WRITE or c & ev.TC_DISCARD or nbytes == 0:
                    continue
                kind = _lookup([local, final], layout, int(e["device"]), int(e["sector"]))
                counts[kind]["writes"] += 1
                counts[kind]["kib"] += nbytes / 1024
                fua += bool(c & ev.TC_FUA)
                seq.append([round((int(e["time"]) - lo) / 1e6, 3), kind, int(e["sector"]), nbytes / 1024,
                            ev.categories_to_rwbs(c, nbytes)])
            fsj = [x[3] for x in seq if x[1] == "fs_journal"]
            out.append({"repeat": r, "index": i, "latency_ms": (rep.ends_ns[i] - lo) / 1e6, "classes": counts,
                        "writes": sum(v["writes"] for v in counts.values()),
                        "kib": sum(v["kib"] for v in counts.values()), "flushes": flushes, "fua_writes": fua,
                        "reads": reads, "first_fs_journal_kib": fsj[0] if fsj else None,
                        "fs_journal_writes_kib": fsj,
                        "syncs": [[s.asked if s.asked == s.issued else f"{s.asked}->{s.issued}",
                                   file_class(s.path, rep.db) or "directory"] for s in syncs],
                        "sequence": seq})
    return out


def summarise(txs: list[dict[str, Any]], layout: Layout) -> dict[str, Any]:
    """Means over transactions (± 95 % CI over them), leaving out the first of each repeat."""
    steady = [x for x in txs if x["index"] >= SKIP_FIRST] or txs
    stat = lambda f: Stat.of([f(x) for x in steady]).to_json()   # noqa: E731
    classes = {c: {"writes": stat(lambda x, c=c: x["classes"][c]["writes"]),
                   "kib": stat(lambda x, c=c: x["classes"][c]["kib"])} for c in CLASSES}
    first = [x["first_fs_journal_kib"] for x in steady if x["first_fs_journal_kib"] is not None]
    syncs = [len(x["syncs"]) for x in steady]
    # A typical transaction to print as Figure 4 does: the one whose write count is the median, mid-run.
    med = sorted(steady, key=lambda x: (x["writes"], abs(x["index"] - len(steady) // 2)))[len(steady) // 2]
    return {
        "transactions": len(steady), "skipped_first": SKIP_FIRST,
        "writes": stat(lambda x: x["writes"]), "kib": stat(lambda x: x["kib"]),
        "flushes": stat(lambda x: x["flushes"]), "fua_writes": stat(lambda x: x["fua_writes"]),
        "reads": stat(lambda x: x["reads"]), "syncs": Stat.of(syncs).to_json(),
        "classes": classes,
        "first_fs_journal_kib": Stat.of(first).to_json() if first else None,
        "fs_journal": layout.journal_description, "fstype": layout.fstype,
        "example": {k: med[k] for k in ("repeat", "index", "latency_ms", "syncs", "sequence")},
    }


def save_bundle(path: Path, repeats: list[Repeat], layout: Layout, extra: dict[str, Any]) -> Path:
    """The sidecar of a recorded trace: everything `per_transaction` needs besides the events."""
    side = path.with_name(path.name + ".sqlite.json")
    side.write_text(json.dumps({"layout": layout.to_json(), "repeats": [r.to_json() for r in repeats], **extra}))
    return side


def load_bundle(path: Path) -> tuple[np.ndarray, list[Repeat], Layout, dict[str, Any]]:
    from smartio.trace.formats import read_trace

    d = json.loads(path.with_name(path.name + ".sqlite.json").read_text())
    trace = read_trace(path)
    return trace.events, [Repeat.from_json(r) for r in d["repeats"]], Layout.from_json(d["layout"]), d

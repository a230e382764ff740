"""The in-memory block trace: one numpy record per block-layer event, in blktrace's vocabulary.

Every reader (ours, blktrace binary, blkparse text, tracefs) produces a `Trace`, and every analysis
reads one. The record layout mirrors `struct blk_io_trace` without its magic, sequence and payload, so
the `action` word means exactly what it means to blkparse: the low 16 bits are the action (queue,
issue, complete, ...) and the high 16 bits the category flags (read, write, sync, meta, flush, FUA,
discard, ...). Keeping the kernel's encoding avoids a translation layer that could drift.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

import numpy as np

# Actions (__BLK_TA_* in include/uapi/linux/blktrace_api.h).
QUEUE, BACKMERGE, FRONTMERGE, GETRQ, SLEEPRQ, REQUEUE, ISSUE, COMPLETE = 1, 2, 3, 4, 5, 6, 7, 8
PLUG, UNPLUG_IO, UNPLUG_TIMER, INSERT, SPLIT, BOUNCE, REMAP, ABORT, DRV_DATA = 9, 10, 11, 12, 13, 14, 15, 16, 17
# Notes (__BLK_TN_*), carried with the NOTIFY category.
NOTE_PROCESS, NOTE_TIMESTAMP, NOTE_MESSAGE = 0, 1, 2

# Categories (BLK_TC_*), stored shifted left by TC_SHIFT in the action word.
TC_READ, TC_WRITE, TC_FLUSH, TC_SYNC = 1 << 0, 1 << 1, 1 << 2, 1 << 3
TC_QUEUE, TC_REQUEUE, TC_ISSUE, TC_COMPLETE = 1 << 4, 1 << 5, 1 << 6, 1 << 7
TC_FS, TC_PC, TC_NOTIFY, TC_AHEAD = 1 << 8, 1 << 9, 1 << 10, 1 << 11
TC_META, TC_DISCARD, TC_DRV_DATA, TC_FUA = 1 << 12, 1 << 13, 1 << 14, 1 << 15
TC_SHIFT = 16

# The category that the kernel adds for each action (BLK_TA_* = __BLK_TA_* | BLK_TC_ACT(...)).
ACTION_CATEGORY = {
    QUEUE: TC_QUEUE, BACKMERGE: TC_QUEUE, FRONTMERGE: TC_QUEUE, GETRQ: TC_QUEUE, SLEEPRQ: TC_QUEUE,
    REQUEUE: TC_REQUEUE, ISSUE: TC_ISSUE, COMPLETE: TC_COMPLETE, PLUG: TC_QUEUE, UNPLUG_IO: TC_QUEUE,
    UNPLUG_TIMER: TC_QUEUE, INSERT: TC_QUEUE, SPLIT: 0, BOUNCE: 0, REMAP: TC_QUEUE, ABORT: TC_QUEUE,
    DRV_DATA: TC_DRV_DATA,
}
# blkparse's one-letter names for the actions.
ACTION_LETTER = {
    QUEUE: "Q", BACKMERGE: "M", FRONTMERGE: "F", GETRQ: "G", SLEEPRQ: "S", REQUEUE: "R", ISSUE: "D",
    COMPLETE: "C", PLUG: "P", UNPLUG_IO: "U", UNPLUG_TIMER: "T", INSERT: "I", SPLIT: "X", BOUNCE: "B",
    REMAP: "A", ABORT: "K",
}
LETTER_ACTION = {v: k for k, v in ACTION_LETTER.items()}

# The record layout is struct blk_io_trace (host byte order, little-endian here), so a blktrace file
# without payloads decodes with no copy, and ours is the same records behind a JSON header.
EVENT_DTYPE = np.dtype([
    ("magic", "<u4"),     # 0x65617407: blktrace magic | version
    ("sequence", "<u4"),
    ("time", "<u8"),      # ns; absolute CLOCK_MONOTONIC when recorded here, relative in blktrace files
    ("sector", "<u8"),    # 512-byte sectors
    ("bytes", "<u4"),
    ("action", "<u4"),    # action | categories << TC_SHIFT
    ("pid", "<u4"),
    ("device", "<u4"),    # kernel dev_t: major << 20 | minor
    ("cpu", "<u4"),
    ("error", "<u2"),
    ("pdu_len", "<u2"),   # always 0 in memory: payloads are consumed while reading
])
MAGIC = 0x65617407

MINORBITS = 20


def kdev(major: int, minor: int) -> int:
    """The kernel's internal dev_t, as block tracepoints and blktrace report it."""
    return (major << MINORBITS) | minor


def dev_name(dev: int) -> str:
    return f"{dev >> MINORBITS},{dev & ((1 << MINORBITS) - 1)}"


def rwbs_to_categories(rwbs: str) -> int:
    """Categories from the kernel's rwbs string (blk_fill_rwbs), e.g. 'FWFS' = preflush, write, FUA, sync.

    A leading F is a preflush, or the flush operation itself when it is the only letter before the
    modifiers; an F after the operation letter is FUA. 'N' (no data) and 'E' (secure erase) carry no
    direction of their own.
    """
    tc = 0
    i = 0
    if rwbs.startswith("F"):
        tc |= TC_FLUSH
        i = 1
    if i < len(rwbs):
        op = rwbs[i]
        if op == "W":
            tc |= TC_WRITE
        elif op == "R":
            tc |= TC_READ
        elif op == "D":
            tc |= TC_WRITE | TC_DISCARD
            if rwbs[i + 1:i + 2] == "E":  # secure erase is written 'DE'
                i += 1
        elif op in "NE":
            pass
        else:
            # A lone 'F' (flush operation): the modifiers start here.
            i -= 1
        i += 1
    for c in rwbs[i:]:
        tc |= {"F": TC_FUA, "A": TC_AHEAD, "S": TC_SYNC, "M": TC_META}.get(c, 0)
    return tc


def categories_to_rwbs(tc: int, nbytes: int) -> str:
    """The rwbs string blkparse prints for these categories (its fill_rwbs)."""
    s = "F" if tc & TC_FLUSH else ""
    if tc & TC_WRITE and not tc & TC_DISCARD:
        s += "W"
    elif tc & TC_DISCARD:
        s += "D"
    elif nbytes:
        s += "R"
    else:
        s += "N"
    if tc & TC_FUA:
        s += "F"
    if tc & TC_AHEAD:
        s += "A"
    if tc & TC_SYNC:
        s += "S"
    if tc & TC_META:
        s += "M"
    return s


@dataclass
class Trace:
    """A block trace: events sorted by time, plus what is known about where it came from."""

    events: np.ndarray                                   # EVENT_DTYPE, sorted by time
    comms: dict[int, str] = field(default_factory=dict)  # pid -> command name
    meta: dict = field(default_factory=dict)             # command, devices, kernel, clock, ...
    source_format: str = "smartio"
    in_order: InitVar[bool] = False  # the caller knows the events are sorted: skip the check
    # What only a phone's trace has (Perfetto): UFS commands (native.UFS_DTYPE) and ext4/f2fs sync calls
    # (native.SYNC_DTYPE), in the order read; None when the format cannot hold them.
    ufs: np.ndarray | None = None
    sync_calls: np.ndarray | None = None

    def __post_init__(self, in_order: bool) -> None:
        if self.events.dtype != EVENT_DTYPE:
            self.events = self.events.astype(EVENT_DTYPE)
        t = self.events["time"]
        if not in_order and len(t) > 1 and np.any(t[1:] < t[:-1]):
            self.events = self.events[np.argsort(t, kind="stable")]

    @property
    def codes(self) -> np.ndarray:
        return (self.events["action"] & 0xFFFF).astype(np.uint16)

    @property
    def categories(self) -> np.ndarray:
        return (self.events["action"] >> TC_SHIFT).astype(np.uint16)

    def __len__(self) -> int:
        return len(self.events)

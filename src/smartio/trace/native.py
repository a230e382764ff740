"""The per-event loops of the trace analysis, in the small C helper _native.c, and their numpy faces.

- read_blktrace: checks a recording's per-CPU blktrace files and merges their events by time;
- match: follows bios into requests (Q2C, D2C) and measures outstanding time on the way;
- locality: accesses per 4 KiB block, for reads, writes and both;
- kind_figures: counts per kind of request, and the sizes and latencies to sort for percentiles;
- between_flushes: requests, bytes and time between successive flushes;
- by_pid: read and write requests and bytes per process;
- Collector: the streaming readers of Perfetto protobuf and tracefs text, fed the file piece by piece.

The helper is compiled with the system C compiler on first use into ~/.cache/smartio/trace/, keyed
by the hash of its source, and loaded with ctypes.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from smartio.cache import cache_dir
from smartio.errors import MissingToolError, SmartioError
from smartio.trace.events import EVENT_DTYPE

SOURCE = Path(__file__).with_name("_native.c")
_P = ctypes.c_void_p
_I64 = ctypes.c_int64


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    src = SOURCE.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    cache = cache_dir("trace")
    lib = cache / f"native-{digest}.so"
    if not lib.exists():
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if cc is None:
            raise MissingToolError("cc", "the trace analysis compiles a small C helper; "
                                   "install gcc (scripts/install-deps --vm)")
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".so")
        os.close(fd)
        res = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            os.unlink(tmp)
            raise SmartioError(f"compiling {SOURCE} failed:\n{res.stderr}")
        os.replace(tmp, lib)  # atomic, so parallel first uses do not load a half-written file
    dll = ctypes.CDLL(str(lib))
    for name, restype, args in (
            ("sio_read_blktrace", ctypes.c_int, [_P, _P, _P, ctypes.c_int, _P, _P, _P, _I64] + [_P] * 7),
            ("sio_match", ctypes.c_int, [_P, _I64, _P, _P, _P, _P, _P]),
            ("sio_locality", ctypes.c_int, [_P, _P, _P, _I64, _I64, _I64, _P, _P, _P]),
            ("sio_kind_figures", None, [_P, _I64, _P, _I64, ctypes.c_int, _P, _P, _P, _P]),
            ("sio_between_flushes", _I64, [_P, _P, _P, _I64, _P, _P, _P]),
            ("sio_by_pid", _I64, [_P, _P, _P, _I64, _P, _P, _P, _P]),
            ("sio_out_new", _P, []),
            ("sio_out_free", None, [_P]),
            ("sio_out_take_events", _P, [_P]),
            ("sio_free", None, [_P]),
            ("sio_out_push", ctypes.c_int, [_P, _P]),
            ("sio_pf_parse", ctypes.c_int, [_P, _P, _I64, ctypes.c_int, _P, _P, _P, _P]),
            ("sio_out_settle_io_events", _I64, [_P]),
            ("sio_permute", None, [_P, _P, _I64]),
            ("sio_text_parse", ctypes.c_int, [_P, _P, _I64, ctypes.c_int, _P]),
            ("sio_out_info", None, [_P, _P]),
            ("sio_out_array", _P, [_P, ctypes.c_int])):
        getattr(dll, name).restype = restype
        getattr(dll, name).argtypes = args
    return dll


# --- reading ------------------------------------------------------------------------------------------

SCAN_ERRORS = {1: "truncated", 2: "magic", 3: "action", 4: "payload"}  # SCAN_* in _native.c; 5: no merge


@dataclass
class Scanned:
    """Blktrace files read together: their events merged by time, and where each file's notes are."""

    events: np.ndarray | None  # EVENT_DTYPE, host byte order, payloads dropped; None after an error
    notes: list[np.ndarray]    # per file, byte offsets of its notes (process names)
    events_per_file: list[int]
    in_order: bool             # events sorted by time
    error: str | None = None   # a SCAN_ERRORS value, or "no merge" (a file out of time order, too many files)
    bad_file: int = 0
    error_offset: int = 0


MAX_PARTS = 256  # files sio_read_blktrace merges at once
# Outputs of unknown length (notes, top blocks, histogram) get this much room, enough for the usual
# traces; more costs a second pass. Small, as numpy backs big arrays with huge pages that cost to zero.
ROOM = 4096


def read_blktrace(buffers: list, swaps: list[bool]) -> Scanned:
    """Checks every record of blktrace files (`swaps`: which are in the other byte order) and merges
    their events by time, in one pass over each file.

    One file's events are used in place (no copy) when they lie back to back in host byte order, as
    in the files we write; otherwise a second pass copies them without their payloads.
    """
    k = len(buffers)
    if k > MAX_PARTS:
        return Scanned(None, [], [], False, "no merge")
    bufs = [np.frombuffer(d, dtype=np.uint8) for d in buffers]
    room = ROOM  # notes per file: one per process (and device)
    nout, bad_off, run_off, nnotes, nevents = _I64(0), _I64(0), _I64(0), (_I64 * k)(), (_I64 * k)()
    bad_file, in_place, in_order = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)

    def run(out: np.ndarray | None) -> int:
        return _library().sio_read_blktrace(
            (_P * k)(*[b.ctypes.data for b in bufs]), (_I64 * k)(*[len(b) for b in bufs]),
            (ctypes.c_int * k)(*[int(s) for s in swaps]), k, None if out is None else out.ctypes.data,
            ctypes.byref(nout), (_P * k)(*[n.ctypes.data for n in notes]), room, nnotes, nevents,
            ctypes.byref(bad_file), ctypes.byref(bad_off), ctypes.byref(run_off), ctypes.byref(in_place),
            ctypes.byref(in_order))

    out = None if k == 1 else np.empty(sum(len(b) for b in bufs) // EVENT_DTYPE.itemsize, dtype=EVENT_DTYPE)
    while True:
        notes = [np.empty(room, dtype=np.int64) for _ in bufs]
        rc = run(out)
        if rc or max(nnotes) <= room:
            break
        room = max(nnotes)
    if rc:
        return Scanned(None, [], [], False, SCAN_ERRORS.get(rc, "no merge"), bad_file.value, bad_off.value)
    if out is None and in_place.value:
        out = np.frombuffer(buffers[0], dtype=EVENT_DTYPE, count=nout.value, offset=run_off.value)
    elif out is None:
        out = np.empty(nout.value, dtype=EVENT_DTYPE)
        run(out)
    return Scanned(out[:nout.value], [n[:c] for n, c in zip(notes, nnotes, strict=True)], list(nevents),
                   bool(in_order.value))


# --- matching -----------------------------------------------------------------------------------------

CLASSES = ("read", "meta_read", "sync_write", "async_write", "flush")  # enum C_* in _native.c
MAX_DEVICES = 64


@dataclass
class Bios:
    """The bios of a trace, one entry per Q, in order; columns, as numpy works best on them."""

    time: np.ndarray    # int64, queue time, ns
    q2c: np.ndarray     # int64, ns; -1 if its completion was not seen
    tc: np.ndarray      # uint32, categories
    nbytes: np.ndarray  # uint32
    pid: np.ndarray     # uint32
    kind: np.ndarray    # uint8: READ, WRITE, FLUSH, DISCARD or OTHER (analyze.py), decided in C (kind_of)


@dataclass
class Requests:
    """The completed requests of a trace, one entry per C event, in order."""

    time: np.ndarray    # int64, completion time, ns
    issue: np.ndarray   # int64, issue time, ns (-1 if the D was not seen)
    sector: np.ndarray  # uint64
    nbytes: np.ndarray  # int64
    tc: np.ndarray      # uint32, categories
    pid: np.ndarray     # uint32, pid that queued it (or issued it)
    nbios: np.ndarray   # int32, bios it carried (0: made by the kernel, e.g. a flush, or queued before the trace)
    kind: np.ndarray    # uint8, as for Bios


def _columns(cls, n: int, have: Bios | Requests | None = None) -> tuple[dict[str, np.ndarray], ctypes.Array]:
    """Empty columns for a Bios or Requests of n entries (or those of `have`), and the C struct of
    pointers to them (struct bio_cols, struct req_cols)."""
    dtypes = {"time": np.int64, "q2c": np.int64, "issue": np.int64, "sector": np.uint64, "tc": np.uint32,
              "pid": np.uint32, "nbios": np.int32, "kind": np.uint8}
    nbytes = np.int64 if cls is Requests else np.uint32
    if have is not None:
        cols = {f: np.ascontiguousarray(getattr(have, f), dtype=dtypes.get(f, nbytes))
                for f in cls.__dataclass_fields__}
    else:
        cols = {f: np.empty(n, dtype=dtypes.get(f, nbytes)) for f in cls.__dataclass_fields__}
    return cols, (ctypes.c_void_p * len(cols))(*[c.ctypes.data for c in cols.values()])


class _Summary(ctypes.Structure):
    _fields_ = [("counts", _I64 * 32), ("busy_ns", _I64), ("outstanding_ns", _I64),
                ("class_ns", _I64 * len(CLASSES)), ("ndevices", _I64), ("devices", ctypes.c_uint32 * MAX_DEVICES)]


@dataclass
class Matched:
    """Bios (with Q2C) and completed requests (with issue time and submitter), and what was seen on the way."""

    bios: Bios
    reqs: Requests
    counts: np.ndarray   # events per action code (0..31)
    busy_ns: int         # time with a request issued and not completed (D..C)
    outstanding_ns: int  # time with a bio queued and not completed (Q..C; D..C for requests without bios)
    class_ns: dict[str, int]  # outstanding time by class of bio (CLASSES)
    devices: list[int] | None  # distinct devices, sorted; None if more than MAX_DEVICES


def match(events: np.ndarray) -> Matched:
    """Follows bios into requests; `events` must be sorted by time (a Trace always is)."""
    ev = np.ascontiguousarray(events, dtype=EVENT_DTYPE)
    n = len(ev)
    bios, bio_ptrs = _columns(Bios, n)
    reqs, req_ptrs = _columns(Requests, n)
    nbio, nreq = _I64(0), _I64(0)
    s = _Summary()
    rc = _library().sio_match(ev.ctypes.data, n, bio_ptrs, ctypes.byref(nbio), req_ptrs, ctypes.byref(nreq),
                              ctypes.byref(s))
    if rc == -1:
        raise SmartioError("out of memory while matching trace events")
    if rc < -1:
        raise SmartioError(f"trace events are not sorted by time at event {-rc - 2}")
    devices = list(s.devices[:s.ndevices]) if s.ndevices <= MAX_DEVICES else None
    return Matched(Bios(**{k: v[:nbio.value] for k, v in bios.items()}),
                   Requests(**{k: v[:nreq.value] for k, v in reqs.items()}),
                   np.array(s.counts[:], dtype=np.int64), s.busy_ns, s.outstanding_ns,
                   dict(zip(CLASSES, s.class_ns[:], strict=True)), devices)


# --- locality -----------------------------------------------------------------------------------------

class _Locality(ctypes.Structure):
    _fields_ = [("blocks", _I64), ("accesses", _I64), ("once", _I64), ("max", _I64), ("ntop", _I64),
                ("nhist", _I64)]


TOP_DTYPE = np.dtype([("count", "<i8"), ("block", "<u8")])
LOCALITY_VIEWS = ("read", "write", "all")


@dataclass
class Locality:
    """Accesses per 4 KiB block of one view (reads, writes, or both)."""

    blocks: int          # blocks accessed at least once
    accesses: int
    once: int            # blocks accessed exactly once
    max: int
    top: np.ndarray      # TOP_DTYPE: most accessed first, then the lower block
    histogram: np.ndarray  # (accesses, blocks) pairs, ascending accesses


def locality(reqs: Requests, top_n: int) -> dict[str, Locality]:
    """Per view of LOCALITY_VIEWS, over the read and write requests."""
    top_room, hist_room = min(top_n, ROOM), ROOM
    while True:
        loc = (_Locality * 3)()
        top = np.empty(3 * top_room, dtype=TOP_DTYPE)
        hist = np.empty(3 * 2 * hist_room, dtype=np.int64)
        if _library().sio_locality(reqs.sector.ctypes.data, reqs.nbytes.ctypes.data, reqs.kind.ctypes.data,
                                   len(reqs.kind), top_room, hist_room, loc, top.ctypes.data, hist.ctypes.data):
            raise SmartioError("out of memory while counting block accesses")
        more_top = top_room < top_n and any(v.blocks > top_room for v in loc)
        if not more_top and all(v.nhist <= hist_room for v in loc):
            break
        top_room = min(top_n, max(v.blocks for v in loc)) if more_top else top_room
        hist_room = max(hist_room, *(v.nhist for v in loc))
    out = {}
    for i, name in enumerate(LOCALITY_VIEWS):
        v = loc[i]
        h = hist[i * 2 * hist_room:i * 2 * hist_room + 2 * v.nhist].reshape(-1, 2)
        out[name] = Locality(v.blocks, v.accesses, v.once, v.max, top[i * top_room:i * top_room + v.ntop], h)
    return out


# --- per kind -----------------------------------------------------------------------------------------

class _KindCounts(ctypes.Structure):
    _fields_ = [(f, _I64 * 5) for f in ("requests", "bytes", "sync", "meta", "bios", "nd2c", "nq2c")] + \
        [("no_issue", _I64), ("no_completion", _I64)]


SORTED_KINDS = 3  # READ, WRITE, FLUSH: the kinds whose values are gathered for percentiles


@dataclass
class KindFigures:
    """Per kind of request, indexed by READ, WRITE, FLUSH, DISCARD, OTHER (analyze.py)."""

    requests: list[int]
    bytes: list[int]
    sync: list[int]            # op_is_sync(): every read, and writes with sync, FUA or preflush
    meta: list[int]
    bios: list[int]            # bios queued
    sizes: list[np.ndarray]    # for READ, WRITE, FLUSH: int64 bytes of each request, in trace order
    d2c: list[np.ndarray]      # int64 ns, of the requests whose issue was seen
    q2c: list[np.ndarray]      # int64 ns, of the bios whose completion was seen
    no_issue: int              # completed requests (not OTHER) whose issue was not seen
    no_completion: int         # bios whose completion was not seen


def kind_figures(m: Matched) -> KindFigures:
    n, nbio = len(m.reqs.kind), len(m.bios.kind)
    sizes = [np.empty(n, np.int64) for _ in range(SORTED_KINDS)]
    d2c = [np.empty(n, np.int64) for _ in range(SORTED_KINDS)]
    q2c = [np.empty(nbio, np.int64) for _ in range(SORTED_KINDS)]
    ptrs = [(_P * SORTED_KINDS)(*[a.ctypes.data for a in arrays]) for arrays in (sizes, d2c, q2c)]
    req_cols, req_ptrs = _columns(Requests, 0, m.reqs)  # the columns stay referenced during the call
    bio_cols, bio_ptrs = _columns(Bios, 0, m.bios)
    c = _KindCounts()
    _library().sio_kind_figures(req_ptrs, n, bio_ptrs, nbio, SORTED_KINDS, *ptrs, ctypes.byref(c))
    del req_cols, bio_cols
    return KindFigures(list(c.requests), list(c.bytes), list(c.sync), list(c.meta), list(c.bios),
                       _cut(sizes, c.requests), _cut(d2c, c.nd2c), _cut(q2c, c.nq2c), c.no_issue, c.no_completion)


def _cut(arrays: list[np.ndarray], counts: ctypes.Array) -> list[np.ndarray]:
    """Each of the sorted kinds' arrays cut to the count C filled in; `counts` has a slot for every kind."""
    return [a[:k] for a, k in zip(arrays, counts[:SORTED_KINDS], strict=True)]


# --- between flushes, per process ---------------------------------------------------------------------

def between_flushes(reqs: Requests) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair of successive flush completions: the read and write requests completed after the first
    and up to the second (int64), their bytes (int64), and the ns between the two flushes (int64)."""
    n = len(reqs.kind)
    out = [np.empty(n, np.int64) for _ in range(3)]
    k = _library().sio_between_flushes(reqs.time.ctypes.data, reqs.nbytes.ctypes.data, reqs.kind.ctypes.data, n,
                                       *[o.ctypes.data for o in out])
    return out[0][:k], out[1][:k], out[2][:k]


def by_pid(reqs: Requests) -> dict[str, np.ndarray]:
    """Per pid with read or write requests, sorted by pid: its reads, writes and bytes."""
    n = len(reqs.kind)
    cols: dict[str, np.ndarray] = {"pid": np.empty(n, np.uint32), "reads": np.empty(n, np.int64),
                                   "writes": np.empty(n, np.int64), "bytes": np.empty(n, np.int64)}
    k = _library().sio_by_pid(reqs.pid.ctypes.data, reqs.nbytes.ctypes.data, reqs.kind.ctypes.data, n,
                              *[c.ctypes.data for c in cols.values()])
    if k < 0:
        raise SmartioError("out of memory while counting requests per process")
    order = np.argsort(cols["pid"][:k])
    return {name: c[:k][order] for name, c in cols.items()}


# --- streaming readers (Perfetto protobuf, tracefs text) ----------------------------------------------

# sio_out_info's counters, in its order.
OUT_INFO = ("events", "comms", "ufs", "sync", "stats", "lost_bundles", "packets", "bundles", "other_events",
            "ufs_other", "rq_dc", "io_events", "lines", "skipped_lines", "clocks", "primary_clock", "in_order",
            "ufs_devs")
COMM_DTYPE = np.dtype([("pid", "<u4"), ("pad", "<i4"), ("at", "<i8"), ("name", "S24")])
# ufshcd_command: kind UFS_SEND or UFS_COMPLETE; dev indexes Collector.ufs_devices().
UFS_DTYPE = np.dtype([("time", "<u8"), ("lba", "<u8"), ("transfer_len", "<i4"), ("tag", "<u4"), ("opcode", "<u4"),
                      ("pid", "<u4"), ("cpu", "<u4"), ("dev", "<u2"), ("kind", "u1"), ("pad", "u1")])
UFS_SEND, UFS_COMPLETE = 0, 1
# ext4/f2fs sync_file_enter (phase 0) and _exit (phase 1).
SYNC_DTYPE = np.dtype([("time", "<u8"), ("ino", "<u8"), ("pid", "<u4"), ("dev", "<u4"), ("ret", "<i4"),
                       ("fs", "u1"), ("phase", "u1"), ("datasync", "u1"), ("need_cp", "u1")])
SYNC_FS = ("ext4", "f2fs")
# One CPU of an ftrace_stats packet; phase as FtraceStats.Phase (1 start of trace, 2 end).
STAT_DTYPE = np.dtype([(f, "<i8") for f in ("phase", "cpu", "overrun", "commit_overrun", "dropped_events")])
PF_OK, PF_BLOB = 0, 1
PF_ERRORS = {-1: "out of memory", -2: "malformed protobuf (a bad varint or wire type)",
             -3: "truncated: a field's length runs past the end of its message or of the file",
             -4: "a block event's device or size does not fit a block trace event"}


def _address(buf) -> tuple[np.ndarray, int]:
    """A uint8 view of buf (bytes, bytearray, memoryview) and its address; keep the view while C reads it."""
    view = np.frombuffer(buf, dtype=np.uint8)
    return view, view.ctypes.data if len(view) else 0


class Collector:
    """What the streaming readers gathered so far (struct sio_out): events, command names, UFS commands,
    sync calls, ftrace statistics. Feed it with parse_perfetto or parse_text, then take what it holds."""

    def __init__(self) -> None:
        self._lib = _library()
        self._o = self._lib.sio_out_new()
        if not self._o:
            raise SmartioError("out of memory while reading a trace")

    def close(self) -> None:
        if self._o:
            self._lib.sio_out_free(self._o)
            self._o = None

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self) -> dict[str, int]:
        out = (_I64 * len(OUT_INFO))()
        self._lib.sio_out_info(self._o, out)
        return dict(zip(OUT_INFO, out[:], strict=True))

    def parse_perfetto(self, buf, start: int, final: bool) -> tuple[int, int, int, int, int]:
        """(rc, consumed, blob offset, blob length, error offset) of sio_pf_parse on buf[start:], offsets from start."""
        view, addr = _address(buf)
        consumed, boff, blen, eoff = _I64(0), _I64(0), _I64(0), _I64(0)
        rc = self._lib.sio_pf_parse(self._o, addr + start, len(view) - start, int(final), ctypes.byref(consumed),
                                    ctypes.byref(boff), ctypes.byref(blen), ctypes.byref(eoff))
        del view
        return rc, consumed.value, boff.value, blen.value, eoff.value

    def parse_text(self, buf, start: int, final: bool) -> tuple[int, int]:
        """(rc, consumed) of sio_text_parse on buf[start:]: rc 1 when the line at start + consumed is left to the
        caller."""
        view, addr = _address(buf)
        consumed = _I64(0)
        rc = self._lib.sio_text_parse(self._o, addr + start, len(view) - start, int(final), ctypes.byref(consumed))
        del view
        if rc < 0:
            raise SmartioError("out of memory while reading a trace")
        return rc, consumed.value

    def push(self, row: tuple) -> None:
        rec = np.array([row], dtype=EVENT_DTYPE)
        if self._lib.sio_out_push(self._o, rec.ctypes.data):
            raise SmartioError("out of memory while reading a trace")

    def _array(self, which: int, dtype: np.dtype, n: int) -> np.ndarray:
        if n == 0:
            return np.zeros(0, dtype=dtype)
        ptr = self._lib.sio_out_array(self._o, which)
        mem = (ctypes.c_char * (n * dtype.itemsize)).from_address(ptr)
        return np.frombuffer(memoryview(mem).cast("B"), dtype=dtype).copy()

    def comms(self) -> np.ndarray:
        return self._array(1, COMM_DTYPE, self.info()["comms"])

    def ufs(self) -> np.ndarray:
        return self._array(2, UFS_DTYPE, self.info()["ufs"])

    def sync(self) -> np.ndarray:
        return self._array(3, SYNC_DTYPE, self.info()["sync"])

    def stats(self) -> np.ndarray:
        return self._array(4, STAT_DTYPE, self.info()["stats"])

    def ufs_devices(self) -> list[str]:
        n = self.info()["ufs_devs"]
        raw = self._array(5, np.dtype("S32"), n) if n else np.zeros(0, "S32")
        return [bytes(x).decode("utf-8", "replace") for x in raw]

    def take_events(self, settle_io_events: bool = False) -> np.ndarray:
        """The events, sorted by time (stable, in place), handed over without a copy."""
        n = self._lib.sio_out_settle_io_events(self._o) if settle_io_events else self.info()["events"]
        in_order = self.info()["in_order"]
        ptr = self._lib.sio_out_take_events(self._o)
        if n == 0:
            self._lib.sio_free(ptr)
            return np.zeros(0, dtype=EVENT_DTYPE)
        mem = (ctypes.c_char * (n * EVENT_DTYPE.itemsize)).from_address(ptr)
        weakref.finalize(mem, self._lib.sio_free, ptr)   # freed with the last view of the events
        events = np.frombuffer(memoryview(mem).cast("B"), dtype=EVENT_DTYPE)
        if not in_order:
            perm = np.argsort(events["time"], kind="stable")
            self._lib.sio_permute(events.ctypes.data, perm.ctypes.data, n)
            del perm
        return events

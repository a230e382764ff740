"""Reading and writing block traces: ours, blktrace's binary format, and blkparse's default text.

- ours (`.smtrace`): magic `SMIOTRC1`, a little-endian u32 header length, a JSON header (where the
  trace came from, and the pid -> command table), then fixed 48-byte `EVENT_DTYPE` records.
- blktrace: `struct blk_io_trace` records (48 bytes, magic 0x65617400 | version 0x07) each followed by
  `pdu_len` payload bytes; process notes carry command names. Written as blktrace does, one file per
  CPU, NAME.blktrace.<cpu>, which `blkparse -i NAME` and `iowatcher -t NAME` read (and `blkparse -i NAME
  -d NAME.bin` merges for `btt -i NAME.bin`). Read: NAME (all its per-CPU files), one per-CPU file (its
  siblings are read too), or a merged stream. Either byte order is read, as blkparse does.
- blkparse text: the default output of `blkparse -i`, up to its summary.
- tracefs text: what `trace-cmd report` or `cat /sys/kernel/tracing/trace` prints for the block events
  (block_bio_queue, block_bio_backmerge/frontmerge, block_getrq, block_rq_insert, block_rq_issue,
  block_rq_merge, block_rq_requeue, block_rq_complete), in the formats of include/trace/events/block.h (Linux 6.1,
  and the later ones that add the I/O priority); other events are skipped.

- Perfetto protobuf (perfetto.py): the block events of its ftrace bundles, and its UFS commands and sync calls.

Any of them may be compressed (gzip, xz, zstd; recognised by their magic bytes, whatever the file's name).

The traces that matter are millions of events long, so blktrace files are checked and merged by the C
helper (native.py) in one pass over each record, and our own format is decoded in place with numpy;
tracefs text and Perfetto are streamed (streams.py) through the C helper's readers, a piece at a time.
A malformed file raises `TraceFormatError` naming the byte offset: never a partial or silently wrong
trace.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import mmap
import os
import re
import zlib
from pathlib import Path
from typing import NoReturn

import numpy as np

from smartio.errors import UsageError
from smartio.trace import events as ev, native, perfetto, streams
from smartio.trace.events import EVENT_DTYPE, Trace
from smartio.trace.streams import COMPRESSED, TraceFormatError

OURS_MAGIC = b"SMIOTRC1"
BLK_MAGIC = 0x65617400
BLK_VERSION = 0x07
BLK_DTYPE_LE = EVENT_DTYPE
BLK_DTYPE_BE = BLK_DTYPE_LE.newbyteorder(">")
BLK_SIZE = BLK_DTYPE_LE.itemsize  # 48

FORMATS = ("smartio", "blktrace", "blkparse", "tracefs", "perfetto")


def detect_format(path: Path) -> str:
    return _detect(path, streams.head(path))


def _detect(path: Path, head: bytes) -> str:
    if not head:
        raise TraceFormatError(path, 0, "the file is empty")
    if head.startswith(OURS_MAGIC):
        return "smartio"
    if len(head) >= 4:
        for order in ("<", ">"):
            magic = int(np.frombuffer(head[:4], dtype=f"{order}u4")[0])
            if magic & 0xFFFFFF00 == BLK_MAGIC:
                return "blktrace"
    text = head.decode("utf-8", "replace")
    if re.match(r"\s*\d+,\d+\s+\d+\s+\d+\s+\d+\.\d+\s", text):
        return "blkparse"
    lines = text.splitlines()[:-1] or text.splitlines()   # the last may be cut short
    if any(_TF_EVENT.match(x) for x in lines) or (lines and re.match(r"# tracer:|cpus=\d+$", lines[0])):
        return "tracefs"
    named = path.name.removesuffix(".gz").endswith(perfetto.EXTENSIONS)
    if perfetto.looks_like_perfetto(head) or (named and head[:1] == b"\x0a"):
        return "perfetto"
    if OURS_MAGIC.startswith(head):
        raise TraceFormatError(path, 0, "truncated smartio trace header")
    raise TraceFormatError(path, 0, "not a smartio trace, a blktrace file, blkparse or tracefs text, or a Perfetto "
                           f"trace (starts with {head[:16]!r})")


_PER_CPU = re.compile(r"(.*)\.blktrace\.(\d+)(\.(?:gz|xz|zst))?$")


def blktrace_cpu_files(path: Path) -> list[Path]:
    """The per-CPU files of a blktrace recording named by NAME or by one of NAME.blktrace.<cpu>[.gz|.xz|.zst]
    (a plain file wins over a compressed one of the same CPU)."""
    m = _PER_CPU.match(path.name)
    base = path.with_name(m.group(1)) if m else path
    by_cpu: dict[int, Path] = {}
    for p in base.parent.glob(glob_escape(base.name) + ".blktrace.*"):
        pm = _PER_CPU.match(p.name)
        if pm and pm.group(1) == base.name and (int(pm.group(2)) not in by_cpu or not pm.group(3)):
            by_cpu[int(pm.group(2))] = p
    return [by_cpu[c] for c in sorted(by_cpu)]


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def read_trace(path: Path | str, fmt: str | None = None) -> Trace:
    """Reads a trace in any of the three formats; `fmt` None means detect it from the content."""
    path = Path(path)
    cpu_files = blktrace_cpu_files(path) if fmt in (None, "blktrace") else []
    if cpu_files and (not path.is_file() or _PER_CPU.match(path.name)):
        trace = _read_cpu_files(cpu_files)
        trace.source_format = "blktrace"
        return trace
    if not path.is_file():
        raise UsageError(None, path, "no such trace file (nor NAME.blktrace.<cpu> files)")
    fmt = fmt or _detect(path, streams.head(path))
    if fmt in ("tracefs", "perfetto"):   # streamed: never the whole file in memory
        trace = read_tracefs_text(path) if fmt == "tracefs" else perfetto.read_perfetto(path)
    else:
        data = _map(path)
        reader = {"smartio": read_ours, "blktrace": read_blktrace, "blkparse": read_blkparse_text}[fmt]
        trace = reader(path, data)
    trace.source_format = fmt
    return trace


def _map(path: Path):
    """The file's bytes: memory-mapped (no copy) when plain, decompressed into memory when gzip, xz or zstd
    (byte offsets in errors are then offsets in the decompressed data)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    kind = next((k for magic, k in COMPRESSED.items() if data[:len(magic)] == magic), None)
    if kind is None:
        return data
    try:
        if kind == "gzip":
            return gzip.decompress(data)
        if kind == "xz":
            return lzma.decompress(data)
        import zstandard

        z = zstandard.ZstdDecompressor().decompressobj()
        with memoryview(data) as view:  # released at once, so the map can be closed
            out = z.decompress(view)
        if not z.eof:
            raise EOFError("the compressed data end before the end of the frame (truncated?)")
        return out
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as e:
        raise TraceFormatError(path, 0, f"{path.name} is {kind}-compressed but cannot be decompressed: {e}") \
            from None
    except Exception as e:   # zstandard.ZstdError
        if type(e).__name__ != "ZstdError":
            raise
        raise TraceFormatError(path, 0, f"{path.name} is zstd-compressed but cannot be decompressed: {e}") \
            from None
    finally:
        data.close()


def _lines(path: Path, data):
    """The file's lines as bytes, with their ends: read from the file when plain, from memory when it was
    decompressed."""
    if isinstance(data, mmap.mmap) or not data:
        return open(path, "rb")
    return io.BytesIO(data)


# --- ours -------------------------------------------------------------------------------------------

def write_ours(trace: Trace, path: Path | str) -> None:
    header = dict(trace.meta)
    header["comms"] = {str(k): v for k, v in trace.comms.items()}
    header["events"] = len(trace.events)
    blob = json.dumps(header, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(OURS_MAGIC)
        f.write(len(blob).to_bytes(4, "little"))
        f.write(blob)
        f.write(trace.events.tobytes())


def read_ours(path: Path, data=None) -> Trace:
    data = _map(path) if data is None else data
    if len(data) < 12 or data[:8] != OURS_MAGIC:
        raise TraceFormatError(path, 0, "missing the SMIOTRC1 header")
    hlen = int.from_bytes(data[8:12], "little")
    if hlen > len(data) - 12:
        if int.from_bytes(data[8:12], "big") <= len(data) - 12:
            raise TraceFormatError(path, 8, "header length is big-endian; smartio traces are little-endian")
        raise TraceFormatError(path, 8, f"header length {hlen} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[12:12 + hlen])
        comms = {int(k): str(v) for k, v in header.pop("comms", {}).items()}
        count = header.pop("events")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise TraceFormatError(path, 12, f"header is not valid JSON with 'events' and 'comms': {e}") from None
    if type(count) is not int or count < 0:
        raise TraceFormatError(path, 12, f"header's 'events' is {count!r}, not a count of events")
    body = 12 + hlen
    size = EVENT_DTYPE.itemsize
    if len(data) - body != count * size:
        have = (len(data) - body) // size
        at = body + min(have, count) * size
        raise TraceFormatError(path, at, f"header promises {count} events of {size} bytes, "
                               f"the file holds {len(data) - body} bytes after the header (truncated?)")
    events = np.frombuffer(data, dtype=EVENT_DTYPE, count=count, offset=body)
    _check_events(path, events, body, size)
    return Trace(events, comms, header)


def _check_events(path: Path, events: np.ndarray, base: int, size: int) -> None:
    """Rejects records that no kernel writes, so garbage cannot pass as a trace."""
    badmagic = events["magic"] != ev.MAGIC
    if badmagic.any():
        i = int(np.argmax(badmagic))
        raise TraceFormatError(path, base + i * size, f"record {i} has magic {int(events['magic'][i]):#010x}, "
                               f"expected {ev.MAGIC:#010x} (garbage, or the wrong byte order?)")
    code = events["action"] & 0xFFFF
    bad = (code == 0) | (code > ev.DRV_DATA) | (events["pdu_len"] != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceFormatError(path, base + i * size, f"record {i} has an invalid action word "
                               f"{int(events['action'][i]):#x} (garbage?)")


# --- blktrace binary --------------------------------------------------------------------------------

def read_blktrace(path: Path, data=None) -> Trace:
    data = _map(path) if data is None else data
    order = _blk_byte_order(path, data)
    # One pass in C checks every record (magic, action, payload length) and finds the events.
    got = native.read_blktrace([data], [order == ">"])
    if got.error:
        _raise_scan_error(path, data, order, got.error, got.error_offset)
    assert got.events is not None   # None only after an error
    comms = _process_names(data, order, got.notes[0])
    if not len(got.events):
        raise TraceFormatError(path, 0, "no events in the file, only notes")
    return Trace(got.events, comms, {"clock": "relative"}, in_order=got.in_order)


def _read_cpu_files(files: list[Path]) -> Trace:
    """A recording's per-CPU files, merged by time while they are checked (each record read once).

    Empty files are CPUs that did no I/O (blktrace writes them too)."""
    files = [p for p in files if p.stat().st_size] or files
    maps = [_map(p) for p in files]
    try:
        orders = [_blk_byte_order(p, m) for p, m in zip(files, maps, strict=True)]
    except TraceFormatError:
        orders = []
    got = native.read_blktrace(maps, [o == ">" for o in orders]) if orders else None
    if got is None or got.error or got.events is None or 0 in got.events_per_file:
        # A bad file, one without events, or one out of time order: read them one by one, so that the
        # first bad file raises its error; a stable sort keeps ties in the order of the files, as the merge does.
        parts = [read_blktrace(p, m) for p, m in zip(files, maps, strict=True)]
        comms = {k: v for t in parts for k, v in t.comms.items()}
        return Trace(np.concatenate([t.events for t in parts]), comms, parts[0].meta)
    comms = {}
    for data, order, notes in zip(maps, orders, got.notes, strict=True):
        comms.update(_process_names(data, order, notes))
    return Trace(got.events, comms, {"clock": "relative"}, in_order=True)


def _raise_scan_error(path: Path, data, order: str, error: str, off: int) -> NoReturn:
    if error == "truncated":
        raise TraceFormatError(path, off, f"truncated record: {len(data) - off} bytes left, a record needs {BLK_SIZE}")
    rec = np.frombuffer(data, dtype=BLK_DTYPE_LE if order == "<" else BLK_DTYPE_BE, count=1, offset=off)[0]
    if error == "magic":
        raise TraceFormatError(path, off, f"record has magic {int(rec['magic']):#010x}, expected "
                               f"{BLK_MAGIC | BLK_VERSION:#010x}: garbage, a different blktrace version, "
                               "a mixed byte order, or a wrong payload length before it")
    if error == "action":
        raise TraceFormatError(path, off, f"record has an invalid action word {int(rec['action']):#x}")
    raise TraceFormatError(path, off, f"truncated payload: record says {int(rec['pdu_len'])} bytes, "
                           f"{len(data) - off - BLK_SIZE} left")


def _process_names(data, order: str, notes: np.ndarray) -> dict[int, str]:
    """pid -> command name from a blktrace file's process notes (the last note of a pid wins)."""
    comms: dict[int, str] = {}
    dt = BLK_DTYPE_LE if order == "<" else BLK_DTYPE_BE
    for off in notes.tolist():
        rec = np.frombuffer(data, dtype=dt, count=1, offset=off)[0]
        if int(rec["action"]) & 0xFFFF == ev.NOTE_PROCESS:
            name = data[off + BLK_SIZE:off + BLK_SIZE + int(rec["pdu_len"])].split(b"\0", 1)[0]
            comms[int(rec["pid"])] = name.decode("utf-8", "replace")
    return comms


def _blk_byte_order(path: Path, data: bytes) -> str:
    if len(data) < 4:
        raise TraceFormatError(path, 0, f"truncated: {len(data)} bytes, a record needs {BLK_SIZE}")
    for order in ("<", ">"):
        if int(np.frombuffer(data[:4], dtype=f"{order}u4")[0]) & 0xFFFFFF00 == BLK_MAGIC:
            return order
    raise TraceFormatError(path, 0, "bad magic: not a blktrace file")


def write_blktrace(trace: Trace, name: Path | str) -> list[Path]:
    """Writes NAME.blktrace.<cpu> files, as `blktrace -o NAME` does; returns their paths.

    Each starts with the process notes (command names), then that CPU's events in time order, with
    times relative to the first event of the trace and sequence numbers counting per CPU. A CPU
    without events gets an empty file, as with blktrace: blkparse looks for CPU 0, 1, ... in turn.
    """
    e = trace.events
    devs = np.unique(e["device"]) if len(e) else np.array([0], dtype=np.uint32)
    t0 = int(e["time"][0]) if len(e) else 0
    notes = bytearray()
    for pid, comm in sorted(trace.comms.items()):
        cname = comm.encode("utf-8", "replace")[:15].ljust(16, b"\0")
        for dev in devs:  # blkparse keeps command names per device
            rec = np.zeros(1, dtype=BLK_DTYPE_LE)
            rec["magic"] = BLK_MAGIC | BLK_VERSION
            rec["action"] = ev.NOTE_PROCESS | ev.TC_NOTIFY << ev.TC_SHIFT
            rec["pid"], rec["device"], rec["pdu_len"] = pid, dev, len(cname)
            notes += rec.tobytes() + cname
    out = e.copy()
    out["time"] = e["time"] - t0
    out["sequence"] = _per_cpu_sequence(e["cpu"])
    paths = []
    for cpu in range(int(out["cpu"].max()) + 1 if len(out) else 1):
        path = Path(f"{name}.blktrace.{cpu}")
        mine = out[out["cpu"] == cpu]
        with open(path, "wb") as f:
            if len(mine) or not len(out):
                f.write(notes)
                f.write(mine.tobytes())
        paths.append(path)
    return paths


def _per_cpu_sequence(cpu: np.ndarray) -> np.ndarray:
    order = np.argsort(cpu, kind="stable")
    sc = cpu[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    counts = np.diff(np.r_[starts, len(sc)])
    rank = np.arange(len(sc)) - np.repeat(starts, counts) + 1
    seq = np.empty(len(cpu), dtype=np.uint32)
    seq[order] = rank
    return seq


# --- blkparse text ----------------------------------------------------------------------------------

_LINE = re.compile(
    r"\s*(\d+),(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\.(\d{9})\s+(\d+)\s+([A-Za-z])\s+(\S+)\s*(.*)$")
# "SECTOR + COUNT [comm]"; requests without data print "SECTOR [error]" (C) or only "[comm]" (D);
# `blkparse -t` adds "(ns)" before the bracket.
_IO = re.compile(r"(?:(\d+)(?: \+ (\d+))? )?(?:\( *(\d+)\) )?\[(.*)\]$")
_SUMMARY = re.compile(r"(CPU\d+|Total) \(")
# The record's fields in EVENT_DTYPE order and the largest value each holds: a bigger number is bad input.
_FIELD_NAMES = tuple(EVENT_DTYPE.names or ())
_FIELD_LIMITS = tuple(int(np.iinfo(EVENT_DTYPE[n]).max) for n in _FIELD_NAMES)
_MAX_DIGITS = 40   # more than any field holds (2**64 has 20), far below Python's int() limit


def _too_large(row: tuple[int, ...]) -> str | None:
    """The name of the first field of an event row whose value does not fit its column, if any."""
    return next((name for name, v, lim in zip(_FIELD_NAMES, row, _FIELD_LIMITS, strict=True) if v > lim), None)


def read_blkparse_text(path: Path, data=None) -> Trace:
    rows: list[tuple] = []
    comms: dict[int, str] = {}
    offset = 0
    with _lines(path, data) as f:
        for lineno, raw in enumerate(f, 1):
            line_off, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8").rstrip("\n")
            except UnicodeDecodeError:
                raise TraceFormatError(path, line_off, f"line {lineno} is not text") from None
            if not line.strip():
                continue
            if _SUMMARY.match(line):
                break
            m = _LINE.match(line)
            if not m:
                raise TraceFormatError(path, line_off, f"line {lineno} is not a blkparse event line: {line[:80]!r}")
            major, minor, cpu, seq, sec, nsec, pid, letter, rwbs, rest = m.groups()
            code = ev.LETTER_ACTION.get(letter)
            if code is None:
                continue  # notes ('m') and actions with nothing to analyse
            tc = ev.rwbs_to_categories(rwbs) | ev.ACTION_CATEGORY.get(code, 0)
            io = _IO.match(rest)
            numbers = (major, minor, cpu, seq, sec, pid, *(io.groups() if io else ()))
            if any(g and len(g) > _MAX_DIGITS for g in numbers):   # int() refuses 4300 digits and more
                raise TraceFormatError(path, line_off, f"line {lineno}: a number is too large for a block trace event")
            sector = nsect = error = 0
            if io:
                sector, nsect = int(io.group(1) or 0), int(io.group(2) or 0)
                tail = io.group(4)
                if code == ev.COMPLETE:
                    error = int(tail) if tail.lstrip("-").isdigit() else 0
                elif tail:
                    comms.setdefault(int(pid), tail)
            elif code in (ev.QUEUE, ev.ISSUE, ev.COMPLETE, ev.INSERT, ev.BACKMERGE, ev.FRONTMERGE, ev.GETRQ):
                raise TraceFormatError(path, line_off, f"line {lineno}: expected 'SECTOR + COUNT [..]' after {letter}")
            row = (ev.MAGIC, 0, int(sec) * 1_000_000_000 + int(nsec), sector, nsect * 512,
                   code | tc << ev.TC_SHIFT, int(pid), ev.kdev(int(major), int(minor)), int(cpu),
                   abs(error) & 0xFFFF, 0)
            too_large = _too_large(row)
            if too_large or int(major) >= 1 << (32 - ev.MINORBITS) or int(minor) >= 1 << ev.MINORBITS:
                raise TraceFormatError(path, line_off, f"line {lineno}: {too_large or 'device number'} is too "
                                       "large for a block trace event")
            rows.append(row)
    if not rows:
        raise TraceFormatError(path, 0, "no blkparse event lines")
    return Trace(np.array(rows, dtype=EVENT_DTYPE), comms, {"clock": "relative"})


# --- tracefs text -----------------------------------------------------------------------------------

# "TASK-PID [CPU] FLAGS TIMESTAMP: EVENT: BODY": trace-cmd report leaves out the flags, `cat trace` prints them
# (4 or 5 characters) and, with the record-tgid option, "(TGID)" before the CPU. Timestamps are seconds with 6
# digits (µs, the default) or 9 (ns, trace-cmd report -t).
_TF_EVENT = re.compile(r"\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*(?:\d+|-+)\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S{1,8}\s+)?"
                       r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<event>\w+):\s*(?P<body>.*)$")
# The bodies of include/trace/events/block.h: block_bio "%d,%d %s %llu + %u [%s]", block_rq
# "%d,%d %s %u (%s) %llu + %u [%s]", block_rq_completion and block_rq_requeue "%d,%d %s (%s) %llu + %u [%d]"; after
# 6.1 the I/O priority ("be,0,4") comes before the bracket.
_TF_BODY = re.compile(r"(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>[A-Z]+)\s+(?:(?P<bytes>\d+)\s+)?(?:\((?P<cmd>[^)]*)\)\s+)?"
                      r"(?P<sector>\d+)\s+\+\s+(?P<nsect>\d+)(?:\s+[^\[\s]+)?\s*\[(?P<tail>[^\]]*)\]\s*$")
_TF_SKIP = re.compile(r"#|cpus=\d+\s*$|version = |CPU\s*\d+ is empty|CPU\d+ data recorded at offset|\s*$")
_TF_LOST = re.compile(r".*\bLOST (\d+) EVENTS")


def read_tracefs_text(path: Path) -> Trace:
    """Streams the file through the C reader, which takes the usual event lines; the others (headers, LOST lines,
    odd ones, and malformed ones, which raise here) go through tracefs_text_line."""
    with native.Collector() as col:
        py_comms: dict[int, tuple[int, str]] = {}   # pid -> (events read when first named, name)
        lost = py_lines = 0
        pending = bytearray()
        base = 0   # offset in the (decompressed) file of pending[0]
        for final, piece in _with_last(streams.pieces(path)):
            pending += piece
            pos = 0
            while True:
                rc, used = col.parse_text(pending, pos, final)
                pos += used
                if rc == 0:
                    break
                nl = pending.find(b"\n", pos)
                raw = bytes(pending[pos:nl + 1 if nl >= 0 else len(pending)])
                py_lines += 1
                got = tracefs_text_line(path, base + pos, col.info()["lines"] + py_lines, raw)
                if isinstance(got, int):
                    lost += got
                elif got is not None:
                    row, comm = got
                    col.push(row)
                    if comm is not None:
                        py_comms.setdefault(row[6], (col.info()["events"], comm))
                pos += len(raw)
            del pending[:pos]
            base += pos
        events = col.take_events()
        if not len(events):
            raise TraceFormatError(path, 0, "no block events (block_bio_queue, block_rq_issue, block_rq_complete, "
                                   "...) in the tracefs text")
        named = {int(c["pid"]): (int(c["at"]), bytes(c["name"]).decode()) for c in col.comms()}
    for pid, (at, comm) in py_comms.items():   # the first line that named a pid wins, as it always did
        if pid not in named or at < named[pid][0]:
            named[pid] = (at, comm)
    meta: dict = {"clock": "tracefs"}
    if lost:
        meta["lost_events"] = lost
    return Trace(events, {pid: comm for pid, (_at, comm) in named.items()}, meta, in_order=True)


def _with_last(pieces):
    """(is_last, piece) for each piece, and (True, b"") after the last."""
    for piece in pieces:
        yield False, piece
    yield True, b""


def tracefs_text_line(path: Path, line_off: int, lineno: int, raw: bytes) -> tuple[tuple, str | None] | int | None:
    """One line of tracefs text: (event row, command name or None), a count of lost events, or None (skipped)."""
    from smartio.trace.tracefs import TRACEPOINTS

    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise TraceFormatError(path, line_off, f"line {lineno} is not text") from None
    m = _TF_EVENT.match(line)
    if not m:
        lm = _TF_LOST.match(line)
        if lm:
            return int(lm.group(1))
        if _TF_SKIP.match(line):
            return None
        raise TraceFormatError(path, line_off, f"line {lineno} is not a tracefs event line: {line[:80]!r}")
    code = TRACEPOINTS.get(m.group("event"))
    if code is None:
        return None   # other events, and block events with nothing to analyse (plug, split, remap)
    b = _TF_BODY.match(m.group("body"))
    if not b:
        raise TraceFormatError(path, line_off, f"line {lineno}: {m.group('event')} does not read "
                               f"'MAJOR,MINOR RWBS ... SECTOR + COUNT [..]': {line[:100]!r}")
    numbers = (m.group("pid"), m.group("cpu"), m.group("sec"), *b.group("maj", "min", "sector", "nsect"))
    if any(len(x) > _MAX_DIGITS for x in numbers):
        raise TraceFormatError(path, line_off, f"line {lineno}: a number is too large for a block trace event")
    pid, comm, tail = int(m.group("pid")), m.group("comm").strip(), b.group("tail")
    error = 0
    if code in (ev.COMPLETE, ev.REQUEUE):
        error = abs(int(tail)) if tail.lstrip("-").isdigit() and len(tail) <= _MAX_DIGITS else 0
    ns = int(m.group("sec")) * 1_000_000_000 + int(m.group("frac")[:9].ljust(9, "0"))
    major, minor = int(b.group("maj")), int(b.group("min"))
    tc = ev.rwbs_to_categories(b.group("rwbs")) | ev.ACTION_CATEGORY[code]
    row = (ev.MAGIC, 0, ns, int(b.group("sector")), int(b.group("nsect")) * 512, code | tc << ev.TC_SHIFT,
           pid, ev.kdev(major, minor) if major < 1 << (32 - ev.MINORBITS) and minor < 1 << ev.MINORBITS
           else 1 << 32, int(m.group("cpu")), error & 0xFFFF, 0)
    too_large = _too_large(row)
    if too_large:
        raise TraceFormatError(path, line_off, f"line {lineno}: {too_large} is too large for a block trace event")
    return row, (comm if pid > 0 and comm and comm != "<...>" else None)

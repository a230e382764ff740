"""Reading Perfetto traces (what Android's and Linux's `perfetto` write) without any of Perfetto's binaries.

A trace is the protobuf message `Trace` (repeated TracePacket packet = 1), often gzip-compressed as a whole, or with
packets deflated into `compressed_packets`. The C helper (native.py) decodes the protobuf wire format itself, piece
by piece as streams.py hands it the file, and keeps:
- the block events of the ftrace bundles (block_bio_queue/backmerge/frontmerge, block_getrq, block_rq_insert/issue/
  complete/requeue), as the same records as every other format, so that they pair exactly as tracefs text does;
  block_io_start/done stand for issue and completion only in traces without block_rq_issue/complete;
- ufshcd_command (send and completion per UFS tag) and ext4/f2fs sync_file_enter/exit;
- command names (from the block events and the process tree), the ftrace clock of the bundles, and the ftrace
  statistics (overrun, commit overrun and dropped events per CPU at the start and the end of the trace).
Field numbers are those of protos/perfetto/trace/ (ftrace_event.proto, trace_packet.proto, ...); tests write traces
with the official protos (the `perfetto` package) to hold them to it.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np

from smartio.trace import native, streams
from smartio.trace.events import Trace
from smartio.trace.streams import TraceFormatError

EXTENSIONS = (".perfetto-trace", ".pftrace", ".perfetto")
# FtraceEventBundle.ftrace_clock; unspecified means ftrace's "boot" clock (CLOCK_BOOTTIME), Perfetto's default.
FTRACE_CLOCKS = {0: "boot", 1: "unknown", 2: "global", 3: "local", 4: "mono_raw"}
STATS_START, STATS_END = 1, 2   # FtraceStats.Phase

# A TraceConfig (text format) that records what `smartio trace analyze` reads; docs/guide/trace.md shows it too.
CONFIG_SNIPPET = """\
buffers { size_kb: 131072 fill_policy: RING_BUFFER }
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      buffer_size_kb: 16384
      ftrace_events: "block/block_bio_queue"
      ftrace_events: "block/block_bio_backmerge"
      ftrace_events: "block/block_bio_frontmerge"
      ftrace_events: "block/block_getrq"
      ftrace_events: "block/block_rq_insert"
      ftrace_events: "block/block_rq_issue"
      ftrace_events: "block/block_rq_complete"
      ftrace_events: "block/block_rq_requeue"
      ftrace_events: "ufs/ufshcd_command"
      ftrace_events: "ext4/ext4_sync_file_enter"
      ftrace_events: "ext4/ext4_sync_file_exit"
      ftrace_events: "f2fs/f2fs_sync_file_enter"
      ftrace_events: "f2fs/f2fs_sync_file_exit"
    }
  }
}
data_sources { config { name: "linux.process_stats" } }
duration_ms: 30000
"""


def looks_like_perfetto(head: bytes) -> bool:
    """Whether the bytes start like a Trace: a packet (field 1, length-delimited) whose first fields parse."""
    if not head or head[0] != 0x0A:
        return False
    pos, length = _varint(head, 1)
    if length is None or length == 0 or length > 1 << 30:
        return False
    end = min(pos + length, len(head))
    fields = 0
    while pos < end and fields < 8:
        pos, tag = _varint(head, pos)
        if tag is None or tag >> 3 == 0 or tag & 7 not in (0, 1, 2, 5):
            return False
        wire = tag & 7
        if wire == 0:
            pos, value = _varint(head, pos)
            if value is None:
                return pos >= len(head)
        elif wire == 2:
            pos, n = _varint(head, pos)
            if n is None:
                return pos >= len(head)
            pos += n
        else:
            pos += 8 if wire == 1 else 4
        fields += 1
    return pos <= end or end == len(head)   # within the packet, unless the head cuts it


def _varint(data: bytes, pos: int) -> tuple[int, int | None]:
    value = shift = 0
    while pos < len(data) and shift < 64:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return pos, value
        shift += 7
    return pos, None


def read_perfetto(path: Path) -> Trace:
    with native.Collector() as col:
        pending = bytearray()
        base = 0   # offset in the (decompressed) file of pending[0]
        for piece in streams.pieces(path):
            pending += piece
            used = _feed(path, col, pending, base, final=False)
            del pending[:used]
            base += used
        _feed(path, col, pending, base, final=True)
        info = col.info()
        if not info["packets"]:
            raise TraceFormatError(path, 0, "no trace packets: not a Perfetto trace")
        events = col.take_events(settle_io_events=True)
        if not len(events):
            raise TraceFormatError(path, 0, no_block_events(info))
        comms = {int(c["pid"]): bytes(c["name"]).decode("utf-8", "replace") for c in col.comms()}
        meta: dict[str, Any] = {"clock": _clock(info["clocks"]), "lost_events": _lost(col.stats()),
                "lost_event_bundles": info["lost_bundles"], "packets": info["packets"]}
        ufs, sync = col.ufs(), col.sync()
        if len(ufs):
            meta["ufs_hosts"] = col.ufs_devices()
        return Trace(events, comms, meta, in_order=True, ufs=ufs if len(ufs) else None,
                     sync_calls=sync if len(sync) else None)


def no_block_events(info: dict[str, int]) -> str:
    seen = (f"{info['bundles']} ftrace bundles with {info['other_events']} other events, {info['ufs']} UFS commands "
            f"and {info['sync']} sync calls")
    return (f"no block events in this Perfetto trace ({info['packets']} packets; {seen}). Enable the ftrace events "
            "block/block_bio_queue, block/block_rq_insert, block/block_rq_issue and block/block_rq_complete (and the "
            "others below) in the linux.ftrace data source, e.g. with this TraceConfig:\n" + CONFIG_SNIPPET)


def _feed(path: Path, col: native.Collector, buf, base: int, final: bool, inside: int | None = None) -> int:
    """Reads the whole packets of buf (all of it when final), inflating compressed packets on the way; returns how
    many bytes it read. `inside`: buf is the inflated data of the compressed packets at that offset of the file."""
    pos = 0
    while True:
        rc, consumed, boff, blen, eoff = col.parse_perfetto(buf, pos, final)
        if rc < 0:
            why = native.PF_ERRORS.get(rc, f"error {rc}")
            if inside is None:
                raise TraceFormatError(path, base + pos + eoff, f"in the packet that starts here: {why}")
            raise TraceFormatError(path, inside, f"in the compressed_packets that start here, at byte "
                                   f"{pos + eoff} of their inflated data: {why}")
        if rc == native.PF_BLOB:
            at = base + pos + boff if inside is None else inside
            try:
                data = streams.inflate(bytes(buf[pos + boff:pos + boff + blen]))
            except zlib.error as e:
                raise TraceFormatError(path, at, f"compressed_packets of {blen} bytes cannot be inflated: {e}") \
                    from None
            _feed(path, col, data, 0, True, inside=at)
            pos += consumed
            continue
        return pos + consumed


def _clock(bits: int) -> str | None:
    names = [FTRACE_CLOCKS.get(i, f"ftrace clock {i}") for i in range(32) if bits >> i & 1]
    return None if not names else names[0] if len(names) == 1 else "mixed: " + ", ".join(names)


def _lost(stats: np.ndarray) -> int | None:
    """Events the kernel lost (overrun, commit overrun, dropped) between the start and the end of the trace: the
    difference of the two ftrace_stats packets, per CPU; the end's counts alone when there is no start."""
    if not len(stats):
        return None

    def per_cpu(phase: int) -> dict[int, int]:
        s = stats[stats["phase"] == phase]
        return {int(c): int(o + co + d) for c, o, co, d in
                zip(s["cpu"], s["overrun"], s["commit_overrun"], s["dropped_events"], strict=True)}

    start, end = per_cpu(STATS_START), per_cpu(STATS_END)
    if not end:
        return None
    return sum(max(n - start.get(cpu, 0), 0) for cpu, n in end.items())

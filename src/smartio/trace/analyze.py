"""Characterises a block trace the way seed 004 (Courville and Chen) does, per read and per write.

Definitions (they matter when comparing with other tools):
- A request is a completed request (C) that moved data; its size is the C's byte count. Flushes
  (requests with the flush category and no data) and discards are counted apart, not as reads/writes.
- Q2C is per bio (queue to completion of the request that carried it), D2C per request (issue to
  completion); btt reports both per bio, so its D2C weighs a request once per bio it merged.
- Bios find their request as btt finds them: through get-request (G) and merge (M, F) events, or, in traces
  without G (tracefs text), by the sector range of the request's insert (I) or issue (D). The request's
  process is the one that queued its first bio, not the kernel worker that issued it.
- A request completed in several parts (partial completions) counts once, at its last part.
- Zero-size requests (flushes) are paired first in, first out per device.
- A write with a preflush, or with FUA on a device without FUA, ends at its final completion, after the
  kernel's post-flush (a completion of 0 bytes at its sector), not at its data completion as in btt: Q2C and
  D2C run to it. Without such a completion (a device with FUA) the data completion ends it.
- Sync: the kernel's op_is_sync(): every read, and writes with the sync, FUA or preflush flag.
- Size shares are "at most" 4/16/64 KiB (a 4 KiB request counts as small).
- Locality counts accesses per 4 KiB block (a request touches every block it overlaps).
- Between successive flushes: the requests and bytes completed, and the time, between two flush completions.
- Busy share: the share of wall time with at least one request issued and not completed (D..C, like
  iostat's %util); outstanding share: with at least one bio queued and not completed (Q..C).
- Every result says the trace's clock and the events the kernel lost (None when the format does not say).

What only a phone's trace has (Perfetto):
- UFS command latency: from a ufshcd_command send to the next completion of the same tag on the same host
  controller (the device's own time, beside the block layer's D2C); per tag and per SCSI opcode. A send that
  meets another send of its tag, or a completion without a send, counts as unpaired.
- Sync calls: ext4_sync_file_enter/exit and f2fs_sync_file_enter/exit of one thread, the exit of the same inode
  right after the enter (fsync and fdatasync of the file: the application's wait for durability).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from smartio.trace import events as ev
from smartio.trace.events import Trace
from smartio.trace.native import (
    SYNC_FS,
    UFS_COMPLETE,
    UFS_SEND,
    KindFigures,
    Locality,
    Requests,
    between_flushes,
    by_pid,
    kind_figures,
    locality,
    match,
)

SIZE_LIMITS_KIB = (4, 16, 64)
PERCENTILES = (50, 90, 99)


READ, WRITE, FLUSH, DISCARD, OTHER = range(5)  # request kinds, decided in C (kind_of in _native.c)


def without_final_completions(trace: Trace) -> Trace:
    """The trace as btt measures it: without the final completions of flush sequences (0 bytes, no flush flag),
    so that a preflush or FUA write ends at its data completion. For cross-checks with btt."""
    e = trace.events
    final = ((e["action"] & 0xFFFF) == ev.COMPLETE) & (e["bytes"] == 0) & \
        ((e["action"] >> ev.TC_SHIFT & ev.TC_FLUSH) == 0)
    return Trace(e[~final], trace.comms, trace.meta, trace.source_format, in_order=True)


def pct(values: np.ndarray, scale: float = 1.0) -> dict:
    """Percentiles (numpy's default linear interpolation), mean, max and 101 quantiles for the CDF."""
    n = len(values)
    if n == 0:
        return {"n": 0}
    v = np.sort(values)

    def at(q: np.ndarray | float) -> np.ndarray:
        pos = np.asarray(q, dtype=float) / 100 * (n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        return (v[lo] + (v[hi] - v[lo]) * (pos - lo)) / scale

    out = {"n": int(n), "mean": float(v.mean()) / scale, "max": float(v[-1]) / scale}
    out.update({f"p{q}": float(at(q)) for q in PERCENTILES})
    # 101 quantiles (0..100 %), enough to draw the CDF without keeping every value.
    out["quantiles"] = at(np.arange(101)).tolist()
    return out


def analyze(trace: Trace, top_n: int = 10, attribution=None) -> dict:
    e = trace.events
    if len(e) == 0:
        return {"events": 0}
    m = match(e)
    t = e["time"]
    t_first, t_last = int(t[0]), int(t[-1])
    start = int(trace.meta.get("start_ns", t_first)) if trace.meta.get("clock") == "mono" else t_first
    end = int(trace.meta.get("end_ns", t_last)) if trace.meta.get("clock") == "mono" else t_last
    wall = max(end - start, 1)

    reqs = m.reqs
    fig = kind_figures(m)
    devs = m.devices if m.devices is not None else np.unique(e["device"]).tolist()

    out: dict = {
        "source": {k: trace.meta[k] for k in ("command", "devices", "kernel", "started", "lost_events")
                   if k in trace.meta},
        "format": trace.source_format,
        "clock": trace.meta.get("clock"),
        "lost_events": trace.meta.get("lost_events", 0 if trace.source_format in LOSS_REPORTED else None),
        "events": int(len(e)),
        "event_counts": {ev.ACTION_LETTER.get(c, str(c)): int(n) for c, n in enumerate(m.counts) if n},
        "wall_s": wall / 1e9,
        "devices": [ev.dev_name(int(d)) for d in devs],
        "unmatched": {"bios_without_completion": fig.no_completion, "completions_without_issue": fig.no_issue},
    }
    blocks = locality(reqs, top_n)
    for kind_name, kind in (("read", READ), ("write", WRITE)):
        out[kind_name] = {
            "requests": fig.requests[kind],
            "bytes": fig.bytes[kind],
            "size": size_stats(fig.sizes[kind]),
            "d2c_ms": pct(fig.d2c[kind], 1e6),
            "q2c_ms": pct(fig.q2c[kind], 1e6),
            "bios": fig.bios[kind],
            "sync": fig.sync[kind],
            "async": fig.requests[kind] - fig.sync[kind],
            "meta": fig.meta[kind],
            "locality": locality_summary(blocks[kind_name]),
        }
    nr, nw = fig.requests[READ], fig.requests[WRITE]
    out["rw_ratio"] = {"reads_per_write": nr / nw if nw else None, "text": ratio_text(nr, nw)}
    out["all"] = {"locality": locality_summary(blocks["all"])}
    out["discard"] = {"requests": fig.requests[DISCARD], "bytes": fig.bytes[DISCARD]}
    out["flush"] = flush_stats(reqs, fig, wall)
    out["time_share"] = {"busy": m.busy_ns / wall, "outstanding": m.outstanding_ns / wall,
                         "outstanding_by_class": {k: v / wall for k, v in m.class_ns.items()}}
    out["processes"] = process_table(reqs, trace.comms, top_n)
    if trace.ufs is not None and len(trace.ufs):
        out["ufs"] = ufs_stats(trace.ufs, trace.meta.get("ufs_hosts", []))
    if trace.sync_calls is not None and len(trace.sync_calls):
        out["sync_calls"] = sync_stats(trace.sync_calls, trace.comms, top_n)
    if attribution is not None:
        out["files"] = attribution.summarise(reqs, trace, top_n)
    return out


# Formats that say when the kernel lost events (a count, 0 when none): ours, tracefs text (LOST lines).
LOSS_REPORTED = ("smartio", "tracefs")
# SCSI opcodes a UFS device sees (the ufshcd_command opcode field).
SCSI_OPCODES = {0x00: "TEST_UNIT_READY", 0x03: "REQUEST_SENSE", 0x12: "INQUIRY", 0x1B: "START_STOP_UNIT",
                0x25: "READ_CAPACITY_10", 0x28: "READ_10", 0x2A: "WRITE_10", 0x35: "SYNCHRONIZE_CACHE_10",
                0x42: "UNMAP", 0x88: "READ_16", 0x8A: "WRITE_16", 0x91: "SYNCHRONIZE_CACHE_16",
                0x9E: "READ_CAPACITY_16", 0xA0: "REPORT_LUNS", 0xB6: "SECURITY_PROTOCOL_OUT"}


def brief(values: np.ndarray, scale: float) -> dict:
    """pct() without the 101 quantiles (for tables with many rows)."""
    out = pct(values, scale)
    out.pop("quantiles", None)
    return out


def ufs_stats(u: np.ndarray, hosts: list[str]) -> dict:
    order = np.lexsort((np.arange(len(u)), u["time"], u["tag"], u["dev"]))   # per host and tag, in time order
    s = u[order]
    same = (s["dev"][1:] == s["dev"][:-1]) & (s["tag"][1:] == s["tag"][:-1])
    i = np.flatnonzero(same & (s["kind"][:-1] == UFS_SEND) & (s["kind"][1:] == UFS_COMPLETE))
    lat = s["time"][i + 1].astype(np.int64) - s["time"][i].astype(np.int64)
    tags, ops = s["tag"][i], s["opcode"][i]
    sends, completions = int((s["kind"] == UFS_SEND).sum()), int((s["kind"] == UFS_COMPLETE).sum())
    by_op = {}
    for op in np.unique(ops).tolist():
        sel = ops == op
        by_op[SCSI_OPCODES.get(op, f"{op:#04x}")] = {**brief(lat[sel], 1e6),
                                                     "bytes": int(s["transfer_len"][i][sel].clip(0).sum())}
    return {"hosts": hosts, "commands": int(len(i)), "unpaired_sends": sends - len(i),
            "unpaired_completions": completions - len(i), "tags": int(len(np.unique(tags))),
            "latency_ms": pct(lat, 1e6),
            "by_tag": {str(t): brief(lat[tags == t], 1e6) for t in np.unique(tags).tolist()},
            "by_opcode": by_op}


def sync_stats(c: np.ndarray, comms: dict[int, str], top_n: int) -> dict:
    order = np.lexsort((np.arange(len(c)), c["time"], c["fs"], c["pid"]))   # per thread and filesystem, in order
    s = c[order]
    same = (s["pid"][1:] == s["pid"][:-1]) & (s["fs"][1:] == s["fs"][:-1]) & (s["ino"][1:] == s["ino"][:-1])
    i = np.flatnonzero(same & (s["phase"][:-1] == 0) & (s["phase"][1:] == 1))
    lat = s["time"][i + 1].astype(np.int64) - s["time"][i].astype(np.int64)
    out: dict = {}
    for code, fs in enumerate(SYNC_FS):
        mine = s["fs"] == code
        if not mine.any():
            continue
        sel = s["fs"][i] == code
        enter, leave = s[i[sel]], s[i[sel] + 1]
        # ext4 says fdatasync at the enter, f2fs at the exit.
        datasync = (enter["datasync"] if fs == "ext4" else leave["datasync"]).astype(bool)
        pids, counts = np.unique(enter["pid"], return_counts=True)
        top = sorted(zip(counts.tolist(), pids.tolist(), strict=True), key=lambda x: (-x[0], x[1]))[:top_n]
        out[fs] = {"calls": int(sel.sum()), "fdatasync": int(datasync.sum()), "errors": int((leave["ret"] != 0).sum()),
                   "unpaired": int(mine.sum()) - 2 * int(sel.sum()), "latency_ms": pct(lat[sel], 1e6),
                   "processes": [{"pid": p, "comm": comms.get(p, "?"), "calls": n} for n, p in top]}
        if fs == "f2fs":
            out[fs]["checkpoints"] = int(leave["need_cp"].astype(bool).sum())
    return out


def size_stats(sizes: np.ndarray) -> dict[str, Any]:
    n = len(sizes)
    if n == 0:
        return {"n": 0}
    v = np.sort(sizes)
    last = np.r_[np.flatnonzero(v[1:] != v[:-1]), n - 1]  # the last of each run of equal sizes
    out: dict[str, Any] = {f"share_le_{k}k": int(np.searchsorted(v, k * 1024, side="right")) / n
                           for k in SIZE_LIMITS_KIB}
    out["mean_kib"] = float(sizes.mean()) / 1024
    out["p50_kib"] = median(v) / 1024
    out["cdf"] = [[float(s) / 1024, float(c)] for s, c in zip(v[last].tolist(), ((last + 1) / n).tolist(), strict=True)]
    return out


def median(v: np.ndarray) -> float:
    """np.percentile(v, 50) of sorted integers, with numpy's arithmetic (so the float is the same)."""
    pos = 0.5 * (len(v) - 1)
    lo = int(pos)
    a, b = int(v[lo]), int(v[min(lo + 1, len(v) - 1)])
    t = pos - lo
    # numpy's _lerp: from the upper end when t >= 0.5, so that t = 1 gives b exactly.
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def locality_summary(loc: Locality) -> dict:
    if loc.blocks == 0:
        return {"blocks": 0}
    hist_k, hist_n = loc.histogram[:, 0], loc.histogram[:, 1]
    # The 300 highest counts, for the plot, straight from the histogram.
    top_counts = np.repeat(hist_k[::-1], np.minimum(hist_n[::-1], 300))[:300]
    return {
        "blocks": loc.blocks,
        "accesses": loc.accesses,
        "share_accessed_once": loc.once / loc.blocks,
        "mean_accesses": loc.accesses / loc.blocks,
        "max_accesses": loc.max,
        "top": [[b, c] for c, b in loc.top.tolist()],
        "accesses_histogram": loc.histogram.tolist(),
        "sorted_counts": top_counts.tolist(),
    }


def flush_stats(reqs: Requests, fig: KindFigures, wall: int) -> dict:
    nflush = fig.requests[FLUSH]
    out: dict = {"requests": nflush, "per_s": nflush / (wall / 1e9), "d2c_ms": pct(fig.d2c[FLUSH], 1e6)}
    if nflush < 2:
        return out
    # Requests completed after flush k and up to flush k+1.
    between_n, between_bytes, gaps = between_flushes(reqs)
    kib, seconds = between_bytes / 1024, gaps / 1e9
    out["between"] = {
        "intervals": int(len(gaps)),
        "requests": pct(between_n.astype(float)),
        "kib": pct(kib),
        "seconds": pct(seconds),
    }
    out["between_series"] = {"requests": between_n.tolist(), "kib": kib.tolist(), "seconds": seconds.tolist()}
    return out


def process_table(reqs: Requests, comms: dict[int, str], top_n: int) -> list[dict]:
    p = by_pid(reqs)
    rows = [{"pid": pid, "comm": comms.get(pid, "?"), "reads": r, "writes": w, "kib": b / 1024}
            for pid, r, w, b in zip(p["pid"].tolist(), p["reads"].tolist(), p["writes"].tolist(), p["bytes"].tolist(),
                                    strict=True)]
    rows.sort(key=lambda r: -(r["reads"] + r["writes"]))
    return rows[:top_n]


def ratio_text(reads: int, writes: int) -> str:
    if reads == 0 or writes == 0:
        return f"{reads}/{writes}"
    return f"{reads / writes:.2f}/1" if reads >= writes else f"1/{writes / reads:.2f}"


def format_text(mx: dict) -> str:
    if not mx.get("events"):
        return "no events"
    lost = mx.get("lost_events")
    lines = [f"{mx['events']} events ({mx['format']}), {mx['wall_s']:.3f} s, devices {', '.join(mx['devices'])}",
             f"clock {mx.get('clock') or 'not recorded'}; lost events "
             f"{'not recorded in this format' if lost is None else lost}",
             f"R/W ratio {mx['rw_ratio']['text']}"]
    lines.append(f"{'':22}{'read':>14}{'write':>14}")

    def row(label: str, get) -> None:
        vals = []
        for k in ("read", "write"):
            try:
                v = get(mx[k])
            except (KeyError, TypeError):
                v = None
            vals.append("-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v)))
        lines.append(f"{label:22}{vals[0]:>14}{vals[1]:>14}")

    row("requests", lambda d: d["requests"])
    row("KiB", lambda d: d["bytes"] // 1024)
    for k in SIZE_LIMITS_KIB:
        row(f"share <= {k} KiB", lambda d, k=k: d["size"][f"share_le_{k}k"])
    for lat in ("q2c_ms", "d2c_ms"):
        for q in PERCENTILES:
            row(f"{lat[:3].upper()} p{q} ms", lambda d, lat=lat, q=q: d[lat].get(f"p{q}"))
    row("sync / async", lambda d: f"{d['sync']}/{d['async']}")
    row("blocks touched", lambda d: d["locality"]["blocks"])
    row("share accessed once", lambda d: d["locality"].get("share_accessed_once"))
    row("max accesses/block", lambda d: d["locality"].get("max_accesses"))
    fl = mx["flush"]
    lines.append(f"flushes {fl['requests']} ({fl['per_s']:.2f}/s)")
    if "between" in fl:
        b = fl["between"]
        lines.append(f"  between flushes p50/p90: {b['requests']['p50']:.0f}/{b['requests']['p90']:.0f} requests, "
                     f"{b['kib']['p50']:.0f}/{b['kib']['p90']:.0f} KiB, "
                     f"{b['seconds']['p50']:.3f}/{b['seconds']['p90']:.3f} s")
    ts = mx["time_share"]
    lines.append(f"wall time with I/O outstanding {ts['outstanding']:.1%}, device busy {ts['busy']:.1%}")
    lines.append("  by class: " + ", ".join(f"{k} {v:.1%}" for k, v in ts["outstanding_by_class"].items()))
    un = mx["unmatched"]
    if un["bios_without_completion"] or un["completions_without_issue"]:
        lines.append(f"unmatched: {un['bios_without_completion']} bios without completion, "
                     f"{un['completions_without_issue']} completions without issue (trace edges or lost events)")
    if "ufs" in mx:
        u, d2c = mx["ufs"], {k: mx[k]["d2c_ms"] for k in ("read", "write")}
        lat = u["latency_ms"]
        lines.append(f"UFS commands {u['commands']} on {u['tags']} tags ({u['unpaired_sends']} sends and "
                     f"{u['unpaired_completions']} completions unpaired)")
        if lat.get("n"):
            lines.append(f"  command latency p50/p90/p99 ms {lat['p50']:.3f}/{lat['p90']:.3f}/{lat['p99']:.3f}; block "
                         "D2C read " + "/".join(f"{d2c['read'].get(f'p{q}', 0):.3f}" for q in PERCENTILES) +
                         ", write " + "/".join(f"{d2c['write'].get(f'p{q}', 0):.3f}" for q in PERCENTILES))
        for name, d in u["by_opcode"].items():
            lines.append(f"  {name:22} {d['n']:>8} commands, p50 {d['p50']:.3f} ms, p99 {d['p99']:.3f} ms")
        worst = sorted(u["by_tag"].items(), key=lambda kv: -kv[1]["p99"])[:3]
        lines.append("  slowest tags (p99 ms): " + ", ".join(f"{t} {d['p99']:.3f}" for t, d in worst))
    for fs, d in mx.get("sync_calls", {}).items():
        lat = d["latency_ms"]
        timing = f", p50/p99 {lat['p50']:.3f}/{lat['p99']:.3f} ms" if lat.get("n") else ""
        extra = f", {d['checkpoints']} with a checkpoint" if "checkpoints" in d else ""
        lines.append(f"{fs} sync calls {d['calls']} ({d['fdatasync']} fdatasync{extra}, {d['errors']} failed)"
                     f"{timing}")
    if "files" in mx:
        lines.append("by file type (requests read/write):")
        for t, d in mx["files"]["types"].items():
            lines.append(f"  {t:12} {d['reads']:>8} {d['writes']:>8}")
        lines.append("by block type (requests read/write):")
        for t, d in mx["files"]["block_types"].items():
            lines.append(f"  {t:12} {d['reads']:>8} {d['writes']:>8}")
    return "\n".join(lines)

"""Characterises a block trace the way seed 004 (Courville and Chen) does, per read and per write.

Definitions (they matter when comparing with other tools):
- A request is a completed request (C) that moved data; its size is the C's byte count. Flushes
  (requests with the flush category and no data) and discards are counted apart, not as reads/writes.
- Q2C is per bio (queue to completion of the request that carried it), D2C per request (issue to
  completion); btt reports both per bio, so its D2C weighs a request once per bio it merged.
- Sync: the kernel's op_is_sync(): every read, and writes with the sync, FUA or preflush flag.
- Size shares are "at most" 4/16/64 KiB (a 4 KiB request counts as small).
- Locality counts accesses per 4 KiB block (a request touches every block it overlaps).
- Between successive flushes: the requests and bytes completed, and the time, between two flush completions.
- Busy share: the share of wall time with at least one request issued and not completed (D..C, like
  iostat's %util); outstanding share: with at least one bio queued and not completed (Q..C).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smartio.trace import events as ev
from smartio.trace.events import Trace
from smartio.trace.match import match

BLOCK_SECTORS = 8  # 4 KiB blocks
SIZE_LIMITS_KIB = (4, 16, 64)
PERCENTILES = (50, 90, 99)


@dataclass
class Requests:
    """The completed requests of a trace, one entry per C event."""

    time: np.ndarray    # completion time, ns
    issue: np.ndarray   # issue time, ns (-1 if the D was not seen)
    sector: np.ndarray
    nbytes: np.ndarray
    tc: np.ndarray      # categories
    pid: np.ndarray     # pid that queued it (or issued it)
    kind: np.ndarray    # READ, WRITE, FLUSH, DISCARD or OTHER
    nbios: np.ndarray   # bios it carried (0: made by the kernel, e.g. a flush, or queued before the trace)


READ, WRITE, FLUSH, DISCARD, OTHER = range(5)
KIND_NAMES = ("read", "write", "flush", "discard", "other")


def classify(tc: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    # One table lookup on the bits that decide the kind: write, flush, discard, and "has data".
    tc = tc.astype(np.uint32)
    key = (tc >> 1 & 1) | (tc >> 1 & 2) | (tc >> 11 & 4) | (nbytes > 0).view(np.uint8).astype(np.uint32) << 3
    return _KIND_TABLE[key]


def _kind_table() -> np.ndarray:
    table = np.full(16, OTHER, dtype=np.uint8)
    for k in range(16):
        write, flush, discard, data = k & 1, k & 2, k & 4, k & 8
        if discard:
            table[k] = DISCARD
        elif data:
            table[k] = WRITE if write else READ
        elif flush:
            table[k] = FLUSH
    return table


_KIND_TABLE = _kind_table()


def is_sync(tc: np.ndarray, kind: np.ndarray) -> np.ndarray:
    return (kind == READ) | (tc & (ev.TC_SYNC | ev.TC_FUA | ev.TC_FLUSH) != 0)


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


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals [start, end)."""
    if len(start) == 0:
        return 0
    if np.all(start[1:] >= start[:-1]):  # bios come in queue order: no sort needed
        s, e = start, end
    else:
        order = np.argsort(start, kind="stable")
        s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # A new stretch starts where an interval begins after everything before it has ended.
    new = np.r_[True, s[1:] > reach[:-1]]
    starts = s[new]
    ends = reach[np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]]
    return int((ends - starts).sum())


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

    r = m.reqs
    reqs = Requests(time=r["time"].astype(np.int64), issue=r["issue"], sector=r["sector"],
                    nbytes=r["bytes"].astype(np.int64), tc=r["tc"], pid=r["pid"],
                    kind=classify(r["tc"], r["bytes"]), nbios=r["nbios"])
    issued = reqs.issue >= 0
    d2c = np.where(issued, reqs.time - reqs.issue, -1)
    q2c = m.bios["q2c"]
    q_kind = classify(m.bios["tc"], m.bios["bytes"])

    out: dict = {
        "source": {k: trace.meta[k] for k in ("command", "devices", "kernel", "started", "lost_events")
                   if k in trace.meta},
        "format": trace.source_format,
        "events": int(len(e)),
        "event_counts": {ev.ACTION_LETTER.get(c, str(c)): int(n) for c, n in enumerate(m.counts) if n},
        "wall_s": wall / 1e9,
        "devices": [ev.dev_name(int(d)) for d in devices(e)],
        "unmatched": {"bios_without_completion": int((q2c < 0).sum()),
                      "completions_without_issue": int((~issued & (reqs.kind != OTHER)).sum())},
    }
    per_kind = {}
    for kind_name, kind in (("read", READ), ("write", WRITE)):
        sel = reqs.kind == kind
        sizes = reqs.nbytes[sel]
        sync = is_sync(reqs.tc[sel], reqs.kind[sel])
        qsel = q_kind == kind
        per_kind[kind_name] = {
            "requests": int(sel.sum()),
            "bytes": int(sizes.sum()),
            "size": size_stats(sizes),
            "d2c_ms": pct(d2c[sel][d2c[sel] >= 0], 1e6),
            "q2c_ms": pct(q2c[qsel][q2c[qsel] >= 0], 1e6),
            "bios": int(qsel.sum()),
            "sync": int(sync.sum()),
            "async": int((~sync).sum()),
            "meta": int((reqs.tc[sel] & ev.TC_META != 0).sum()),
            "locality": locality(reqs.sector[sel], sizes, top_n),
        }
    out.update(per_kind)
    nr, nw = per_kind["read"]["requests"], per_kind["write"]["requests"]
    out["rw_ratio"] = {"reads_per_write": nr / nw if nw else None, "text": ratio_text(nr, nw)}
    out["all"] = {"locality": merge_locality(per_kind["read"]["locality"], per_kind["write"]["locality"], top_n)}
    out["discard"] = {"requests": int((reqs.kind == DISCARD).sum()),
                      "bytes": int(reqs.nbytes[reqs.kind == DISCARD].sum())}
    out["flush"] = flush_stats(reqs, d2c, wall)
    out["time_share"] = time_shares(reqs, m.bios, q_kind, wall)
    out["processes"] = process_table(reqs, trace.comms, top_n)
    if attribution is not None:
        out["files"] = attribution.summarise(reqs, trace, top_n)
    for d in (out["read"]["locality"], out["write"]["locality"], out["all"]["locality"]):
        d.pop("_blocks", None)
    return out


def devices(e: np.ndarray) -> np.ndarray:
    d = e["device"]
    return d[:1] if (d == d[0]).all() else np.unique(d)  # the usual single device without a sort


def size_stats(sizes: np.ndarray) -> dict:
    n = len(sizes)
    if n == 0:
        return {"n": 0}
    values, counts = np.unique(sizes, return_counts=True)
    out = {f"share_le_{k}k": float((sizes <= k * 1024).sum()) / n for k in SIZE_LIMITS_KIB}
    out["mean_kib"] = float(sizes.mean()) / 1024
    out["p50_kib"] = float(np.percentile(sizes, 50)) / 1024
    out["cdf"] = [[float(v) / 1024, float(c)] for v, c in zip(values, np.cumsum(counts) / n)]
    return out


def locality(sector: np.ndarray, nbytes: np.ndarray, top_n: int) -> dict:
    if len(sector) == 0:
        return {"blocks": 0}
    first = (sector // BLOCK_SECTORS).astype(np.int64)
    last = ((sector + np.maximum(nbytes // 512, 1) - 1) // BLOCK_SECTORS).astype(np.int64)
    span = last - first + 1
    # Expand each request into the blocks it touches: first, first+1, ..., last.
    starts = np.repeat(first - np.cumsum(np.r_[0, span[:-1]]), span)
    blocks = starts + np.arange(int(span.sum()))
    uniq, counts = np.unique(blocks, return_counts=True)
    return _locality_summary(uniq, counts, top_n)


def _locality_summary(uniq: np.ndarray, counts: np.ndarray, top_n: int) -> dict:
    order = np.argsort(-counts, kind="stable")[:top_n]
    hist_k, hist_n = np.unique(counts, return_counts=True)
    return {
        "blocks": int(len(uniq)),
        "accesses": int(counts.sum()),
        "share_accessed_once": float((counts == 1).sum()) / len(uniq),
        "mean_accesses": float(counts.mean()),
        "max_accesses": int(counts.max()),
        "top": [[int(uniq[i]), int(counts[i])] for i in order],
        "accesses_histogram": [[int(k), int(n)] for k, n in zip(hist_k, hist_n)],
        "sorted_counts": np.sort(counts)[::-1][:300].tolist(),
        "_blocks": (uniq, counts),  # for merging reads and writes; dropped from the output
    }


def merge_locality(a: dict, b: dict, top_n: int) -> dict:
    parts = [d["_blocks"] for d in (a, b) if "_blocks" in d]
    if not parts:
        return {"blocks": 0}
    uniq, inv = np.unique(np.concatenate([u for u, _ in parts]), return_inverse=True)
    counts = np.bincount(inv, weights=np.concatenate([c for _, c in parts])).astype(np.int64)
    return _locality_summary(uniq, counts, top_n)


def flush_stats(reqs: Requests, d2c: np.ndarray, wall: int) -> dict:
    is_flush = reqs.kind == FLUSH
    ft = reqs.time[is_flush]
    out: dict = {"requests": int(is_flush.sum()), "per_s": float(is_flush.sum()) / (wall / 1e9),
                 "d2c_ms": pct(d2c[is_flush][d2c[is_flush] >= 0], 1e6)}
    if len(ft) < 2:
        return out
    data = (reqs.kind <= WRITE)
    dt, dbytes = reqs.time[data], reqs.nbytes[data]
    # Requests completed after flush k and up to flush k+1.
    pos = np.searchsorted(dt, ft, side="right")
    csum = np.r_[0, np.cumsum(dbytes)]
    between_n = np.diff(pos)
    between_bytes = np.diff(csum[pos])
    gaps = np.diff(ft)
    out["between"] = {
        "intervals": int(len(gaps)),
        "requests": pct(between_n.astype(float)),
        "kib": pct(between_bytes / 1024),
        "seconds": pct(gaps / 1e9),
    }
    out["between_series"] = {"requests": between_n.tolist(), "kib": (between_bytes / 1024).tolist(),
                             "seconds": (gaps / 1e9).tolist()}
    return out


def time_shares(reqs: Requests, bios: np.ndarray, q_kind: np.ndarray, wall: int) -> dict:
    issued = reqs.issue >= 0
    out = {"busy": union_ns(reqs.issue[issued], reqs.time[issued]) / wall}
    q2c = bios["q2c"]
    done = q2c >= 0
    qt = bios["time"].astype(np.int64)
    qend = qt + np.where(done, q2c, 0)
    # A request's bios cover it from queue to completion; requests without bios (flushes the kernel
    # makes, or a trace without Q events) count from issue.
    bare = issued & (reqs.nbios == 0)
    out["outstanding"] = union_ns(np.r_[qt[done], reqs.issue[bare]], np.r_[qend[done], reqs.time[bare]]) / wall
    # By class, as in seed 004's "impact of storage I/O latency" (which classes keep I/O waiting).
    qtc = bios["tc"]
    sync = is_sync(qtc, q_kind)
    meta = qtc & ev.TC_META != 0
    classes = {
        "read": (q_kind == READ) & ~meta,
        "meta_read": (q_kind == READ) & meta,
        "sync_write": (q_kind == WRITE) & sync,
        "async_write": (q_kind == WRITE) & ~sync,
        "flush": q_kind == FLUSH,
    }
    out["outstanding_by_class"] = {k: union_ns(qt[s & done], qend[s & done]) / wall for k, s in classes.items()}
    return out


def process_table(reqs: Requests, comms: dict[int, str], top_n: int) -> list[dict]:
    data = (reqs.kind <= WRITE)
    pids, inv = np.unique(reqs.pid[data], return_inverse=True)
    w = reqs.kind[data] == WRITE
    nbytes = reqs.nbytes[data]
    rows = []
    for i, pid in enumerate(pids):
        sel = inv == i
        rows.append({"pid": int(pid), "comm": comms.get(int(pid), "?"), "reads": int((sel & ~w).sum()),
                     "writes": int((sel & w).sum()), "kib": float(nbytes[sel].sum()) / 1024})
    rows.sort(key=lambda r: -(r["reads"] + r["writes"]))
    return rows[:top_n]


def ratio_text(reads: int, writes: int) -> str:
    if reads == 0 or writes == 0:
        return f"{reads}/{writes}"
    return f"{reads / writes:.2f}/1" if reads >= writes else f"1/{writes / reads:.2f}"


def format_text(mx: dict) -> str:
    if not mx.get("events"):
        return "no events"
    lines = [f"{mx['events']} events ({mx['format']}), {mx['wall_s']:.3f} s, devices {', '.join(mx['devices'])}",
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
    if "files" in mx:
        lines.append("by file type (requests read/write):")
        for t, d in mx["files"]["types"].items():
            lines.append(f"  {t:12} {d['reads']:>8} {d['writes']:>8}")
        lines.append("by block type (requests read/write):")
        for t, d in mx["files"]["block_types"].items():
            lines.append(f"  {t:12} {d['reads']:>8} {d['writes']:>8}")
    return "\n".join(lines)

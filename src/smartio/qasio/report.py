"""Tables for `smartio bench qasio` and `smartio compare qasio` (seed 001's Table 2 and Figure 8)."""

from __future__ import annotations

import math
from typing import Any

from smartio.compare.spec import clock_text
from smartio.flashdev.profiles import device_line
from smartio.iosched.debugfs import QASIO_LOG_EVENTS
from smartio.qasio.workload import BENCHMARKS, DEPENDENCIES, KEY_CALLS
from smartio.report.tables import grid as table
from smartio.testbed.boot import text_of

# Seed 001, Table 2: (avg, max) per benchmark and call; ms for M1-M4, seconds for M5.
PAPER_TABLE2 = {
    "none": {("m1", "creat"): (119.57, 1435.54), ("m1", "fsync"): (98.24, 1119.62),
             ("m2", "creat"): (109.01, 1397.64), ("m2", "fsync"): (172.05, 1417.82),
             ("m3", "write"): (0.19, 1813.54), ("m4", "truncate"): (62.60, 1632.15),
             ("m5", "fsync"): (13.27e3, 13.87e3)},
    "all": {("m1", "creat"): (1.02, 39.15), ("m1", "fsync"): (35.64, 144.69),
            ("m2", "creat"): (3.90, 22.52), ("m2", "fsync"): (69.24, 298.83),
            ("m3", "write"): (0.10, 177.40), ("m4", "truncate"): (12.85, 334.57),
            ("m5", "fsync"): (6.85e3, 7.11e3)},
}
# Figure 8 (total elapsed time normalised to NONE) is a bar chart; its text gives these points only.
PAPER_FIG8 = {
    "m1": "ALL 0.17 (-83.1 %); most from D_meta and D_discard",
    "m2": "like M1; D_data+D_sync as effective as D_meta or D_discard",
    "m3": "most from D_data (write() avg -47.4 %, max -90.2 %)",
    "m4": "most from D_sync (truncate)",
    "m5": "D_discard: fsync 13.27 s -> 6.85 s (0.52)",
}
PAPER_BG = (46.2, 39.1)    # MB/s of the background writer beside M1, NONE and ALL (section 6.2)


def _f(x: Any, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def _ci(stat: dict[str, Any] | None, nd: int = 2) -> str:
    if not stat:
        return "-"
    lo, hi = stat.get("ci95") or [None, None]
    if stat.get("n", 1) > 1 and lo is not None:
        return f"{_f(stat['mean'], nd)} [{_f(lo, nd)}, {_f(hi, nd)}]"
    return _f(stat["mean"], nd)


def render_bench(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    z = s["sizes"]
    wb = s["writeback"]
    lines = [f"QASIO microbenchmarks (seed 001, section 6.1) beside a background buffered writer; "
             f"{s['repeats']} repeat(s)",
             f"  target {doc['target']['description']}; scheduler {doc['scheduler']}"
             + (f", --dependency {s['dependency']}" if s["dependency"] else "")
             + f"; kernel {doc['kernel']}; {doc['fio_version']}",
             f"  scale {s['scale']:g} (sizes), count scale {s['count_scale']:g} (iterations): M1 {z['m1_iterations']}"
             f" x 4 KiB, M2 {z['m2_iterations']} x {z['m2_file'] >> 10} KiB, M3 {z['m3_total'] >> 10} KiB in 1 KiB "
             f"writes, M4 {z['m4_iterations']} x {z['m4_file'] >> 10} KiB, M5 beside {z['m5_big'] >> 20} MiB "
             f"truncated and rewritten; writer file {z['background'] >> 20} MiB",
             f"  vm.dirty_expire_centisecs={wb['dirty_expire_centisecs']} dirty_writeback_centisecs="
             f"{wb['dirty_writeback_centisecs']} dirty_background_bytes={wb['dirty_background_bytes']} "
             f"dirty_bytes={wb['dirty_bytes']}; wbt_lat_usec=0 (restored afterwards)", ""]
    rows = []
    for b, r in doc["results"]["benchmarks"].items():
        for call, c in sorted(r["calls"].items()):
            rows.append([b.upper(), call, str(c["n"]), _f(c["avg_ms"], 3), _f(c["p99_ms"], 3), _f(c["max_ms"], 3)])
    lines.append(table(["bench", "call", "n", "avg ms", "p99 ms", "max ms"], rows))
    lines.append("")
    rows = []
    for b, r in doc["results"]["benchmarks"].items():
        boosted = r.get("boosted")
        rows.append([b.upper(), _ci(r["total_s"]), _ci(r["background_mb_per_s"], 3),
                     _ci(r["device_write_mb_per_s"], 3),
                     " ".join(f"{k}={v}" for k, v in boosted.items()) if boosted is not None else "n/a"])
    lines.append(table(["bench", "total s", "writer MB/s", "device write MB/s", "boosted"], rows))
    lines.append("")
    lines.append("  total = the benchmark's calls from first to last; writer = fio's buffered background writer "
                 "(bytes written / its runtime); boosted = the smartio module's QASIO counters (debugfs), per "
                 "dependency type")
    why = [f"  {b.upper()} {call} {x['ms']:.1f} ms: {wait_text(x)}"
           for b, r in doc["results"]["benchmarks"].items() for call, x in sorted((r.get("slowest") or {}).items())
           if call != "close"]
    if why:
        lines += ["", "  the slowest call of each type, and what the module's QASIO log shows while it waited:", *why]
    lines += [f"  note: {n}" for n in doc.get("notes", [])]
    return "\n".join(lines)


def wait_text(x: dict[str, Any]) -> str:
    """One slowest call's QASIO log, in words."""
    if not x.get("log_covers"):
        return "the log (its last 1024 events) no longer covers it"
    ev = x["events"]
    waits = {k: ev.get(k, 0) for k in "QDRPX" if ev.get(k)}
    if not waits:
        return "no wait on a write the probes saw (a journal commit's sync writes, a tag, the CPU)"
    text = ", ".join(f"{n} {QASIO_LOG_EVENTS[k]}" for k, n in waits.items())
    # A write found queued is boosted unless it already was or it is the waiter's own sync write: the d lines count.
    boosted = ev.get("d", 0)
    text += f"; {boosted} write{'' if boosted == 1 else 's'} boosted"
    if x.get("last_boosted_done_ms") is not None:
        text += f", the last completed {x['last_boosted_done_ms']:.1f} ms into the call"
    return text


# --- compare ---------------------------------------------------------------------------------------------------

def _call(doc: dict[str, Any] | None, bench: str, call: str) -> dict[str, Any] | None:
    if not doc:
        return None
    b = doc["results"]["benchmarks"].get(bench)
    c = b["calls"].get(call) if b else None
    if c is None:
        return None
    return c if bench != "m5" else {**c, "avg_ms": c["avg_ms"] / 1e3, "max_ms": c["max_ms"] / 1e3}


def _total(doc: dict[str, Any] | None, bench: str) -> float | None:
    b = doc["results"]["benchmarks"].get(bench) if doc else None
    return b["total_s"]["mean"] if b else None


def _pct(new: float | None, old: float | None) -> str:
    if new is None or not old:
        return "-"
    return f"{100 * (new - old) / old:+.1f}"



def settings(runs: dict[str, Any]) -> dict[str, dict[str, str]]:
    """smartio's runs by the tunables they carry after the dependency (`smartio:all:async_depth=960` is `all` under
    `async_depth=960`; '' = the module's defaults): {tunables: {dependency: label}}, in the runs' order."""
    out: dict[str, dict[str, str]] = {}
    for label in runs:
        name, *parts = label.split(":")
        if name == "smartio" and parts and parts[0] in DEPENDENCIES:
            out.setdefault(":".join(parts[1:]), {})[parts[0]] = label
    return out


def table2_pair(runs: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """The setting whose NONE and ALL make Table 2 and the summary line: the module's defaults if both ran there,
    else the first setting with both (else the first with either). Returns (tunables, NONE's label, ALL's)."""
    groups = settings(runs)
    both = [k for k, g in groups.items() if "none" in g and "all" in g]
    key = "" if "" in both else (both[0] if both else next(iter(groups), ""))
    g = groups.get(key, {})
    return key, g.get("none"), g.get("all")


def _setting_text(tunables: str) -> str:
    return f"smartio with {tunables.replace(':', ', ')}" if tunables else "smartio (module defaults)"


def _table2(doc: dict[str, Any], tunables: str, group: dict[str, str], benches: list[str]) -> list[str]:
    """Table 2, Figure 8 and the counters for one setting of smartio."""
    runs = doc["runs"]
    none_doc, all_doc = runs.get(group.get("none", "")), runs.get(group.get("all", ""))
    prof = doc["profile"]
    lines = [f"Table 2: latency of key file system operations (ms; M5 in s), {_setting_text(tunables)} with "
             "boosting off (NONE) and on (ALL), beside seed 001's Galaxy S5",
             f"  profile {prof['name']} ({device_line(prof)}); "
             f"kernel {doc.get('kernel')}{f' ({g})' if (g := text_of(doc)) else ''}; "
             f"scale {doc['plan']['scale']:g}, count scale {doc['plan']['count_scale']:g}"
             f", {doc['plan']['repeats']} repeat(s); ext4 ordered, discard; {clock_text(doc['plan'])}", ""]
    rows = []
    for (b, call) in PAPER_TABLE2["none"]:
        if b not in benches:
            continue
        n, a = _call(none_doc, b, call), _call(all_doc, b, call)
        pn, pa = PAPER_TABLE2["none"][(b, call)], PAPER_TABLE2["all"][(b, call)]
        scale = 1e3 if b == "m5" else 1.0
        nmax, amax = (n["max_ms"] if n else None), (a["max_ms"] if a else None)
        rows.append([b.upper(), call, _f(n and n["avg_ms"]), _f(nmax), _f(a and a["avg_ms"]),
                     _f(amax), _pct(amax, nmax),
                     _f(pn[0] / scale), _f(pn[1] / scale), _f(pa[0] / scale), _f(pa[1] / scale),
                     _pct(pa[1], pn[1])])
    lines.append(table(["bench", "call", "NONE avg", "NONE max", "ALL avg", "ALL max", "max %",
                        "paper NONE avg", "paper NONE max", "paper ALL avg", "paper ALL max", "paper max %"], rows))
    rows = []
    for b in benches:
        tn, ta = _total(none_doc, b), _total(all_doc, b)
        rows.append([b.upper(), _f(tn), _f(ta), _pct(ta, tn),
                     _f(none_doc and none_doc["results"]["benchmarks"][b]["background_mb_per_s"]["mean"], 3),
                     _f(all_doc and all_doc["results"]["benchmarks"][b]["background_mb_per_s"]["mean"], 3)])
    lines += ["", table(["bench", "NONE total s", "ALL total s", "total %", "NONE writer MB/s",
                         "ALL writer MB/s"], rows),
              f"  paper: M1 total -83.1 %; writer beside M1 {PAPER_BG[0]} -> {PAPER_BG[1]} MB/s (-15.4 %)"]

    deps = [d for d in DEPENDENCIES if d in group]
    lines += ["", f"Figure 8: total elapsed time per benchmark, normalised to NONE, boosting one dependency type at a "
                  f"time ({_setting_text(tunables)})", ""]
    rows = []
    for b in benches:
        tn = _total(none_doc, b)
        row = [b.upper()]
        for d in deps:
            t = _total(runs[group[d]], b)
            row.append(_f(t / tn if t is not None and tn else None))
        row.append(PAPER_FIG8[b])
        rows.append(row)
    lines.append(table(["bench", *[d.upper() for d in deps], "paper (text of section 6.2)"], rows))
    boost_rows = []
    for d in deps:
        for b in benches:
            c = runs[group[d]]["results"]["benchmarks"][b].get("counters") or {}
            boost_rows.append([group[d], b.upper(),
                               *[f"{c.get(t, {}).get('detected', 0)}/{c.get(t, {}).get('boosted', 0)}"
                                 for t in ("meta", "data", "sync")],
                               str(c.get("discard", {}).get("async_inserted", 0))])
    lines += ["", "  QASIO counters (detected/boosted per dependency type; async discards inserted):", "",
              table(["run", "bench", "meta", "data", "sync", "async discards"], boost_rows),
              "  D_data+D_sync are one switch in the paper; the module has one per type. D_discard: ext4 on 6.1 "
              "issues discards with submit_bio_wait() (REQ_SYNC), so there is nothing to boost.", ""]
    return lines


def render_compare(doc: dict[str, Any]) -> str:
    """Table 2 (NONE vs ALL under smartio, beside the paper) and Figure 8 (each dependency type alone, total time over
    NONE's), once per setting of smartio's tunables that has runs, then every run's key latencies."""
    runs: dict[str, dict[str, Any]] = doc["runs"]
    benches = [b for b in BENCHMARKS if b in doc["plan"]["benchmarks"]]
    lines: list[str] = []
    for tunables, group in settings(runs).items():
        lines += _table2(doc, tunables, group, benches)

    lines += ["Key calls per scheduler: max ms (M5: s) and total s", ""]
    keys = [(b, c) for b in benches for c in KEY_CALLS[b]]
    rows = []
    for label, d in runs.items():
        row = [label]
        for b, c in keys:
            x = _call(d, b, c)
            row.append(_f(x and x["max_ms"]))
        row += [_f(_total(d, b)) for b in benches]
        rows.append(row)
    lines.append(table(["run", *[f"{b.upper()} {c} max" for b, c in keys], *[f"{b.upper()} s" for b in benches]],
                       rows))
    return "\n".join(lines)


def summary_line(doc: dict[str, Any]) -> str:
    """bench/qasio's last line (issue 12): the targets' figures as key=value, NONE and ALL of table2_pair()'s
    setting (its tunables are the line's `setting`, `default` for the module's own)."""
    runs = doc["runs"]
    tunables, none_label, all_label = table2_pair(runs)
    n, a = runs.get(none_label or ""), runs.get(all_label or "")

    def mx(d: dict[str, Any] | None, b: str, c: str) -> float | None:
        x = _call(d, b, c)
        return x["max_ms"] if x else None

    m1n, m1a = mx(n, "m1", "creat"), mx(a, "m1", "creat")
    tn, ta = _total(n, "m1"), _total(a, "m1")
    bgn = n["results"]["benchmarks"]["m1"]["background_mb_per_s"]["mean"] if n and "m1" in n["results"][
        "benchmarks"] else None
    bga = a["results"]["benchmarks"]["m1"]["background_mb_per_s"]["mean"] if a and "m1" in a["results"][
        "benchmarks"] else None
    others = [mx(d, "m1", "creat") for k, d in runs.items() if not k.startswith("smartio")]
    others_v = [x for x in others if x is not None]
    boosted = 0
    if a:
        for b in a["results"]["benchmarks"].values():
            boosted += sum((b.get("boosted") or {}).values())

    def red(new: float | None, old: float | None) -> str:
        return f"{100 * (old - new) / old:.1f}" if new is not None and old else "nan"

    return (f"m1_creat_max_none_ms={_f(m1n)} m1_creat_max_all_ms={_f(m1a)} m1_total_reduction_pct={red(ta, tn)} "
            f"m3_write_max_reduction_pct={red(mx(a, 'm3', 'write'), mx(n, 'm3', 'write'))} "
            f"m4_truncate_max_reduction_pct={red(mx(a, 'm4', 'truncate'), mx(n, 'm4', 'truncate'))} "
            f"bg_throughput_loss_pct={red(bga, bgn)} setting={tunables or 'default'} "
            f"best_other_m1_creat_max_ms={_f(min(others_v)) if others_v else 'nan'} boosted={boosted}")

"""Terminal tables for result documents. Pure functions of the document: tests compare them byte for byte.

The cell and grid helpers here (`grid`, `pm`, `ci_errors`, `runs`, and `mib` from smartio.units) are the ones
every report uses (compare, sqlite).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from smartio.units import mib

PRETTY = {"seq_read": "seq read", "seq_write": "seq write", "rand_read": "rand read", "rand_write": "rand write"}


def runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def ci_errors(stat: dict[str, Any]) -> tuple[float, float] | None:
    """How far a Stat's 95 % CI reaches below and above its mean, for error bars (never negative); None for a
    single run, which has no interval. The interval of a positive quantity is asymmetric (see experiments.stats)."""
    lo, hi = stat["ci95"]
    if lo is None or hi is None:
        return None
    return max(stat["mean"] - lo, 0.0), max(hi - stat["mean"], 0.0)


def pm(stat: dict[str, Any], fmt: str = "{:.3f}") -> str:
    """mean [low, high] of the 95 % CI (just the mean for a single run)."""
    lo, hi = stat["ci95"]
    if lo is None or hi is None:
        return fmt.format(stat["mean"])
    return f"{fmt.format(stat['mean'])} [{fmt.format(lo)}, {fmt.format(hi)}]"


def grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _provenance(doc: dict[str, Any]) -> str:
    dev = doc["device"]
    where = f"{dev['name']} (scheduler {dev['scheduler']})" if dev.get("name") else dev.get("note", "?")
    return f"  target {doc['target']['description']}; device {where}; kernel {doc['kernel']}; {doc['fio_version']}"


def _iowait(doc: dict[str, Any]) -> str:
    return f"  iowait: {pm(doc['results']['iowait_pct'], '{:.1f}')} % of CPU time while it ran"


def latency(doc: dict[str, Any]) -> str:
    r, s = doc["results"], doc["settings"]
    rows = [[PRETTY[p], pm(m["mean_ms"]), pm(m["p50_ms"]), pm(m["p99_ms"])] for p, m in r["patterns"].items()]
    title = (f"Latency alone: {r['bs'] // 1024} KiB requests, {mib(r['size_bytes'])} per pattern, "
             f"{runs(s['repeats'])} (mean [95 % CI])")
    return "\n".join([title, _provenance(doc), "", grid(["pattern", "mean ms", "p50 ms", "p99 ms"], rows), "",
                      _iowait(doc)])


def slowdown(doc: dict[str, Any]) -> str:
    r, s = doc["results"], doc["settings"]
    n = r["streams"]
    header = ["", "read alone ms", f"read+{n}W ms", "ReadSlowdown", "write alone ms", f"write+{n}R ms",
              "WriteSlowdown", "efficiency"]
    rows = []
    for mode, d in r["detail"].items():
        rows.append([mode, pm(d["read_alone_ms"]), pm(d["read_with_writer_ms"]), pm(d["read_slowdown"], "{:.2f}"),
                     pm(d["write_alone_ms"]), pm(d["write_with_reader_ms"]), pm(d["write_slowdown"], "{:.2f}"),
                     pm(d["efficiency"], "{:.2f}")])
    title = (f"Slowdown: {n} reader(s) against {n} writer(s), {r['bs'] // 1024} KiB, {mib(r['size_bytes'])} per "
             f"stream, {runs(s['repeats'])} (mean [95 % CI])")
    note = "  efficiency = 1/ReadSlowdown + 1/WriteSlowdown: share of its solo work the shared device still does"
    return "\n".join([title, _provenance(doc), "", grid(header, rows), "", note, _iowait(doc)])


def concurrency(doc: dict[str, Any]) -> str:
    r, s = doc["results"], doc["settings"]
    levels = [str(n) for n in r["levels"]]
    rows = []
    for p, m in r["detail"].items():
        rows.append([PRETTY[p], *[f"{m[n]['mean']:.2f}" for n in levels],
                     f"{r['parameters'][p]} ({r['max_speedup'][p]:.2f})"])
    title = (f"Concurrency: speedup of N concurrent over N serial streams, {r['bs'] // 1024} KiB, "
             f"{mib(r['size_bytes'])} per stream, {runs(s['repeats'])} (means)")
    return "\n".join([title, _provenance(doc), "", grid(["pattern", *[f"N={n}" for n in levels],
                                                           "parameter (speedup)"], rows), "",
                      parameters(doc), _iowait(doc)])


def parameters(doc: dict[str, Any]) -> str:
    p = doc["results"]["parameters"]
    return "  concurrency parameters: " + " ".join(f"{k}={v}" for k, v in p.items())


def mixed(doc: dict[str, Any]) -> str:
    r, s = doc["results"], doc["settings"]
    mixes = [str(x) for x in r["mixes"]]
    rows = [[mode, *[_fmt_s(d[x]) for x in mixes]] for mode, d in r["detail"].items()]
    title = (f"Mixed workload: total response time in seconds ({mixed_measure(r)}), {mib(r['size_bytes'])}, "
             f"queue depth {r['iodepth']}, {runs(s['repeats'])} (means); columns: % reads")
    return "\n".join([title, _provenance(doc), "", grid(["mode", *[f"{x}%" for x in mixes]], rows), "",
                      _iowait(doc)])


def mixed_measure(results: dict[str, Any]) -> str:
    """What a mixed result's response time is: the workload's time to complete (documents say so), or, in
    documents written between issue 15 and issue 11 (with `elapsed_s`), the sum of its I/Os' latencies."""
    if "response_measure" in results:
        return str(results["response_measure"])
    return "sum over its I/Os" if "elapsed_s" in results else "time to complete, 1 ms resolution"


def _fmt_s(stat: dict[str, Any]) -> str:
    v = stat["mean"]
    return "nan" if v is None or math.isnan(v) else f"{v:.3f}"


RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "latency": latency, "slowdown": slowdown, "concurrency": concurrency, "mixed": mixed}


def render(doc: dict[str, Any]) -> str:
    if doc["experiment"] == "all":
        return "\n\n".join(RENDER[name](d) for name, d in doc["results"].items())
    return RENDER[doc["experiment"]](doc)

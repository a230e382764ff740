"""`mixed`: the scheduler-comparison workload (seed 000, 7.3, Figure 12).

A mixed read/write workload of one size with 10 %, 20 %, ... 100 % reads at queue depth 128 (libaio), sequential and
random. The result (`response_s`) is the paper's response time: how long the whole workload takes to complete, fio's
job runtime (whole milliseconds: 0.1 % of a 1 s workload). Beside it, `io_time_sum_s` sums the I/Os' own latencies
(`lat_ns`: mean x count, reads and writes, nanoseconds). That sum is about the number of I/Os outstanding x the
time to complete, and how many are outstanding depends on the scheduler (`none` admits only the device's queue
depth, the others nr_requests; io_submit blocks the rest before fio counts them): on s5-emmc, none's sum was half
the others' for the same time to complete. So schedulers are compared by the time to complete.
"""

from __future__ import annotations

from smartio.engine import Job, JobSet
from smartio.storebench.context import RunContext
from smartio.storebench.options import Settings
from smartio.storebench.stats import Stat, merge_stats

NAME = "mixed"
MODES = {"seq": "rw", "rand": "randrw"}


def space_needed(s: Settings) -> int:
    return s.size_for(NAME)


def runs(s: Settings) -> int:
    return s.repeats * len(MODES)


def run(ctx: RunContext) -> dict:
    s = ctx.settings
    size = s.size_for(NAME)
    filename, offset = ctx.target.slot("mixed", size)
    samples: dict[str, dict[int, list[float]]] = {m: {x: [] for x in s.mixes} for m in MODES}
    io_sum: dict[str, dict[int, list[float]]] = {m: {x: [] for x in s.mixes} for m in MODES}
    for rep in range(s.repeats):
        for mode, rw in MODES.items():
            groups = tuple((Job(f"{mode}-{x}r", rw, filename, size, offset, s.bs, s.iodepth, rwmixread=x),)
                           for x in s.mixes)
            r = ctx.run(JobSet(groups, ioengine="libaio"),
                        f"mixed {mode} {s.mixes[0]}..{s.mixes[-1]}% reads (run {rep + 1}/{s.repeats})")
            for x in s.mixes:
                job = r.jobs[f"{mode}-{x}r"]
                io_sum[mode][x].append(sum(d.lat_mean_ms * d.ios for d in (job.read, job.write) if d) / 1000.0)
                samples[mode][x].append(job.runtime_ms / 1000.0)
    detail = {m: {str(x): Stat.of(v).to_json() for x, v in d.items()} for m, d in samples.items()}
    io_time = {m: {str(x): sum(v) / len(v) for x, v in d.items()} for m, d in io_sum.items()}
    return _results({"size_bytes": size, "bs": s.bs, "iodepth": s.iodepth, "mixes": list(s.mixes)}, detail, io_time,
                    ctx.iowait())


def _results(head: dict, detail: dict, io_time: dict | None, iowait_pct: dict) -> dict:
    return {**head, "response_measure": "time to complete",
            "response_s": {m: {x: d["mean"] for x, d in v.items()} for m, v in detail.items()},
            **({"io_time_sum_s": io_time} if io_time is not None else {}), "detail": detail, "iowait_pct": iowait_pct}


def merge(results: list[dict]) -> dict:
    """The results of runs of the same settings taken together, as one run of all their repeats would give them
    (`smartio compare` runs each scheduler's repeats in turn with the others'); the I/O time sums are means over
    repeats, weighted by each run's repeats."""
    first = results[0]
    detail = {m: {x: merge_stats([r["detail"][m][x] for r in results]) for x in d} for m, d in first["detail"].items()}
    mode = next(iter(first["detail"]))
    mix = next(iter(first["detail"][mode]))
    weights = [r["detail"][mode][mix]["n"] for r in results]     # each run's repeats
    io_time = None
    if all("io_time_sum_s" in r for r in results):     # documents before it had none
        io_time = {m: {x: sum(w * r["io_time_sum_s"][m][x] for w, r in zip(weights, results, strict=True)) /
                       sum(weights) for x in d} for m, d in first["io_time_sum_s"].items()}
    head = {k: first[k] for k in ("size_bytes", "bs", "iodepth", "mixes")}
    return _results(head, detail, io_time, merge_stats([r["iowait_pct"] for r in results]))

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
from smartio.storebench.stats import Stat

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
    return {"size_bytes": size, "bs": s.bs, "iodepth": s.iodepth, "mixes": list(s.mixes),
            "response_measure": "time to complete",
            "response_s": {m: {x: d["mean"] for x, d in v.items()} for m, v in detail.items()},
            "io_time_sum_s": {m: {str(x): sum(v) / len(v) for x, v in d.items()} for m, d in io_sum.items()},
            "detail": detail, "iowait_pct": ctx.iowait()}

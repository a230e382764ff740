"""`mixed`: the scheduler-comparison workload (seed 000, 7.3, Figure 12).

A mixed read/write workload of one size with 10 %, 20 %, ... 100 % reads at queue depth 128 (libaio), sequential and
random. The result is the total response time: the sum of the response times of the workload's I/Os, from fio's
per-I/O latencies (`lat_ns`: mean × count, reads and writes), in nanoseconds as fio measures them. The paper times
how long the whole workload takes; fio reports that only in whole milliseconds (`runtime`), too coarse for small
workloads, so it is kept beside as `elapsed_s`. With the queue kept full, the sum is about queue depth × elapsed time.
"""

from __future__ import annotations

from smartio.engine import Job, JobSet
from smartio.experiments.context import RunContext
from smartio.experiments.options import Settings
from smartio.experiments.stats import Stat

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
    elapsed: dict[str, dict[int, list[float]]] = {m: {x: [] for x in s.mixes} for m in MODES}
    for rep in range(s.repeats):
        for mode, rw in MODES.items():
            groups = tuple((Job(f"{mode}-{x}r", rw, filename, size, offset, s.bs, s.iodepth, rwmixread=x),)
                           for x in s.mixes)
            r = ctx.run(JobSet(groups, ioengine="libaio"),
                        f"mixed {mode} {s.mixes[0]}..{s.mixes[-1]}% reads (run {rep + 1}/{s.repeats})")
            for x in s.mixes:
                job = r.jobs[f"{mode}-{x}r"]
                samples[mode][x].append(sum(d.lat_mean_ms * d.ios for d in (job.read, job.write) if d) / 1000.0)
                elapsed[mode][x].append(job.runtime_ms / 1000.0)
    detail = {m: {str(x): Stat.of(v).to_json() for x, v in d.items()} for m, d in samples.items()}
    return {"size_bytes": size, "bs": s.bs, "iodepth": s.iodepth, "mixes": list(s.mixes),
            "response_s": {m: {x: d["mean"] for x, d in v.items()} for m, v in detail.items()},
            "elapsed_s": {m: {str(x): sum(v) / len(v) for x, v in d.items()} for m, d in elapsed.items()},
            "detail": detail, "iowait_pct": ctx.iowait()}

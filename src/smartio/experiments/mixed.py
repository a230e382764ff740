"""`mixed`: the scheduler-comparison workload (seed 000, 7.3, Figure 12).

A mixed read/write workload of one size with 10 %, 20 %, ... 100 % reads at queue depth 128 (libaio), sequential and
random; the result is the total response time: how long the whole workload takes to complete.
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
    for rep in range(s.repeats):
        for mode, rw in MODES.items():
            groups = tuple((Job(f"{mode}-{x}r", rw, filename, size, offset, s.bs, s.iodepth, rwmixread=x),)
                           for x in s.mixes)
            r = ctx.run(JobSet(groups, ioengine="libaio"),
                        f"mixed {mode} {s.mixes[0]}..{s.mixes[-1]}% reads (run {rep + 1}/{s.repeats})")
            for x in s.mixes:
                samples[mode][x].append(r.jobs[f"{mode}-{x}r"].runtime_ms / 1000.0)
    detail = {m: {str(x): Stat.of(v).to_json() for x, v in d.items()} for m, d in samples.items()}
    return {"size_bytes": size, "bs": s.bs, "iodepth": s.iodepth, "mixes": list(s.mixes),
            "response_s": {m: {x: d["mean"] for x, d in v.items()} for m, v in detail.items()},
            "detail": detail, "iowait_pct": ctx.iowait()}

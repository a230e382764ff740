"""`latency`: response time of seq read, seq write, rand read and rand write, each running alone (seed 000, 4.3)."""

from __future__ import annotations

from smartio.engine import Job, JobSet
from smartio.storebench.context import RunContext
from smartio.storebench.options import FIO_RW, Settings
from smartio.storebench.stats import Stat

NAME = "latency"


def space_needed(s: Settings) -> int:
    return s.size_for(NAME)


def runs(s: Settings) -> int:
    return s.repeats * len(s.patterns())


def run(ctx: RunContext) -> dict:
    s = ctx.settings
    size = s.size_for(NAME)
    filename, offset = ctx.target.slot("latency", size)
    samples: dict[str, dict[str, list[float]]] = {p: {"mean_ms": [], "p50_ms": [], "p99_ms": []}
                                                  for p in s.patterns()}
    for rep in range(s.repeats):
        for p in s.patterns():
            job = Job(p, FIO_RW[p], filename, size, offset, s.bs)
            d = ctx.run(JobSet(((job,),)), f"latency {p} alone (run {rep + 1}/{s.repeats})").jobs[p].main()
            samples[p]["mean_ms"].append(d.lat_mean_ms)
            samples[p]["p50_ms"].append(d.lat_p50_ms)
            samples[p]["p99_ms"].append(d.lat_p99_ms)
    return {"size_bytes": size, "bs": s.bs,
            "patterns": {p: {k: Stat.of(v).to_json() for k, v in m.items()} for p, m in samples.items()},
            "iowait_pct": ctx.iowait()}

"""`concurrency`: the Concurrency Profiler (seed 000, 4.5 and 5).

For each pattern and each N, N streams run one after another (serial), then N streams run together
(concurrent). Speedup = serial response time / concurrent response time, where a stream's response time is the
sum of its I/Os' latencies and the concurrent time is that of the slowest stream ("use the larger result"). The
concurrency parameter of a pattern is the N with maximal mean speedup. The serial jobs also give each pattern's
latency alone (one QD1 stream), which `profile --apply` turns into the scheduler's write pacing.

The N serial streams are one fio job that goes through the N streams' data one after the other (sequential file
service): the same I/O as N jobs separated by stonewalls, without fio's ~0.3 s start-up per job group, which
made `--quick` take minutes.
"""

from __future__ import annotations

from smartio.engine import Job, JobResult, JobSet
from smartio.storebench.context import RunContext
from smartio.storebench.options import FIO_RW, Settings
from smartio.storebench.stats import Stat

NAME = "concurrency"


def space_needed(s: Settings) -> int:
    return max(s.levels) * s.size_for(NAME)


def runs(s: Settings) -> int:
    return int(not s.read_only) + s.repeats * len(s.patterns())


def busy_ms(r: JobResult) -> float:
    return sum(d.lat_mean_ms * d.ios for d in (r.read, r.write) if d)


def run(ctx: RunContext) -> dict:
    s = ctx.settings
    size = s.size_for(NAME)
    slots = [ctx.target.slot(f"c{i}", size) for i in range(max(s.levels))]
    samples: dict[str, dict[int, list[float]]] = {p: {n: [] for n in s.levels} for p in s.patterns()}
    alone: dict[str, list[float]] = {p: [] for p in s.patterns()}
    if not s.read_only:
        # Lay the streams' data out once, unmeasured, so no measured group pays for creating or first touching it.
        prefill = tuple(Job(f"prefill{i}", "write", f, size, o, min(size, 1 << 20)) for i, (f, o) in enumerate(slots))
        ctx.run(JobSet((prefill,)), "concurrency: laying out the streams' data")
    for rep in range(s.repeats):
        for p in s.patterns():
            groups: list[tuple[Job, ...]] = []
            for n in s.levels:
                files, offset = ctx.target.span([f"c{i}" for i in range(n)])
                groups.append((Job(f"n{n}-serial", FIO_RW[p], files, n * size, offset, s.bs),))
                groups.append(tuple(Job(f"n{n}-conc{i}", FIO_RW[p], f, size, o, s.bs)
                                    for i, (f, o) in enumerate(slots[:n])))
            r = ctx.run(JobSet(tuple(groups)), f"concurrency {p}, N={','.join(map(str, s.levels))} "
                                               f"(run {rep + 1}/{s.repeats})")
            for n in s.levels:
                serial = busy_ms(r.jobs[f"n{n}-serial"])
                concurrent = max(busy_ms(r.jobs[f"n{n}-conc{i}"]) for i in range(n))
                samples[p][n].append(serial / concurrent)
                alone[p].append(r.jobs[f"n{n}-serial"].main().lat_mean_ms)
    detail = {p: {str(n): Stat.of(v).to_json() for n, v in m.items()} for p, m in samples.items()}
    speedup = {p: {n: d["mean"] for n, d in m.items()} for p, m in detail.items()}
    parameters = {p: int(max(m, key=lambda n: m[n])) for p, m in speedup.items()}
    return {"levels": list(s.levels), "size_bytes": size, "bs": s.bs, "speedup": speedup,
            "parameters": parameters, "max_speedup": {p: speedup[p][str(n)] for p, n in parameters.items()},
            "alone_lat_ms": {p: Stat.of(v).mean for p, v in alone.items()},
            "detail": detail, "iowait_pct": ctx.iowait()}

"""`slowdown`: how a concurrent writer slows reads and a concurrent reader slows writes (seed 000, 4.3 and 4.4).

ReadSlowdown = read response time beside a writer / read response time alone; WriteSlowdown likewise. With
`--streams N`, N readers run against N writers (the paper's 4R4W with N = 4), and "alone" means the N streams of
the measured kind alone. The background streams loop (time-based) and are stopped when the first measured stream
ends (fio's exitall), so every measured I/O had company. Efficiency = 1/ReadSlowdown + 1/WriteSlowdown: the share
of its solo work the shared device still does (issue 4).
"""

from __future__ import annotations

from smartio.engine import Job, JobSet
from smartio.errors import SmartioError
from smartio.storebench.context import RunContext
from smartio.storebench.options import Settings
from smartio.storebench.stats import Stat, merge_stats

NAME = "slowdown"
MODES = ("seq", "rand")
BACKGROUND_S = 24 * 3600   # a bound, never reached: exitall ends the background when the measured stream ends
HEAD_START_MS = 100        # the background's head start in contended runs


def space_needed(s: Settings) -> int:
    return 2 * s.streams * s.size_for(NAME)


def runs(s: Settings) -> int:
    return s.repeats * len(MODES) * 4


def _streams(ctx: RunContext, kind: str, mode: str, background: bool, delay_ms: int = 0) -> list[Job]:
    s = ctx.settings
    size = s.size_for(NAME)
    rw = {"read": "read", "write": "write"}[kind]
    if mode == "rand":
        rw = "rand" + rw
    jobs = []
    for i in range(s.streams):
        filename, offset = ctx.target.slot(f"{kind[0]}{i}", size)
        name = f"{'bg' if background else 'm'}-{kind}{i}"
        jobs.append(Job(name, rw, filename, size, offset, s.bs, time_based_s=BACKGROUND_S if background else None,
                        startdelay_ms=delay_ms))
    return jobs


def _mean_latency(result, jobs: list[Job]) -> float:
    """Response time of one I/O over all measured streams: total busy time / total I/Os. With several streams,
    exitall ends the group when the first measured one ends; a stream that got no I/O in by then is left out."""
    stats = [d for j in jobs for d in (result.jobs[j.name].read, result.jobs[j.name].write) if d]
    ios = sum(d.ios for d in stats)
    if ios == 0:
        raise SmartioError(f"the measured streams {[j.name for j in jobs]} did no I/O")
    return sum(d.lat_mean_ms * d.ios for d in stats) / ios


def run(ctx: RunContext) -> dict:
    s = ctx.settings
    samples: dict[str, dict[str, list[float]]] = {m: {k: [] for k in SAMPLES} for m in MODES}
    for rep in range(s.repeats):
        tag = f"(run {rep + 1}/{s.repeats})"
        for mode in MODES:
            # Both kinds alone first: a scheduler that learns from what it sees alone (smartio's auto_pace learns
            # its write pace from writes alone) then meets the other kind as it would on a device in use, from the
            # first repeat on, not after a contended run that taught it nothing.
            for kind in ("read", "write"):
                measured = _streams(ctx, kind, mode, background=False)
                r = ctx.run(JobSet((tuple(measured),)), f"slowdown {mode} {kind} alone {tag}")
                samples[mode][f"{kind}_alone_ms"].append(_mean_latency(r, measured))
            for kind, other, key in (("read", "write", "read_with_writer_ms"),
                                     ("write", "read", "write_with_reader_ms")):
                measured = _streams(ctx, kind, mode, background=False, delay_ms=HEAD_START_MS)
                group = tuple(measured + _streams(ctx, other, mode, background=True))
                r = ctx.run(JobSet((group,), exitall=True), f"slowdown {mode} {kind} beside {other} {tag}")
                samples[mode][key].append(_mean_latency(r, measured))
                idle = [j.name for j in group if j not in measured and r.jobs[j.name].read is None
                        and r.jobs[j.name].write is None]
                if idle:
                    raise SmartioError(f"background streams {idle} did no I/O beside the measured ones; "
                                       "the measurement had no contention")

    return _results(samples, {"streams": s.streams, "size_bytes": s.size_for(NAME), "bs": s.bs}, ctx.iowait())


SAMPLES = ("read_alone_ms", "read_with_writer_ms", "write_alone_ms", "write_with_reader_ms")


def _results(samples: dict[str, dict[str, list[float]]], head: dict, iowait_pct: dict) -> dict:
    detail, read_sd, write_sd = {}, {}, {}
    for mode in MODES:
        m = samples[mode]
        rs = [c / a for c, a in zip(m["read_with_writer_ms"], m["read_alone_ms"], strict=True)]
        ws = [c / a for c, a in zip(m["write_with_reader_ms"], m["write_alone_ms"], strict=True)]
        detail[mode] = {k: Stat.of(v).to_json() for k, v in m.items()}
        detail[mode]["read_slowdown"] = Stat.of(rs).to_json()
        detail[mode]["write_slowdown"] = Stat.of(ws).to_json()
        detail[mode]["efficiency"] = Stat.of(1 / r + 1 / w for r, w in zip(rs, ws, strict=True)).to_json()
        read_sd[mode] = detail[mode]["read_slowdown"]["mean"]
        write_sd[mode] = detail[mode]["write_slowdown"]["mean"]
    return {**head, "read_slowdown": read_sd, "write_slowdown": write_sd, "detail": detail, "iowait_pct": iowait_pct}


def merge(results: list[dict]) -> dict:
    """The results of runs of the same settings taken together, as one run of all their repeats would give them
    (`smartio compare` runs each scheduler's repeats in turn with the others')."""
    samples = {m: {k: [x for r in results for x in r["detail"][m][k]["values"]] for k in SAMPLES} for m in MODES}
    head = {k: results[0][k] for k in ("streams", "size_bytes", "bs")}
    return _results(samples, head, merge_stats([r["iowait_pct"] for r in results]))

"""The measurement engine: fio jobs in, per-job results out.

Experiments describe what to run as a `JobSet` (groups of jobs; the jobs of a group run concurrently, the groups
run one after another, as fio's `stonewall` does) and get back one `JobResult` per job. `FioEngine` runs real fio;
the engines in `smartio.engine.fake` replay recorded fio JSON or synthesise it, so statistics and reports can be
tested without a disk. Parsing fio's JSON lives here, once, for all engines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Protocol

from smartio.errors import SmartioError


@dataclasses.dataclass(frozen=True)
class Job:
    """One fio job: one I/O stream."""

    name: str
    rw: str                      # fio rw=: read, write, randread, randwrite, rw, randrw
    filename: str | tuple[str, ...]   # several files: one after the other (file_service_type=sequential)
    size: int                    # bytes this job transfers (and the region it covers; split among files)
    offset: int = 0
    bs: int = 4096
    iodepth: int = 1
    rwmixread: int | None = None
    time_based_s: float | None = None   # run for this long (looping over the region) instead of once
    startdelay_ms: int = 0


@dataclasses.dataclass(frozen=True)
class JobSet:
    """Groups of jobs: each group runs concurrently; groups run one after another."""

    groups: tuple[tuple[Job, ...], ...]
    direct: bool = True
    ioengine: str = "psync"
    # End a group as soon as its first job ends: a background stream must not outlive the measured one.
    exitall: bool = False
    # Further [global] lines, e.g. ("fallocate=none",): a buffered writer that allocates as it goes.
    options: tuple[str, ...] = ()

    @property
    def jobs(self) -> list[Job]:
        return [j for g in self.groups for j in g]

    def jobfile(self) -> str:
        """The fio job file for this set."""
        lines = ["[global]", f"ioengine={self.ioengine}", f"direct={int(self.direct)}",
                 "lat_percentiles=1", "percentile_list=50:90:99:99.9", "group_reporting=0",
                 "randrepeat=0", "invalidate=1"]
        if self.exitall:
            lines.append("exitall")
        lines += list(self.options)
        for gi, group in enumerate(self.groups):
            for ji, job in enumerate(group):
                files = (job.filename,) if isinstance(job.filename, str) else job.filename
                lines += ["", f"[{job.name}]", f"filename={':'.join(map(_escape, files))}", f"rw={job.rw}",
                          f"bs={job.bs}", f"size={job.size}", f"offset={job.offset}", f"iodepth={job.iodepth}"]
                if len(files) > 1:
                    lines.append("file_service_type=sequential")
                if job.rwmixread is not None:
                    lines.append(f"rwmixread={job.rwmixread}")
                if job.time_based_s is not None:
                    lines += ["time_based", f"runtime={job.time_based_s:g}s"]
                if job.startdelay_ms:
                    lines.append(f"startdelay={job.startdelay_ms}ms")
                if gi > 0 and ji == 0:
                    lines.append("stonewall")
        return "\n".join(lines) + "\n"

    def signature(self) -> str:
        """Stable id of what is run, independent of file names: replayed recordings are checked against it."""
        shape = [[(j.name, j.rw, j.size, j.bs, j.iodepth, j.rwmixread, j.time_based_s) +
                  ((j.startdelay_ms,) if j.startdelay_ms else ()) for j in g]
                 for g in self.groups]
        blob = json.dumps([shape, self.direct, self.ioengine, self.exitall, *([list(self.options)] if self.options
                                                                               else [])])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class DirStats:
    """One direction (read or write) of one job."""

    ios: int
    bytes: int
    runtime_ms: float
    lat_mean_ms: float
    lat_p50_ms: float
    lat_p99_ms: float


@dataclasses.dataclass(frozen=True)
class JobResult:
    name: str
    group: int
    runtime_ms: float
    read: DirStats | None
    write: DirStats | None

    def main(self) -> DirStats:
        """The direction this job mostly did (mixed jobs: use .read/.write)."""
        r, w = self.read, self.write
        if r and (not w or r.ios >= w.ios):
            return r
        if w:
            return w
        raise SmartioError(f"fio job {self.name} did no I/O")


@dataclasses.dataclass(frozen=True)
class RunResult:
    jobs: dict[str, JobResult]
    raw: dict[str, Any]


class Engine(Protocol):
    def run(self, jobset: JobSet, label: str) -> RunResult: ...

    def version(self) -> str: ...


def _escape(filename: str) -> str:
    # fio splits filename= on ':'; escape it (device paths like /dev/disk/by-id/... contain it).
    return filename.replace(":", "\\:")


def _dir_stats(d: dict[str, Any]) -> DirStats | None:
    if not d or d.get("total_ios", 0) == 0:
        return None
    lat = d["lat_ns"]
    pct = lat.get("percentile") or d["clat_ns"].get("percentile") or {}

    def p(key: str) -> float:
        for k, v in pct.items():
            if abs(float(k) - float(key)) < 1e-6:
                return v / 1e6
        return float("nan")

    return DirStats(ios=int(d["total_ios"]), bytes=int(d["io_bytes"]), runtime_ms=float(d["runtime"]),
                    lat_mean_ms=lat["mean"] / 1e6, lat_p50_ms=p("50"), lat_p99_ms=p("99"))


def parse_fio_json(raw: dict[str, Any], jobset: JobSet) -> RunResult:
    """Turn fio's --output-format=json into JobResults, checking every job of the set ran without error."""
    out: dict[str, JobResult] = {}
    for j in raw.get("jobs", []):
        if j.get("error"):
            raise SmartioError(f"fio job {j['jobname']} failed with error {j['error']}")
        out[j["jobname"]] = JobResult(
            name=j["jobname"], group=int(j.get("groupid", 0)),
            runtime_ms=float(j.get("job_runtime") or max(j["read"]["runtime"], j["write"]["runtime"])),
            read=_dir_stats(j["read"]), write=_dir_stats(j["write"]))
    missing = [job.name for job in jobset.jobs if job.name not in out]
    if missing:
        raise SmartioError(f"fio output lacks jobs {missing}")
    return RunResult(out, raw)

"""Engines that do not touch a disk, for tests (as hyperfine's mock executor and fio's null engine).

- `RecordingEngine` wraps a real engine and saves every fio JSON document it gets, in order, with the job set's
  signature: `SMARTIO_RECORD_FIO=DIR smartio bench ...` makes such a recording.
- `ReplayEngine` plays a recording back and checks each job set's signature, so a test fails when the jobs an
  experiment generates change.
- `ModelEngine` synthesises fio JSON from a simple latency model: exact inputs for checking the arithmetic.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from smartio.engine import Engine, Job, JobSet, RunResult, parse_fio_json
from smartio.errors import SmartioError


class RecordingEngine:
    def __init__(self, inner: Engine, directory: Path) -> None:
        self.inner, self.dir, self.n = inner, directory, 0
        self.dir.mkdir(parents=True, exist_ok=True)

    def version(self) -> str:
        return self.inner.version()

    def run(self, jobset: JobSet, label: str) -> RunResult:
        res = self.inner.run(jobset, label)
        self.n += 1
        doc = {"label": label, "signature": jobset.signature(), "fio": res.raw}
        (self.dir / f"{self.n:04d}.json").write_text(json.dumps(doc, indent=1) + "\n")
        (self.dir / "fio_version").write_text(self.inner.version() + "\n")
        return res


class ReplayEngine:
    def __init__(self, directory: Path) -> None:
        self.files = sorted(p for p in directory.glob("[0-9]*.json"))
        if not self.files:
            raise SmartioError(f"no recorded fio runs in {directory}")
        vf = directory / "fio_version"
        self._version = vf.read_text().strip() if vf.exists() else "fio-recorded"
        self.n = 0

    def version(self) -> str:
        return self._version

    def run(self, jobset: JobSet, label: str) -> RunResult:
        if self.n >= len(self.files):
            raise SmartioError(f"recording exhausted at run {self.n + 1} ({label})")
        doc = json.loads(self.files[self.n].read_text())
        self.n += 1
        if doc["signature"] != jobset.signature():
            raise SmartioError(f"recorded run {self.n} was {doc['label']!r}, experiment asked for {label!r}")
        return parse_fio_json(doc["fio"], jobset)


# (job, jobs running beside it) -> mean latency in ms of one I/O of that job
LatencyModel = Callable[[Job, list[Job]], float]


class ModelEngine:
    """Synthesises fio JSON: each job's I/Os take `model(job, others)` ms; a group lasts as long as its
    longest job. Time-based jobs run as long as the longest job that is not time-based."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.runs: list[JobSet] = []

    def version(self) -> str:
        return "fio-model"

    def run(self, jobset: JobSet, label: str) -> RunResult:
        self.runs.append(jobset)
        jobs = []
        for gid, group in enumerate(jobset.groups):
            lat = {j.name: self.model(j, [o for o in group if o is not j]) for j in group}
            fixed = [j.size / j.bs * lat[j.name] for j in group if j.time_based_s is None]
            span = max(fixed) if fixed else max(j.time_based_s or 0 for j in group) * 1000
            for j in group:
                ios = int(j.size / j.bs) if j.time_based_s is None else max(1, int(span / lat[j.name]))
                runtime = ios * lat[j.name]
                jobs.append(_job_json(j, gid, ios, runtime, lat[j.name]))
        return parse_fio_json({"fio version": "fio-model", "jobs": jobs}, jobset)


def _job_json(job: Job, gid: int, ios: int, runtime_ms: float, lat_ms: float) -> dict:
    def side(n: int) -> dict:
        ns = lat_ms * 1e6
        return {"total_ios": n, "io_bytes": n * job.bs, "runtime": round(runtime_ms),
                "lat_ns": {"mean": ns if n else 0.0,
                           "percentile": {"50.000000": ns, "99.000000": ns * 1.5} if n else {}},
                "clat_ns": {}}

    reads = ios if "read" in job.rw else 0
    if job.rw in ("rw", "randrw", "readwrite"):
        reads = ios * (job.rwmixread or 50) // 100
    return {"jobname": job.name, "groupid": gid, "error": 0, "job_runtime": round(runtime_ms),
            "read": side(reads), "write": side(ios - reads)}

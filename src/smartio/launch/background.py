"""The background workloads a launch runs beside: fio job sets on one scratch file, time-based, so that they run
until the launch ends and smartio stops them.

- seq-write:      sequential direct writes of 256 KiB (a download, a camera recording, an app install)
- rand-write:     random direct writes of 4 KiB (a database's checkpoints)
- buffered-write: sequential buffered writes of 256 KiB through the page cache, so the kernel's writeback
                  issues them asynchronously (the case QASIO's boosting is about, seed 001)
"""

from __future__ import annotations

import dataclasses

from smartio.engine import Job, JobSet

# A launch lasts seconds; fio is stopped when it ends. This only bounds a run nobody stops.
RUNTIME_S = 24 * 3600


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    rw: str
    bs: int
    direct: bool
    help: str


WORKLOADS = {w.name: w for w in (
    Workload("seq-write", "write", 256 << 10, True, "sequential direct writes of 256 KiB"),
    Workload("rand-write", "randwrite", 4 << 10, True, "random direct writes of 4 KiB"),
    Workload("buffered-write", "write", 256 << 10, False,
             "sequential buffered writes of 256 KiB (the kernel's writeback issues them)"),
)}
NAMES = ("none", *WORKLOADS)


def jobset(name: str, filename: str, size: int) -> JobSet:
    """The fio jobs of background workload `name` on `filename` (which holds `size` bytes), looping until stopped."""
    w = WORKLOADS[name]
    job = Job(name=f"bg-{name}", rw=w.rw, filename=filename, size=size, bs=w.bs, time_based_s=RUNTIME_S)
    return JobSet(((job,),), direct=w.direct)

"""What an experiment runs with: the engine, the target, the settings, progress and the iowait sampler."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from smartio.engine import Engine, JobSet, RunResult
from smartio.progress import Progress
from smartio.storebench.options import Settings
from smartio.storebench.stats import Stat
from smartio.storebench.target import Target


def read_cpu_times(path: str = "/proc/stat") -> tuple[int, int]:
    """(iowait, total) jiffies over all CPUs."""
    with open(path) as f:
        fields = f.readline().split()
    if fields[0] != "cpu":
        raise ValueError(f"unexpected first line in {path}")
    values = [int(x) for x in fields[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in user/nice.
    return values[4], sum(values[:8])


@dataclasses.dataclass
class RunContext:
    engine: Engine
    target: Target
    settings: Settings
    progress: Progress | None = None
    cpu_times: Callable[[], tuple[int, int]] = read_cpu_times
    iowait_shares: list[float] = dataclasses.field(default_factory=list)
    # fio's own JSON output of every run, kept with the document so that its results can be recomputed later.
    fio_raw: list[dict] = dataclasses.field(default_factory=list)

    def run(self, jobset: JobSet, label: str) -> RunResult:
        if self.progress:
            self.progress.begin(label)
        io0, tot0 = self.cpu_times()
        result = self.engine.run(jobset, label)
        io1, tot1 = self.cpu_times()
        self.fio_raw.append({"label": label, "output": result.raw})
        if tot1 > tot0:
            self.iowait_shares.append(100.0 * (io1 - io0) / (tot1 - tot0))
        if self.progress:
            self.progress.end()
        return result

    def iowait(self) -> dict:
        """Share of CPU time in iowait during this experiment's runs, in percent (a Stat over runs)."""
        return Stat.of(self.iowait_shares or [0.0]).to_json()

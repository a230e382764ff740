"""How much of the host other work took while the testbed ran.

Under TCG the guest's clock runs on the host's CPUs: whatever else runs on the host slows the guest's code, and a
launch or a benchmark that is mostly CPU under emulation takes longer. These machines are shared, so every testbed
run records it, and a figure that scatters can be checked against it:

    with HostLoad(Path("host-load.csv")) as load:     # one line per INTERVAL_S
        ...                                           # QEMU, virtiofsd and nbdkit run as descendants of this process
    load.summary()   # {"cpus": 2, "other_cpus_mean": 0.04, "other_cpus_max": 0.93, ...}

"Ours" is this process and every process descended from it (QEMU, virtiofsd, nbdkit, the disk transport); "other"
is the rest of the CPU time /proc/stat counts as busy (user, nice, system, irq, softirq, steal), in CPUs (1.0: one
CPU busy all along). A descendant that starts and ends between two samples is counted as other; the testbed's
helpers all live as long as the VM.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

INTERVAL_S = 5.0
HZ = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")
COLUMNS = "unix_time,interval_s,busy_cpus,ours_cpus,other_cpus"
FILE = "host-load.csv"      # the name a testbed run's artifacts keep it under
MIN_SAMPLE_S = 0.2    # a last sample shorter than this (the run ended right after one) is left out
WARN_CPUS = 0.1       # other work above this many CPUs on average is worth a warning
# A launch taken while other work used more than this many of the host's CPUs (`during`) is marked as disturbed
# (smartio.launch.compare.disturbed).
# On the 2-CPU hosts here, 0.57 to 0.82 CPUs of other work for 30 s tripled the CPU time of 8 cold editor launches
# in a row (0.5 s to 1.1-1.5 s, in a launch comparison of 2026-11-28); outside such bursts other work stays below 0.1.
DISTURBED_CPUS = 0.25


def busy_jiffies(stat_text: str) -> int:
    """Busy jiffies of all CPUs, from /proc/stat's first line (user nice system idle iowait irq softirq steal ...)."""
    f = [int(x) for x in stat_text.split("\n", 1)[0].split()[1:9]]
    return f[0] + f[1] + f[2] + f[5] + f[6] + f[7]


def tree_jiffies(root: int, proc: Path = PROC) -> int:
    """utime + stime of `root` and every live descendant of it (all their threads), and cutime + cstime of each:
    what their children that exited and were reaped used. A process's time then moves from its own fields to its
    parent's when it is reaped, and stays counted: QEMU reaped before a run's last sample is still the run's."""
    parent: dict[int, int] = {}
    jiffies: dict[int, int] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            text = (d / "stat").read_text()
        except OSError:                      # gone since the listing
            continue
        rest = text[text.rindex(")") + 2:].split()     # after "pid (comm) "; comm may hold spaces and ')'
        parent[int(d.name)] = int(rest[1])
        jiffies[int(d.name)] = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    total = 0
    for pid, t in jiffies.items():
        p, seen = pid, 0
        while p and p != root and seen < 64:        # walk up to the root, or to init
            p, seen = parent.get(p, 0), seen + 1
        if p == root:
            total += t
    return total


class HostLoad:
    """Samples the host's busy time and this process tree's every `interval_s` in a thread, into a CSV file."""

    def __init__(self, path: Path, interval_s: float = INTERVAL_S) -> None:
        self.path, self.interval_s = path, interval_s
        self.rows: list[tuple[float, float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpus = os.cpu_count() or 1

    def _sample(self) -> tuple[float, int, int]:
        return time.monotonic(), busy_jiffies((PROC / "stat").read_text()), tree_jiffies(os.getpid())

    def _run(self) -> None:
        try:
            with open(self.path, "w") as out:
                out.write(COLUMNS + "\n")
                t0, b0, o0 = self._sample()
                stopped = False
                while not stopped:           # the last sample covers the end of the run, however short
                    stopped = self._stop.wait(self.interval_s)
                    t1, b1, o1 = self._sample()
                    dt = t1 - t0
                    if dt > MIN_SAMPLE_S:
                        busy, ours = (b1 - b0) / HZ / dt, max(0, o1 - o0) / HZ / dt
                        row = (time.time(), dt, busy, ours, max(0.0, busy - ours))
                        self.rows.append(row)
                        out.write(",".join(f"{x:.3f}" for x in row) + "\n")
                        out.flush()
                    t0, b0, o0 = t1, b1, o1
        except OSError:                     # a record, never a reason to fail the run
            pass

    def __enter__(self) -> HostLoad:
        self._thread = threading.Thread(target=self._run, name="host-load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 5)

    def summary(self) -> dict[str, Any]:
        """Other work's CPUs, mean and the highest sample, over the run; None where nothing was sampled."""
        other = [r[4] for r in self.rows]
        seconds = sum(r[1] for r in self.rows)
        mean = sum(r[4] * r[1] for r in self.rows) / seconds if seconds else None
        return {"cpus": self.cpus, "interval_s": self.interval_s, "samples": len(self.rows),
                "other_cpus_mean": None if mean is None else round(mean, 3),
                "other_cpus_max": round(max(other), 3) if other else None,
                "file": self.path.name}


Sample = tuple[float, float, float]       # (start, end, other CPUs): one row, unix seconds


def read(path: Path) -> list[Sample]:
    """The samples of a host-load file (COLUMNS), each covering the `interval_s` before its `unix_time`; [] when it
    is missing or unreadable (runs older than it), rows that do not parse left out (a file cut off mid-line)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines[1:] if lines and lines[0] == COLUMNS else []:
        try:
            t, dt, _, _, other = (float(x) for x in line.split(","))
        except ValueError:
            continue
        out.append((t - dt, t, other))
    return out


def during(samples: list[Sample], start: float, end: float) -> float | None:
    """Other work's CPUs over [start, end] (unix seconds): the samples' mean weighted by how much of each falls in
    it; None when no sample overlaps it. An interval shorter than a sample gets that sample's mean, which may hide
    a short burst in it or blame a burst next to it: a sample is INTERVAL_S long."""
    weight = total = 0.0
    for s, e, other in samples:
        overlap = min(e, end) - max(s, start)
        if overlap > 0 or (start == end and s <= start <= e):
            w = max(overlap, 1e-9)
            weight, total = weight + w, total + w * other
    return total / weight if weight else None


def note(summary: dict[str, Any] | None) -> str | None:
    """The line a comparison's table ends with, or None for a document recorded before it was kept."""
    if not summary or summary.get("other_cpus_mean") is None:
        return None
    mean = summary["other_cpus_mean"]
    return (f"host: other processes took {mean:.2f} of its {summary['cpus']} CPUs on average while the VM ran (at "
            f"most {summary['other_cpus_max']:.2f} over {summary['interval_s']:g} s)"
            + ("; more than 0.1 slows the guest's code under TCG, and its timings scatter more"
               if mean > WARN_CPUS else ""))


def warning(summary: dict[str, Any]) -> str | None:
    """note() with where the samples are, when other work took more than WARN_CPUS on average, else None."""
    line = note(summary)
    if line is None or summary["other_cpus_mean"] <= WARN_CPUS:
        return None
    return f"{line}; see {summary['file']} in the artifacts"

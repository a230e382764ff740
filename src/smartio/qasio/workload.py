"""Seed 001's microbenchmarks M1-M5, scaled, as a sequence of system calls, and the summary of their latencies.

The paper (seed 001, section 6.1, "Methodology"), word for word:

  M1: M1 iterates the creation of a 4KB file 500 times. In each iteration, M1 opens the same file with `creat()`,
      and then writes 4KB of data to the file using the buffered `write()`. Finally, it performs `fsync()` and
      closes the file with `close()`. Note that this microbenchmark mimics the storage I/O patterns of a database
      system such as SQLite.
  M2: M2 is the same as M1 except that the file size is increased to 1MB and the number of iterations is set to
      200. The file data (1MB in size) is written using a single `write()` system call.
  M3: M3 creates a new file with `creat()` and repeats a 1KB-sized `write()` until the file size reaches 300MB.
  M4: In each iteration, M4 truncates the 2MB file created in the previous iteration to zero length using
      `truncate()`, recreates the same sized file using `write()`, and then closes the file with `close()`. This is
      repeated 500 times. The file for the first iteration is created manually before the execution.
  M5: M5 creates a single 4KB file by performing `creat()`, `write()`, `fsync()`, and `close()`, while another task
      truncates an existing 8GB file and writes 8GB of data again to the file.

  We run all the microbenchmarks except M5 while a 8GB file is written in the background in order to generate
  asynchronous I/O operations. [...] In Android, the dirty page expiration time is set to 2 seconds and the
  background dirty ratio to 5% by default. [Galaxy S5: 2GB DRAM, 16GB eMMC.]

Scaling. The emulated device is slower than the phone's eMMC by its time scale (s5-emmc models the S5's own eMMC,
with every time multiplied by `time_scale`), so the same bytes take that much longer. `scale` multiplies every byte
quantity the paper names that is about the device's throughput: the M2 and M4 file sizes, M3's 300MB, the 8GB of
the background writer and of M5's file, and the dirty thresholds (5 % and 20 % of the phone's 2GB). With
scale = 1 / time_scale, a byte quantity takes the device as long as on the phone. The 4KB files of M1 and M5 and
M3's 1KB write are not scaled: they are what makes the dependency (one page; a partial page). `count_scale`
multiplies the iteration counts (500, 200, 500) and M3's total, only to make the run shorter; it changes how many
samples the maximum is taken over, not what one iteration does. Sizes are rounded to whole 4 KiB pages.

Why not fio: fio times I/O units (reads, writes, trims) and reports their latency distribution; it cannot time the
`creat()`, `fsync()`, `truncate()` and `close()` of one iteration each on their own (its `fsync=N` is counted in
the write's latency or in a separate sync distribution without the call that opened the file, and it never
truncates). The foreground calls are therefore made here, one at a time, each timed with the monotonic clock
(`run.execute`); fio writes the background file, as it is the project's one I/O engine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

from smartio.errors import UsageError
from smartio.iosched.debugfs import QASIO_LOG_SIZE

BENCHMARKS = ("m1", "m2", "m3", "m4", "m5")
# --dependency: what the boost acts on (Figure 8's order; "all" is Table 2's ALL, "none" its NONE).
DEPENDENCIES = ("none", "meta", "data", "sync", "discard", "all")
CALLS = ("creat", "open", "write", "fsync", "truncate", "close")
PAGE = 4096
MB = 1 << 20
GB = 1 << 30

# The paper's quantities (section 6.1), before scaling.
PAPER = {
    "m1_iterations": 500, "m1_file": 4096,
    "m2_iterations": 200, "m2_file": MB,
    "m3_total": 300 * MB, "m3_write": 1024,
    "m4_iterations": 500, "m4_file": 2 * MB,
    "m5_file": 4096, "m5_big": 8 * GB,
    "background": 8 * GB,
    "dram": 2 * GB,
}
DIRTY_BACKGROUND_RATIO = 0.05     # Android's background dirty ratio (section 6.1)
DIRTY_RATIO = 0.20                # Linux's (and Android 4.4's) vm.dirty_ratio; the paper does not name it
DIRTY_EXPIRE_CS = 200             # Android: dirty pages expire after 2 seconds (section 6.1)
DIRTY_WRITEBACK_CS = 500          # the flusher wakes every 5 s: Linux's and Android's default, not scaled
# Table 2's "key file system operations", per benchmark (the calls the paper reports).
KEY_CALLS = {"m1": ("creat", "fsync"), "m2": ("creat", "fsync"), "m3": ("write",), "m4": ("truncate",),
             "m5": ("fsync",)}
DEFAULT_SCALE = 0.1               # s5-emmc at time scale 10 (`smartio compare qasio`'s default)
DEFAULT_COUNT_SCALE = 0.1


def _pages(n: float) -> int:
    return max(PAGE, int(round(n / PAGE)) * PAGE)


@dataclasses.dataclass(frozen=True)
class Params:
    """The scaled benchmark: every size in bytes, every count an iteration count."""

    scale: float = DEFAULT_SCALE
    count_scale: float = DEFAULT_COUNT_SCALE

    def __post_init__(self) -> None:
        if not (0 < self.scale <= 1) or math.isnan(self.scale):
            raise UsageError("--scale", self.scale, "must be above 0 and at most 1 (1 = the paper's sizes)")
        if not (0 < self.count_scale <= 1) or math.isnan(self.count_scale):
            raise UsageError("--count-scale", self.count_scale,
                             "must be above 0 and at most 1 (1 = the paper's iteration counts)")

    def count(self, n: int) -> int:
        return max(2, int(round(n * self.count_scale)))

    @property
    def sizes(self) -> dict[str, int]:
        s, c = self.scale, self.count_scale
        return {
            "m1_iterations": self.count(PAPER["m1_iterations"]), "m1_file": PAPER["m1_file"],
            "m2_iterations": self.count(PAPER["m2_iterations"]), "m2_file": _pages(PAPER["m2_file"] * s),
            "m3_total": _pages(PAPER["m3_total"] * s * c), "m3_write": PAPER["m3_write"],
            "m4_iterations": self.count(PAPER["m4_iterations"]), "m4_file": _pages(PAPER["m4_file"] * s),
            "m5_file": PAPER["m5_file"], "m5_big": _pages(PAPER["m5_big"] * s * c),
            "background": _pages(PAPER["background"] * s),
            "dirty_background_bytes": _pages(PAPER["dram"] * DIRTY_BACKGROUND_RATIO * s),
            "dirty_bytes": _pages(PAPER["dram"] * DIRTY_RATIO * s),
        }

    def writeback(self) -> dict[str, int]:
        """The vm.* settings of the run (bytes, not ratios: the guest's RAM is not the phone's)."""
        z = self.sizes
        return {"dirty_expire_centisecs": DIRTY_EXPIRE_CS, "dirty_writeback_centisecs": DIRTY_WRITEBACK_CS,
                "dirty_background_bytes": z["dirty_background_bytes"], "dirty_bytes": z["dirty_bytes"]}


@dataclasses.dataclass(frozen=True)
class Op:
    """One system call of a benchmark: creat/open/truncate name a file; write has a size; fsync/close act on the
    file opened last. `timed` is False for set-up calls ("created manually before the execution")."""

    call: str
    file: str = ""
    size: int = 0
    timed: bool = True


def setup_ops(bench: str, p: Params) -> list[Op]:
    """Untimed preparation: M4's first 2MB file."""
    if bench == "m4":
        z = p.sizes
        return [Op("creat", "m4.dat", timed=False), Op("write", size=z["m4_file"], timed=False),
                Op("fsync", timed=False), Op("close", timed=False)]
    return []


def ops(bench: str, p: Params) -> Iterator[Op]:
    """The timed system calls of one run of `bench`, in order."""
    z = p.sizes
    if bench in ("m1", "m2", "m5"):
        n = 1 if bench == "m5" else z[f"{bench}_iterations"]
        for _ in range(n):
            yield Op("creat", f"{bench}.dat")
            yield Op("write", size=z[f"{bench}_file"])
            yield Op("fsync")
            yield Op("close")
    elif bench == "m3":
        yield Op("creat", "m3.dat")
        for _ in range(z["m3_total"] // z["m3_write"]):
            yield Op("write", size=z["m3_write"])
        yield Op("close")
    elif bench == "m4":
        for _ in range(z["m4_iterations"]):
            yield Op("truncate", "m4.dat")
            yield Op("open", "m4.dat")
            yield Op("write", size=z["m4_file"])
            yield Op("close")
    else:
        raise UsageError("--benchmarks", bench, f"unknown benchmark; choose from {', '.join(BENCHMARKS)}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default), without importing numpy."""
    v = sorted(values)
    if not v:
        return math.nan
    pos = (len(v) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarise(latencies: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per call type: count, average, p99 and maximum latency in ms, from latencies in seconds."""
    out = {}
    for call in CALLS:
        v = latencies.get(call) or []
        if v:
            out[call] = {"n": len(v), "avg_ms": round(1e3 * math.fsum(v) / len(v), 4),
                         "p99_ms": round(1e3 * percentile(v, 99), 4), "max_ms": round(1e3 * max(v), 4)}
    return out


def parse_benchmarks(text: str) -> tuple[str, ...]:
    names = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in BENCHMARKS]
    if bad or not names:
        raise UsageError("--benchmarks", text, f"choose from {', '.join(BENCHMARKS)} (comma-separated)")
    return tuple(dict.fromkeys(names))


def counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What a run added to each counter (`pending` is a level, not a count: its value after)."""
    out = {}
    for dep, row in after.items():
        b = before.get(dep, {})
        out[dep] = {k: v if k == "pending" else v - b.get(k, 0) for k, v in row.items()}
    return out


def explain_waits(spans: dict[str, tuple[float, float]], log: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For the slowest call of each type (start, duration in s, CLOCK_MONOTONIC), what the QASIO log says happened
    while it waited: how many waits were found queued, dispatched, not yet queued or never found, and
    how long after the call began its last boosted write completed. A slow call with no event waited on nothing the
    probes see (a journal commit's sync writes, a tag, the CPU)."""
    out: dict[str, dict[str, Any]] = {}
    for call, (start, dur) in spans.items():
        end = start + dur
        inside = [e for e in log if start <= e["t"] <= end]
        counts: dict[str, int] = {}
        for e in inside:
            counts[e["what"]] = counts.get(e["what"], 0) + 1
        done = [e["t"] - start for e in inside if e["what"] == "c"]
        out[call] = {"ms": round(dur * 1e3, 3), "events": counts,
                     "last_boosted_done_ms": round(max(done) * 1e3, 3) if done else None,
                     "log_covers": len(log) < QASIO_LOG_SIZE or log[0]["t"] <= start}
    return out

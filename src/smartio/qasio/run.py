"""Carry out M1-M5 (smartio.qasio.workload) on a mounted ext4 directory, beside fio's background writer.

    doc = run_qasio(QasioSettings(dependency="all"), "/mnt/t", command="smartio bench qasio ...")
    doc["results"]["benchmarks"]["m1"]["calls"]["creat"]["max_ms"]

For the run (root), and restored afterwards, also on Ctrl-C and SIGTERM:
- the writeback settings the paper implies (`Params.writeback`: dirty pages expire after 2 s, dirty thresholds of
  5 % and 20 % of the phone's 2GB times --scale, in bytes);
- writeback throttling off (`wbt_lat_usec` 0): on 6.1 wbt holds async writes above the scheduler, where no
  scheduler can reorder them (the phone's 3.10 kernel had no wbt); bfq turns it off by itself;
- with --dependency, the smartio scheduler's QASIO tunables (qasio_boost, qasio_meta, qasio_data, qasio_sync).

Each benchmark runs in a fresh scratch directory `.smartio-qasio-<token>/` of the target, removed afterwards. M1-M4:
fio starts writing the background file (buffered, 1 MiB writes, allocating as it goes), the foreground waits until
dirty pages have expired once (2 s + 1 s) so that background writeback is under way, then makes its calls; fio is
stopped when they are done. M5: a file of `m5_big` bytes is allocated (posix_fallocate, synced: the truncation frees
its blocks whether they were written or not), then truncated to zero, fio starts writing it again, and M5's four
calls follow at once, so that its fsync's journal commit carries the truncation's discards.
"""

from __future__ import annotations

import datetime
import os
import platform
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from smartio import __version__
from smartio.blockdev import Device, backing_of, memory_backed, mount_of, read_scheduler, read_tunables
from smartio.blockdev.diskstat import read_disk_stat
from smartio.engine import Job, JobSet
from smartio.engine.fio import BackgroundRun, FioEngine
from smartio.errors import NeedsRootError, SmartioError, UsageError
from smartio.iosched import debugfs
from smartio.iosched.tunables import QASIO_DEPENDENCIES
from smartio.progress import Progress
from smartio.qasio.workload import (
    BENCHMARKS,
    DEPENDENCIES,
    DIRTY_EXPIRE_CS,
    Op,
    Params,
    counter_delta,
    explain_waits,
    ops,
    setup_ops,
    summarise,
)
from smartio.signals import sigterm_as_interrupt
from smartio.storebench.stats import Stat

DEP_TUNABLES = QASIO_DEPENDENCIES     # qasio_meta, qasio_data, qasio_sync (the module's table)
# ext4 on 6.1 issues the discards of freed blocks from a worker with submit_bio_wait(), which marks them REQ_SYNC
# (kernel/smartio-iosched.c, header item 5): they are sync I/O, already above every async write, and the module has
# nothing to boost for D_discard. `--dependency discard` therefore boosts nothing; the module counts async discards
# (qasio_discard async_inserted) so a run shows whether any arrived.
DISCARD_NOTE = ("D_discard: ext4 on Linux 6.1 issues discards with submit_bio_wait(), i.e. REQ_SYNC, so they are "
                "never async and there is nothing to boost; --dependency discard boosts nothing")
SCRATCH_PREFIX = ".smartio-qasio-"
VM = Path("/proc/sys/vm")
WARMUP_S = DIRTY_EXPIRE_CS / 100 + 1.0
BG_BS = 1 << 20
MIB = 1 << 20


def dependency_tunables(dep: str) -> dict[str, int]:
    """The module's tunables for `--dependency dep`."""
    if dep not in DEPENDENCIES:
        raise UsageError("--dependency", dep, f"choose from {', '.join(DEPENDENCIES)}")
    on = {"all": set(DEP_TUNABLES), "none": set(), "discard": set()}.get(dep, {f"qasio_{dep}"})
    return {"qasio_boost": int(dep != "none"), **{t: int(t in on) for t in DEP_TUNABLES}}


class QasioSettings:
    """What `smartio bench qasio` was asked to do, validated."""

    def __init__(self, *, benchmarks: tuple[str, ...] = BENCHMARKS, dependency: str | None = None,
                 scale: float | None = None, count_scale: float | None = None, repeats: int = 1,
                 warmup_s: float = WARMUP_S) -> None:
        kw = {k: v for k, v in (("scale", scale), ("count_scale", count_scale)) if v is not None}
        self.params = Params(**kw)
        if dependency is not None:
            dependency_tunables(dependency)
        if not 1 <= repeats <= 100:
            raise UsageError("--repeats", repeats, "must be between 1 and 100")
        self.benchmarks, self.dependency, self.repeats, self.warmup_s = benchmarks, dependency, repeats, warmup_s

    def to_json(self) -> dict[str, Any]:
        return {"benchmarks": list(self.benchmarks), "dependency": self.dependency, "scale": self.params.scale,
                "count_scale": self.params.count_scale, "repeats": self.repeats, "warmup_s": self.warmup_s,
                "sizes": self.params.sizes, "writeback": self.params.writeback()}

    def space_needed(self) -> int:
        z = self.params.sizes
        need = {"m1": z["m1_file"], "m2": z["m2_file"], "m3": z["m3_total"], "m4": z["m4_file"],
                "m5": z["m5_big"] + z["m5_file"]}
        return max(need[b] for b in self.benchmarks) + z["background"] + (64 << 20)


def check_target(path: str | None, settings: QasioSettings) -> tuple[Path, Device]:
    """A writable directory on ext4 (data=ordered, mount option discard) with a block device and the space."""
    if not path:
        raise UsageError("--target", "(missing)", "a directory on a mounted ext4 filesystem is required "
                         "(ordered, mount option discard)")
    p = Path(path)
    if not p.is_dir():
        raise UsageError("--target", path, "does not exist" if not p.exists() else "is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError("--target", path, "directory is not writable")
    mem = memory_backed(str(p))
    if mem:
        raise UsageError("--target", path, f"is on {mem}, which keeps files in memory; there is no writeback")
    mount = mount_of(str(p))
    if mount is None or mount.fstype != "ext4":
        raise UsageError("--target", path, f"is on {mount.fstype if mount else 'an unknown filesystem'}; M1-M5 "
                         "need ext4 (seed 001 measured ext4; its dependency types are ext4's and jbd2's)")
    data = next((o.split("=", 1)[1] for o in mount.options if o.startswith("data=")), "ordered")
    if data != "ordered":
        raise UsageError("--target", path, f"ext4 is mounted data={data}; mount it data=ordered (the default)")
    if "discard" not in mount.options:
        raise UsageError("--target", path, f"ext4 on {mount.source} is mounted without the discard option; "
                         "remount it (mount -o remount,discard) so freed blocks are discarded as on the phone "
                         "(D_discard)")
    dev = backing_of(str(p)).device
    if dev is None:
        raise UsageError("--target", path, "has no block device underneath")
    st = os.statvfs(p)
    avail, need = st.f_bavail * st.f_frsize, settings.space_needed()
    if need > avail:
        raise UsageError("--target", path, f"too little space: the run needs {need >> 20} MiB (the background "
                         f"file, the largest benchmark's files and 64 MiB for ext4), {avail >> 20} MiB are free; "
                         "lower --scale")
    return p.resolve(), dev


def _write(path: Path, value: int | str) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as e:
        raise SmartioError(f"writing {value} to {path} failed: {e.strerror}") from e


class Knobs:
    """Kernel settings changed for the run, each restored by `restore()` in reverse order."""

    def __init__(self) -> None:
        self.saved: list[tuple[Path, str]] = []

    def set(self, path: Path, value: int | str) -> str:
        old = path.read_text().strip()
        self.saved.append((path, old))
        _write(path, value)
        return old

    def restore(self) -> None:
        errors = []
        for path, old in reversed(self.saved):
            try:
                path.write_text(f"{old}\n")
            except OSError as e:
                errors.append(f"{path}: {e.strerror}")
        self.saved.clear()
        if errors:
            raise SmartioError(f"could not restore {', '.join(errors)}")


def set_writeback(knobs: Knobs, wb: dict[str, int]) -> dict[str, dict[str, int]]:
    """Set the vm.* settings; returns before and after. Writing dirty_bytes zeroes dirty_ratio and the other way
    round, so the ratios are saved first and restored last (restore() goes in reverse)."""
    before = {k: int((VM / k).read_text()) for k in (*wb, "dirty_ratio", "dirty_background_ratio")}
    for ratio, nbytes in (("dirty_ratio", "dirty_bytes"), ("dirty_background_ratio", "dirty_background_bytes")):
        knobs.saved.append((VM / (nbytes if before[nbytes] else ratio),
                            str(before[nbytes] if before[nbytes] else before[ratio])))
    for k in ("dirty_expire_centisecs", "dirty_writeback_centisecs"):
        knobs.set(VM / k, wb[k])
    for k in ("dirty_background_bytes", "dirty_bytes"):
        _write(VM / k, wb[k])
    return {"before": before, "after": {k: int((VM / k).read_text()) for k in before}}


def read_qasio_log(dev: Device) -> list[dict[str, Any]] | None:
    """The module's QASIO log (debugfs qasio_log: its last 1024 events), or None without it."""
    try:
        return debugfs.read_qasio_log(dev.disk)
    except OSError:
        return None


def read_counters(dev: Device) -> dict[str, dict[str, int]] | None:
    """The smartio module's qasio_* counters (debugfs), or None under another scheduler or without debugfs."""
    if read_scheduler(dev)[0] != "smartio":
        return None
    try:
        return debugfs.qasio_counters(debugfs.read_file(dev.disk, "stats"))
    except OSError:
        return None


def sectors_written(dev: Device) -> int:
    return read_disk_stat(dev.disk).write_sectors


def execute(root: Path, calls: list[Op] | Any, lat: dict[str, list[float]] | None,
            slowest: dict[str, tuple[float, float]] | None = None) -> float:
    """Make the calls in `root`, timing each timed one into `lat` (seconds) and keeping the slowest of each type in
    `slowest` as (start on time.monotonic's clock, duration); returns the time they took in all.
    creat() is open(O_WRONLY | O_CREAT | O_TRUNC), as the C library defines it."""
    buf = memoryview(os.urandom(4 << 20))
    fd = -1
    clock = time.monotonic
    t_start = clock()
    try:
        for op in calls:
            t = clock()
            if op.call == "creat":
                fd = os.open(root / op.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            elif op.call == "open":
                fd = os.open(root / op.file, os.O_WRONLY)
            elif op.call == "write":
                left = op.size
                while left:
                    n = min(left, len(buf))
                    left -= os.write(fd, buf[:n])
            elif op.call == "fsync":
                os.fsync(fd)
            elif op.call == "close":
                os.close(fd)
                fd = -1
            elif op.call == "truncate":
                os.truncate(root / op.file, 0)
            else:
                raise SmartioError(f"unknown call {op.call}")
            if op.timed and lat is not None:
                d = clock() - t
                lat.setdefault(op.call, []).append(d)
                if slowest is not None and d > slowest.get(op.call, (0.0, -1.0))[1]:
                    slowest[op.call] = (t, d)
    finally:
        if fd >= 0:
            os.close(fd)
    return clock() - t_start


def writer_jobset(path: Path, size: int) -> JobSet:
    """The background writer: one buffered sequential writer of `path` (up to `size` bytes, then over again) that
    runs until stopped, allocating blocks as it goes (fallocate=none), as a program writing a big file does."""
    job = Job(name="bg", rw="write", filename=str(path), size=size, bs=BG_BS, time_based_s=86400)
    return JobSet(groups=((job,),), direct=False, options=("fallocate=none", "end_fsync=0"))


def wait_for_writer(writer: BackgroundRun, path: Path, timeout: float = 30.0) -> None:
    """Until fio has written its first bytes (it is then past its start-up and will answer SIGINT with results)."""
    end = time.monotonic() + timeout
    while writer.running() and time.monotonic() < end:
        try:
            if os.stat(path).st_size > 0:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.02)


def run_one(bench: str, root: Path, dev: Device, engine: FioEngine, settings: QasioSettings,
            say: Any) -> dict[str, Any]:
    """One run of one benchmark in the fresh directory `root`; its calls, total time, writer and counters."""
    z = settings.params.sizes
    execute(root, setup_ops(bench, settings.params), None)
    if bench == "m5":
        big = root / "big.dat"
        fd = os.open(big, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, z["m5_big"])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.sync()
        bg_path = big
    else:
        bg_path = root / "bg.dat"
    os.sync()
    before = read_counters(dev)
    if bench == "m5":
        os.truncate(bg_path, 0)          # "another task truncates an existing 8GB file and writes ... again"
    writer = engine.start(writer_jobset(bg_path, z["background"] if bench != "m5" else z["m5_big"]),
                          f"the background writer of {bench}")
    lat: dict[str, list[float]] = {}
    slowest: dict[str, tuple[float, float]] = {}
    try:
        writer.wait_started()
        wait_for_writer(writer, bg_path)
        if bench != "m5":
            time.sleep(settings.warmup_s)   # dirty pages have expired once: background writeback is under way
        if not writer.running():
            raise SmartioError(writer.failure())
        sec0, t0 = sectors_written(dev), time.monotonic()
        total = execute(root, ops(bench, settings.params), lat, slowest)
        sec1, t1 = sectors_written(dev), time.monotonic()
        res = writer.stop()
    except BaseException:
        writer.close()
        raise
    after = read_counters(dev)
    log = read_qasio_log(dev) if after is not None else None
    w = res.jobs["bg"].write
    bg_bytes, bg_s = (w.bytes, w.runtime_ms / 1e3) if w else (0, 0.0)
    out: dict[str, Any] = {
        "calls": summarise(lat), "total_s": round(total, 4),
        "background": {"bytes": bg_bytes, "runtime_s": round(bg_s, 3),
                       "mb_per_s": round(bg_bytes / MIB / bg_s, 4) if bg_s > 0 else 0.0},
        "device_write_mb_per_s": round((sec1 - sec0) * 512 / MIB / max(t1 - t0, 1e-9), 4),
        "counters": counter_delta(before, after) if before is not None and after is not None else None,
        "slowest": explain_waits(slowest, log) if log is not None else None,
    }
    say(f"{bench}: {total:.1f} s, " + ", ".join(f"{c} max {s['max_ms']:.1f} ms" for c, s in out["calls"].items()
                                                 if c != "close")
        + f"; writer {out['background']['mb_per_s']:.2f} MB/s")
    return out



def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _boosted(counters: dict[str, dict[str, int]] | None) -> dict[str, int] | None:
    if counters is None:
        return None
    return {dep: row["boosted"] for dep, row in counters.items() if "boosted" in row}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One benchmark's repeats: its calls pooled, and mean [95 % CI] over the repeats of the figures."""
    pooled: dict[str, dict[str, Any]] = {}
    for call in {c for r in runs for c in r["calls"]}:
        rs = [r["calls"][call] for r in runs if call in r["calls"]]
        n = sum(x["n"] for x in rs)
        pooled[call] = {"n": n, "avg_ms": round(sum(x["avg_ms"] * x["n"] for x in rs) / n, 4),
                        "max_ms": max(x["max_ms"] for x in rs),
                        "p99_ms": round(sum(x["p99_ms"] for x in rs) / len(rs), 4)}   # mean of per-repeat p99
        if len(rs) > 1:
            pooled[call]["ci"] = {k: Stat.of(x[k] for x in rs).to_json() for k in ("avg_ms", "max_ms")}
    counters: dict[str, dict[str, int]] | None = None
    if all(r["counters"] is not None for r in runs):
        counters = {}
        for r in runs:
            for dep, row in r["counters"].items():
                acc = counters.setdefault(dep, {})
                for k, v in row.items():
                    acc[k] = v if k == "pending" else acc.get(k, 0) + v
    return {"calls": pooled,
            "total_s": Stat.of(r["total_s"] for r in runs).to_json(),
            "background_mb_per_s": Stat.of(r["background"]["mb_per_s"] for r in runs).to_json(),
            "device_write_mb_per_s": Stat.of(r["device_write_mb_per_s"] for r in runs).to_json(),
            "counters": counters, "boosted": _boosted(counters), "slowest": slowest_of(runs), "repeats": runs}


def slowest_of(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per call type, the slowest call over the repeats and what the QASIO log says about its wait."""
    out: dict[str, Any] = {}
    for r in runs:
        for call, x in (r.get("slowest") or {}).items():
            if call not in out or x["ms"] > out[call]["ms"]:
                out[call] = x
    return out or None


def run_qasio(settings: QasioSettings, target: str | None, *, command: str = "smartio bench qasio",
              progress: bool = True) -> dict[str, Any]:
    """Run the benchmarks of `settings` in `target`; returns the result document (docs/guide/bench.md)."""
    root, dev = check_target(target, settings)
    scheduler, _ = read_scheduler(dev)
    if settings.dependency is not None:
        if scheduler != "smartio":
            raise UsageError("--dependency", settings.dependency, f"{dev.disk}'s scheduler is {scheduler}; "
                             "--dependency sets the smartio scheduler's QASIO tunables "
                             f"(echo smartio > {dev.queue / 'scheduler'})")
        missing = [t for t in ("qasio_boost", *DEP_TUNABLES) if not (dev.queue / "iosched" / t).exists()]
        if missing:
            raise UsageError("--dependency", settings.dependency, f"the smartio module on {dev.disk} has no "
                             f"{', '.join(missing)} (an older build? run make module)")
    if os.geteuid() != 0:
        raise NeedsRootError("setting the writeback settings (/proc/sys/vm) and the scheduler's tunables for "
                             "the run")
    engine = FioEngine()
    started = _now()
    say = (lambda m: print(f"smartio bench qasio: {m}", file=sys.stderr, flush=True)) if progress \
        else (lambda m: None)
    knobs = Knobs()
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in settings.benchmarks}
    state: dict[str, Any] = {}
    steps = [(r, b) for r in range(settings.repeats) for b in settings.benchmarks]
    prog = Progress(len(steps)) if progress else None
    t_all = time.monotonic()
    with sigterm_as_interrupt():
        try:
            state["writeback"] = set_writeback(knobs, settings.params.writeback())
            wbt = dev.queue / "wbt_lat_usec"
            if wbt.exists():
                state["wbt_lat_usec_before"] = knobs.set(wbt, 0)
            if settings.dependency is not None:
                for k, v in dependency_tunables(settings.dependency).items():
                    knobs.set(dev.queue / "iosched" / k, v)
            state["scheduler"], state["tunables"] = scheduler, read_tunables(dev)
            wb = state["writeback"]["after"]
            say(f"{dev.disk} under {scheduler}" + (f", --dependency {settings.dependency}"
                                                   if settings.dependency else "")
                + f"; vm.dirty_expire_centisecs={wb['dirty_expire_centisecs']} dirty_writeback_centisecs="
                f"{wb['dirty_writeback_centisecs']} dirty_background_bytes={wb['dirty_background_bytes']} "
                f"dirty_bytes={wb['dirty_bytes']}; wbt_lat_usec=0")
            for r, b in steps:
                if prog:
                    prog.begin(f"{b.upper()} (repeat {r + 1}/{settings.repeats})")
                scratch = root / f"{SCRATCH_PREFIX}{secrets.token_hex(4)}"
                scratch.mkdir()
                try:
                    runs[b].append(run_one(b, scratch, dev, engine, settings, say))
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                    os.sync()
                if prog:
                    prog.end()
        finally:
            if prog:
                prog.close()
            knobs.restore()
    results = {"benchmarks": {b: summary(rs) for b, rs in runs.items()},
               "duration_s": round(time.monotonic() - t_all, 1)}
    return {
        "experiment": "qasio",
        "target": {"path": str(root), "kind": "dir", "description": f"directory {root} (ext4 on {dev.path})"},
        "device": {"name": dev.name, "disk": dev.disk, "path": dev.path, "size_bytes": dev.size},
        "scheduler": scheduler,
        "tunables": state.get("tunables"),
        "kernel": platform.release(),
        "fio_version": engine.version(),
        "smartio_version": __version__,
        "command": command,
        "started": started,
        "finished": _now(),
        "settings": {**settings.to_json(), "writeback_before": state["writeback"]["before"],
                     "wbt_lat_usec_before": state.get("wbt_lat_usec_before")},
        "notes": [DISCARD_NOTE] if settings.dependency == "discard" else [],
        "results": results,
    }

"""The timing loop of `smartio bench launch` (with or without `--replay`): one untimed warm-up launch (cold: idle,
after its own cache drop), then one launch per repeat, each timed from its start to its end, cold (caches dropped
before it) or warm, alone or beside a background fio workload that starts first and is stopped when the launch
ends. The launch comparison (`smartio compare launch`) takes a real launch and its replay in turn
(`measure_interleaved`) and can keep one background running through many launches (`RunningBackground`).

    doc = measure(target, settings, launcher, what={...}, command="smartio bench launch ...")

`launcher` is a `Launcher` (smartio.launch.launcher): its `launch()` does one launch and returns its wall time in
seconds. A real command (`CommandLauncher`) is timed from just before its exec to its exit as the parent sees it; a
replay (`replay.Replayer`) from its first operation to its last think time. Each leaves where the time went in
`last_breakdown` (the CPU time the launch used; a replay also its think time and its time per kind of operation),
which the document keeps per launch under results.breakdown_s.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import os
import platform
import time
from typing import Any

from smartio import __version__
from smartio.blockdev import is_root, read_scheduler
from smartio.blockdev.diskstat import SYS_CLASS_BLOCK, read_disk_stat
from smartio.engine.fio import FioEngine
from smartio.errors import NeedsRootError, SmartioError, UsageError
from smartio.launch import background
from smartio.launch.launcher import Launcher, drop_caches
from smartio.launch.mobigen import call_table
from smartio.progress import Progress
from smartio.signals import sigterm_as_interrupt
from smartio.storebench.stats import Stat
from smartio.storebench.target import Target
from smartio.units import mib

SYS_BLOCK = SYS_CLASS_BLOCK        # tests point it at a directory of their own


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    cold: bool = False
    background: str = "none"
    repeats: int = 5
    background_size: int = 256 << 20     # bytes of the background workload's scratch file
    warmup_s: float = 1.0                # the background does I/O this long before the launch starts
    # After a cold launch's cache drop, this long before the launch (or its background) starts. In a full launch
    # table in the testbed (36 idle cold cells of 3 launches: 6 schedulers, 3 applications, real and replay) the
    # first cold launch of a cell took 1.20 times (geometric mean) the mean of the other two, which agreed within
    # 2 %; beside the writer, which starts after the drop and runs a second before the launch, 1.01. (Beside a
    # background that keeps running, measure_interleaved's background_run, it runs through the settle too.)
    settle_s: float = 1.0
    # Cold: one untimed cold launch first, idle (after its own drop and settle; beside a background that keeps
    # running, beside it). The first cold launch of a cell
    # pays for what came before it, the emulator's and the guest's: in a full launch table in the testbed (18 idle
    # cold cells of 8 real launches) the first took 1.17 times (geometric mean, up to 2.3) the median of the other 7;
    # beside the writer 1.01. Warm always has its untimed launch: it fills the cache.
    cold_warmup: bool = True

    def check(self) -> None:
        if self.background not in background.NAMES:
            raise UsageError("--background", self.background, f"unknown; one of {', '.join(background.NAMES)}")
        if self.repeats < 1:
            raise UsageError("--repeats", self.repeats, "must be at least 1")
        if not 0 <= self.warmup_s <= 600:
            raise UsageError("--background-warmup", self.warmup_s, "must be between 0 and 600 seconds")
        if self.cold and not is_root():
            raise NeedsRootError("--cold (dropping the page cache through /proc/sys/vm/drop_caches)")

    @property
    def warmup(self) -> bool:
        """One untimed launch first: always warm (it fills the cache), cold if cold_warmup."""
        return not self.cold or self.cold_warmup

    def to_json(self) -> dict[str, Any]:
        return {"cache": "cold" if self.cold else "warm", "background": self.background, "repeats": self.repeats,
                "background_size_bytes": self.background_size, "background_warmup_s": self.warmup_s,
                "settle_s": self.settle_s if self.cold else 0.0, "warmup_launches": int(self.warmup)}


def disk_io(target: Target) -> tuple[int, int, int] | None:
    """(read requests completed, sectors read, sectors written) of the target's block device so far
    (/sys/class/block/NAME/stat), or None when the target is on no block device. Per launch, the difference tells
    how many requests of what size its reads made, which is how a replay's I/O is compared with the real launch's
    (the background workload only writes), and, beside a background that keeps running, what the device wrote."""
    if target.device is None:
        return None
    try:
        st = read_disk_stat(target.device.name, root=SYS_BLOCK)
    except (OSError, ValueError):
        return None
    return st.read_ios, st.read_sectors, st.write_sectors


class RunningBackground:
    """A background workload started once and kept running through many launches, as BFQ's suite S runs its
    readers and writers (`smartio compare launch`). A workload started anew a second before each
    launch is a new process each time, which bfq weight-raises as interactive (a sync queue that has been idle
    long: bfq_bfqq_handle_idle_busy_switch) for up to 25 s (bfq_wr_duration), so the launch competes with a
    raised writer: a download that runs for minutes is not raised. Started, it runs `head_s` before `__enter__`
    returns.

        with RunningBackground(target, "seq-write", 64 << 20, head_s=30) as bg:
            measure_interleaved(target, settings, arms, background_run=bg)

    Its file lives in `target`'s scratch space; give it a Target of its own (a launch's measurement cleans its
    target up)."""

    def __init__(self, target: Target, name: str, size: int, head_s: float) -> None:
        if name not in background.WORKLOADS:
            raise UsageError("--background", name, f"unknown; one of {', '.join(background.WORKLOADS)}")
        self.target, self.name, self.size, self.head_s = target, name, size, head_s
        self.engine = FioEngine()
        self.run: Any = None
        self.started = 0.0

    def __enter__(self) -> RunningBackground:
        try:
            filename = _prepare_background(self.target, LaunchSettings(background=self.name, background_size=self.size))
            assert filename is not None
            self.run = self.engine.start(background.jobset(self.name, filename, self.size), f"background {self.name}")
            self.run.wait_started()
            self.started = time.monotonic()
            time.sleep(self.head_s)
            self.check()
        except BaseException:
            self.__exit__()
            raise
        return self

    def age_s(self) -> float:
        return time.monotonic() - self.started

    def check(self) -> None:
        """SmartioError if fio has ended (it should run until stopped)."""
        if not self.run.running():
            raise SmartioError(self.run.failure())

    def __exit__(self, *exc: object) -> None:
        try:
            if self.run is not None:
                self.run.close()
        finally:
            self.run = None
            self.target.cleanup()


def device_info(target: Target) -> dict[str, Any]:
    b = target.backing
    info: dict[str, Any] = {"fstype": b.fstype if b else None, "source": b.source if b else None, "name": None}
    if target.device is not None:
        current, _ = read_scheduler(target.device)
        info.update(name=target.device.name, disk=target.device.disk, size_bytes=target.device.size,
                    scheduler=current)
    return info


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _prepare_background(target: Target, settings: LaunchSettings) -> str | None:
    """The background workload's scratch file, allocated up front so that fio does not lay it out (a burst of
    writes of its own) while a launch is timed."""
    if settings.background == "none":
        return None
    target.check_space([settings.background_size])
    filename, _ = target.slot("bg", settings.background_size)
    fd = os.open(filename, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, settings.background_size)
    except OSError as e:
        raise UsageError("--target", target.path, f"cannot allocate the background file "
                         f"({mib(settings.background_size)}): {e.strerror} (lower --background-size)") from e
    finally:
        os.close(fd)
    os.sync()
    return filename


def measure(target: Target, settings: LaunchSettings, launcher: Launcher, *, what: dict[str, Any], command: str,
            progress: bool = True) -> dict[str, Any]:
    """Run `settings.repeats` timed launches; returns the result document (docs/guide/bench.md, launch)."""
    return measure_interleaved(target, settings, [Arm(launcher, what, command, settings.repeats)],
                               progress=progress)[0]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One of the launch series `measure_interleaved` runs side by side: its launcher, what its document says it
    is, the command it names, and its number of timed launches."""
    launcher: Launcher
    what: dict[str, Any]
    command: str
    repeats: int


def interleaving(repeats: list[int]) -> list[int]:
    """The order in which measure_interleaved takes its arms' launches (arm indices): launch j of an arm of n sits
    at (j + 1/2) / n of the series, so arms of unequal repeats are spread over each other evenly; arms at the same
    place go in arm order for even j, reversed for odd j (equal repeats: A B B A A B ...)."""
    keys = [((j + 0.5) / n, k if j % 2 == 0 else -k, k) for k, n in enumerate(repeats) for j in range(n)]
    return [k for *_, k in sorted(keys)]


def measure_interleaved(target: Target, settings: LaunchSettings, arms: list[Arm], *, progress: bool = True,
                        background_run: RunningBackground | None = None) -> list[dict[str, Any]]:
    """Several launch series under the same settings (cache, background), their launches taken in turn, and one
    result document per arm, as `measure` writes it. The launches are spread over each other (`interleaving`:
    A B B A ... for equal repeats); each arm's untimed warm-up launch comes first. So a slow drift of the machine,
    or a state a scheduler keeps from one launch to the next (kyber's write depth), falls on every arm alike:
    measured one series after the other, the first replay of vim beside a writer under kyber took as long as its
    real launches (7.5 s against 6.9-7.6 s) and the next four twice that, kyber's write depth having grown from 1
    to 2 in between and stayed there.

    `background_run`: the settings' background workload, already running (RunningBackground), which the launches
    then run beside instead of starting it for each; caches are dropped without a sync (see drop_caches), and a
    launch's background throughput is what the device wrote while it ran."""
    settings.check()
    if not arms or any(a.repeats < 1 for a in arms):
        raise ValueError("measure_interleaved: at least one arm, each with at least one launch")
    if background_run is not None and background_run.name != settings.background:
        raise ValueError(f"measure_interleaved: background {settings.background!r}, running {background_run.name!r}")
    # The engine that runs the background: the running one's, else a new one for each launch's.
    engine = background_run.engine if background_run is not None else \
        FioEngine() if settings.background != "none" else None
    device = device_info(target)
    started = _now()
    walls: list[list[float]] = [[] for _ in arms]
    bg_mib_s: list[list[float]] = [[] for _ in arms]
    reads: list[list[tuple[int, int]]] = [[] for _ in arms]   # per launch: read requests, sectors (disk_io)
    spent: list[list[dict[str, float]]] = [[] for _ in arms]  # per launch, where its time went (last_breakdown)
    spans: list[list[tuple[float, float]]] = [[] for _ in arms]   # per launch: when it ran (unix s, this clock)
    calls: list[list[dict[str, Any]]] = [[] for _ in arms]   # per launch, a script replay's calls (last_calls)
    order = interleaving([a.repeats for a in arms])
    steps = len(order) + (len(arms) if settings.warmup else 0)
    cache = "cold" if settings.cold else "warm"

    def label(k: int) -> str:
        mode = arms[k].what.get("mode", "launch")
        return f"{mode} {cache}, background {settings.background}"

    def timed(k: int) -> None:
        """One timed launch of arm k, and the disk reads made while it ran (and, beside a running background, the
        megabytes per second the device wrote)."""
        launcher = arms[k].launcher
        before = disk_io(target)
        at = time.time()
        walls[k].append(launcher.launch())
        spans[k].append((at, time.time()))
        after = disk_io(target)
        if (breakdown := getattr(launcher, "last_breakdown", None)) is not None:
            spent[k].append(breakdown)
        if (per_call := getattr(launcher, "last_calls", None)) is not None:
            calls[k].append(per_call)
        if before is not None and after is not None:
            reads[k].append((after[0] - before[0], after[1] - before[1]))
            if background_run is not None and walls[k][-1] > 0:
                bg_mib_s[k].append((after[2] - before[2]) * 512 / (1 << 20) / walls[k][-1])

    with sigterm_as_interrupt(), Progress(steps, stream=None if progress else io.StringIO()) as bar:
        try:
            bg_file = _prepare_background(target, settings) if background_run is None else None
            drop = drop_caches if background_run is None else functools.partial(drop_caches, sync=False)
            if background_run is not None:
                background_run.check()
            for k, arm in enumerate(arms if settings.warmup else ()):
                bar.begin(f"warm-up launch ({label(k)})" if not settings.cold else
                          f"warm-up launch ({arm.what.get('mode', 'launch')} cold, "
                          f"{'idle, ' if background_run is None else ''}not timed)")
                if settings.cold:
                    drop()
                    time.sleep(settings.settle_s)
                arm.launcher.launch()
                bar.end()
            since = background_run.age_s() if background_run is not None else None
            for k in order:
                bar.begin(f"launch {len(walls[k]) + 1}/{arms[k].repeats} ({label(k)})")
                if settings.cold:
                    drop()
                    time.sleep(settings.settle_s)
                if background_run is not None:
                    background_run.check()
                    timed(k)
                    background_run.check()          # it ran through the launch
                elif engine is None or bg_file is None:
                    timed(k)
                else:
                    jobs = background.jobset(settings.background, bg_file, settings.background_size)
                    with engine.start(jobs, f"background {settings.background}") as bg:
                        bg.wait_started()
                        time.sleep(settings.warmup_s)
                        if not bg.running():
                            raise SmartioError(bg.failure())
                        timed(k)
                        result = bg.stop()
                    st = next(iter(result.jobs.values())).write
                    bg_mib_s[k].append(st.bytes / (1 << 20) / (st.runtime_ms / 1000) if st and st.runtime_ms
                                       else 0.0)
                bar.end()
        finally:
            target.cleanup()
    finished = _now()
    docs = []
    for k, arm in enumerate(arms):
        results: dict[str, Any] = {
            "wall_s": Stat.of(walls[k]).to_json(),
            "min_s": round(min(walls[k]), 6),
            "max_s": round(max(walls[k]), 6),
            # When each launch ran, on the clock of the machine that ran it, for a match with the host's load
            # (hostload.during): under the testbed the guest's clock is the host's, set at boot.
            "launch_unix_s": [[round(a, 3), round(b, 3)] for a, b in spans[k]],
        }
        if bg_mib_s[k]:
            results["background_write_mib_s"] = Stat.of(bg_mib_s[k]).to_json()
        if reads[k] and len(reads[k]) == len(walls[k]):
            results["disk_read_requests"] = Stat.of([float(n) for n, _ in reads[k]]).to_json()
            results["disk_read_kib"] = Stat.of([s / 2 for _, s in reads[k]]).to_json()
        if spent[k] and len(spent[k]) == len(walls[k]):
            results["breakdown_s"] = {key: Stat.of([b[key] for b in spent[k]]).to_json() for key in spent[k][0]}
        if calls[k]:
            results["calls"] = call_table(calls[k])
        doc = {
            "experiment": "launch",
            **arm.what,
            "target": {"path": target.path, "kind": target.kind, "description": target.describe()},
            "device": device,
            "scheduler": device.get("scheduler"),
            "kernel": platform.release(),
            "host": platform.node(),
            "fio_version": engine.version() if engine else None,
            "smartio_version": __version__,
            "command": arm.command,
            "started": started,
            "finished": finished,
            "settings": {**dataclasses.replace(settings, repeats=arm.repeats).to_json(),
                         # Beside a background that was running already: no per-launch head start; since when it
                         # ran (at the first timed launch); and background_write_mib_s is the device's writes
                         # during each launch (the launch's own too, and writeback of pages dirtied before it).
                         **({"background_warmup_s": None, "background_running": {"since_s": round(since, 1)},
                             "background_write_mib_s_from": "device"} if since is not None else
                            {"background_write_mib_s_from": "fio"} if settings.background != "none" else {})},
            "results": results,
        }
        if len(arms) > 1:
            doc["interleaved_with"] = [a.what.get("mode", a.command) for j, a in enumerate(arms) if j != k]
        docs.append(doc)
    return docs

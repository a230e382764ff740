"""`smartio compare mobigen SCRIPT`: seed 002's Figure 10 in the testbed, a Mobigen script replayed per filesystem,
optimisation and scheduler, beside a background writer.

One VM session on the emulated flash device (s5-emmc by default), two disks: /dev/vda holds the filesystem,
/dev/vdb the external journal of E. For every filesystem and optimisation the guest makes the filesystem afresh
and mounts it as `compare sqlite` does (smartio.sqlite.compare.make_fs), lays the script's files out, and then,
under each scheduler in turn, starts the background writer, lets it run `background_head_s` (bfq weight-raises a
new writer for up to 25 s), and replays the script `repeats` times, each from the laid-out state with the page
cache dropped (cold). Per replay: the time from the first call to the last thread's end, Mobibench's I/O time
(the calls' durations summed), and the share of the guest's CPU time spent in iowait (seed 000's Figure 10
measure) while it ran. The schedulers' order reverses from one filesystem and optimisation to the next.

The optimisations, as in `compare sqlite` (seed 002, section 6):
  B   the script as recorded: fsync()
  F   fdatasync() for every fsync() of the script
  E   the filesystem's journal on the second disk (ext4 only here)
  P   polled I/O: not applicable (smartio.sqlite.compare.POLL_NA)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Literal

from smartio.compare.spec import DEFAULT_NR_REQUESTS, RUNS_DIR, JsonPlan, SchedulerSpec, parse_schedulers, with_clock
from smartio.errors import SmartioError, UsageError
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.kernelrelease import DEFAULT_KERNEL

FILESYSTEMS = ("ext4", "f2fs")
OPTIMISATIONS = ("B", "F", "E", "P")
DEFAULT_OPTIMISATIONS = ("B", "F", "E")
DEFAULT_SCHEDULERS = "none,mq-deadline,kyber,bfq,smartio"
BACKGROUNDS = ("none", "seq-write", "rand-write", "buffered-write")
DEFAULT_BACKGROUND = "seq-write"
BACKGROUND_SIZE = 64 << 20
BACKGROUND_HEAD_S = 30.0
MOUNT = "/mnt/smartio-mobigen"
DISK_SIZE = 512 << 20
GUEST_FILE = "mobigen-guest.json"
PLOT_FILE = "mobigen.png"
E_NA = "{fs} has no separate journal to move"


@dataclasses.dataclass(frozen=True)
class MobigenPlan(JsonPlan):
    script: str
    schedulers: tuple[SchedulerSpec, ...] = parse_schedulers(DEFAULT_SCHEDULERS)
    filesystems: tuple[str, ...] = FILESYSTEMS
    optimisations: tuple[str, ...] = DEFAULT_OPTIMISATIONS
    background: str = DEFAULT_BACKGROUND
    background_head_s: float = BACKGROUND_HEAD_S
    repeats: int = 3
    think: bool = False
    nr_requests: int = DEFAULT_NR_REQUESTS
    clock_scale: float | None = None     # schedulers' time tunables times this; None: the profile's time scale

    def __post_init__(self) -> None:
        for flag, values, known in (("--filesystems", self.filesystems, FILESYSTEMS),
                                    ("--optimisations", self.optimisations, OPTIMISATIONS)):
            bad = [v for v in values if v not in known]
            if bad or not values:
                raise UsageError(flag, ",".join(values), f"choose from {', '.join(known)}")
        if self.background not in BACKGROUNDS:
            raise UsageError("--background", self.background, f"choose from {', '.join(BACKGROUNDS)}")
        if not 1 <= self.repeats <= 100:
            raise UsageError("--repeats", self.repeats, "must be between 1 and 100")
        if not 0 <= self.background_head_s <= 600:
            raise UsageError("--background-head", self.background_head_s, "must be between 0 and 600 s")
        if any(s.profiled for s in self.schedulers):
            raise UsageError("--schedulers", ",".join(s.label for s in self.schedulers),
                             "the Concurrency Profiler's parameters are not for `compare mobigen`")
        if not os.path.isabs(self.script):
            raise UsageError("SCRIPT", self.script, "must be an absolute path (the guest reads it from the host)")

    @property
    def flavour(self) -> str:
        from smartio.testbed.kernelpkg import flavour_for

        return flavour_for(self.filesystems)

    def configs(self) -> list[tuple[str, str, str, bool]]:
        """(fs, optimisation, sync call, external journal) of every cell that applies; P and E where it cannot
        apply are left out (`na`)."""
        out: list[tuple[str, str, str, bool]] = []
        for fs in self.filesystems:
            for opt in self.optimisations:
                if na(fs, opt) is None:
                    out.append((fs, opt, "fdatasync" if opt == "F" else "fsync", opt == "E"))
        return out


def na(fs: str, opt: str) -> str | None:
    """Why optimisation `opt` does not apply on `fs`, or None."""
    from smartio.sqlite.compare import EXTERNAL_JOURNAL_FS, POLL_NA

    if opt == "P":
        return POLL_NA
    if opt == "E" and fs not in EXTERNAL_JOURNAL_FS:
        return E_NA.format(fs=fs)
    return None


def run_file(fs: str, opt: str, label: str) -> str:
    return f"{RUNS_DIR}/{fs}.{opt}.{label}.json"


def iowait_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of CPU time in iowait between two (iowait, total) jiffies readings (storebench.context's
    read_cpu_times): what the guest's CPUs spent waiting for I/O with nothing else to run."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


# --- guest -----------------------------------------------------------------------------------------------------

def guest_main(argv: list[str]) -> int:
    from smartio.signals import sigterm_as_interrupt

    with sigterm_as_interrupt():
        return _guest_main(argv)


def _guest_main(argv: list[str]) -> int:
    from smartio.blockdev import device_of_node
    from smartio.compare.guest import device_state, restore, say, warm_up
    from smartio.launch.mobigen import Script, ScriptLayout
    from smartio.sqlite.compare import DATA_DISK, make_fs
    from smartio.storebench.target import open_target

    plan = MobigenPlan.from_json(argv[0])
    out = Path(argv[1])
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    script = Script.read(Path(plan.script), "SCRIPT")
    dev = device_of_node(DATA_DISK)
    record: dict[str, Any] = {"kernel": os.uname().release, "before": device_state(dev), "after": None,
                              "script": script.summary(), "runs": []}
    save = lambda: (out / GUEST_FILE).write_text(json.dumps(record, indent=2) + "\n")  # noqa: E731
    save()
    warm_up(DATA_DISK)
    os.makedirs(MOUNT, exist_ok=True)
    failed = 0
    configs = plan.configs()
    try:
        for i, (fs, opt, sync_call, external) in enumerate(configs):
            order = plan.schedulers if i % 2 == 0 else tuple(reversed(plan.schedulers))
            say(f"[{i + 1}/{len(configs)}] {fs} {opt}: making the filesystem")
            try:
                opts = make_fs(fs, external)
                subprocess.run(["mount", "-t", fs, "-o", ",".join(opts), DATA_DISK, MOUNT], check=True,
                               capture_output=True)
            except (SmartioError, subprocess.CalledProcessError) as e:
                record["runs"].append({"fs": fs, "opt": opt, "error": str(e)})
                failed += 1
                save()
                continue
            try:
                target = open_target(MOUNT, writes=True, destroy_data=False)
                with ScriptLayout(script, MOUNT) as layout:
                    for spec in order:
                        failed += _cell(plan, out, dev, target, layout, script, fs, opt, sync_call, spec, record)
                        save()
            finally:
                subprocess.run(["umount", MOUNT], capture_output=True)
    finally:
        restore(dev, record["before"])
        record["after"] = device_state(dev)
        save()
    return 1 if failed else 0


def _cell(plan: MobigenPlan, out: Path, dev: Any, target: Any, layout: Any, script: Any, fs: str, opt: str,
          sync_call: str, spec: SchedulerSpec, record: dict[str, Any]) -> int:
    """One scheduler's replays of one filesystem and optimisation; 1 if it failed."""
    from smartio.compare.guest import say, switch
    from smartio.launch.launcher import drop_caches
    from smartio.launch.measure import RunningBackground
    from smartio.launch.mobigen import MobigenReplayer
    from smartio.storebench.context import read_cpu_times

    t0 = time.monotonic()
    replays: list[dict[str, Any]] = []
    try:
        switch(dev, spec, plan.nr_requests, plan.clock_scale or 1.0)
        bg = (RunningBackground(target, plan.background, BACKGROUND_SIZE, plan.background_head_s)
              if plan.background != "none" else contextlib.nullcontext())
        say(f"{fs} {opt} under {spec.label}: {plan.repeats} replays" +
            (f" beside {plan.background} (after {plan.background_head_s:g} s of it)"
             if plan.background != "none" else ""))
        with bg as running:
            replayer = MobigenReplayer(script, layout, think=plan.think, sync_call=sync_call)
            for r in range(plan.repeats):
                replayer.reset()
                drop_caches()
                c0 = read_cpu_times()
                wall = replayer.launch()
                c1 = read_cpu_times()
                if running is not None:
                    running.check()
                calls = replayer.last_calls or {}
                spent = replayer.last_breakdown
                assert spent is not None        # launch() sets it
                replays.append({"wall_s": round(wall, 6), "io_s": spent["io"], "sync_s": spent["sync"],
                                "iowait_share": round(iowait_share(c0, c1), 6),
                                "failed": sum(c["failed"] for c in calls.values()),
                                "skipped": sum(c["skipped"] for c in calls.values()),
                                "calls": {k: len(c["durations_s"]) for k, c in calls.items()}})
                say(f"  replay {r + 1}: {wall:.2f} s, I/O {spent['io']:.2f} s, iowait "
                    f"{100 * replays[-1]['iowait_share']:.1f} %")
        doc = {"fs": fs, "opt": opt, "scheduler": spec.label, "sync_call": sync_call, "background": plan.background,
               "replays": replays, "duration_s": round(time.monotonic() - t0, 1)}
        (out / run_file(fs, opt, spec.label)).write_text(json.dumps(doc, indent=1) + "\n")
        record["runs"].append({"fs": fs, "opt": opt, "scheduler": spec.label, "rc": 0})
        return 0
    except SmartioError as e:
        say(f"{fs} {opt} under {spec.label}: {e}")
        record["runs"].append({"fs": fs, "opt": opt, "scheduler": spec.label, "rc": e.exit_code, "error": str(e)})
        return 1


# --- host ------------------------------------------------------------------------------------------------------

def _stat(values: list[float]) -> dict[str, Any] | None:
    from smartio.storebench.stats import Stat

    return Stat.of(values).to_json() if values else None     # times and shares: positive, interval on the logs


def _scaled(st: dict[str, Any], k: float) -> dict[str, Any]:
    """A Stat's JSON with its mean and interval times k (a share in %)."""
    lo, hi = st["ci95"]
    return {**st, "mean": st["mean"] * k, "ci95": [None if lo is None else lo * k, None if hi is None else hi * k]}


def assemble(plan: MobigenPlan, guest_out: Path, *, profile: Any, command: str, started: str,
             vm_result: Any | None) -> dict[str, Any]:
    """One document from the guest's run files (pure: tests feed it recorded ones)."""
    from smartio.compare.run import provenance

    gfile = guest_out / GUEST_FILE
    record = json.loads(gfile.read_text()) if gfile.exists() else {}
    table: dict[str, dict[str, dict[str, Any]]] = {}
    missing = []
    for fs in plan.filesystems:
        for opt in plan.optimisations:
            why = na(fs, opt)
            row: dict[str, Any] = table.setdefault(fs, {}).setdefault(opt, {})
            if why:
                row["na"] = why
                continue
            for spec in plan.schedulers:
                f = guest_out / run_file(fs, opt, spec.label)
                if not f.exists():
                    missing.append(f"{fs} {opt} {spec.label}")
                    continue
                reps = json.loads(f.read_text())["replays"]
                row[spec.label] = {k: _stat([r[k] for r in reps]) for k in ("wall_s", "io_s", "iowait_share")}
                row[spec.label]["failed"] = sum(r["failed"] for r in reps)
    return {
        **provenance("mobigen", json.loads(plan.to_json()), profile=profile, command=command, started=started,
                     vm_result=vm_result, known={"kernel": record.get("kernel")}),
        "script": record.get("script"), "guest": {k: v for k, v in record.items() if k != "script"},
        "missing": missing, "table": table,
    }


def _ci(s: dict[str, Any] | None, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    from smartio.report.tables import pm

    return pm(_scaled(s, scale), fmt) if s else "-"


def render(doc: dict[str, Any]) -> str:
    plan = doc["plan"]
    labels = plan["schedulers"]
    s = doc.get("script") or {}
    lines = [f"Mobigen replay (seed 002, Figure 10): {s.get('path', plan['script'])}, {s.get('calls', '?')} calls in "
             f"{s.get('threads', '?')} threads, {'with' if plan['think'] else 'without'} think times; beside "
             f"{plan['background']}; {plan['repeats']} replays per cell, cold; mean [95 % interval]",
             f"kernel {doc.get('kernel') or '?'}"]
    for title, key, fmt, scale in (("replay time, s", "wall_s", "{:.2f}", 1.0),
                                   ("Mobibench's I/O time (the calls' durations summed), s", "io_s", "{:.2f}", 1.0),
                                   ("iowait, % of the guest's CPU time", "iowait_share", "{:.1f}", 100.0)):
        lines += ["", title, "| fs | opt | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
        for fs, rows in doc["table"].items():
            for opt, row in rows.items():
                if "na" in row:
                    lines.append(f"| {fs} | {opt} | n/a |" + " |" * (len(labels) - 1))
                    continue
                lines.append(f"| {fs} | {opt} | " + " | ".join(_ci((row.get(lb) or {}).get(key), fmt, scale)
                                                              for lb in labels) + " |")
    best = [(fs, opt, lb, row[lb]["wall_s"]["mean"]) for fs, rows in doc["table"].items()
            for opt, row in rows.items() for lb in labels if (row.get(lb) or {}).get("wall_s")]
    if best:
        for lb in labels:
            mine = [b for b in best if b[2] == lb]
            if mine:
                fs, opt, _, t = min(mine, key=lambda b: b[3])
                lines.append(f"fastest under {lb}: {fs} {opt} ({t:.2f} s)")
    nas = sorted({f"{fs} {opt}: {row['na']}" for fs, rows in doc["table"].items() for opt, row in rows.items()
                  if "na" in row and opt != "P"})
    if any("na" in row for rows in doc["table"].values() for opt, row in rows.items() if opt == "P"):
        nas.append(f"P: {next(iter(r for rows in doc['table'].values() for o, r in rows.items() if o == 'P'))['na']}")
    lines += [f"n/a {x}" for x in nas]
    if doc.get("missing"):
        lines.append(f"not measured: {', '.join(doc['missing'])}")
    return "\n".join(lines)


def plot(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """mobigen.png: the replay time and the iowait share per filesystem and optimisation (groups) and scheduler
    (bars), with their intervals."""
    from smartio.report import plots

    labels = doc["plan"]["schedulers"]
    cells = [(fs, opt, row) for fs, rows in doc["table"].items() for opt, row in rows.items() if "na" not in row]
    if not cells:
        return []
    def series(key: str, scale: float) -> dict[str, list[dict[str, Any]]]:
        stats = {lb: [(row.get(lb) or {}).get(key) for _, _, row in cells] for lb in labels}
        return {lb: [_scaled(st, scale) if st else {"mean": 0.0, "ci95": [None, None]} for st in sts]
                for lb, sts in stats.items()}

    fig, axes = plots.figure(ncols=2, width=max(7.0, 1.8 * len(cells) + 3), height=4.4)
    groups = [f"{fs} {opt}" for fs, opt, _ in cells]
    plots.bars(axes[0], groups, series("wall_s", 1.0), "replay time, s")
    plots.bars(axes[1], groups, series("iowait_share", 100.0), "iowait, % of the guest's CPU time")
    s = doc.get("script") or {}
    plan = doc["plan"]
    plots.stamp(fig, f"{Path(s.get('path') or plan['script']).name} ({s.get('calls', '?')} calls), beside "
                     f"{plan['background']}, {plan['repeats']} cold replays per cell, "
                     f"{'think times kept' if plan['think'] else 'no think times'}; emulated "
                     f"{(doc.get('profile') or {}).get('name', '?')}; kernel {doc.get('kernel') or '?'}; "
                     f"{doc.get('started', '?')}; mean and 95 % interval")
    path = out_dir / PLOT_FILE
    plots.save(fig, path)
    return [path]


def run_mobigen_compare(plan: MobigenPlan, *, profile: str, time_scale: float | None, out: Path | None,
                        timeout: float, command: str,
                        stream: IO[bytes] | None | Literal["stdout"] = "stdout",
                        db: str | Path | None = None, boot: Boot = DEFAULT_BOOT,
                        kernel: str = DEFAULT_KERNEL) -> tuple[dict, Path]:
    from smartio.compare.run import module_for, run_in_guest, vm_profile

    prof = vm_profile(profile, timeout, time_scale)
    plan = with_clock(plan, prof)
    modules = module_for((s.name for s in plan.schedulers), kernel, plan.flavour)
    return run_in_guest("smartio.launch.mobigen_compare", plan.to_json(),
                        lambda guest_out, result, started: assemble(plan, guest_out, profile=prof, command=command,
                                                                    started=started, vm_result=result),
                        profile=prof, out=out, timeout=timeout, stream=stream, db=db, disks=2, disk_size=DISK_SIZE,
                        modules=modules, flavour=plan.flavour, boot=boot, kernel=kernel,
                        plots=plot)


if __name__ == "__main__":
    from smartio.compare.run import guest_entry

    guest_entry(guest_main)

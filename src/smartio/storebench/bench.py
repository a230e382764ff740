"""One StoreBench run as `smartio bench` makes it, without the command line: check everything that can be checked,
run, store the document, write its outputs. The Concurrency Profiler (`smartio profile`) is one such run plus the
tunables it derives. The CLI and the testbed's guest both call these with typed settings."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smartio.blockdev import Device, is_root, read_scheduler, write_tunables
from smartio.engine import Engine
from smartio.engine.fake import RecordingEngine, ReplayEngine
from smartio.engine.fio import FioEngine
from smartio.errors import NeedsRootError, UsageError
from smartio.flashdev.model import pacing
from smartio.iosched.tunables import DISPATCH_LIMITS, WRITE_POLICY
from smartio.outputs import check_output_dir, check_output_file
from smartio.results import Store, save_run
from smartio.storebench.options import PATTERNS, Settings
from smartio.storebench.runner import check, run_bench
from smartio.storebench.target import Target

# The module's tunables that take the Concurrency Profiler's parameters, and the write policy derived with them
# (pacing()), from the module's table.
TUNABLE = {p: DISPATCH_LIMITS[p] for p in PATTERNS}
PACING_TUNABLES = WRITE_POLICY


@dataclasses.dataclass(frozen=True)
class Outputs:
    """Where a run goes and what it may touch: the target and its permission, the scheduler to switch to, the JSON
    file, the plots directory and the results database (the flags of the same names)."""

    target: str | None = None
    destroy_data: bool = False
    scheduler: str | None = None
    json: str | None = None
    plots: str | None = None
    db: str | None = None


def make_engine() -> Engine:
    """fio, or (for tests) recorded fio JSON: SMARTIO_REPLAY_FIO replays a recording, SMARTIO_RECORD_FIO makes one."""
    replay = os.environ.get("SMARTIO_REPLAY_FIO")
    if replay:
        return ReplayEngine(Path(replay))
    engine: Engine = FioEngine()
    record = os.environ.get("SMARTIO_RECORD_FIO")
    return RecordingEngine(engine, Path(record)) if record else engine


def execute(experiment: str, settings: Settings, out: Outputs, *, command: str,
            preflight: Callable[[Target], object] | None = None) -> tuple[dict[str, Any], Target]:
    """Check everything that can be checked, then run, store and write the outputs."""
    if out.json:
        check_output_file("--json", out.json)
    if out.plots:
        check_output_dir("--plots", out.plots)
    engine = make_engine()                  # fails early (exit 2) when fio is missing
    target = check(experiment, out.target, settings, out.destroy_data)
    store = Store(out.db)                   # fails early on a bad --db, before anything runs
    if preflight:
        preflight(target)
    doc = run_bench(experiment, target, settings, engine, scheduler=out.scheduler, command=command)
    save_run(store, doc, out.json)
    if out.plots:
        from smartio.report.plots import write_plots

        for path in write_plots(doc, Path(out.plots)):
            print(f"plot: {path}", file=sys.stderr)
    return doc, target


def applicable_device(target: Target) -> Device:
    """The device whose smartio scheduler `profile --apply` will tune, checked before anything is measured."""
    dev = target.device
    if dev is None:
        raise UsageError("--target", target.path, "has no block device whose scheduler could take the parameters")
    current, _ = read_scheduler(dev)
    if current != "smartio":
        raise UsageError("--apply", dev.disk, f"scheduler is {current}, not smartio; "
                         f"echo smartio > {dev.queue / 'scheduler'} first")
    missing = [t for t in (*TUNABLE.values(), *PACING_TUNABLES) if not (dev.queue / "iosched" / t).exists()]
    if missing:
        raise UsageError("--apply", dev.disk, f"its smartio scheduler has no {', '.join(missing)} "
                         "(an older module? rebuild it with make module)")
    if not is_root():
        raise NeedsRootError(f"writing the smartio scheduler's tunables of {dev.disk} (--apply)")
    return dev


@dataclasses.dataclass(frozen=True)
class Profiled:
    """What the Concurrency Profiler found: the four parameters, the write pacing derived from the same run, and the
    device whose scheduler took both (None without --apply)."""

    parameters: dict[str, int]
    pacing: dict[str, int]
    applied_to: Device | None

    def lines(self) -> list[str]:
        """As `smartio profile` prints them: `seq_read=4`, ..., the pacing tunables, and where they were applied."""
        return [*(f"{k}={v}" for k, v in (*self.parameters.items(), *self.pacing.items())),
                *([f"applied to {self.applied_to.queue / 'iosched'}"] if self.applied_to is not None else [])]


def profile(settings: Settings, out: Outputs, *, apply: bool, command: str) -> Profiled:
    """The Concurrency Profiler: the concurrency experiment, its parameters and pacing, written into the device's
    smartio tunables if `apply`."""
    doc, target = execute("concurrency", settings, out, command=command,
                          preflight=applicable_device if apply else None)
    params = doc["results"]["parameters"]
    paced = pacing(doc["results"])
    dev = None
    if apply:
        dev = applicable_device(target)
        write_tunables(dev, {**{TUNABLE[p]: n for p, n in params.items()}, **paced})
    return Profiled(params, paced, dev)

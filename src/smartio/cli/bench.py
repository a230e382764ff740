"""`smartio bench` and `smartio profile`: parse, then hand over to smartio.experiments."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from smartio.blockdev import write_tunables
from smartio.engine import Engine
from smartio.engine.fake import RecordingEngine, ReplayEngine
from smartio.engine.fio import FioEngine
from smartio.errors import UsageError
from smartio.experiments.options import EXPERIMENTS, OPTIONS, PATTERNS, Option, Settings
from smartio.experiments.runner import check, command_line, run_bench
from smartio.experiments.target import open_target
from smartio.report import tables
from smartio.results import Store

PROFILE_SKIPS = {"--streams", "--mixes", "--iodepth"}
# The module's tunables that take the Concurrency Profiler's parameters (kernel/smartio-iosched.c).
TUNABLE = {p: f"dispatch_limit_{p}" for p in PATTERNS}


def _add(parser: argparse.ArgumentParser, opt: Option) -> None:
    help_ = (opt.help + (f" [{opt.unit}]" if opt.unit else "")).replace("%", "%%")   # argparse formats help
    if opt.kind == "flag":
        parser.add_argument(opt.flag, action="store_true", help=help_)
        return
    kw: dict[str, Any] = {"help": help_, "default": opt.default}
    if opt.kind == "int":
        kw["type"] = int
    if opt.choices:
        kw["choices"] = opt.choices
    if opt.default is not None and opt.kind != "flag":
        kw["help"] += f" (default {opt.default})"
    parser.add_argument(opt.flag, **kw)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="StoreBench measurements with fio: latency, slowdown, concurrency, mixed",
                       description="Run a StoreBench experiment (seed 000, section 4) with fio as the engine.")
    p.add_argument("experiment", choices=EXPERIMENTS, metavar="EXPERIMENT",
                   help=f"one of: {', '.join(EXPERIMENTS)}")
    for opt in OPTIONS:
        _add(p, opt)
    p.set_defaults(func=bench)

    q = sub.add_parser("profile", help="the Concurrency Profiler: print the four concurrency parameters",
                       description="Measure the concurrency parameters (the N of maximal speedup for seq/rand "
                                   "read/write) and optionally write them into smartio-iosched's tunables.")
    for opt in OPTIONS:
        if opt.flag not in PROFILE_SKIPS:
            _add(q, opt)
    q.add_argument("--apply", action="store_true",
                   help="write the parameters into the device's smartio scheduler tunables (root)")
    q.set_defaults(func=profile, streams=1, mixes="10", iodepth=1)


def make_engine() -> Engine:
    replay = os.environ.get("SMARTIO_REPLAY_FIO")
    if replay:
        return ReplayEngine(Path(replay))
    engine: Engine = FioEngine()
    record = os.environ.get("SMARTIO_RECORD_FIO")
    return RecordingEngine(engine, Path(record)) if record else engine


def _execute(experiment: str, a: argparse.Namespace) -> dict[str, Any]:
    settings = Settings.from_args(a)
    engine = make_engine()                  # fails early (exit 2) when fio is missing
    target = check(experiment, a.target, settings, a.destroy_data)
    store = Store(a.db)                     # fails early on a bad --db, before anything runs
    doc = run_bench(experiment, target, settings, engine, scheduler=a.scheduler, command=command_line())
    doc["id"] = store.add(doc)
    store.close()
    if a.json:
        try:
            Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as e:
            raise UsageError("--json", a.json, f"cannot write: {e.strerror}")
    if a.plots:
        from smartio.report.plots import write_plots

        for path in write_plots(doc, Path(a.plots)):
            print(f"plot: {path}", file=sys.stderr)
    return doc


def bench(a: argparse.Namespace) -> int:
    doc = _execute(a.experiment, a)
    print(tables.render(doc))
    print(f"\nstored as run {doc['id']} (smartio results show {doc['id']})")
    return 0


def profile(a: argparse.Namespace) -> int:
    doc = _execute("concurrency", a)
    params = doc["results"]["parameters"]
    for p, n in params.items():
        print(f"{p}={n}")
    if a.apply:
        dev = open_target(a.target, writes=False, destroy_data=False).device
        if dev is None:
            raise UsageError("--target", a.target, "has no block device whose scheduler could take the parameters")
        scheduler = doc["device"].get("scheduler")
        if scheduler != "smartio":
            raise UsageError("--apply", dev.disk, f"scheduler is {scheduler}, not smartio; "
                             f"echo smartio > {dev.queue / 'scheduler'} first")
        write_tunables(dev, {TUNABLE[p]: n for p, n in params.items()})
        print(f"applied to {dev.queue / 'iosched'}")
    return 0

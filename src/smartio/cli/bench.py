"""`smartio bench EXPERIMENT` and `smartio profile`: parse, then hand over to the experiment's library.

The experiments are the registry's (smartio.registry) that have a bench side: StoreBench's here, qasio here, sqlite
and launch from their own CLI modules, which add their subcommands to this one's."""

from __future__ import annotations

import argparse
from typing import Any

from smartio import registry
from smartio.outputs import check_output_file
from smartio.qasio.workload import DEPENDENCIES
from smartio.report import tables
from smartio.results import Store, save_run, stored_line
from smartio.storebench.bench import Outputs, execute, profile as profile_run
from smartio.storebench.options import OPTIONS, Option, Settings
from smartio.storebench.runner import command_line

PROFILE_SKIPS = {"--streams", "--mixes", "--iodepth"}


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


EXIT_CODES = "Exit codes: 0 ok, 1 run failed, 2 bad input, 3 needs root, 130 interrupted."


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure on this machine: StoreBench (latency, slowdown, concurrency, mixed, "
                                     "all), qasio (M1-M5), sqlite, launch",
                       description="Run one experiment in place on this machine, with fio as the engine where it "
                                   "does I/O. Each experiment is a subcommand with its own options.",
                       epilog=EXIT_CODES)
    exps = p.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name in registry.STOREBENCH:
        q = exps.add_parser(name, help=registry.get(name).summary,
                            description=f"{registry.get(name).summary}. StoreBench (seed 000, section 4) with fio "
                                        "as the engine.", epilog=EXIT_CODES)
        for opt in OPTIONS:
            _add(q, opt)
        q.add_argument("--submit", metavar="URL", help="then send the run to this fleet server (smartio serve); "
                                                       "a failed upload stays pending for `smartio results submit`")
        q.add_argument("--public", action="store_true", help="with --submit: list the run in the server's rankings")
        q.set_defaults(func=bench)
    q = exps.add_parser("qasio", help=registry.get("qasio").summary,
                        description="Seed 001's microbenchmarks M1-M5 beside a background buffered writer on a "
                                    "mounted ext4 directory (root).", epilog=EXIT_CODES)
    for opt in OPTIONS:
        if opt.flag in QASIO_SHARED:
            _add(q, opt)
    for flag, kw in QASIO_OPTIONS:
        q.add_argument(flag, **kw)
    q.set_defaults(func=bench_qasio)
    from smartio.cli import launch, sqlite

    sqlite.register_bench(exps)
    launch.register_bench(exps)

    q = sub.add_parser("profile", help="the Concurrency Profiler: print the four concurrency parameters",
                       description="Measure the concurrency parameters (the N of maximal speedup for seq/rand "
                                   "read/write) and optionally write them into smartio-iosched's tunables.",
                       epilog=EXIT_CODES)
    for opt in OPTIONS:
        if opt.flag not in PROFILE_SKIPS:
            _add(q, opt)
    q.add_argument("--apply", action="store_true",
                   help="write the parameters into the device's smartio scheduler tunables (root)")
    q.set_defaults(func=profile, streams=1, mixes="10", iodepth=1)


def _outputs(a: argparse.Namespace) -> Outputs:
    return Outputs(target=a.target, destroy_data=a.destroy_data, scheduler=a.scheduler, json=a.json, plots=a.plots,
                   db=a.db)


def bench(a: argparse.Namespace) -> int:
    if a.submit:
        from smartio.fleet.client import check_url

        check_url(a.submit)
    doc, _ = execute(a.experiment, Settings.from_args(a), _outputs(a), command=command_line())
    print(tables.render(doc))
    print(stored_line(doc))
    if a.submit:
        from smartio.fleet.client import submit

        lines, _ok = submit(Store(a.db), a.submit, [doc["id"]], public=a.public, model=None)
        print("\n".join(lines))     # a failed upload is kept and retried; the run itself succeeded
    return 0


QASIO_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--dependency", {"choices": DEPENDENCIES,
                      "help": "set the smartio scheduler's QASIO tunables for the run and restore them afterwards: "
                              "boost every dependency type (all), none (boosting off), or one type alone "
                              "(default: leave the tunables as they are; refused under another scheduler)"}),
    ("--scale", {"type": float, "metavar": "F",
                 "help": "multiply the paper's sizes (M2's 1MB and M4's 2MB files, M3's 300MB, the 8GB "
                         "background and M5 files, the dirty thresholds) by F; 1 / the device's time scale "
                         "keeps them as long on the emulated device as on the phone (default 0.1)"}),
    ("--count-scale", {"type": float, "metavar": "C",
                       "help": "multiply the iteration counts (500, 200, 500) and M3's size by C (default 0.1)"}),
    ("--benchmarks", {"metavar": "LIST", "help": "comma-separated subset of m1,m2,m3,m4,m5 (default all)"}),
)
# StoreBench's options that `bench qasio` takes too.
QASIO_SHARED = ("--target", "--repeats", "--json", "--db")


def bench_qasio(a: argparse.Namespace) -> int:
    from smartio.qasio.report import render_bench
    from smartio.qasio.run import QasioSettings, run_qasio
    from smartio.qasio.workload import BENCHMARKS, parse_benchmarks

    settings = QasioSettings(benchmarks=parse_benchmarks(a.benchmarks) if a.benchmarks else BENCHMARKS,
                        dependency=a.dependency, scale=a.scale, count_scale=a.count_scale,
                        repeats=a.repeats if a.repeats is not None else 1)
    if a.json:
        check_output_file("--json", a.json)
    store = Store(a.db)
    doc = run_qasio(settings, a.target, command=command_line())
    save_run(store, doc, a.json)
    print(render_bench(doc))
    print(stored_line(doc))
    return 0


def profile(a: argparse.Namespace) -> int:
    found = profile_run(Settings.from_args(a), _outputs(a), apply=a.apply, command=command_line())
    print("\n".join(found.lines()))
    return 0

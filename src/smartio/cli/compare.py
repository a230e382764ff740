"""`smartio compare`: parse the options and hand them to smartio.compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from smartio.compare.report import render
from smartio.compare.run import run_compare
from smartio.compare.spec import (DEFAULT_NR_REQUESTS, DEFAULT_SCHEDULERS, EXPERIMENTS, STREAMS, VM_REPEATS,
                                  VM_SIZES, Plan, parse_schedulers)
from smartio.experiments.runner import command_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="one experiment under several I/O schedulers, in one VM session",
                       description="Boot the testbed once with an emulated flash device and run the same "
                                   "`smartio bench` experiment under each scheduler; print the paper's Figure 11 "
                                   "(slowdown) and/or Figure 12 (mixed workload) per scheduler, write "
                                   "compare.json and PNG plots. The device's scheduler is restored afterwards.",
                       epilog="example: smartio compare --profile s5-emmc --schedulers none,mq-deadline,kyber,bfq,"
                              "smartio,smartio:read_anticipation_us=0 --quick. Exit codes: 0 ok, 1 a run failed, "
                              "2 bad input.")
    p.add_argument("--profile", default="s5-emmc", metavar="NAME",
                   help="emulated flash profile (see `smartio flashdev profiles`; default s5-emmc)")
    p.add_argument("--schedulers", default=DEFAULT_SCHEDULERS, metavar="LIST",
                   help=f"comma-separated schedulers, in order; NAME:TUNABLE=N[:TUNABLE=N] sets tunables after "
                        f"switching (default {DEFAULT_SCHEDULERS})")
    p.add_argument("--experiment", default="slowdown", choices=EXPERIMENTS,
                   help="slowdown (Figure 11), mixed (Figure 12) or both (default slowdown)")
    p.add_argument("--streams", type=int, default=1, choices=STREAMS,
                   help="readers and writers of the slowdown experiment (4 = 4R4W; default 1)")
    p.add_argument("--quick", action="store_true",
                   help=f"smaller sizes and {VM_REPEATS[1]} repeat(s): "
                        + ", ".join(f"{e} {q}" for e, (_, q) in VM_SIZES.items()))
    p.add_argument("--repeats", type=int, metavar="N",
                   help=f"repeats of every measurement (default {VM_REPEATS[0]})")
    p.add_argument("--size", metavar="S",
                   help="data per stream, e.g. 1M (default " + ", ".join(f"{e} {d}" for e, (d, _) in VM_SIZES.items())
                        + "; the VM makes every I/O cost milliseconds)")
    p.add_argument("--mixes", metavar="LIST", help="read percentages of the mixed sweep (bench's default)")
    p.add_argument("--nr-requests", type=int, default=DEFAULT_NR_REQUESTS, metavar="N",
                   help=f"raise the queue's nr_requests to N under every scheduler but none, so the scheduler "
                        f"holds the requests a shallow device queue cannot (default {DEFAULT_NR_REQUESTS})")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="new or empty directory for compare.json, plots and the VM's artifacts "
                        "(default ./artifacts/compare-<timestamp>)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                   help="kill the VM after S seconds (default 3600)")
    p.set_defaults(func=compare)


def plan_from_args(a: argparse.Namespace) -> Plan:
    return Plan(schedulers=parse_schedulers(a.schedulers), experiment=a.experiment, streams=a.streams,
                quick=a.quick, repeats=a.repeats, size=a.size, mixes=a.mixes, nr_requests=a.nr_requests)


def compare(a: argparse.Namespace) -> int:
    doc, out = run_compare(plan_from_args(a), profile=a.profile, out=a.out, timeout=a.timeout,
                           command=command_line(), stream=sys.stderr.buffer)   # progress apart from the tables
    print(render(doc))
    print(f"\ncompare.json and plots in {out}", file=sys.stderr)
    return 0

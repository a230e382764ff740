"""`smartio compare`: parse the options and hand them to smartio.compare."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smartio.compare.run import check_testbed, kept_line, vm_profile
from smartio.compare.spec import DEFAULT_NR_REQUESTS, DEFAULT_SCHEDULERS, parse_schedulers
from smartio.errors import UsageError
from smartio.launch import compare as la
from smartio.qasio import compare as qa
from smartio.qasio.workload import BENCHMARKS, parse_benchmarks
from smartio.results import Store
from smartio.signals import sigterm_as_interrupt
from smartio.sqlite import compare as sq
from smartio.storebench.compare import EXPERIMENTS, STREAMS, VM_REPEATS, VM_SIZES, Plan, run_compare
from smartio.storebench.compare_report import render
from smartio.storebench.runner import command_line
from smartio.testbed.boot import DEFAULT_CPUS, Boot


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
    p.add_argument("--schedulers", metavar="LIST",
                   help=f"comma-separated schedulers, in order; NAME:TUNABLE=N[:TUNABLE=N] sets tunables after "
                        f"switching (default {DEFAULT_SCHEDULERS}; for launch {la.DEFAULT_SCHEDULERS})")
    p.add_argument("--experiment", default="slowdown", choices=(*EXPERIMENTS, "sqlite", "launch", "qasio"),
                   help="slowdown (Figure 11), mixed (Figure 12), both, sqlite (seed 002's Table 2 and "
                        "Figure 4 per filesystem and optimisation), launch (application start-up, real and "
                        "replayed, cold and warm, idle and beside background writes), or qasio (seed 001's Table 2 "
                        "and Figure 8: M1-M5 per scheduler and QASIO dependency type); see the options below "
                        "(default slowdown)")
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
    p.add_argument("--cpus", type=int, metavar="N",
                   help=f"the guest's vCPUs (default {DEFAULT_CPUS}); under TCG a second vCPU makes the guest drop its "
                        "TSC for the HPET and spreads a cold launch's kernel time (README, \"Where the scatter comes "
                        "from\")")
    p.add_argument("--kernel-arg", action="append", metavar="ARG", dest="kernel_args",
                   help="one more guest kernel argument, e.g. tsc=reliable (repeat for more)")
    p.add_argument("--db", metavar="FILE",
                   help="results database that keeps the comparison, also an interrupted or failed one (default "
                        "$SMARTIO_DB or ~/.local/share/smartio/results.db; `smartio results list`)")
    q = p.add_argument_group("--experiment sqlite")
    q.add_argument("--filesystems", default=",".join(sq.FILESYSTEMS), metavar="LIST",
                   help=f"filesystems, in order (default {','.join(sq.FILESYSTEMS)}; f2fs and nilfs2 boot the "
                        "generic kernel flavour)")
    q.add_argument("--optimisations", default=",".join(sq.OPTIMISATIONS), metavar="LIST",
                   help=f"of {','.join(sq.OPTIMISATIONS)} (default all)")
    q.add_argument("--ops", default=",".join(sq.OPS), metavar="LIST", help="insert,update (default both)")
    q.add_argument("--journal-modes", default=",".join(sq.FIG4_MODES), metavar="LIST",
                   help="journal modes of the Figure 4 table, inserts with fsync on every filesystem "
                        f"(default {','.join(sq.FIG4_MODES)}; empty for none)")
    q.add_argument("--sync", default="full", choices=("off", "normal", "full"),
                   help="PRAGMA synchronous of every run (default full, SQLite's default)")
    q.add_argument("--transactions", type=int, metavar="N",
                   help=f"transactions per repeat (default {sq.VM_TX[0]}, --quick {sq.VM_TX[1]})")
    q.add_argument("--time-scale", type=float, default=sq.DEFAULT_TIME_SCALE, metavar="X",
                   help=f"the profile's time scale for this experiment, launch and qasio (default "
                        f"{sq.DEFAULT_TIME_SCALE:g}; see README)")
    q.add_argument("--scheduler-clock", choices=("device", "guest"), metavar="{device,guest}",
                   help="launch and qasio: device (default) multiplies every scheduler's time tunables (deadlines, "
                        "latency targets, slices, idle and anticipation windows) by the time scale, as the device "
                        "and the guest's programs are slowed; guest leaves them at the kernel's defaults")
    g = p.add_argument_group("--experiment launch (default schedulers: " + la.DEFAULT_SCHEDULERS + ")")
    g.add_argument("--apps", metavar="LIST", help=f"applications of the set (default {','.join(la.APPS)}; "
                                                  "--quick python-stdlib)")
    g.add_argument("--backgrounds", metavar="LIST", help=f"of {','.join(la.BACKGROUNDS)} (default none,"
                                                         f"{la.HEADLINE_BG})")
    g.add_argument("--caches", metavar="LIST", help="cold,warm (default both; --quick cold)")
    g.add_argument("--modes", metavar="LIST", help="real,replay (default both)")
    g.add_argument("--headline-repeats", type=int, metavar="N",
                   help=f"launches in the cells of the headline (cold, real, idle and beside {la.HEADLINE_BG}), "
                        "for every scheduler; default --repeats")
    g.add_argument("--replay-repeats", type=int, metavar="N",
                   help="launches in the cold replay cells, for every scheduler (where replay against real is "
                        "decided); default --repeats")
    g.add_argument("--separate", action="store_true",
                   help="measure a real cell and its replay cell one after the other instead of taking their "
                        "launches in turn (the default, so that both see the scheduler in the same state)")
    g.add_argument("--background-start", choices=la.BACKGROUND_STARTS, metavar="{once,each-launch}",
                   help=f"once (default): under each scheduler a background workload starts "
                        f"{la.BACKGROUND_HEAD_S:g} s before the first launch beside it and runs through all of them, "
                        "as a download would (a writer started anew for each launch is weight-raised by bfq as a new "
                        "process); each-launch: started a second before every launch")
    g.add_argument("--resume", type=Path, metavar="DIR",
                   help="go on with the launch comparison in DIR (its --out) in a new VM session: its plan, profile "
                        "and time scale, only the cells no earlier session finished; the table is then the whole "
                        "run's (a comparison of all four backgrounds takes longer than one sitting)")
    r = p.add_argument_group("--experiment qasio (--schedulers then lists runs: smartio:DEPENDENCY with DEPENDENCY "
                             "none, all, meta, data, sync or discard, and none, mq-deadline, kyber, bfq; default "
                             + ",".join(qa.DEFAULT_RUNS) + ")")
    r.add_argument("--scale", type=float, default=qa.DEFAULT_SCALE, metavar="F",
                   help=f"bench qasio's --scale: the paper's sizes times F (default {qa.DEFAULT_SCALE:g})")
    r.add_argument("--count-scale", type=float, default=qa.DEFAULT_COUNT_SCALE, metavar="C",
                   help=f"bench qasio's --count-scale: iterations times C (default {qa.DEFAULT_COUNT_SCALE:g})")
    r.add_argument("--benchmarks", default=",".join(BENCHMARKS), metavar="LIST",
                   help="of m1,m2,m3,m4,m5 (default all)")
    p.set_defaults(func=compare)


GUEST_EXPERIMENTS = ("launch", "qasio", "sqlite")     # a guest side of their own, with --time-scale


def _list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def sqlite_plan_from_args(a: argparse.Namespace) -> sq.SqlitePlan:
    return sq.SqlitePlan(filesystems=_list(a.filesystems), optimisations=_list(a.optimisations), ops=_list(a.ops),
                         fig4_modes=_list(a.journal_modes), sync=a.sync,
                         transactions=a.transactions or sq.VM_TX[a.quick],
                         repeats=a.repeats or sq.VM_REPEATS[a.quick])


def plan_from_args(a: argparse.Namespace) -> Plan:
    schedulers = DEFAULT_SCHEDULERS if a.schedulers is None else a.schedulers
    return Plan(schedulers=parse_schedulers(schedulers), experiment=a.experiment, streams=a.streams, quick=a.quick,
                repeats=a.repeats, size=a.size, mixes=a.mixes, nr_requests=a.nr_requests)


def launch_plan_from_args(a: argparse.Namespace) -> la.LaunchPlan:
    schedulers = la.DEFAULT_SCHEDULERS if a.schedulers is None else a.schedulers
    return la.LaunchPlan(
        schedulers=parse_schedulers(schedulers),
        apps=_list(a.apps) if a.apps else ("python-stdlib",) if a.quick else la.APPS,
        backgrounds=_list(a.backgrounds) if a.backgrounds else ("none", la.HEADLINE_BG),
        caches=_list(a.caches) if a.caches else ("cold",) if a.quick else la.CACHES,
        modes=_list(a.modes) if a.modes else la.MODES,
        repeats=a.repeats or (1 if a.quick else 3), headline_repeats=a.headline_repeats,
        replay_repeats=a.replay_repeats, nr_requests=a.nr_requests, clock_scale=_clock(a),
        interleave=not a.separate, background_start=a.background_start or "once")


def qasio_plan_from_args(a: argparse.Namespace) -> qa.QasioPlan:
    runs = qa.DEFAULT_RUNS if a.schedulers is None else qa.parse_runs(a.schedulers)
    return qa.QasioPlan(runs=runs, benchmarks=parse_benchmarks(a.benchmarks), scale=a.scale,
                        count_scale=a.count_scale, repeats=a.repeats or 1, nr_requests=a.nr_requests,
                        clock_scale=_clock(a))


def _clock(a: argparse.Namespace) -> float | None:
    """--scheduler-clock: None (device: the profile's time scale, settled on the host) or 1 (guest)."""
    return 1.0 if a.scheduler_clock == "guest" else None


def _check_resume(a: argparse.Namespace) -> None:
    """--resume takes the plan from the run it resumes: it is refused beside anything that would change it."""
    if a.experiment != "launch":
        raise UsageError("--resume", a.resume, "applies to --experiment launch only")
    if not a.resume.is_dir():
        raise UsageError("--resume", a.resume, "is not a directory (give the --out of a launch comparison)")
    given = [flag for flag, v in (("--schedulers", a.schedulers), ("--apps", a.apps), ("--backgrounds", a.backgrounds),
                                  ("--caches", a.caches), ("--modes", a.modes), ("--repeats", a.repeats),
                                  ("--headline-repeats", a.headline_repeats), ("--replay-repeats", a.replay_repeats),
                                  ("--out", a.out), ("--scheduler-clock", a.scheduler_clock), ("--cpus", a.cpus),
                                  ("--kernel-arg", a.kernel_args), ("--background-start", a.background_start))
             if v is not None]
    given += [flag for flag, v in (("--quick", a.quick), ("--separate", a.separate)) if v]
    if given:
        raise UsageError("--resume", a.resume, f"takes the plan of the run it resumes; drop {', '.join(given)}")


def _guest_experiment(a: argparse.Namespace) -> tuple[Callable[..., tuple[dict, Path]], Any, Callable[[dict], str]]:
    """The runner, plan and renderer of an experiment with a guest side of its own (launch, qasio, sqlite)."""
    if a.experiment == "launch":
        return la.run_launch_compare, launch_plan_from_args(a), la.render
    if a.experiment == "qasio":
        from smartio.qasio.report import render_compare

        return qa.run_qasio_compare, qasio_plan_from_args(a), render_compare
    from smartio.sqlite.compare_report import render as render_sqlite

    return sq.run_sqlite_compare, sqlite_plan_from_args(a), render_sqlite


def compare(a: argparse.Namespace) -> int:
    if a.scheduler_clock and a.experiment not in ("launch", "qasio"):
        raise UsageError("--scheduler-clock", a.scheduler_clock, "applies to --experiment launch and qasio only")
    for flag, n in (("--headline-repeats", a.headline_repeats), ("--replay-repeats", a.replay_repeats)):
        if n is not None and a.experiment != "launch":
            raise UsageError(flag, n, "applies to --experiment launch only")
    # A comparison runs for up to hours, often under nohup or a job runner, where Ctrl-C is not available (a
    # background job of a non-interactive shell ignores SIGINT): SIGTERM and SIGHUP stop it as Ctrl-C does, and
    # compare.json keeps every run the guest finished.
    with sigterm_as_interrupt():
        return _compare(a)


def _compare(a: argparse.Namespace) -> int:
    # The plan is checked first, then --db, then the testbed boots: bad input costs nothing and writes nothing.
    if a.resume is not None:
        _check_resume(a)
        render_doc: Callable[[dict], str] = la.render
        plan: Any = None
    elif a.experiment in GUEST_EXPERIMENTS:
        run, plan, render_doc = _guest_experiment(a)
    else:
        plan, render_doc = plan_from_args(a), render
    boot = Boot.of(a.cpus, a.kernel_args)    # checked here; a resumed run boots as its first session did
    vm_profile(a.profile, a.timeout, a.time_scale if a.resume is None and a.experiment in GUEST_EXPERIMENTS else None)
    check_testbed()                          # root, QEMU: exit 3 or 1 before a database is made
    Store(a.db).close()
    if a.resume is not None:
        doc, out = la.run_launch_compare(None, profile=a.profile, out=None, timeout=a.timeout, command=command_line(),
                                         stream=sys.stderr.buffer, resume=a.resume, db=a.db)
    elif a.experiment in GUEST_EXPERIMENTS:
        doc, out = run(plan, profile=a.profile, time_scale=a.time_scale, out=a.out, timeout=a.timeout,
                       command=command_line(), stream=sys.stderr.buffer, db=a.db, boot=boot)
    else:
        # progress on stderr, apart from the tables
        doc, out = run_compare(plan, profile=a.profile, out=a.out, timeout=a.timeout, command=command_line(),
                               stream=sys.stderr.buffer, db=a.db, boot=boot)
    print(render_doc(doc))
    print("\n" + kept_line(doc, out), file=sys.stderr)
    return 0

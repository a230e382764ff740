"""`smartio compare EXPERIMENT | analyze DIR | resume DIR`: parse the options and hand them to the experiment's
comparison side (smartio.registry names it) and smartio.compare's host runner."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smartio import registry
from smartio.compare.run import check_testbed, kept_line, vm_profile
from smartio.compare.spec import DEFAULT_NR_REQUESTS, DEFAULT_SCHEDULERS, GUEST_TIME_SCALE, parse_schedulers
from smartio.errors import SmartioError, UsageError
from smartio.launch import compare as la, mobigen_compare as mg
from smartio.qasio import compare as qa
from smartio.qasio.workload import BENCHMARKS, parse_benchmarks
from smartio.results import Store
from smartio.signals import sigterm_as_interrupt
from smartio.sqlite import compare as sq
from smartio.storebench.compare import STREAMS, VM_REPEATS, VM_SIZES, Plan
from smartio.storebench.runner import command_line
from smartio.testbed.boot import DEFAULT_CPUS, Boot
from smartio.testbed.guest import MATRIX_MODULE, check_kernel
from smartio.testbed.kernelrelease import DEFAULT_KERNEL

EXIT_CODES = "Exit codes: 0 ok, 1 a run failed, 2 bad input, 3 needs root, 130 interrupted."


def _common(p: argparse.ArgumentParser, default_schedulers: str | None, repeats: str,
            schedulers_help: str = "") -> None:
    """The options of every experiment's comparison: the device, the schedulers (not for sqlite, which compares
    filesystems under the device's default scheduler), the VM, the outputs."""
    p.add_argument("--profile", default="s5-emmc", metavar="NAME",
                   help="emulated flash profile (see `smartio flashdev profiles`; default s5-emmc)")
    if default_schedulers is not None:
        p.add_argument("--schedulers", metavar="LIST",
                       help=schedulers_help or f"comma-separated schedulers, in order; NAME:TUNABLE=N[:TUNABLE=N] sets "
                                               f"tunables after switching, smartio:profile runs the Concurrency "
                                               f"Profiler first (default {default_schedulers})")
    p.add_argument("--repeats", type=int, metavar="N", help=f"repeats of every measurement (default {repeats})")
    if default_schedulers is not None:
        p.add_argument("--nr-requests", type=int, default=DEFAULT_NR_REQUESTS, metavar="N",
                       help=f"raise the queue's nr_requests to N under every scheduler but none, so the scheduler "
                            f"holds the requests a shallow device queue cannot (default {DEFAULT_NR_REQUESTS})")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="new or empty directory for compare.json, plots and the VM's artifacts "
                        "(default ./artifacts/compare-<timestamp>)")
    _session(p)
    p.add_argument("--cpus", type=int, metavar="N",
                   help=f"the guest's vCPUs (default {DEFAULT_CPUS}); under TCG a second vCPU makes the guest drop its "
                        "TSC for the HPET and spreads a cold launch's kernel time (docs/faq.md)")
    p.add_argument("--kernel-arg", action="append", metavar="ARG", dest="kernel_args",
                   help="one more guest kernel argument, e.g. tsc=reliable (repeat for more)")
    p.add_argument("--kernel", default=DEFAULT_KERNEL, metavar="K",
                   help=f"the guest's kernel: {DEFAULT_KERNEL} (default, Debian 12), 6.12 (Debian 13), newest (Debian "
                        f"unstable) or an exact release; smartio's module is the one built for it "
                        f"({MATRIX_MODULE.format(kernel='<K>')} for 6.12 and newest: make -C kernel matrix). The "
                        f"document's `kernel` is the release that ran")


def _session(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                   help="kill the VM after S seconds (default 3600)")
    p.add_argument("--db", metavar="FILE",
                   help="results database that keeps the comparison, also an interrupted or failed one (default "
                        "$SMARTIO_DB or ~/.local/share/smartio/results.db; `smartio results list`)")


def _time_scale(p: argparse.ArgumentParser, clock: bool) -> None:
    p.add_argument("--time-scale", type=float, default=GUEST_TIME_SCALE, metavar="X",
                   help=f"the profile's time scale for this experiment (default {GUEST_TIME_SCALE:g}; see "
                        "docs/design/testbed.md)")
    if clock:
        p.add_argument("--scheduler-clock", choices=("device", "guest"), metavar="{device,guest}",
                       help="device (default) multiplies every scheduler's time tunables (deadlines, latency "
                            "targets, slices, idle and anticipation windows) by the time scale, as the device and the "
                            "guest's programs are slowed; guest leaves them at the kernel's defaults")


def _storebench(p: argparse.ArgumentParser) -> None:
    p.add_argument("--streams", type=int, default=1, choices=STREAMS,
                   help="readers and writers of the slowdown experiment (4 = 4R4W; default 1)")
    p.add_argument("--quick", action="store_true",
                   help=f"smaller sizes and {VM_REPEATS[1]} repeat(s): "
                        + ", ".join(f"{e} {q}" for e, (_, q) in VM_SIZES.items()))
    p.add_argument("--size", metavar="S",
                   help="data per stream, e.g. 1M (default " + ", ".join(f"{e} {d}" for e, (d, _) in VM_SIZES.items())
                        + "; the VM makes every I/O cost milliseconds)")
    p.add_argument("--mixes", metavar="LIST", help="read percentages of the mixed sweep (bench's default)")


def _sqlite(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help=f"{sq.VM_TX[1]} transactions and {sq.VM_REPEATS[1]} repeats")
    p.add_argument("--filesystems", default=",".join(sq.FILESYSTEMS), metavar="LIST",
                   help=f"filesystems, in order (default {','.join(sq.FILESYSTEMS)}; f2fs and nilfs2 boot the "
                        "generic kernel flavour)")
    p.add_argument("--optimisations", default=",".join(sq.OPTIMISATIONS), metavar="LIST",
                   help=f"of {','.join(sq.OPTIMISATIONS)} (default all)")
    p.add_argument("--ops", default=",".join(sq.OPS), metavar="LIST", help="insert,update (default both)")
    p.add_argument("--journal-modes", default=",".join(sq.FIG4_MODES), metavar="LIST",
                   help="journal modes of the Figure 4 table, inserts with fsync on every filesystem "
                        f"(default {','.join(sq.FIG4_MODES)}; empty for none)")
    p.add_argument("--sync", default="full", choices=("off", "normal", "full"),
                   help="PRAGMA synchronous of every run (default full, SQLite's default)")
    p.add_argument("--transactions", type=int, metavar="N",
                   help=f"transactions per repeat (default {sq.VM_TX[0]}, --quick {sq.VM_TX[1]})")
    _time_scale(p, clock=False)


def _launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="python-stdlib only, cold only, 1 repeat")
    p.add_argument("--apps", metavar="LIST", help=f"applications of the set (default {','.join(la.APPS)}; "
                                                  "--quick python-stdlib)")
    p.add_argument("--backgrounds", metavar="LIST", help=f"of {','.join(la.BACKGROUNDS)} (default none,"
                                                         f"{la.HEADLINE_BG})")
    p.add_argument("--caches", metavar="LIST", help="cold,warm (default both; --quick cold)")
    p.add_argument("--modes", metavar="LIST", help="real,replay (default both)")
    p.add_argument("--headline-repeats", type=int, metavar="N",
                   help=f"launches in the cells of the headline (cold, real, idle and beside {la.HEADLINE_BG}), "
                        "for every scheduler; default --repeats")
    p.add_argument("--replay-repeats", type=int, metavar="N",
                   help="launches in the cold replay cells, for every scheduler (where replay against real is "
                        "decided); default --repeats")
    p.add_argument("--separate", action="store_true",
                   help="measure a real cell and its replay cell one after the other instead of taking their "
                        "launches in turn (the default, so that both see the scheduler in the same state)")
    p.add_argument("--background-start", choices=la.BACKGROUND_STARTS, metavar="{once,each-launch}",
                   help=f"once (default): under each scheduler a background workload starts "
                        f"{la.BACKGROUND_HEAD_S:g} s before the first launch beside it and runs through all of them, "
                        "as a download would (a writer started anew for each launch is weight-raised by bfq as a new "
                        "process); each-launch: started a second before every launch")
    _time_scale(p, clock=True)


def _mobigen(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", type=Path, metavar="SCRIPT",
                   help="the Mobigen script (Mobibench's `-g` format, e.g. its shell/mobigen.out.twitter)")
    p.add_argument("--quick", action="store_true", help="ext4 B and F, 1 replay, 10 s of background first")
    p.add_argument("--filesystems", default=",".join(mg.FILESYSTEMS), metavar="LIST",
                   help=f"of {','.join(mg.FILESYSTEMS)} (default both; f2fs boots the generic kernel flavour)")
    p.add_argument("--optimisations", default=",".join(mg.DEFAULT_OPTIMISATIONS), metavar="LIST",
                   help=f"of {','.join(mg.OPTIMISATIONS)} (default {','.join(mg.DEFAULT_OPTIMISATIONS)}; P is "
                        "reported n/a, as in compare sqlite)")
    p.add_argument("--background", default=mg.DEFAULT_BACKGROUND, choices=mg.BACKGROUNDS,
                   help=f"the writer beside the replays (default {mg.DEFAULT_BACKGROUND})")
    p.add_argument("--background-head", type=float, metavar="S",
                   help=f"how long the writer runs under a scheduler before its first replay (default "
                        f"{mg.BACKGROUND_HEAD_S:g}: bfq weight-raises a new writer for up to 25 s)")
    p.add_argument("--think", action="store_true",
                   help="keep the script's think times (default: its calls back to back, each thread from the start)")
    _time_scale(p, clock=True)


def _qasio(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", type=float, default=qa.DEFAULT_SCALE, metavar="F",
                   help=f"bench qasio's --scale: the paper's sizes times F (default {qa.DEFAULT_SCALE:g})")
    p.add_argument("--count-scale", type=float, default=qa.DEFAULT_COUNT_SCALE, metavar="C",
                   help=f"bench qasio's --count-scale: iterations times C (default {qa.DEFAULT_COUNT_SCALE:g})")
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS), metavar="LIST",
                   help="of m1,m2,m3,m4,m5 (default all)")
    _time_scale(p, clock=True)


QASIO_SCHEDULERS = ("runs: smartio:DEPENDENCY with DEPENDENCY none, all, meta, data, sync or discard, and none, "
                    "mq-deadline, kyber, bfq (default " + ",".join(qa.DEFAULT_RUNS) + ")")
# Each experiment's own options, its default schedulers (None: it takes none) and its default repeats.
_STOREBENCH_REPEATS = f"{VM_REPEATS[0]}, --quick {VM_REPEATS[1]}"
OPTIONS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str | None, str]] = {
    "slowdown": (_storebench, DEFAULT_SCHEDULERS, _STOREBENCH_REPEATS),
    "mixed": (_storebench, DEFAULT_SCHEDULERS, _STOREBENCH_REPEATS),
    "both": (_storebench, DEFAULT_SCHEDULERS, _STOREBENCH_REPEATS),
    "sqlite": (_sqlite, None, f"{sq.VM_REPEATS[0]}, --quick {sq.VM_REPEATS[1]}"),
    "launch": (_launch, la.DEFAULT_SCHEDULERS, "3, --quick 1"),
    "mobigen": (_mobigen, mg.DEFAULT_SCHEDULERS, "3, --quick 1"),
    "qasio": (_qasio, ",".join(qa.DEFAULT_RUNS), "1"),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="one experiment under several I/O schedulers, in one VM session",
                       description="Boot the testbed once with an emulated flash device and run the same experiment "
                                   "under each scheduler; print its table (Figure 11 and 12 for StoreBench, seed 001's "
                                   "Table 2 for qasio, seed 002's Table 2 and Figure 4 for sqlite, launch per "
                                   "scheduler and background), write compare.json and PNG plots. The device's "
                                   "scheduler is restored afterwards. `analyze DIR` reprints a comparison, `resume "
                                   "DIR` goes on with an unfinished launch comparison.",
                       epilog="example: smartio compare slowdown --profile s5-emmc --schedulers none,mq-deadline,kyber,"
                              "bfq,smartio,smartio:read_anticipation_us=0 --quick. " + EXIT_CODES)
    exps = p.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name in registry.COMPARE:
        exp = registry.get(name)
        own, default_schedulers, repeats = OPTIONS[name]
        where = (", per filesystem and optimisation" if default_schedulers is None else ", under each scheduler")
        q = exps.add_parser(name, help=exp.summary, description=exp.summary + where + ", in one VM session of the "
                            "testbed.", epilog=EXIT_CODES)
        _common(q, default_schedulers, repeats, QASIO_SCHEDULERS if name == "qasio" else "")
        own(q)
        q.set_defaults(func=compare)
    q = exps.add_parser("analyze", help="reprint a comparison from its directory, run nothing",
                        description="Print the tables of the comparison in DIR (its compare.json; for a launch "
                                    "comparison still going, assembled from its cell files), and the scheduler "
                                    "counters behind them where the experiment keeps them.", epilog=EXIT_CODES)
    q.add_argument("dir", type=Path, metavar="DIR", help="a comparison's --out directory")
    q.add_argument("--plots", type=Path, metavar="DIR", help="draw the comparison's plots into DIR")
    q.set_defaults(func=analyze)
    q = exps.add_parser("resume", help="go on with an unfinished launch comparison in a new VM session",
                        description="Go on with the launch comparison in DIR (its --out) in a new VM session: its "
                                    "plan, profile, time scale and guest settings, only the cells no earlier session "
                                    "finished; the table is then the whole run's (a comparison of all four "
                                    "backgrounds takes longer than one sitting).", epilog=EXIT_CODES)
    q.add_argument("dir", type=Path, metavar="DIR", help="the launch comparison's --out directory")
    _session(q)
    q.set_defaults(func=resume, experiment="launch")


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


def mobigen_plan_from_args(a: argparse.Namespace) -> mg.MobigenPlan:
    from smartio.launch.mobigen import Script

    Script.read(a.script, "SCRIPT")             # a missing or foreign file is exit 2 before anything boots
    return mg.MobigenPlan(
        script=str(a.script.resolve()),
        schedulers=parse_schedulers(a.schedulers or mg.DEFAULT_SCHEDULERS),
        filesystems=("ext4",) if a.quick else _list(a.filesystems),
        optimisations=("B", "F") if a.quick else _list(a.optimisations),
        background=a.background, repeats=a.repeats or (1 if a.quick else 3), think=a.think,
        background_head_s=a.background_head if a.background_head is not None else
        10.0 if a.quick else mg.BACKGROUND_HEAD_S,
        nr_requests=a.nr_requests, clock_scale=_clock(a))


def _clock(a: argparse.Namespace) -> float | None:
    """--scheduler-clock: None (device: the profile's time scale, settled on the host) or 1 (guest)."""
    return 1.0 if a.scheduler_clock == "guest" else None


PLANS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "launch": launch_plan_from_args, "qasio": qasio_plan_from_args, "sqlite": sqlite_plan_from_args,
    "mobigen": mobigen_plan_from_args}
GUEST_EXPERIMENTS = tuple(PLANS)     # a guest side of their own, with --time-scale


def _guest_experiment(a: argparse.Namespace) -> tuple[Callable[..., tuple[dict, Path]], Any]:
    """The runner and plan of an experiment with a guest side of its own (launch, qasio, sqlite)."""
    exp = registry.get(a.experiment)
    assert exp.compare is not None
    return registry.resolve(exp.compare.run), PLANS[a.experiment](a)


def _report(experiment: str, doc: dict[str, Any], out: Path) -> None:
    """What a comparison prints when it is done: its tables, and where it is kept (on stderr, apart from them)."""
    print(registry.get(experiment).compare_renderer()(doc))
    print("\n" + kept_line(doc, out), file=sys.stderr)


def compare(a: argparse.Namespace) -> int:
    # A comparison runs for up to hours, often under nohup or a job runner, where Ctrl-C is not available (a
    # background job of a non-interactive shell ignores SIGINT): SIGTERM and SIGHUP stop it as Ctrl-C does, and
    # compare.json keeps every run the guest finished.
    with sigterm_as_interrupt():
        doc, out = _compare(a, command_line())
    _report(a.experiment, doc, out)
    return 0


def _compare(a: argparse.Namespace, command: str) -> tuple[dict[str, Any], Path]:
    # The plan is checked first, then --db, then the testbed boots: bad input costs nothing and writes nothing.
    if a.experiment in GUEST_EXPERIMENTS:
        run, plan = _guest_experiment(a)
    else:
        plan = plan_from_args(a)
    boot = Boot.of(a.cpus, a.kernel_args)    # checked here
    check_kernel(a.kernel)
    vm_profile(a.profile, a.timeout, a.time_scale if a.experiment in GUEST_EXPERIMENTS else None)
    check_testbed()                          # root, QEMU: exit 3 or 1 before a database is made
    Store(a.db).close()
    if a.experiment in GUEST_EXPERIMENTS:
        return run(plan, profile=a.profile, time_scale=a.time_scale, out=a.out, timeout=a.timeout,
                   command=command, stream=sys.stderr.buffer, db=a.db, boot=boot, kernel=a.kernel)
    from smartio.storebench.compare import run_compare

    # progress on stderr, apart from the tables
    return run_compare(plan, profile=a.profile, out=a.out, timeout=a.timeout, command=command,
                       stream=sys.stderr.buffer, db=a.db, boot=boot, kernel=a.kernel)


def resume(a: argparse.Namespace) -> int:
    with sigterm_as_interrupt():
        doc, out = _resume(a, command_line())
    _report("launch", doc, out)
    return 0


def _resume(a: argparse.Namespace, command: str) -> tuple[dict[str, Any], Path]:
    if not a.dir.is_dir():
        raise UsageError("DIR", a.dir, "is not a directory (give the --out of a launch comparison)")
    vm_profile("s5-emmc", a.timeout)         # checks --timeout
    check_testbed()
    Store(a.db).close()
    return la.run_launch_compare(None, profile="s5-emmc", out=None, timeout=a.timeout, command=command,
                                 stream=sys.stderr.buffer, resume=a.dir, db=a.db)


def run_command(argv: list[str], command: str) -> tuple[dict[str, Any], Path]:
    """`smartio compare ARGV` (an experiment or `resume`) in this process, for the bench scripts: prints what the
    command prints and returns the comparison's document and directory; bad input is a UsageError (exit 2).
    `command` is what the document records as the command that made it (the bench script's own command line)."""
    from smartio.cli import build_parser

    try:
        a = build_parser().parse_args(["compare", *argv])
    except SystemExit as e:
        raise UsageError(None, " ".join(argv), "not a `smartio compare` command line (see above)") from e
    if a.experiment not in (*registry.COMPARE, "resume"):
        raise UsageError(None, " ".join(argv), "runs no comparison")
    with sigterm_as_interrupt():
        doc, out = _resume(a, command) if a.func is resume else _compare(a, command)
    _report(a.experiment, doc, out)
    return doc, out


def analyze(a: argparse.Namespace) -> int:
    doc, exp, note = registry.read_comparison(a.dir)
    assert exp.compare is not None
    if a.plots is not None and exp.compare.plot is None:
        raise UsageError("--plots", a.plots, f"a {exp.name} comparison has no plots")
    if note:
        print(f"smartio compare analyze: {note}", file=sys.stderr)
    print("\n".join(registry.analysis(a.dir, doc, exp)))
    if a.plots is not None and exp.compare.plot is not None:
        a.plots.mkdir(parents=True, exist_ok=True)
        try:
            for path in registry.resolve(exp.compare.plot)(doc, a.plots):
                print(f"plot: {path}", file=sys.stderr)
        except OSError as e:
            raise SmartioError(f"cannot write the plots into {a.plots}: {e.strerror}") from e
    return 0

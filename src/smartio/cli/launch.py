"""`smartio bench launch` (time a start-up, real or replayed) and `smartio launch record`: parse, then hand over to
smartio.launch."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from smartio.errors import UsageError
from smartio.outputs import check_output_file
from smartio.storebench.runner import command_line
from smartio.units import parse_size

EXIT_CODES = "Exit codes: 0 ok, 1 run failed (or the command did), 2 bad input, 3 needs root (--cold), 130 interrupted."


def register(sub: argparse._SubParsersAction) -> None:
    from smartio.launch.apps import APPS

    p = sub.add_parser("launch", help="record a start-up's file I/O (strace), for `smartio bench launch --replay`",
                       description="Record the file-level I/O of an application's start-up (seed 002's Mobigen): "
                                   "`smartio bench launch` times it, real or replayed from the recording.")
    lsub = p.add_subparsers(dest="launch_command", metavar="ACTION", required=True)
    c = lsub.add_parser("record", help="record the file-level I/O of a command's start-up (strace)",
                        description="Runs COMMAND warm once, once under strace (opens, stats, reads and writes "
                                    "with offsets and sizes, mmaps, fsyncs, think times), five times without "
                                    "strace (its real warm time: the shortest), and as root once cold to see "
                                    "which pages of mapped files it faults in (mincore). Writes a JSON-lines "
                                    "trace; its format is in docs/design/file-formats.md.",
                        epilog=EXIT_CODES)
    c.add_argument("-o", "--output", metavar="TRACE", help="trace file to write (required)")
    c.add_argument("--app", metavar="NAME",
                   help="record an application of the set that ships with smartio instead of COMMAND: "
                        + "; ".join(f"{x.name}: {x.help}" for x in APPS.values()))
    c.add_argument("--cwd", metavar="DIR", default=".", help="directory to run the command in (default .)")
    c.add_argument("--no-cold", action="store_true",
                   help="skip the cold launch (which drops the page cache); mapped files are then replayed whole")
    c.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to record")
    c.set_defaults(func=record)


def _timing(q: argparse.ArgumentParser) -> None:
    from smartio.launch import background

    q.add_argument("--target", metavar="DIR", help="directory on the filesystem to measure (required); the "
                                                   "background's scratch file is made in it and removed after")
    cache = q.add_mutually_exclusive_group()
    cache.add_argument("--cold", dest="cold", action="store_true",
                       help="drop the page cache, dentries and inodes before each launch, after one untimed "
                            "cold launch (root)")
    cache.add_argument("--warm", dest="cold", action="store_false",
                       help="one untimed launch first, so that every timed one finds its files cached (default)")
    q.add_argument("--background", default="none", choices=background.NAMES,
                   help="workload fio runs from before each launch until its end: "
                        + "; ".join(f"{w.name}: {w.help}" for w in background.WORKLOADS.values())
                        + " (default none)")
    q.add_argument("--repeats", type=int, default=5, metavar="N", help="timed launches (default 5)")
    q.add_argument("--background-size", default="256M", metavar="SIZE",
                   help="size of the background's scratch file (default 256M)")
    q.add_argument("--background-warmup", type=float, default=1.0, metavar="S",
                   help="seconds the background runs before the launch starts (default 1)")
    q.add_argument("--json", metavar="FILE", help="write the result document as JSON")
    q.add_argument("--db", metavar="FILE", help="results database (default $SMARTIO_DB or "
                                                 "~/.local/share/smartio/results.db)")


def register_bench(exps: argparse._SubParsersAction) -> None:
    """`smartio bench launch` (the subcommand `smartio bench` adds for it)."""
    r = exps.add_parser("launch", help="application start-up time, real or replayed, cold or warm, beside "
                                       "background writes",
                        description="Start-up time of an application (seed 000 section 7.4, seed 001 section 6.3): "
                                    "wall time from exec to exit of COMMAND, run in --target with no input and its "
                                    "output discarded; or, with --replay TRACE, of a replay of a recorded start-up "
                                    "(`smartio launch record`): its files laid out under a scratch directory in "
                                    "--target, its operations replayed in order with their think times, the files "
                                    "removed after. Mean, 95 % interval, min and max over --repeats launches.",
                        epilog=EXIT_CODES)
    _timing(r)
    src = r.add_mutually_exclusive_group()
    src.add_argument("--app", metavar="TRACE",
                     help="install the application a trace recorded (its files, real content, and the symbolic "
                          "links it followed) in --target and run it there in a chroot (root): a real launch "
                          "from the target's filesystem, beside which --replay of the same trace can be set. "
                          "COMMAND defaults to the recorded one")
    src.add_argument("--replay", metavar="TRACE", help="replay this trace's start-up instead of running a command; "
                                                       "a Mobigen script (`TID TIME_US CALL ARGS...` lines, as "
                                                       "`mobibench -g` replays) is replayed one thread per script "
                                                       "thread")
    r.add_argument("--no-think", action="store_true",
                   help="with --replay: no think times, every operation right after the one before (a Mobigen "
                        "script's threads all start at once)")
    r.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to launch")
    r.set_defaults(func=bench_launch)


def _argv(a: argparse.Namespace) -> list[str]:
    argv = list(a.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("--", "(missing)", "give the command after `--`, e.g. `-- python3 -c 'import json'`")
    return argv


def _settings(a: argparse.Namespace) -> Any:
    from smartio.launch.measure import LaunchSettings

    s = LaunchSettings(cold=a.cold, background=a.background, repeats=a.repeats,
                 background_size=parse_size("--background-size", a.background_size), warmup_s=a.background_warmup)
    s.check()
    return s


def _finish(a: argparse.Namespace, doc: dict[str, Any]) -> int:
    from smartio.launch.report import render
    from smartio.results import Store, save_run, stored_line

    save_run(Store(a.db), doc, a.json)
    print(render(doc))
    print(stored_line(doc))
    return 0


def bench_launch(a: argparse.Namespace) -> int:
    if a.no_think and a.replay is None:
        raise UsageError(None, "--no-think", "goes with --replay (a real launch has no think times to leave out)")
    if a.replay is not None:
        if a.argv and a.argv != ["--"]:
            raise UsageError("--replay", a.replay, "replays a trace; give no COMMAND beside it")
        return replay(a)
    return run(a)


def run(a: argparse.Namespace) -> int:
    from smartio.launch.commands import run_launch
    from smartio.results import Store

    argv = _argv(a) if a.app is None or a.argv else []
    settings = _settings(a)
    if a.json:
        check_output_file("--json", a.json)
    Store(a.db).close()                       # a bad --db fails before anything runs
    return _finish(a, run_launch(argv, a.target, settings, command=command_line(), app=a.app))


def replay(a: argparse.Namespace) -> int:
    from smartio.launch.commands import replay_launch
    from smartio.results import Store

    settings = _settings(a)
    if a.json:
        check_output_file("--json", a.json)
    Store(a.db).close()
    return _finish(a, replay_launch(a.replay, a.target, settings, command=command_line(),
                                    think=not a.no_think))


def record(a: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from smartio.blockdev import is_root
    from smartio.launch.launcher import check_command
    from smartio.launch.trace import record as record_trace

    if not a.output:
        raise UsageError("-o", "(missing)", "give the trace file to write")
    out = check_output_file("-o", a.output)
    if a.app is not None:
        from smartio.launch.apps import APPS

        if a.argv and a.argv != ["--"]:
            raise UsageError("--app", a.app, "give either --app or a COMMAND, not both")
        if a.app not in APPS:
            raise UsageError("--app", a.app, f"unknown; one of {', '.join(APPS)}")
        argv, a.cwd = APPS[a.app].prepare()
    else:
        argv = _argv(a)
    if not os.path.isdir(a.cwd):
        raise UsageError("--cwd", a.cwd, "is not a directory")
    check_command(argv, a.cwd)
    cold = is_root() and not a.no_cold

    def say(m: str) -> None:
        print(f"smartio launch record: {m}", file=sys.stderr, flush=True)

    if not cold:
        say("not root or --no-cold: no cold launch, so mapped files will be replayed whole (an overstatement)")
    trace = record_trace(argv, os.path.abspath(a.cwd), cold_residency=cold, say=say)
    try:
        trace.write(Path(out))
    except OSError as e:
        raise UsageError("-o", a.output, f"cannot write: {e.strerror}") from e
    h = trace.header
    reads = [o for o in trace.ops if o.op == "read"]
    mapped = sum(n for o in trace.ops for _, n in o.extents)
    print(f"{out}: {len(trace.ops)} operations on {len(trace.files)} files "
          f"({sum(f.size for f in trace.files) / (1 << 20):.1f} MiB): {len(reads)} reads of "
          f"{sum(o.size for o in reads) / (1 << 20):.2f} MiB, {mapped / (1 << 20):.2f} MiB of mapped pages "
          f"({h['residency']})")
    print(f"  launch {h['untraced_wall_s'] * 1e3:.1f} ms warm without strace, {h['traced_wall_s'] * 1e3:.1f} ms "
          f"under strace; think times × {h['think_scale']:.3f} on replay")
    return 0

"""`smartio trace record|analyze|model-check`: wires the command line to smartio.trace (and, for model-check,
smartio.trace.modelcheck)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from smartio.errors import UsageError
from smartio.outputs import check_output_file
from smartio.trace.modelcheck import TOLERANCE_US


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trace", help="record block-layer events and characterise them",
                              description="Record block-layer events (tracefs) and characterise them "
                                          "(request sizes, latency, flushes, locality, busy time).")
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)

    r = sub.add_parser("record", help="record block events while COMMAND runs, or until Ctrl-C (needs root)",
                       description="Record queue/insert/issue/complete events with sector, size, flags, pid, "
                                   "command and ns timestamps. Tracing is left as it was found.")
    r.add_argument("-o", "--output", required=True, type=Path, metavar="FILE",
                   help="trace file to write (blktrace format: FILE.blktrace.<cpu>, as blktrace -o FILE)")
    r.add_argument("--device", action="append", default=[], metavar="DEV",
                   help="block device to record (repeatable; default: all devices)")
    r.add_argument("--format", choices=("smartio", "blktrace"), default="smartio",
                   help="smartio (default) or blktrace binary, readable by blkparse, btt and iowatcher")
    r.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="command to run while recording; without it, record until Ctrl-C")
    r.set_defaults(func=run_record)

    a = sub.add_parser("analyze", help="characterise a trace (smartio, blktrace binary, blkparse or tracefs text, "
                                       "Perfetto; also gzip, xz or zstd compressed)",
                       description="Per read and write: counts, R/W ratio, request sizes, Q2C/D2C percentiles, "
                                   "sync/async, flush behaviour, locality, share of time with I/O outstanding; the "
                                   "trace's clock and lost events. From a Perfetto trace also the UFS command "
                                   "latency per tag (ufshcd_command) and the ext4/f2fs sync calls.")
    a.add_argument("file", type=Path, metavar="FILE")
    a.add_argument("--html", type=Path, metavar="OUT", help="write an HTML report with plots")
    a.add_argument("--json", type=Path, metavar="OUT", help="write the metrics as JSON ('-' for stdout)")
    a.add_argument("--files", type=Path, metavar="DIR",
                   help="attribute requests to the files under DIR (FIEMAP) and to file types")
    a.add_argument("--top", type=int, default=10, metavar="N", help="most accessed blocks to list (default 10)")
    a.set_defaults(func=run_analyze)

    m = sub.add_parser("model-check", help="check a trace recorded under smartio against the policy's pure twin",
                       description="At every issue of a trace recorded under the smartio scheduler, rebuild what the "
                                   "module knew (queued and in-flight requests, last write and its kind, last "
                                   "completions) and ask the model's decision function (smartio.iosched.policy) "
                                   "what it would have dispatched: the agreement rate and every disagreement. "
                                   "Exit 1 if the agreement is below --min-agreement.")
    m.add_argument("file", type=Path, metavar="FILE")
    m.add_argument("--tunables", type=Path, metavar="FILE",
                   help="the module's tunables during the run: JSON, or `grep . iosched/*` lines (default: the "
                        "module's defaults)")
    m.add_argument("--tunable", action="append", default=[], metavar="NAME=VALUE",
                   help="one tunable, over --tunables (repeatable), e.g. write_pace_us=28500")
    m.add_argument("--tolerance-us", type=float, default=TOLERANCE_US, metavar="US",
                   help=f"how far the module's clock at a dispatch may be from its issue event (default "
                        f"{TOLERANCE_US:g})")
    m.add_argument("--queue-depth", type=int, metavar="N",
                   help="the device's queue depth, for the dispatch delays (default: unlimited)")
    m.add_argument("--min-agreement", type=float, default=0.0, metavar="PCT",
                   help="exit 1 when the agreement (%%) is below this (default 0)")
    m.add_argument("--show", type=int, default=10, metavar="N", help="disagreements to print (default 10)")
    m.add_argument("--json", type=Path, metavar="OUT", help="write the summary and every disagreement as JSON")
    m.set_defaults(func=run_model_check)


def run_record(args: argparse.Namespace) -> int:
    from smartio.trace.record import record

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command and command[0].startswith("-"):
        raise UsageError(None, command[0], "unknown option; put the command to run after `--`")
    if command:     # before tracing starts: a command that cannot run is bad input, not a traceback
        from smartio.launch.launcher import check_command
        check_command(command, os.getcwd())
    res = record(args.output, args.device, args.format, command or None)
    lost = f", {res.lost} LOST (buffer overrun)" if res.lost else ""
    where = ", ".join(str(p) for p in res.files)
    print(f"smartio: {res.events} events in {res.duration_s:.2f} s written to {where} "
          f"({args.format} format){lost}", file=sys.stderr)
    if args.format == "blktrace":
        print(f"smartio: read it with: blkparse -i {args.output} [-d {args.output}.bin]; btt -i {args.output}.bin; "
              f"smartio trace analyze {args.output}", file=sys.stderr)
    if res.command_rc:
        print(f"smartio: the command exited with {res.command_rc}; the trace was written anyway", file=sys.stderr)
        return 1
    return 0


def run_analyze(args: argparse.Namespace) -> int:
    from smartio.trace.analyze import analyze, format_text
    from smartio.trace.formats import read_trace

    if args.top < 1:
        raise UsageError("--top", args.top, "must be at least 1")
    if args.files is not None and not args.files.is_dir():
        raise UsageError("--files", args.files, "not a directory")
    for flag, out in (("--html", args.html), ("--json", args.json)):
        if out is not None and str(out) != "-":
            check_output_file(flag, out)
    trace = read_trace(args.file)
    attribution = None
    if args.files is not None:
        from smartio.trace.files import attribute
        attribution = attribute(trace, args.files)
    metrics = analyze(trace, top_n=args.top, attribution=attribution)
    del trace, attribution   # the events (48 bytes each) are done with: their memory goes before the output's
    if args.json is not None:
        text = json.dumps(metrics, indent=1, sort_keys=True)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n")
    if args.html is not None:
        from smartio.trace.report import write_html
        write_html(metrics, None, args.html, source=str(args.file))
    if args.json is None or str(args.json) != "-":
        print(format_text(metrics))
    return 0


def run_model_check(args: argparse.Namespace) -> int:
    import dataclasses

    from smartio.iosched.policy import Tunables
    from smartio.trace.formats import read_trace
    from smartio.trace.modelcheck import check_trace, format_text, learned_pacing_note, read_tunable_values

    if args.json is not None:
        check_output_file("--json", args.json)
    try:
        values = read_tunable_values(args.tunables) if args.tunables else {}
        tun = Tunables.from_mapping(values)
    except OSError as e:
        raise UsageError("--tunables", args.tunables, e.strerror or str(e)) from None
    except ValueError as e:
        raise UsageError("--tunables", args.tunables, str(e)) from None
    for item in args.tunable:
        name, eq, value = item.partition("=")
        try:
            one = Tunables.from_mapping({name: value}) if eq else None
        except ValueError as e:
            raise UsageError("--tunable", item, str(e)) from None
        if one is None:
            raise UsageError("--tunable", item, "expected NAME=VALUE")
        tun = dataclasses.replace(tun, **{name: getattr(one, name)})
    if (note := learned_pacing_note(values, tun)) is not None:
        print(note, file=sys.stderr)
    res = check_trace(read_trace(args.file), tun, tolerance_us=args.tolerance_us, queue_depth=args.queue_depth)
    if not res.checks:
        raise UsageError(None, args.file, "no issue of a request inserted through the scheduler in this trace")
    print(format_text(res, show=args.show))
    if args.json is not None:
        args.json.write_text(json.dumps({"tunables": dataclasses.asdict(tun), **res.to_json()}, indent=1) + "\n")
    return 1 if 100 * res.rate() < args.min_agreement else 0

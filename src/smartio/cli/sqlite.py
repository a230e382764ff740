"""`smartio bench sqlite`: parse, then hand over to smartio.sqlite."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from smartio.outputs import check_output_file
from smartio.results import Store, save_run, stored_line
from smartio.sqlite.settings import OPTIONS, SqliteSettings
from smartio.storebench.runner import command_line


def register_bench(exps: argparse._SubParsersAction) -> None:
    """`smartio bench sqlite` (the subcommand `smartio bench` adds for it)."""
    p = exps.add_parser("sqlite", help="SQLite transactions/s and latency per journal mode and sync call; "
                                      "--trace: block writes per transaction by file",
                       description="Mobibench's SQLite workload (seed 002) on the system's SQLite: one statement "
                                   "per transaction, timed; the database lives in a scratch directory inside "
                                   "--target, removed afterwards (also on Ctrl-C).",
                       epilog="Exit codes: 0 ok, 1 run failed, 2 bad input, 3 needs root (--trace), "
                              "130 interrupted.")
    p.add_argument("--target", metavar="DIR", help="directory on the filesystem to measure (required)")
    for opt in OPTIONS:
        kw: dict[str, Any] = {"default": opt.default,
                              "help": f"{opt.help}{f' [{opt.unit}]' if opt.unit else ''} (default {opt.default})"
                              .replace("%", "%%")}
        if opt.kind == "int":
            kw["type"] = int
            kw["metavar"] = "N"
        if opt.choices:
            kw["choices"] = opt.choices
        p.add_argument(opt.flag, **kw)
    p.add_argument("--trace", action="store_true",
                   help="record the block layer (root) and split each transaction's writes by file: database, "
                        "rollback journal, WAL, filesystem journal, other metadata")
    p.add_argument("--trace-file", type=Path, metavar="FILE",
                   help="with --trace: keep the recording (smartio trace format) and FILE.sqlite.json beside it")
    p.add_argument("--json", metavar="FILE", help="write the result document as JSON")
    p.add_argument("--db", metavar="FILE", help="results database (default $SMARTIO_DB or "
                                                 "~/.local/share/smartio/results.db)")
    p.set_defaults(func=sqlite)


def sqlite(a: argparse.Namespace) -> int:
    from smartio.sqlite.report import render
    from smartio.sqlite.run import run_sqlite

    settings = SqliteSettings.from_args(a)
    if a.json:
        check_output_file("--json", a.json)
    store = Store(a.db)                      # a bad --db fails before anything runs
    doc = run_sqlite(settings, a.target, trace=a.trace, trace_file=a.trace_file, command=command_line())
    save_run(store, doc, a.json)
    print(render(doc))
    print(stored_line(doc))
    return 0

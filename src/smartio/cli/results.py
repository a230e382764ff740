"""`smartio results`: read back the results database."""

from __future__ import annotations

import argparse
import json

from smartio import registry
from smartio.results import Store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="list and show stored runs",
                       description="Every run of `smartio bench` and `smartio compare` (and the bench scripts' "
                                   "comparisons) is stored in a SQLite database.")
    db_help = "results database (default: ~/.local/share/smartio/results.db or $SMARTIO_DB)"
    p.add_argument("--db", help=db_help)
    rs = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = rs.add_parser("list", help="one line per stored run, newest first")
    ls.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    ls.set_defaults(func=list_runs)
    show = rs.add_parser("show", help="the tables (or --json document) of one run")
    for action in (ls, show):
        # Also after the action (`results list --db X`); SUPPRESS keeps one given before it when absent here.
        action.add_argument("--db", default=argparse.SUPPRESS, help=db_help)
    show.add_argument("id", type=int, metavar="ID")
    show.add_argument("--json", action="store_true", help="print the whole JSON document")
    show.set_defaults(func=show_run)


def list_runs(a: argparse.Namespace) -> int:
    rows = Store(a.db).list(a.limit)
    if not rows:
        print("no runs stored yet")
        return 0
    w = max(10, *(len(r.experiment) for r in rows))      # `compare slowdown+mixed` and the like
    print(f"{'id':>4}  {'started (UTC)':<25}  {'experiment':<{w}}  {'device':<8}  {'target':<10}  scheduler(s)")
    for r in rows:
        print(f"{r.id:>4}  {r.started:<25}  {r.experiment:<{w}}  {r.device or '-':<8}  {r.target:<10}  "
              f"{r.scheduler or '-'}")
    return 0


def show_run(a: argparse.Namespace) -> int:
    doc = Store(a.db).get(a.id)
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"run {a.id}: {doc['command']}\n")
        print(registry.renderer(doc)(doc))
    return 0

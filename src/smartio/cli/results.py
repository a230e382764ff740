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
    submit = rs.add_parser("submit", help="send runs to a fleet server (smartio serve); private unless --public",
                           description="Send stored StoreBench runs, with fio's raw output and without host names, "
                                       "user names, paths or serial numbers, to a fleet server. Without IDs: every "
                                       "run not yet sent there. A failed upload stays pending and is sent again by "
                                       "the next submit to that server.")
    submit.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8046")
    submit.add_argument("ids", type=int, nargs="*", metavar="ID", help="runs to send (default: all not yet sent)")
    submit.add_argument("--public", action="store_true", help="list the runs in the server's rankings and ECDFs")
    submit.add_argument("--model", help="the device's model as you name it (default: the machine's DMI model)")
    submit.set_defaults(func=submit_runs)
    unsubmit = rs.add_parser("unsubmit", help="delete runs this database sent to a fleet server")
    unsubmit.add_argument("url", metavar="URL", help="the server")
    unsubmit.add_argument("ids", type=int, nargs="+", metavar="ID", help="the local ids of the runs")
    unsubmit.set_defaults(func=unsubmit_runs)
    for action in (ls, show, submit, unsubmit):
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


def submit_runs(a: argparse.Namespace) -> int:
    from smartio.fleet.client import submit

    lines, ok = submit(Store(a.db), a.url, a.ids, public=a.public, model=a.model)
    print("\n".join(lines))
    return 0 if ok else 1


def unsubmit_runs(a: argparse.Namespace) -> int:
    from smartio.fleet.client import unsubmit

    print("\n".join(unsubmit(Store(a.db), a.url, a.ids)))
    return 0

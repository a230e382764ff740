"""`smartio serve`: the fleet results service on this machine's runs, or on a shared PostgreSQL."""

from __future__ import annotations

import argparse

from smartio.fleet.service import MAX_BODY, MIN_RUNS

PORT = 8046


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="the results service: device ranking, ECDFs, runs, comparisons; takes "
                                     "submissions",
                       description="Serve the fleet results pages and the submission API. By default on 127.0.0.1, "
                                   "with this machine's own runs (imported from its results database); --db "
                                   "postgresql://... serves a shared PostgreSQL, the store for a fleet.",
                       epilog="Exit codes: 0 stopped, 2 bad input, 130 interrupted.")
    p.add_argument("--db", metavar="FILE|URL",
                   help="fleet database: a SQLite file or postgresql://USER@HOST:PORT/DB (default: fleet.db beside "
                        "the results database)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=PORT, help=f"port (default {PORT})")
    p.add_argument("--workers", type=int, default=1, help="server processes sharing the port and database (default 1)")
    p.add_argument("--results-db", metavar="FILE",
                   help="the local results database whose runs are imported (default: the machine's)")
    p.add_argument("--no-import", action="store_true", help="do not import this machine's runs (a fleet server)")
    p.add_argument("--min-runs", type=int, default=MIN_RUNS,
                   help=f"runs a device needs before it is ranked or plotted (default {MIN_RUNS}; a page's "
                        "?min_runs= overrides it)")
    p.add_argument("--max-body", type=int, default=MAX_BODY,
                   help=f"largest upload taken, in bytes (default {MAX_BODY})")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=serve)


def serve(a: argparse.Namespace) -> int:
    from smartio.errors import UsageError
    from smartio.fleet.serve import serve as run

    if a.min_runs < 1:
        raise UsageError("--min-runs", a.min_runs, "must be at least 1")
    if a.max_body < 1024:
        raise UsageError("--max-body", a.max_body, "must be at least 1024 bytes")
    import_runs = not a.no_import and (a.db is None or a.results_db is not None)
    run(a.db, a.host, a.port, a.workers, a.results_db, import_runs, a.min_runs, a.max_body, a.access_log)
    return 0

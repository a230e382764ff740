"""`smartio serve`: the fleet database ready (migrated; the machine's own runs in it by default), then uvicorn."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from smartio.errors import UsageError
from smartio.fleet.db import Database
from smartio.fleet.identity import install_id, submission_of
from smartio.fleet.service import Fleet
from smartio.fleet.submission import Invalid, validate
from smartio.results import Store, default_path


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with Nagle's algorithm off on every connection. With several worker processes
    uvicorn binds the socket itself (protocol number 0), and asyncio then leaves TCP_NODELAY unset on the accepted
    connections: a reply written as headers and body waited for the client's delayed ACK, 40 ms a request."""

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


def default_db() -> Path:
    """The machine's own fleet database, beside its results database."""
    return default_path().with_name("fleet.db")


def import_local(fleet: Fleet, results: Store) -> tuple[int, int]:
    """Every StoreBench run of the local results database into the fleet database, as public runs of this machine
    (a server of the machine's own runs; they go through the same stripping as an upload). Idempotent: a run already
    there is found by its content hash. Returns (runs now in, runs skipped: other experiments, comparisons)."""
    install = install_id(default_path().parent)
    taken = skipped = 0
    for row in reversed(results.list(None)):
        try:
            sub = validate(submission_of(results.get(row.id), install=install))
        except (UsageError, Invalid, KeyError, TypeError):
            skipped += 1
            continue
        fleet.submit(sub, secrets.token_urlsafe(24), public=True)
        taken += 1
    return taken, skipped


def serve(db: str | None, host: str, port: int, workers: int, results_db: str | None, import_runs: bool,
          min_runs: int, max_body: int, access_log: bool) -> None:
    where = db or str(default_db())
    if workers < 1 or workers > 64:
        raise UsageError("--workers", workers, "must be 1 to 64")
    if not 0 <= port <= 65535:
        raise UsageError("--port", port, "must be 0 to 65535")
    try:                                # a port in use is bad input, said before anything is imported
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as e:
        raise UsageError("--port", port, f"cannot listen on {host}:{port}: {e.strerror}") from None
    database = Database(where)          # migrated here once, before the workers start
    fleet = Fleet(database, min_runs)
    if import_runs:
        store = Store(results_db)
        taken, skipped = import_local(fleet, store)
        print(f"smartio serve: {taken} StoreBench runs of {store.path} are in {database.describe()}"
              + (f" ({skipped} other runs are not: comparisons and other experiments)" if skipped else ""))
        store.close()
    database.close()
    os.environ["SMARTIO_FLEET_DB"] = where
    os.environ["SMARTIO_FLEET_MIN_RUNS"] = str(min_runs)
    os.environ["SMARTIO_FLEET_MAX_BODY"] = str(max_body)
    import uvicorn

    print(f"smartio serve: http://{host}:{port}/ ({workers} process{'es' if workers > 1 else ''}; Ctrl-C stops)",
          flush=True)
    uvicorn.run("smartio.fleet.app:create_app", factory=True, host=host, port=port, workers=workers,
                http="smartio.fleet.serve:NoDelayH11Protocol",
                log_level="warning", access_log=access_log, timeout_graceful_shutdown=5)

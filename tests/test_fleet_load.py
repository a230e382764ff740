"""Many concurrent submitters against several `smartio serve` processes sharing one PostgreSQL, on loopback only and
bounded in count and time: nothing is lost or duplicated (every run counted and hashed on both sides), and replayed
uploads find the first."""

from __future__ import annotations

import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fleet_support import post, postgres, submission

from smartio.fleet.db import Database
from smartio.fleet.submission import content_hash
from smartio.fleet.tempdb import Server

pytestmark = pytest.mark.timeout(180)

CLIENTS = 64            # concurrent submitters
PER_CLIENT = 8          # unique runs each, then one replay of its first
DEADLINE_S = 120        # the whole load, at most


def test_concurrent_submitters_lose_and_duplicate_nothing(tmp_path) -> None:
    with postgres() as pg:
        url = pg.new_database("load")
        server = Server(url, workers=2).start()
        try:
            docs = [[submission(f"Load {c}", 1.0 + i / 100, started=f"2026-11-01T00:{i:02d}:00+00:00")
                     for i in range(PER_CLIENT)] for c in range(CLIENTS)]
            sent = {content_hash(d) for ds in docs for d in ds}
            assert len(sent) == CLIENTS * PER_CLIENT
            start = time.monotonic()
            replies: dict[str, int] = {}
            replays: list[tuple[int, int, bool]] = []
            lock = threading.Lock()

            def client(c: int) -> None:
                token = secrets.token_urlsafe(24)
                first = None
                for d in docs[c]:
                    if time.monotonic() - start > DEADLINE_S:
                        raise TimeoutError("the load took longer than its deadline")
                    status, out = post(server.url, d, token)
                    assert status == 201, out
                    with lock:
                        replies[content_hash(d)] = out["id"]
                    first = first if first is not None else out["id"]
                status, out = post(server.url, docs[c][0], token)
                with lock:
                    replays.append((status, out["id"], out["created"]))
                assert first is not None

            with ThreadPoolExecutor(CLIENTS) as pool:
                for f in [pool.submit(client, c) for c in range(CLIENTS)]:
                    f.result()
            elapsed = time.monotonic() - start
            db = Database(url)
            with db.connection() as c:
                stored = c.all("SELECT id, content_hash, document FROM runs")
                metrics = c.one("SELECT COUNT(*) FROM metrics")[0]
            db.close()
            assert len(stored) == len(sent)                                # nothing lost, nothing duplicated
            assert {h for _, h, _ in stored} == sent
            assert all(content_hash(json.loads(doc)) == h for _, h, doc in stored)    # stored as sent
            assert {h: i for i, h, _ in stored} == replies                 # each reply named its own run
            assert metrics == len(sent) * 9
            assert all(s == 200 and not created for s, _, created in replays)
            assert {i for _, i, _ in replays} <= set(replies.values())
            assert elapsed < DEADLINE_S
        finally:
            server.stop()

"""`smartio results submit` / `unsubmit` and `smartio bench --submit` against a real `smartio serve`: the local
database stays the source of truth, a failed upload is kept and sent by the next submit, and only StoreBench runs
can leave. `smartio serve` imports the machine's own runs once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fleet_support import get_json, local_doc, request

from smartio.cli import main
from smartio.fleet.db import Database
from smartio.fleet.serve import import_local
from smartio.fleet.service import Fleet
from smartio.fleet.tempdb import Server
from smartio.results import Store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def local(tmp_path: Path) -> Path:
    path = Path(os.environ["SMARTIO_DB"])
    store = Store(path)
    store.add(local_doc(1.0, started="2026-11-01T00:00:00+00:00"))
    store.add(local_doc(2.0, started="2026-11-02T00:00:00+00:00"))
    store.close()
    return path


def test_submit_sends_runs_and_unsubmit_deletes_them(local: Path, tmp_path: Path, capsys) -> None:
    server = Server(str(tmp_path / "fleet.db")).start()
    try:
        assert main(["results", "submit", server.url, "1", "--public", "--model", "Test Phone"]) == 0
        out = capsys.readouterr().out
        assert f"run 1: {server.url}/runs/" in out and "public" in out
        url = out.split("run 1: ")[1].split()[0]
        run = get_json(f"{url}.json")
        assert run["model"] == "Test Phone" and run["public"]
        assert main(["results", "submit", server.url]) == 0                  # the rest: run 2, private
        out = capsys.readouterr().out
        assert "run 2:" in out and "private" in out and "run 1:" not in out
        assert main(["results", "submit", server.url]) == 0
        assert "nothing to submit" in capsys.readouterr().out
        assert main(["results", "unsubmit", server.url, "1"]) == 0
        assert "run 1: deleted" in capsys.readouterr().out
        assert request("GET", url)[0] == 404
        assert Store(local).get(1)["experiment"] == "latency"               # the local run stays
        assert main(["results", "unsubmit", server.url, "1"]) == 2           # no longer submitted from here
    finally:
        server.stop()


def test_a_failed_upload_is_kept_and_sent_by_the_next_submit(local: Path, tmp_path: Path, capsys) -> None:
    server = Server(str(tmp_path / "fleet.db"))
    assert main(["results", "submit", server.url, "2"]) == 1               # nothing listens yet
    out = capsys.readouterr().out
    assert "run 2: not submitted" in out and "kept" in out
    outbox = json.loads(local.with_name(local.name + ".submissions.json").read_text())
    assert [e["state"] for e in outbox["entries"].values()] == ["pending"]
    server.start()
    try:
        assert main(["results", "submit", server.url, "1"]) == 0          # sends 1, and the pending 2
        out = capsys.readouterr().out
        assert "run 1:" in out and "run 2:" in out
        assert len(get_json(f"{server.url}/index.json")["recent"]) == 0    # both private
    finally:
        server.stop()


def test_only_storebench_runs_can_be_submitted(tmp_path: Path, capsys) -> None:
    from smartio.results import Row

    store = Store()
    store.put({"kind": "compare", "experiment": "slowdown", "started": "x", "command": "smartio compare"},
              Row(0, "x", "compare slowdown", "vm", None, "none,smartio", None, "smartio compare"))
    store.close()
    assert main(["results", "submit", "http://127.0.0.1:9", "1"]) == 2
    assert "only `smartio bench` StoreBench runs" in capsys.readouterr().err


def test_a_bad_url_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    assert main(["bench", "latency", "--target", str(tmp_path), "--submit", "ftp://example"]) == 2
    assert "http://" in capsys.readouterr().err
    assert main(["results", "submit", "127.0.0.1:8046"]) == 2


def test_serve_imports_the_machines_own_runs_once(local: Path, tmp_path: Path) -> None:
    from smartio.results import Row

    store = Store(local)
    store.put({"kind": "compare", "experiment": "slowdown", "started": "x", "command": "smartio compare"},
              Row(0, "x", "compare slowdown", "vm", None, "none,smartio", None, "smartio compare"))
    fleet = Fleet(Database(tmp_path / "fleet.db"), min_runs=1)
    assert import_local(fleet, store) == (2, 1)
    assert import_local(fleet, store) == (2, 1)
    assert fleet.counts() == {"runs": 2, "devices": 1}
    store.close()
    fleet.db.close()


def test_serve_refuses_a_port_in_use(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", "--db", str(tmp_path / "f.db"), "--no-import", "--port", str(port)]) == 2
    assert f"--port {port}" in capsys.readouterr().err

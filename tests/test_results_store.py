"""The results database (`smartio results`, smartio.results.Store): schema version and migrations, databases that
are not ours, damaged rows, and `results` output into a closed pipe."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.cli import main
from smartio.errors import UsageError
from smartio.results import SCHEMA_VERSION, Store

pytestmark = pytest.mark.timeout(120)

# The table as smartio created it before the database had a schema version (user_version 0).
UNVERSIONED_SCHEMA = """
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    started     TEXT NOT NULL,
    experiment  TEXT NOT NULL,
    target      TEXT NOT NULL,
    device      TEXT,
    scheduler   TEXT,
    kernel      TEXT,
    command     TEXT NOT NULL,
    document    TEXT NOT NULL
);
"""


def _doc(**extra: object) -> dict:
    return {"started": "2025-01-01T00:00:00+00:00", "experiment": "latency", "target": {"path": "/scratch"},
            "device": {"name": "vda"}, "scheduler": "none", "kernel": "6.1", "command": "smartio bench latency",
            **extra}


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA user_version").fetchone()[0]


def test_new_database_gets_the_schema_version(tmp_path):
    db = tmp_path / "new" / "results.db"
    store = Store(db)
    run_id = store.add(_doc())
    store.close()
    assert _user_version(db) == SCHEMA_VERSION >= 1
    assert Store(db).get(run_id)["experiment"] == "latency"


def test_unversioned_smartio_database_is_migrated_keeping_its_runs(tmp_path, capsys):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:
        c.executescript(UNVERSIONED_SCHEMA)
        c.execute("INSERT INTO runs (started, experiment, target, device, scheduler, kernel, command, document) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ("2024-05-01T10:00:00+00:00", "slowdown", "/old", "sda",
                                                      "bfq", "6.1", "smartio bench slowdown",
                                                      json.dumps(_doc(experiment="slowdown"))))
    assert main(["results", "--db", str(db), "list"]) == 0
    assert "slowdown" in capsys.readouterr().out
    assert _user_version(db) == SCHEMA_VERSION
    assert Store(db).get(1)["experiment"] == "slowdown"


@pytest.mark.parametrize("schema", [
    "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE TABLE runs (id INTEGER PRIMARY KEY, host TEXT, seconds REAL)",   # a runs table, but not ours
], ids=["other-tables", "other-runs-table"])
def test_foreign_database_is_refused_by_name(tmp_path, capsys, schema):
    db = tmp_path / "someone-elses.db"
    with sqlite3.connect(db) as c:
        c.executescript(schema)
    before = db.read_bytes()
    assert main(["results", "--db", str(db), "list"]) == 2
    err = capsys.readouterr().err
    assert f"`--db {db}`" in err and "not a smartio results database" in err
    with pytest.raises(UsageError, match="not a smartio results database"):
        Store(db)
    assert db.read_bytes() == before        # not touched


def test_database_of_a_newer_smartio_is_refused(tmp_path, capsys):
    db = tmp_path / "future.db"
    Store(db).close()
    with sqlite3.connect(db) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    assert main(["results", "--db", str(db), "list"]) == 2
    err = capsys.readouterr().err
    assert f"`--db {db}`" in err and f"schema version {SCHEMA_VERSION + 1}" in err


def test_file_that_is_not_sqlite_is_refused(tmp_path, capsys):
    db = tmp_path / "notes.txt"
    db.write_text("this is not a database, but it is long enough to have a header of sorts\n" * 10)
    assert main(["results", "--db", str(db), "list"]) == 2
    assert f"`--db {db}`" in capsys.readouterr().err


def test_row_with_invalid_json_is_an_error_not_a_traceback(tmp_path, capsys):
    db = tmp_path / "r.db"
    store = Store(db)
    run_id = store.add(_doc())
    store.db.execute("UPDATE runs SET document = ? WHERE id = ?", ('{"experiment": "lat', run_id))
    store.db.commit()
    store.close()
    assert main(["results", "--db", str(db), "show", str(run_id)]) == 2
    err = capsys.readouterr().err
    assert f"`ID {run_id}`" in err and "not valid JSON" in err and str(db) in err


def test_db_option_is_accepted_after_the_action(tmp_path, capsys):
    db = tmp_path / "r.db"
    store = Store(db)
    run_id = store.add(_doc(results={"patterns": {}}))
    store.close()
    assert main(["results", "list", "--db", str(db)]) == 0
    assert "latency" in capsys.readouterr().out
    assert main(["results", "show", str(run_id), "--json", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == run_id
    # Given in both places, the one after the action wins.
    assert main(["results", "--db", str(tmp_path / "other.db"), "list", "--db", str(db)]) == 0
    assert "latency" in capsys.readouterr().out


def test_show_json_into_a_closed_pipe_ends_without_a_traceback(tmp_path):
    db = tmp_path / "r.db"
    store = Store(db)
    # Far more than a pipe buffer, so smartio is still writing when `head` exits.
    run_id = store.add(_doc(results={"values": list(range(200_000))}))
    store.close()
    src = Path(__file__).resolve().parents[1] / "src"
    script = (f"{sys.executable} -m smartio results --db {db} show {run_id} --json 2>{tmp_path}/err | head -1; "
              f"echo ${{PIPESTATUS[0]}} > {tmp_path}/rc")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert out.stdout == "{\n"
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert (tmp_path / "rc").read_text().strip() == "141"     # as a program killed by SIGPIPE


@pytest.mark.parametrize("argv", [
    ["show", "99999999999999999999999"],     # beyond SQLite's integers (OverflowError)
    ["list", "--limit", "99999999999999999999999"],   # (sqlite3.IntegrityError)
    ["list", "--limit", "0"],
])
def test_numbers_beyond_sqlite_are_bad_input(tmp_path, capsys, argv):
    assert main(["results", *argv, "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err
    assert argv[-1] in err and ("`ID " in err or "`--limit " in err)


def test_device_file_as_database_is_refused_clearly(capsys):
    assert main(["results", "list", "--db", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "`--db /dev/null`" in err and "rollback" not in err

"""The results database: every run's document, stored in an embedded SQLite file.

Default path: $SMARTIO_DB, else $XDG_DATA_HOME/smartio/results.db (~/.local/share/smartio/results.db).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from smartio.errors import UsageError

# The schema's history: MIGRATIONS[i] holds the statements that take a database from version i to i + 1
# (PRAGMA user_version). Append a migration for every change; never edit one that has shipped.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the runs table. Databases from before versioning hold exactly this table at version 0.
    ("""CREATE TABLE IF NOT EXISTS runs (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            started     TEXT NOT NULL,
            experiment  TEXT NOT NULL,
            target      TEXT NOT NULL,
            device      TEXT,
            scheduler   TEXT,
            kernel      TEXT,
            command     TEXT NOT NULL,
            document    TEXT NOT NULL
        )""",),
)
SCHEMA_VERSION = len(MIGRATIONS)
SQLITE_MAX_INT = (1 << 63) - 1     # run ids and limits beyond this cannot be SQLite integers
RUNS_COLUMNS = ("id", "started", "experiment", "target", "device", "scheduler", "kernel", "command", "document")


def default_path() -> Path:
    if os.environ.get("SMARTIO_DB"):
        return Path(os.environ["SMARTIO_DB"])
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "smartio" / "results.db"


@dataclasses.dataclass(frozen=True)
class Row:
    id: int
    started: str
    experiment: str
    target: str
    device: str | None
    scheduler: str | None
    kernel: str | None
    command: str


class Store:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
        except (OSError, sqlite3.Error) as e:
            raise UsageError("--db", self.path, f"cannot open the results database: {e}") from e
        try:
            self._migrate()
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise UsageError("--db", self.path, f"not a usable SQLite database: {e}") from e
        except UsageError:
            self.db.close()
            raise

    def _migrate(self) -> None:
        """Bring the database to SCHEMA_VERSION, or refuse one that is not ours or is newer than this smartio."""
        version = self._check()
        if version == SCHEMA_VERSION:
            return
        self.db.isolation_level = None      # transactions by hand: the check and every step in one
        try:
            self.db.execute("BEGIN IMMEDIATE")  # another smartio may be migrating the same file
            try:
                version = self._check()
                for step in MIGRATIONS[version:]:
                    for statement in step:
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._check()
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        finally:
            self.db.isolation_level = "DEFERRED"   # back to implicit transactions (BEGIN DEFERRED)

    def _check(self) -> int:
        """The database's schema version, after checking that it is a smartio results database of that version."""
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UsageError("--db", self.path, f"written by a newer smartio (schema version {version}; this one "
                                                f"knows up to {SCHEMA_VERSION}); upgrade smartio or pass another --db")
        tables = self._tables()
        if version == 0 and tables - {"runs", "sqlite_sequence"}:
            raise self._foreign(tables)
        if version > 0 or "runs" in tables:
            columns = tuple(r[1] for r in self.db.execute("PRAGMA table_info(runs)"))
            if columns != RUNS_COLUMNS:
                raise self._foreign(tables)
        return version

    def _tables(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _foreign(self, tables: set[str]) -> UsageError:
        return UsageError("--db", self.path, f"not a smartio results database (it holds tables "
                                             f"{', '.join(sorted(tables))}); pass another --db")

    def add(self, doc: dict[str, Any]) -> int:
        """A run's document (StoreBench's shape: target, device, scheduler); returns its id."""
        return self.put(doc, Row(0, doc["started"], doc["experiment"], doc["target"]["path"],
                                 doc["device"].get("name"), doc.get("scheduler"), doc.get("kernel"), doc["command"]))

    def put(self, doc: dict[str, Any], row: Row, uid: str | None = None) -> int:
        """Store `doc` with the columns of `row` as a new run; with `uid`, in place of the stored run whose
        document has that `run_uid`, if there is one (a document stored again as its run goes on). Returns the id."""
        text = json.dumps({k: v for k, v in doc.items() if k != "id"})     # get() puts the id back
        with self.db:
            old = uid and self.db.execute("SELECT id FROM runs WHERE json_valid(document) AND "
                                          "json_extract(document, '$.run_uid') = ? ORDER BY id LIMIT 1",
                                          (uid,)).fetchone()
            if old:
                self.db.execute(
                    "UPDATE runs SET started = ?, experiment = ?, target = ?, device = ?, scheduler = ?, "
                    "kernel = ?, command = ?, document = ? WHERE id = ?",
                    (row.started, row.experiment, row.target, row.device, row.scheduler, row.kernel, row.command,
                     text, old[0]))
                return int(old[0])
            cur = self.db.execute(
                "INSERT INTO runs (started, experiment, target, device, scheduler, kernel, command, document) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (row.started, row.experiment, row.target, row.device, row.scheduler, row.kernel, row.command, text))
        assert cur.lastrowid is not None    # set by every INSERT that succeeded
        return cur.lastrowid

    def list(self, limit: int | None = None) -> list[Row]:
        if limit is not None and not 1 <= limit <= SQLITE_MAX_INT:
            raise UsageError("--limit", limit, "must be at least 1")
        q = "SELECT id, started, experiment, target, device, scheduler, kernel, command FROM runs ORDER BY id DESC"
        rows = self.db.execute(q + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
        return [Row(*r) for r in rows]

    def get(self, run_id: int) -> dict[str, Any]:
        if not 1 <= run_id <= SQLITE_MAX_INT:
            raise UsageError("ID", run_id, f"no such run in {self.path} (see `smartio results list`)")
        row = self.db.execute("SELECT document FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise UsageError("ID", run_id, f"no such run in {self.path} (see `smartio results list`)")
        try:
            doc = json.loads(row[0])
        except ValueError as e:
            raise UsageError("ID", run_id, f"the stored document in {self.path} is not valid JSON ({e}); "
                                           "the database is damaged") from None
        if not isinstance(doc, dict):
            raise UsageError("ID", run_id, f"the stored document in {self.path} is not a JSON object; "
                                           "the database is damaged")
        doc["id"] = run_id
        return doc

    def close(self) -> None:
        self.db.close()


def save_run(store: Store, doc: dict[str, Any], json_file: str | None) -> None:
    """Add a run's document to `store` (its id goes into the document) and close it; write `--json` if asked."""
    from smartio.outputs import write_json

    doc["id"] = store.add(doc)
    store.close()
    if json_file:
        write_json("--json", json_file, doc)


def stored_line(doc: dict[str, Any]) -> str:
    """What a command prints last about a run that save_run() stored."""
    return f"\nstored as run {doc['id']} (smartio results show {doc['id']})"

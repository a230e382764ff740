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

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
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
            self.db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise UsageError("--db", self.path, f"cannot open the results database: {e}")

    def add(self, doc: dict[str, Any]) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (started, experiment, target, device, scheduler, kernel, command, document) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (doc["started"], doc["experiment"], doc["target"]["path"], doc["device"].get("name"),
                 doc.get("scheduler"), doc.get("kernel"), doc["command"], json.dumps(doc)))
        return int(cur.lastrowid)

    def list(self, limit: int | None = None) -> list[Row]:
        q = "SELECT id, started, experiment, target, device, scheduler, kernel, command FROM runs ORDER BY id DESC"
        rows = self.db.execute(q + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
        return [Row(*r) for r in rows]

    def get(self, run_id: int) -> dict[str, Any]:
        row = self.db.execute("SELECT document FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise UsageError("ID", run_id, f"no such run in {self.path} (see `smartio results list`)")
        doc = json.loads(row[0])
        doc["id"] = run_id
        return doc

    def close(self) -> None:
        self.db.close()

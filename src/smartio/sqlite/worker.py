"""The child process of `smartio bench sqlite`: one repeat of the workload on one fresh database, timed per
transaction.

    python -m smartio.sqlite.worker SPEC_JSON OUT_JSON

It runs in its own process so that the LD_PRELOAD shim (shim.py) sits under the system's SQLite from the start.
Each statement is its own transaction (autocommit, as Mobibench runs them): the time of a transaction is the
time of `execute()`, which returns after the commit, i.e. after SQLite's syncs. In WAL mode the run ends with a
checkpoint, as Mobibench's does, timed apart (`checkpoint_ns`). Times are CLOCK_MONOTONIC ns, the clock of
smartio's block traces, so the parent can cut a trace into transactions.

Mobibench's table: tblMyList(id INTEGER PRIMARY KEY AUTOINCREMENT, Value TEXT, creation_time TEXT). Update and
delete first insert `transactions` rows in one transaction (untimed), then touch one row per transaction.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import random
import sqlite3
import string
import struct
import sys
import time
from pathlib import Path
from typing import Any

SCHEMA = ("CREATE TABLE tblMyList (id INTEGER PRIMARY KEY AUTOINCREMENT, Value TEXT NOT NULL, "
          "creation_time TEXT NOT NULL)")
_ALPHABET = (string.ascii_letters + string.digits).encode()


def _value(rng: random.Random, n: int) -> str:
    return bytes(rng.choices(_ALPHABET, k=n)).decode()


_FIEMAP = 0xC020660B
_FIEMAP_HEADER = struct.Struct("=QQIIII")
_FIEMAP_EXTENT = struct.Struct("=QQQQQIIII")
_FIEMAP_SKIP = 0x2 | 0x200           # no physical location yet (delayed allocation), data inline in the inode


def _extents(path: str, batch: int = 256) -> list[list[int]]:
    """FIEMAP (logical, physical, length) of a file still open in SQLite (the WAL goes when the connection closes);
    [] if it is gone. smartio.trace.files has the same call, but importing it (numpy) costs 5 s in a TCG guest."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        buf = bytearray(_FIEMAP_HEADER.size + batch * _FIEMAP_EXTENT.size)
        _FIEMAP_HEADER.pack_into(buf, 0, 0, 2**64 - 1, 1, 0, batch, 0)       # FIEMAP_FLAG_SYNC
        fcntl.ioctl(fd, _FIEMAP, buf, True)
        out = []
        for i in range(_FIEMAP_HEADER.unpack_from(buf, 0)[3]):
            logical, physical, length, _a, _b, flags, *_ = _FIEMAP_EXTENT.unpack_from(
                buf, _FIEMAP_HEADER.size + i * _FIEMAP_EXTENT.size)
            if not flags & _FIEMAP_SKIP:
                out.append([logical, physical, length])
        return out
    except OSError:
        return []
    finally:
        os.close(fd)


def _reset_sync_counts() -> None:
    """Zero the shim's counters (when it is preloaded), so they count the timed transactions only."""
    reset = getattr(ctypes.CDLL(None), "smartio_sync_reset", None)
    if reset is not None:
        reset()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    db_path = spec["db"]
    n, size, op = int(spec["transactions"]), int(spec["record_bytes"]), spec["op"]
    rng = random.Random(spec.get("seed", 1))
    db = sqlite3.connect(db_path, isolation_level=None)    # autocommit: every statement is its own transaction
    try:
        mode = db.execute(f"PRAGMA journal_mode={spec['journal']}").fetchone()[0]
        db.execute(f"PRAGMA synchronous={spec['sync']}")
        sync = db.execute("PRAGMA synchronous").fetchone()[0]
        db.execute(SCHEMA)
        setup_start = time.monotonic_ns()
        if op in ("update", "delete"):
            db.execute("BEGIN")
            db.executemany("INSERT INTO tblMyList (Value, creation_time) VALUES (?, datetime('now'))",
                           ((_value(rng, size),) for _ in range(n)))
            db.execute("COMMIT")
        if mode == "wal":
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")     # every repeat starts from an empty WAL
        setup_end = time.monotonic_ns()
        _reset_sync_counts()
        ids = list(range(1, n + 1))
        rng.shuffle(ids)
        values = [_value(rng, size) for _ in range(n)] if op != "delete" else []
        starts, ends = [0] * n, [0] * n
        clock = time.monotonic_ns
        if op == "insert":
            sql = "INSERT INTO tblMyList (Value, creation_time) VALUES (?, datetime('now'))"
            args: list[tuple[str | int, ...]] = [(v,) for v in values]
        elif op == "update":
            sql = "UPDATE tblMyList SET Value = ? WHERE id = ?"
            args = list(zip(values, ids, strict=True))
        else:
            sql = "DELETE FROM tblMyList WHERE id = ?"
            args = [(i,) for i in ids]
        for i in range(n):
            starts[i] = clock()
            db.execute(sql, args[i])
            ends[i] = clock()
        # Mobibench checkpoints the WAL at the end of its run (sqlite3_wal_checkpoint: PASSIVE) inside its clock;
        # so does this run, timed apart, so that the parent can give the figure either way (run.repeat_summary).
        checkpoint = [0, 0]
        if mode == "wal":
            checkpoint[0] = clock()
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            checkpoint[1] = clock()
        files = {p: _extents(p) for p in (db_path, db_path + "-wal", db_path + "-journal") if os.path.exists(p)}
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        rows = db.execute("SELECT count(*) FROM tblMyList").fetchone()[0]
    finally:
        db.close()
    return {"sqlite_version": sqlite3.sqlite_version, "journal_mode": mode, "synchronous": sync,
            "page_size": page_size, "rows_after": rows, "setup_ns": [setup_start, setup_end],
            "starts_ns": starts, "ends_ns": ends, "checkpoint_ns": checkpoint, "final_extents": files}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m smartio.sqlite.worker SPEC_JSON OUT_JSON", file=sys.stderr)
        return 2
    out = run(json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except sqlite3.Error as e:
        print(f"smartio bench sqlite worker: SQLite error: {e}", file=sys.stderr)
        sys.exit(1)

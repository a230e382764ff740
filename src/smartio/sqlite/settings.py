"""The options of `smartio bench sqlite`, declared once: the CLI builds its parser from them and `SqliteSettings`
checks them."""

from __future__ import annotations

import dataclasses
from typing import Any

from smartio.errors import UsageError

OPS = ("insert", "update", "delete")
JOURNALS = ("delete", "truncate", "persist", "wal", "memory", "off")
SYNCS = ("off", "normal", "full")
SYNC_CALLS = ("library", "fsync", "fdatasync")


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str
    help: str
    default: Any
    kind: str = "str"                    # str | int | flag
    choices: tuple[str, ...] | None = None
    unit: str | None = None


OPTIONS = (
    Option("--op", "the statement each transaction runs (update and delete work on rows inserted first, "
                   "in one untimed transaction)", "insert", choices=OPS),
    Option("--journal", "SQLite journal mode (PRAGMA journal_mode)", "delete", choices=JOURNALS),
    Option("--sync", "PRAGMA synchronous", "full", choices=SYNCS),
    Option("--sync-call", "the call SQLite's syncs are issued as: library = as the system's SQLite does "
                          "(recorded), fsync or fdatasync (through an LD_PRELOAD shim; needs cc)",
           "library", choices=SYNC_CALLS),
    Option("--transactions", "timed transactions per repeat, one statement each", 1000, kind="int"),
    Option("--record-bytes", "size of the value each insert or update writes", 100, kind="int", unit="bytes"),
    Option("--repeats", "repeats, each on a fresh database; figures are mean ± 95 % CI over them", 5, kind="int"),
)


@dataclasses.dataclass(frozen=True)
class SqliteSettings:
    op: str = "insert"
    journal: str = "delete"
    sync: str = "full"
    sync_call: str = "library"
    transactions: int = 1000
    record_bytes: int = 100
    repeats: int = 5

    def __post_init__(self) -> None:
        for flag, value, allowed in (("--op", self.op, OPS), ("--journal", self.journal, JOURNALS),
                                     ("--sync", self.sync, SYNCS), ("--sync-call", self.sync_call, SYNC_CALLS)):
            if value not in allowed:
                raise UsageError(flag, value, f"choose one of {', '.join(allowed)}")
        if not 1 <= self.transactions <= 10_000_000:
            raise UsageError("--transactions", self.transactions, "must be between 1 and 10000000")
        if not 1 <= self.record_bytes <= 1 << 20:
            raise UsageError("--record-bytes", self.record_bytes, "must be between 1 and 1048576")
        if not 1 <= self.repeats <= 1000:
            raise UsageError("--repeats", self.repeats, "must be between 1 and 1000")

    @classmethod
    def from_args(cls, a: Any) -> SqliteSettings:
        return cls(op=a.op, journal=a.journal, sync=a.sync, sync_call=a.sync_call, transactions=a.transactions,
                   record_bytes=a.record_bytes, repeats=a.repeats)

    def space_needed(self) -> int:
        """Bytes the database and its journal can take: rows with SQLite's overhead, a WAL of up to 1000 pages
        (the auto-checkpoint) and a rollback journal; update/delete start from as many rows as transactions."""
        rows = self.transactions * (self.record_bytes + 64)
        return 2 * rows + (8 << 20)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

"""The application set of `smartio launch` (issue 14, item 2): start-ups that read a realistic mix of many small
files and a few large ones, each a real program of this machine.

    smartio launch record --app python-stdlib -o stdlib.launch
    sudo smartio bench launch --app stdlib.launch --target /mnt/flash --cold

- python-stdlib: the system's Python importing a dozen standard modules (about 60 files: many small .pyc, the
  interpreter, a few shared libraries);
- python-numpy: smartio's own interpreter importing numpy (hundreds of files, a few large shared objects);
- editor: vim starting and quitting (a large binary with its shared libraries, its runtime files);
- sqlite: the sqlite3 shell opening a 16 MiB database and running a query that reads all of it.

An application whose program is not installed is skipped with the reason (`available()`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import sys
from pathlib import Path

from smartio.cache import cache_dir
from smartio.errors import UsageError

SQLITE_ROWS = 4000          # rows of 4000 bytes: a 16 MiB database


@dataclasses.dataclass(frozen=True)
class App:
    name: str
    help: str
    argv: tuple[str, ...]
    needs_data: bool = False     # the sqlite database, made once under the cache directory

    def available(self) -> str | None:
        """None if it can be launched here, else why not."""
        if shutil.which(self.argv[0]) is None:
            return f"{self.argv[0]} is not installed"
        if self.name == "python-numpy":
            import importlib.util

            if importlib.util.find_spec("numpy") is None:
                return "numpy is not installed in smartio's interpreter"
        return None

    def data_dir(self) -> Path:
        return cache_dir("launch") / self.name

    def prepare(self) -> tuple[list[str], str]:
        """The command and the directory to run it in, with the data it needs made first (once)."""
        why = self.available()
        if why:
            raise UsageError("--app", self.name, why)
        cwd = self.data_dir()
        cwd.mkdir(parents=True, exist_ok=True)
        if self.needs_data:
            _make_database(cwd / "app.db")
        return list(self.argv), str(cwd)


def _make_database(path: Path) -> None:
    if path.exists():
        return
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    db.executemany("INSERT INTO t VALUES (?, ?)", ((k, os.urandom(4000)) for k in range(SQLITE_ROWS)))
    db.execute("CREATE INDEX t_len ON t (length(v))")
    db.commit()
    db.close()
    os.replace(tmp, path)


APPS: dict[str, App] = {a.name: a for a in (
    App("python-stdlib", "the system's Python importing a dozen standard modules",
        ("/usr/bin/python3", "-c", "import json, email.parser, http.client, decimal, sqlite3, argparse, logging, "
                                   "xml.etree.ElementTree, csv, zipfile, unittest")),
    App("python-numpy", "smartio's Python importing numpy", (sys.executable, "-c", "import numpy")),
    App("editor", "vim starting with its defaults and quitting", ("vim.basic", "-es", "+q")),
    App("sqlite", "the sqlite3 shell reading a 16 MiB database in a query",
        ("sqlite3", "app.db", "SELECT count(*), sum(length(v)) FROM t WHERE k % 97 <> 3;"), needs_data=True),
)}

"""The LD_PRELOAD shim (syncshim.c) under the system's SQLite: builds it, sets up its environment, reads its logs.

Python's sqlite3 module cannot register a VFS, and the system's libsqlite3 decides at compile time whether its
syncs are fsync() or fdatasync() (HAVE_FDATASYNC). The shim interposes both libc calls in the worker process, so
`--sync-call` can issue either one while the library stays the system's; it counts what SQLite asked for, which is
how smartio finds out what the library does, and with a log path it records every call with the synced file's
FIEMAP extents (the rollback journal of DELETE mode is gone before anyone could map it afterwards).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from smartio.cache import cache_dir
from smartio.errors import MissingToolError, SmartioError

SOURCE = Path(__file__).with_name("syncshim.c")


def build() -> Path:
    """The shim's .so in ~/.cache/smartio/sqlite/, compiled with cc on first use (keyed by the source's hash)."""
    src = SOURCE.read_bytes()
    lib = cache_dir("sqlite") / f"libsmartio-sync-{hashlib.sha256(src).hexdigest()[:16]}.so"
    if lib.is_file():
        return lib
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise MissingToolError("cc", "`smartio bench sqlite --sync-call fsync|fdatasync` and `--trace` compile an "
                               "LD_PRELOAD shim; install gcc (scripts/install-deps --vm)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=lib.parent, suffix=".so")
    os.close(fd)
    try:
        res = subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-ldl"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise SmartioError(f"compiling {SOURCE} failed:\n{res.stderr}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def environment(lib: Path, sync_call: str, counts: Path, log: Path | None) -> dict[str, str]:
    """The worker's environment: the shim preloaded (after any LD_PRELOAD already set), its mode and files."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD", ""), str(lib)) if x)
    env["SMARTIO_SYNC_CALL"] = "" if sync_call == "library" else sync_call
    env["SMARTIO_SYNC_COUNTS"] = str(counts)
    env["SMARTIO_SYNC_LOG"] = str(log) if log else ""
    return env


@dataclasses.dataclass(frozen=True)
class Counts:
    fsync: int
    fdatasync: int
    issued_fsync: int
    issued_fdatasync: int

    @classmethod
    def read(cls, path: Path) -> Counts:
        words = path.read_text().split()
        d = dict(zip(words[::2], map(int, words[1::2]), strict=True))
        return cls(d["fsync"], d["fdatasync"], d["issued_fsync"], d["issued_fdatasync"])

    @property
    def library_call(self) -> str | None:
        """What SQLite asked for: fsync, fdatasync, both, or None when it made no sync call."""
        if self.fsync and self.fdatasync:
            return "both"
        return "fsync" if self.fsync else "fdatasync" if self.fdatasync else None


@dataclasses.dataclass(frozen=True)
class SyncCall:
    """One fsync()/fdatasync() as the shim logged it; extents (logical, physical, length) in bytes."""

    start_ns: int
    end_ns: int
    asked: str
    issued: str
    rc: int
    path: str
    extents: tuple[tuple[int, int, int], ...]


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) + 1 and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def read_log(path: Path) -> list[SyncCall]:
    calls: list[SyncCall] = []
    if not path.exists():
        return calls
    for line in path.read_text().splitlines():
        f = line.split(" ")
        if len(f) < 7:
            continue
        n = int(f[6])
        ext = tuple((int(lo), int(phys), int(length)) for lo, phys, length in (e.split(":") for e in f[7:7 + n]))
        calls.append(SyncCall(int(f[0]), int(f[1]), f[2], f[3], int(f[4]), _unescape(f[5]), ext))
    return calls

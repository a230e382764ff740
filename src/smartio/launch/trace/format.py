"""The launch trace format: a header, the files, the operations, as JSON lines (`Trace.read`, `Trace.write`).

## Format (one JSON object per line; version 3, which reads versions 1 and 2 too)

1. A header: `{"format": "smartio-launch-trace", "version": 3, "command": [...], "cwd": ..., "recorded": ISO time,
   "kernel": ..., "tool": "strace ...", "traced_wall_s": the traced launch's wall time, "untraced_wall_s": the
   shortest of 5 warm launches without strace (the least disturbed by whatever else runs), "think_scale": see
   below, "residency": how mapped pages were chosen, "executable": the command's absolute path, "symlinks":
   {link: target} for every symbolic link met on the paths the program asked for (an installed copy, `run --app`,
   recreates them), "notes": [...]}`.
2. One line per file: `{"file": ID, "path": the real path (symlinks resolved), "size": bytes}`. Replay lays out a
   file of this size for each (its content is not recorded).
3. One line per operation, in the order they started (all processes of the launch merged by time):
   `{"op": KIND, "file": ID or null, "offset": bytes, "size": bytes, "think_s": seconds since the previous
   operation ended, "dur_s": its duration under strace, "pid": ..., "extents": [[offset, length], ...]}`.
   KIND is
   - `exec`: the kernel maps an executable (also a script's interpreter and an ELF's dynamic loader);
     `extents` are the pages replay reads for it (see "mapped pages");
   - `open`, `stat` (of a regular file), `close`: metadata; no offset or size;
   - `read`, `write`: `size` bytes at `offset` (read(), readv(), write() and writev() at the file position
     smartio tracks from open, lseek, dup and earlier calls; pread64, preadv(2), pwrite64 and pwritev(2) at
     their own offset); only the bytes transferred (a read at the end of the file, which transfers none, is left out);
   - `mmap`: a file mapping of `size` bytes at `offset`; `extents` are the pages replay reads for it;
   - `fault` (version 2): mapped pages the program faulted in here, `extents` as for `mmap` (see below);
   - `readahead` (version 3): mapped pages the kernel's asynchronous readahead brought in here (a fault on a page
     an earlier read-around marked PG_readahead starts the next window and does not wait for it); replay starts
     their reads and goes on, as the program did;
   - `fsync`, `fdatasync`;
   - `exit`: the last process of the launch exited; only its think time counts.

"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from smartio.errors import UsageError

FORMAT, VERSION = "smartio-launch-trace", 3


READS_VERSIONS = (1, 2, 3)       # version 1 has no `fault` operations, 2 no `readahead`


PAGE = 4096


OPS = ("exec", "open", "stat", "lookup", "close", "read", "write", "mmap", "fault", "readahead", "fsync", "fdatasync",
       "exit")


MAPPED = ("mmap", "exec", "fault", "readahead")   # operations whose `extents` replay reads


PAD_MAX = 10000          # entries replay's layout adds to one directory at most (see Layout)


@dataclasses.dataclass(frozen=True)
class FileEntry:
    id: int
    path: str
    size: int


@dataclasses.dataclass(frozen=True)
class Op:
    op: str
    file: int | None
    offset: int = 0
    size: int = 0
    think_s: float = 0.0
    dur_s: float = 0.0
    pid: int = 0
    extents: tuple[tuple[int, int], ...] = ()
    path: str | None = None           # lookup: the path looked up

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "file": self.file, "offset": self.offset, "size": self.size,
                             "think_s": round(self.think_s, 7), "dur_s": round(self.dur_s, 7), "pid": self.pid}
        if self.op in MAPPED:
            d["extents"] = [list(e) for e in self.extents]
        if self.op == "lookup":
            d["path"] = self.path
        return d


@dataclasses.dataclass
class Trace:
    header: dict[str, Any]
    files: list[FileEntry]
    ops: list[Op]

    @property
    def think_scale(self) -> float:
        return float(self.header.get("think_scale", 1.0))

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            f.write(json.dumps(self.header) + "\n")
            for fe in self.files:
                f.write(json.dumps({"file": fe.id, "path": fe.path, "size": fe.size}) + "\n")
            for op in self.ops:
                f.write(json.dumps(op.to_json()) + "\n")

    @classmethod
    def read(cls, path: Path, flag: str = "TRACE") -> Trace:
        """Reads and checks a trace; a file that is not one is a UsageError naming `flag`."""
        try:
            lines = Path(path).read_text().splitlines()
        except FileNotFoundError:
            raise UsageError(flag, path, "does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(flag, path, f"cannot read: {e}") from e
        try:
            docs = [json.loads(x) for x in lines if x.strip()]
        except ValueError as e:
            raise UsageError(flag, path, f"not a smartio launch trace (bad JSON: {e})") from e
        if not docs or not isinstance(docs[0], dict) or docs[0].get("format") != FORMAT:
            raise UsageError(flag, path, "not a smartio launch trace (record one with `smartio launch record`)")
        if docs[0].get("version") not in READS_VERSIONS:
            raise UsageError(flag, path, f"trace version {docs[0].get('version')}; this smartio reads "
                             f"{', '.join(map(str, READS_VERSIONS))}")
        files: list[FileEntry] = []
        ops: list[Op] = []
        try:
            for n, d in enumerate(docs[1:], start=2):
                if "file" in d and "op" not in d:
                    files.append(FileEntry(int(d["file"]), str(d["path"]), int(d["size"])))
                elif d.get("op") in OPS:
                    ops.append(Op(d["op"], None if d["file"] is None else int(d["file"]), int(d["offset"]),
                                  int(d["size"]), float(d["think_s"]), float(d["dur_s"]), int(d.get("pid", 0)),
                                  tuple((int(o), int(n_)) for o, n_ in d.get("extents", ())),
                                  str(d["path"]) if d["op"] == "lookup" else None))
                else:
                    raise ValueError(f"line {n}: neither a file nor a known operation")
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(flag, path, f"malformed trace: {e}") from e
        ids = {f.id for f in files}
        bad = [o for o in ops if o.file is not None and o.file not in ids]
        if bad:
            raise UsageError(flag, path, f"malformed trace: operation on unknown file {bad[0].file}")
        sizes = {f.id: f.size for f in files}
        for o in ops:
            size = sizes.get(o.file, 0) if o.file is not None else 0
            if any(off < 0 or n <= 0 or off % PAGE or off + n > size for off, n in o.extents):
                raise UsageError(flag, path, f"malformed trace: a mapped extent of file {o.file} "
                                 f"({list(o.extents)[:3]}) is not page-aligned or not inside its {size} bytes")
        return cls(docs[0], files, ops)

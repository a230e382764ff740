"""Launch traces: the file-level I/O of an application's start-up, recorded with strace, kept as JSON lines.

    trace = record(["python3", "-c", "import json"], cwd="/tmp")
    trace.write(Path("json.launch"))
    Trace.read(Path("json.launch")).ops[0]

## Format (one JSON object per line; version 2, which reads version 1 too)

1. A header: `{"format": "smartio-launch-trace", "version": 2, "command": [...], "cwd": ..., "recorded": ISO time,
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

## What strace cannot see, and how it is approximated

Page faults on mapped files (executables, shared libraries, mmap()ed data) are no system calls: strace sees the
mapping, not which pages the program then touched. As root, `record` therefore launches the program once more
cold (page cache dropped, no strace) with ftrace's `filemap:mm_filemap_add_to_page_cache` on in a private tracefs
instance: the pages each mapped file brought into the page cache, in the order they came, read-around windows
included (`"residency": "page-cache insertions of a cold launch, in order (ftrace)"`). An `mmap` or `exec`
operation's `extents` are its mapped range's pages in that order, as runs of consecutive pages, less the pages an
earlier operation of the trace read. The order matters on flash: a device that tells sequential from random reads
(the s5-emmc model does) served a replay that read the same pages in file order 20 % faster than the launch. So
does where the faults come among the program's reads: the same ftrace log orders the pages of all files, and
(version 2) the mapped pages move from their `mmap`/`exec` to `fault` operations, each right before the first
`read` whose pages entered the cache after them (`interleave`). Where kprobes work, the same log also holds the
kernel's asynchronous readahead calls (a kprobe and a kretprobe on `page_cache_async_ra`): the pages a task
inserted inside one were read ahead, not waited for, and (version 3) go to `readahead` operations, which replay
starts and does not wait for (`"readahead": "kprobe page_cache_async_ra"`). Read synchronously, vim's chains of
read-around windows made its replay 1.16 to 1.19 times slower than its launch beside a writer under FIFO schedulers.
Without tracefs the pages resident after the cold launch (mincore) are taken in file order (`"mincore after a cold
launch"`); without root the whole mapped range, clipped to the file's size (`"whole mapped range"`), which
overstates a cold start-up's reads. Replay reads the pages of an `mmap`, `exec` or `fault`, each run in 128 KiB
windows as the kernel's fault read-around does, and waits for them; without the ftrace order (no `fault`
operations) all of a mapping's pages are read when it is made, where the real faults come spread over the think
time after it.

Think times are the gaps between operations; under strace they include strace's own cost (two ptrace stops per
traced call). `think_scale` corrects for it: (untraced wall time − the operations' durations) / the sum of think
times, kept within [0, 1]; replay multiplies every think time by it. Paths under /proc, /sys and /dev, files
deleted before the launch ended, pipes and sockets are left out; directory reads (getdents) are not recorded.
Replay runs the operations of all processes one after another, in the order they started.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from smartio.errors import MissingToolError, SmartioError, UsageError

FORMAT, VERSION = "smartio-launch-trace", 3
READS_VERSIONS = (1, 2, 3)       # version 1 has no `fault` operations, 2 no `readahead`
PAGE = 4096
OPS = ("exec", "open", "stat", "lookup", "close", "read", "write", "mmap", "fault", "readahead", "fsync", "fdatasync",
       "exit")
MAPPED = ("mmap", "exec", "fault", "readahead")   # operations whose `extents` replay reads
SYSCALLS = ("execve", "open", "openat", "close", "read", "pread64", "readv", "preadv", "preadv2", "write", "writev",
            "pwrite64", "pwritev", "pwritev2", "lseek", "mmap", "fsync", "fdatasync", "newfstatat", "stat", "lstat",
            "statx", "access", "faccessat", "faccessat2", "dup", "dup2", "dup3", "fcntl")
PATH_CALLS = ("open", "openat", "newfstatat", "stat", "lstat", "statx", "access", "faccessat", "faccessat2")
PAD_MAX = 10000          # entries replay's layout adds to one directory at most (see Layout)
SKIP_PREFIXES = ("/proc/", "/sys/", "/dev/")
UNTRACED_RUNS = 5
RESIDENCY_ORDER = "page-cache insertions of a cold launch, in order (ftrace)"
RESIDENCY_MINCORE, RESIDENCY_WHOLE = "mincore after a cold launch", "whole mapped range"


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


# ---------------------------------------------------------------------------------------------------------------
# Parsing strace's output (-ff -ttt -T -y: one file per process, absolute times, durations, paths of fds)

_LINE = re.compile(r"^(\d+\.\d+) (\w+)\((.*)\) += (-?\d+|0x[0-9a-f]+)(<.*?>)?(?: [A-Z].*?)? <(\d+\.\d+)>$")
_EXIT = re.compile(r"^(\d+\.\d+) \+\+\+ (?:exited with|killed by) ")
_FD = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>$")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass
class _Raw:
    """An operation on a path, before files get ids."""

    t: float
    dur: float
    pid: int
    op: str
    path: str | None
    offset: int = 0
    size: int = 0
    asked: str | None = None          # open, stat, exec: the path as the program gave it (made absolute)


def _fd(arg: str) -> tuple[int, str | None]:
    m = _FD.match(arg.strip())
    if not m:
        try:
            return int(arg.strip()), None
        except ValueError:
            return -1, None
    path = m.group(2)
    return -100 if m.group(1) == "AT_FDCWD" else int(m.group(1)), path if path.startswith("/") else None


def _int(text: str) -> int:
    return int(text.strip(), 0)


def _args(text: str) -> list[str]:
    """Top-level comma-separated arguments (commas inside {}, [], "" or <> do not split)."""
    out, depth, cur, quote = [], 0, [], False
    prev = ""
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == '"' and prev != "\\":
                quote = False
        elif ch == '"':
            quote = True
            cur.append(ch)
        elif ch in "{[<(":
            depth += 1
            cur.append(ch)
        elif ch in "}]>)":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        prev = ch
    if cur:
        out.append("".join(cur).strip())
    return out


def _string(arg: str) -> str | None:
    m = _STR.search(arg)
    return m.group(1).encode().decode("unicode_escape") if m else None


def _asked(name: str, a: list[str]) -> str | None:
    """The absolute, normalised path a path call names (relative ones joined to their directory fd's path)."""
    if not a:
        return None
    at = name in ("openat", "newfstatat", "statx", "faccessat", "faccessat2")
    p = _string(a[1] if at and len(a) > 1 else a[0])
    if not p:
        return None
    if not p.startswith("/"):
        base = _fd(a[0])[1] if at else None
        if base is None:
            return None
        p = os.path.join(base, p)
    return os.path.normpath(p)


def parse_strace(files: list[Path]) -> tuple[list[_Raw], float | None, float | None]:
    """Operations of all processes, in the order they started, and the launch's first and last times (the first
    execve, the last exit)."""
    raws: list[_Raw] = []
    first: float | None = None
    last: float | None = None
    pos: dict[tuple[int, str], int] = {}
    lines: list[tuple[float, int, str]] = []
    for f in files:
        pid = int(f.name.rsplit(".", 1)[1])
        for line in f.read_text(errors="replace").splitlines():
            ts = line.split(" ", 1)[0]
            try:
                lines.append((float(ts), pid, line))
            except ValueError:
                continue
    lines.sort(key=lambda x: x[0])
    for t, pid, line in lines:
        if _EXIT.match(line):
            last = t if last is None else max(last, t)
            continue
        m = _LINE.match(line)
        if not m:
            continue
        _, name, argtext, ret_s, ret_path, dur_s = m.groups()
        ret, dur = _int(ret_s), float(dur_s)
        a = _args(argtext)
        if ret < 0:
            if name in PATH_CALLS:
                p = _asked(name, a)
                if p is not None:
                    raws.append(_Raw(t, dur, pid, "lookup", p, asked=p))
            continue
        if name in ("access", "faccessat", "faccessat2"):
            p = _asked(name, a)
            if p is not None:
                raws.append(_Raw(t, dur, pid, "stat", p, asked=p))
            continue
        if name == "execve":
            path = _string(a[0]) if a else None
            if path is not None:
                first = t if first is None else first
                raws.append(_Raw(t, dur, pid, "exec", path, asked=path if path.startswith("/") else None))
            continue
        if name in ("open", "openat"):
            new = _fd(f"{ret}{ret_path or ''}")[1]
            if new is not None:
                pos[(ret, new)] = 0
                asked = _string(a[1] if name == "openat" else a[0]) if a else None
                if asked and not asked.startswith("/"):
                    base = _fd(a[0])[1] if name == "openat" else None
                    asked = os.path.join(base, asked) if base else None
                raws.append(_Raw(t, dur, pid, "open", new, asked=asked))
            continue
        if name in ("newfstatat", "stat", "lstat", "statx"):
            p = _string(a[1] if name in ("newfstatat", "statx") else a[0]) if a else None
            if not p:                               # fstat of an open fd (AT_EMPTY_PATH): no lookup, no I/O
                continue
            if not p.startswith("/"):
                base = _fd(a[0])[1] if name in ("newfstatat", "statx") else None
                if base is None:
                    continue
                p = os.path.join(base, p)
            raws.append(_Raw(t, dur, pid, "stat", os.path.normpath(p), asked=p))
            continue
        if not a:
            continue
        fd, path = _fd(a[-2] if name == "mmap" else a[0])
        if path is None:
            continue
        key = (fd, path)
        if name in ("dup", "dup2", "dup3", "fcntl"):
            if name != "fcntl" or "F_DUPFD" in (a[1] if len(a) > 1 else ""):
                pos[(ret, path)] = pos.get(key, 0)
        elif name == "lseek":
            pos[key] = ret
        elif name == "close":
            pos.pop(key, None)
            raws.append(_Raw(t, dur, pid, "close", path))
        elif name in ("read", "readv", "write", "writev"):
            if ret > 0:
                off = pos.get(key, 0)
                raws.append(_Raw(t, dur, pid, "read" if name.startswith("read") else "write", path, off, ret))
                pos[key] = off + ret
        elif name in ("pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2") and len(a) > 3:
            off = _int(a[3])
            if off == -1:                           # preadv2/pwritev2 at the file position
                off = pos.get(key, 0)
                pos[key] = off + max(ret, 0)
            if ret > 0:
                raws.append(_Raw(t, dur, pid, "read" if name.startswith("pread") else "write", path, off, ret))
        elif name == "mmap":
            raws.append(_Raw(t, dur, pid, "mmap", path, _int(a[-1]), _int(a[1])))
        elif name in ("fsync", "fdatasync"):
            raws.append(_Raw(t, dur, pid, name, path))
    return raws, first, last


# ---------------------------------------------------------------------------------------------------------------
# Executables: a script's interpreter and an ELF's dynamic loader, which the kernel maps at execve


def exec_chain(path: str, asked: set[str] | None = None) -> list[str]:
    """The files the kernel maps when it executes `path`: the interpreter of a `#!` script (and its loader), the
    dynamic loader of an ELF executable (PT_INTERP), then the file itself. The interpreters' names as the files
    give them (`/lib64/ld-linux-x86-64.so.2`, before symlinks are resolved) are added to `asked`."""
    asked = set() if asked is None else asked
    chain: list[str] = []
    for _ in range(4):                   # the kernel allows a few levels of interpreters too
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except OSError:
            break
        chain.insert(0, path)
        if head.startswith(b"#!"):
            words = head[2:].split(b"\n", 1)[0].split()
            if not words:
                break
            asked.add(words[0].decode(errors="replace"))
            path = os.path.realpath(words[0].decode(errors="replace"))
            continue
        interp = _elf_interp(path, head)
        if interp:
            asked.add(interp)
            chain.insert(0, os.path.realpath(interp))
        break
    return chain


def _elf_interp(path: str, head: bytes) -> str | None:
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:      # 64-bit little-endian only
        return None
    phoff = int.from_bytes(head[32:40], "little")
    phentsize = int.from_bytes(head[54:56], "little")
    phnum = int.from_bytes(head[56:58], "little")
    try:
        with open(path, "rb") as f:
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                ph = table[i * phentsize:(i + 1) * phentsize]
                if int.from_bytes(ph[0:4], "little") == 3:           # PT_INTERP
                    off, size = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[32:40], "little")
                    f.seek(off)
                    return f.read(size).rstrip(b"\0").decode(errors="replace")
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------------------------------------------
# Page residency (mincore)


def resident_pages(path: str) -> set[int] | None:
    """Indices of the file's pages now in the page cache, or None if it cannot be asked."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return set()
        addr = libc.mmap(None, size, 1, 1, fd, 0)            # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            return {i for i in range(n) if vec[i] & 1}
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


class PageCacheLog:
    """The order in which a launch's file pages enter the page cache: ftrace's filemap:mm_filemap_add_to_page_cache
    in a private tracefs instance (root). A cold launch's page faults show up here, read-around windows and all,
    which neither strace nor mincore() can see. Use as a context manager around the launch, then `order()`."""

    EVENT = "filemap/mm_filemap_add_to_page_cache"
    LINE = re.compile(r"mm_filemap_add_to_page_cache: dev (\d+):(\d+) ino ([0-9a-f]+) .*?ofs=(\d+)(?: order=(\d+))?")
    BUFFER_KB_PER_CPU = 16384     # 4 KiB pages of a launch's files: about 200k events
    # The kernel's asynchronous readahead (mm/readahead.c; a global function, exported, so never inlined): what a
    # task inserts between entering and leaving it was read ahead. Probed as kprobe events named RA_START/RA_END.
    READAHEAD = "page_cache_async_ra"
    RA_START, RA_END = "smartio_ra_start", "smartio_ra_end"
    TASK = re.compile(r"-(\d+)\s+\[\d+\]")

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.instance: Path | None = None
        self.text = ""
        self._root: Path | None = None
        self._group = f"smartio_ra_{os.getpid()}"
        # How asynchronous readahead was seen: "kprobe page_cache_async_ra", or why not (then every page counts
        # as waited for, as before version 3).
        self.readahead_how = "not traced"

    def __enter__(self) -> PageCacheLog:
        from smartio.trace.tracefs import mounted_tracefs

        try:
            root = self._stack.enter_context(mounted_tracefs())
            inst = root / "instances" / f"smartio-pagecache-{os.getpid()}"
            inst.mkdir()
            self.instance = inst
            (inst / "buffer_size_kb").write_text(str(self.BUFFER_KB_PER_CPU))
            (inst / "events" / self.EVENT / "enable").write_text("1")
        except (OSError, SmartioError) as e:
            self.__exit__()
            raise SmartioError(f"cannot trace page-cache insertions ({self.EVENT}): {e}") from None
        self._root = root
        try:
            self._probe(f"p:{self._group}/{self.RA_START} {self.READAHEAD}")
            self._probe(f"r:{self._group}/{self.RA_END} {self.READAHEAD}")
            (inst / "events" / self._group / "enable").write_text("1")
            self.readahead_how = f"kprobe {self.READAHEAD}"
        except OSError as e:
            self._remove_probes()
            self.readahead_how = f"not traced (kprobe on {self.READAHEAD}: {e.strerror or e})"
        return self

    def _probe(self, line: str) -> None:
        """One line to kprobe_events, appended (other tools' probes stay). Not open(..., "a"): Python seeks to the
        end of a file it appends to, and tracefs refuses the seek (EINVAL)."""
        assert self._root is not None
        fd = os.open(self._root / "kprobe_events", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def _remove_probes(self) -> None:
        if self._root is None:
            return
        for name in (self.RA_START, self.RA_END):
            try:
                self._probe(f"-:{self._group}/{name}")
            except OSError:          # never made, or already gone
                pass

    def __exit__(self, *exc: object) -> None:
        inst = self.instance
        try:
            if inst is not None and inst.exists():
                (inst / "tracing_on").write_text("0")
                self.text = (inst / "trace").read_text(errors="replace")
                (inst / "events" / self.EVENT / "enable").write_text("0")
                if (inst / "events" / self._group).is_dir():
                    (inst / "events" / self._group / "enable").write_text("0")
                inst.rmdir()
        finally:
            self.instance = None
            self._remove_probes()
            self._root = None
            self._stack.close()

    def order(self, paths: set[str]) -> dict[str, list[int]]:
        """Per path, the page indices in the order they entered the cache (first time only). Raises if the
        kernel's buffer lost events (the order would have holes)."""
        return pages_by_path(self.sequence(paths), {p for p in paths if os.path.exists(p)})

    def sequence(self, paths: set[str]) -> list[tuple[str, int]]:
        """(path, page index) of these files' pages in the order they entered the cache, across files (first time
        only): where a mapped file's faults came between the reads of others. Raises as `order` does."""
        return self.pages(paths)[0]

    def pages(self, paths: set[str]) -> tuple[list[tuple[str, int]], set[tuple[str, int]]]:
        """`sequence(paths)`, and the pages of it that the kernel's asynchronous readahead inserted (empty when it
        was not traced, see readahead_how), from one pass over the log."""
        if "LOST" in self.text and re.search(r"LOST \d+ EVENTS", self.text):
            raise SmartioError("the page-cache trace lost events")
        keys: dict[tuple[int, int, int], str] = {}
        for p in paths:
            try:
                st = os.stat(p)
            except OSError:
                continue
            keys[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = p
        # A file on overlayfs (the testbed's root) reports the overlay's device, while its pages belong to the
        # lower filesystem's inode, whose number it keeps: on a device none of the files reports, an inode
        # number that only one of them has names it.
        devs = {k[:2] for k in keys}
        by_ino: dict[int, list[str]] = {}
        for k, p in keys.items():
            by_ino.setdefault(k[2], []).append(p)
        out: list[tuple[str, int]] = []
        ahead: set[tuple[str, int]] = set()
        seen: dict[str, set[int]] = {p: set() for p in keys.values()}
        in_readahead: set[str] = set()          # tasks (pids) inside page_cache_async_ra
        start, end = f" {self.RA_START}: ", f" {self.RA_END}: "
        for line in self.text.splitlines():
            if start in line or end in line:
                if t := self.TASK.search(line):
                    (in_readahead.add if start in line else in_readahead.discard)(t.group(1))
                continue
            m = self.LINE.search(line)
            if m is None:
                continue
            dev, ino = (int(m.group(1)), int(m.group(2))), int(m.group(3), 16)
            path = keys.get((*dev, ino))
            if path is None and dev not in devs and len(by_ino.get(ino, ())) == 1:
                path = by_ino[ino][0]
            if path is None:
                continue
            t = self.TASK.search(line)
            read_ahead = t is not None and t.group(1) in in_readahead
            first = int(m.group(4)) // PAGE
            for page in range(first, first + (1 << int(m.group(5) or 0))):
                if page not in seen[path]:
                    seen[path].add(page)
                    out.append((path, page))
                    if read_ahead:
                        ahead.add((path, page))
        return out, ahead


def pages_by_path(sequence: list[tuple[str, int]], paths: set[str]) -> dict[str, list[int]]:
    """Per path of `paths` (each one present, maybe empty), its pages in `sequence`'s order."""
    out: dict[str, list[int]] = {p: [] for p in paths}
    for path, page in sequence:
        if path in out:
            out[path].append(page)
    return out


def _runs(pages: list[int], size: int) -> tuple[tuple[int, int], ...]:
    """Page indices as (offset, length) extents in their order (each run of consecutive ascending pages is one),
    clipped to the file's size."""
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p * PAGE:
            out[-1] = (out[-1][0], out[-1][1] + PAGE)
        else:
            out.append((p * PAGE, PAGE))
    return tuple((o, min(n, size - o)) for o, n in out if o < size)


# ---------------------------------------------------------------------------------------------------------------
# Building a trace


def build(raws: list[_Raw], first: float, last: float, sizes: dict[str, int],
          residency: dict[str, list[int]] | None) -> tuple[list[FileEntry], list[Op]]:
    """Files with ids (in the order of first use) and operations with think times and mapped extents.

    residency: per mapped file, the page indices a cold launch read, in the order it read them (or ascending);
    None: every page of each mapped range. An `mmap` or `exec` gets its range's pages in that order, as runs."""
    ids: dict[str, int] = {}
    files: list[FileEntry] = []
    covered: dict[int, set[int]] = {}
    ops: list[Op] = []
    end = first
    for r in raws:
        if r.op == "lookup" and r.path is not None:
            ops.append(Op("lookup", None, think_s=max(0.0, r.t - end), dur_s=r.dur, pid=r.pid, path=r.path))
            end = max(end, r.t + r.dur)
            continue
        if r.path is None or r.path not in sizes:
            continue
        if r.path not in ids:
            ids[r.path] = len(files)
            files.append(FileEntry(len(files), r.path, sizes[r.path]))
        fid, size = ids[r.path], sizes[r.path]
        think = max(0.0, r.t - end)
        end = max(end, r.t + r.dur)
        pages = None if residency is None else residency.get(r.path, [])
        extents = _extents(r.op, r.offset, r.size, size, pages, covered.setdefault(fid, set()))
        ops.append(Op(r.op, fid, r.offset, r.size, think, r.dur, r.pid, extents))
    ops.append(Op("exit", None, think_s=max(0.0, last - end)))
    return files, ops


def _extents(op: str, offset: int, size: int, file_size: int, pages: list[int] | None,
             seen: set[int]) -> tuple[tuple[int, int], ...]:
    """An mmap's or exec's extents: the pages of its range in `pages`' order (None: all of them, ascending) that
    no earlier operation read; adds what an operation reads to `seen`."""
    if op in ("read", "write"):
        seen.update(range(offset // PAGE, (offset + size + PAGE - 1) // PAGE))
    if op not in ("mmap", "exec"):
        return ()
    lo, hi = (offset, offset + size) if op == "mmap" else (0, file_size)
    span = range(lo // PAGE, (min(hi, file_size) + PAGE - 1) // PAGE)
    want = [p for p in (span if pages is None else pages) if p in span and p not in seen]
    seen.update(want)
    return _runs(want, file_size)


def remap(trace: Trace, residency: dict[str, list[int]], how: str,
          sequence: list[tuple[str, int]] | None = None,
          read_ahead: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset()) -> Trace:
    """The trace with its mapped extents taken from another cold launch's page order (per recorded path), e.g.
    of an installed copy whose shared libraries no other process holds in the page cache; with that launch's
    `sequence` (see PageCacheLog.sequence, paths as recorded) they are then interleaved with the reads as its
    faults came (`interleave`, `read_ahead` as there). The trace's own `fault` and `readahead` operations, from the
    recording's cold launch, go."""
    sizes = {f.id: f.size for f in trace.files}
    paths = {f.id: f.path for f in trace.files}
    covered: dict[int, set[int]] = {}
    ops = []
    for o in trace.ops:
        if o.op in ("fault", "readahead"):
            continue
        if o.file is None:
            ops.append(o)
            continue
        ext = _extents(o.op, o.offset, o.size, sizes[o.file], residency.get(paths[o.file], []),
                       covered.setdefault(o.file, set()))
        ops.append(dataclasses.replace(o, extents=ext) if o.op in ("mmap", "exec") else o)
    out = Trace({**trace.header, "residency": how}, list(trace.files), ops)
    return out if sequence is None else interleave(out, sequence, read_ahead)


def interleave(trace: Trace, sequence: list[tuple[str, int]],
               read_ahead: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset()) -> Trace:
    """The trace with its mapped pages moved from the `mmap`/`exec` that mapped them to `fault` operations where a
    cold launch faulted them in: `sequence` is that launch's page-cache insertions across files (path as recorded,
    page), and a mapped page is read right before the first `read` whose first page not read before came after it
    (the rest before `exit`); a mapped page that a later `read` covers is left to that read. Replay then
    interleaves a program's faults with its reads as the launch did: read all at mmap time, the faults of a binary
    (and their read-around windows) became one sequential burst, which the s5-emmc model serves at the sequential
    rate where the launch's scattered faults pay the random one (0.072 against 0.187 ms per 4 KiB alone).
    The pages of `read_ahead` (same keys as `sequence`) go to `readahead` operations instead: the kernel read them
    ahead asynchronously, and the program did not wait for them there."""
    paths = {f.id: f.path for f in trace.files}
    sizes = {f.id: f.size for f in trace.files}
    pos: dict[tuple[str, int], int] = {}
    for i, key in enumerate(sequence):
        pos.setdefault(key, i)
    end = len(sequence)
    fid_of = {path: fid for fid, path in paths.items()}
    ahead = {(fid_of[path], page) for path, page in read_ahead if path in fid_of}
    pending: list[tuple[int, int, int]] = []          # (position, file, page) mapped, not read yet
    read: set[tuple[int, int]] = set()                 # (file, page) a `read` or `fault` has read
    ops: list[Op] = []

    def flush(before: int) -> None:
        nonlocal pending
        due = sorted(x for x in pending if x[0] < before)
        pending = [x for x in pending if x[0] >= before]
        i = 0
        while i < len(due):              # one `fault` or `readahead` per stretch of pages of one file and kind
            fid, kind = due[i][1], (due[i][1], due[i][2]) in ahead
            j = i
            while j < len(due) and due[j][1] == fid and ((due[j][1], due[j][2]) in ahead) == kind:
                j += 1
            ops.append(Op("readahead" if kind else "fault", fid,
                          extents=_runs([p for _, _, p in due[i:j]], sizes[fid])))
            read.update((fid, p) for _, _, p in due[i:j])
            i = j

    for o in trace.ops:
        if o.op in ("mmap", "exec") and o.file is not None:
            for off, n in o.extents:
                for page in range(off // PAGE, (off + n + PAGE - 1) // PAGE):
                    if (o.file, page) not in read:
                        pending.append((pos.get((paths[o.file], page), end), o.file, page))
            ops.append(dataclasses.replace(o, extents=()))
            continue
        if o.op == "exit":
            flush(end + 1)
        elif o.op == "read" and o.file is not None and o.size > 0:
            pages = range(o.offset // PAGE, (o.offset + o.size - 1) // PAGE + 1)
            new = [p for p in pages if (o.file, p) not in read]
            first = min((pos[k] for p in new if (k := (paths[o.file], p)) in pos), default=None)
            if first is not None:
                flush(first)
            covered = {(o.file, p) for p in new}
            pending = [x for x in pending if (x[1], x[2]) not in covered]
            read.update(covered)
        ops.append(o)
    flush(end + 1)                                       # a trace that does not end in `exit`
    return Trace({**trace.header, "version": VERSION}, list(trace.files), ops)


def symlinks_along(paths: set[str]) -> dict[str, str]:
    """Every symbolic link met while resolving these absolute paths (`/lib` -> `usr/lib`, a venv's `bin/python`),
    link -> target as the link holds it: an installed copy of a launch (`smartio launch run --app`) needs them to
    find its files by the names the program asks for."""
    links: dict[str, str] = {}

    def walk(path: str, depth: int) -> None:
        parts = [x for x in path.split("/") if x]
        cur = "/"
        for i, comp in enumerate(parts):
            cur = os.path.join(cur, comp)
            if depth < 40 and os.path.islink(cur):
                try:
                    target = os.readlink(cur)
                except OSError:
                    return
                links[cur] = target
                rest = "/".join(parts[i + 1:])
                walk(os.path.normpath(os.path.join(os.path.dirname(cur), target, rest)), depth + 1)
                return

    for p in sorted(paths):
        walk(os.path.normpath(p), 0)
    return links


def _file_sizes(raws: list[_Raw]) -> dict[str, int]:
    """Regular files that still exist, by real path, with their sizes (at least as far as the trace reached)."""
    sizes: dict[str, int] = {}
    for r in raws:
        if r.path is None or r.path in sizes or r.path.startswith(SKIP_PREFIXES) or r.path.endswith(" (deleted)") \
                or r.op == "lookup":
            continue
        try:
            st = os.stat(r.path)
        except OSError:
            continue
        if os.path.isfile(r.path):
            sizes[r.path] = st.st_size
    for r in raws:
        if r.path in sizes and r.op in ("read", "write"):
            sizes[r.path] = max(sizes[r.path], r.offset + r.size)
    return sizes


def _real_lookup(path: str) -> str:
    """A path that did not resolve, with its deepest existing ancestor's symlinks resolved: where replay's layout
    (which has no symlinks) makes the same lookup fail in the same directory."""
    head, rest = path, ""
    while head != "/" and not os.path.exists(head):
        head, tail = os.path.split(head)
        rest = os.path.join(tail, rest) if rest else tail
    return os.path.normpath(os.path.join(os.path.realpath(head), rest)) if rest else os.path.realpath(head)


def directory_sizes(paths: set[str]) -> dict[str, int]:
    """Entries of every existing directory on these paths (theirs and their ancestors'): a cold lookup in a
    directory of thousands of entries reads more blocks than one in a directory of three."""
    dirs: dict[str, int] = {}
    for p in paths:
        d = os.path.dirname(p)
        while d and d not in dirs:
            if os.path.isdir(d) and not d.startswith(SKIP_PREFIXES):
                try:
                    dirs[d] = sum(1 for _ in os.scandir(d))
                except OSError:
                    pass
            if d == "/":
                break
            d = os.path.dirname(d)
    return dirs


def _resolve(raws: list[_Raw], asked: set[str]) -> list[_Raw]:
    """Real paths (symlinks resolved), and each execve expanded into the files the kernel maps for it."""
    out: list[_Raw] = []
    for r in raws:
        path = r.path
        if path is None:
            continue
        if r.op == "lookup":
            if not path.startswith(SKIP_PREFIXES):
                out.append(dataclasses.replace(r, path=_real_lookup(path)))
            continue
        if r.op == "exec":
            for p in exec_chain(os.path.realpath(path), asked):
                out.append(dataclasses.replace(r, path=p))
                r = dataclasses.replace(r, dur=0.0)      # the execve's time once, with its first file
        else:
            out.append(dataclasses.replace(r, path=os.path.realpath(path)))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Recording


def executable_of(name: str, cwd: str) -> str:
    """The absolute path a command name runs: from PATH, or relative to `cwd` when it holds a slash."""
    if os.sep in name:
        return os.path.normpath(os.path.join(cwd, name))
    return os.path.abspath(shutil.which(name) or name)


def strace_path() -> str:
    path = shutil.which("strace")
    if path is None:
        raise MissingToolError("strace", "install it with `apt-get install strace` (or run scripts/install-deps "
                               "as root)")
    return path


def _strace_version(strace: str) -> str:
    out = subprocess.run([strace, "-V"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].strip() if out else "strace"


def _launch(argv: list[str], cwd: str, prefix: list[str] | None = None) -> float:
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.run([*(prefix or []), *argv], cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=err, check=False)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip()[-800:]
            raise SmartioError(f"the command exited with {proc.returncode}" + (f": {tail}" if tail else ""))
    return elapsed


def record(argv: list[str], cwd: str, *, cold_residency: bool, say: Any = None) -> Trace:
    """Record the start-up of `argv` (run in `cwd`): a warm-up launch, one launch under strace, three untraced
    launches for the time without strace, and (`cold_residency`, root) one cold launch to see its mapped pages."""
    from smartio.launch.launcher import CommandLauncher, drop_caches

    strace = strace_path()
    say = say or (lambda m: None)
    say("warm-up launch")
    _launch(argv, cwd)
    with tempfile.TemporaryDirectory(prefix="smartio-strace-") as tmp:
        say("launch under strace")
        out = os.path.join(tmp, "st")
        prefix = [strace, "-f", "-ff", "-q", "--seccomp-bpf", "-ttt", "-T", "-y", "-s", "0",
                  "-e", f"trace={','.join(SYSCALLS)}", "-o", out, "--"]
        traced = _launch(argv, cwd, prefix)
        raws, first, last = parse_strace(sorted(Path(tmp).glob("st.*")))
    if first is None or last is None:
        raise SmartioError("strace saw no execve or no exit of the command; nothing recorded")
    executable = executable_of(argv[0], cwd)
    asked = {r.asked for r in raws if r.asked} | {executable}
    raws = _resolve(raws, asked)
    links = symlinks_along({p for p in asked if p.startswith("/") and not p.startswith(SKIP_PREFIXES)})
    sizes = _file_sizes(raws)
    untraced = []
    launcher = CommandLauncher(argv, cwd)         # timed as `smartio launch run` times it
    for i in range(UNTRACED_RUNS):
        say(f"untraced launch {i + 1}/{UNTRACED_RUNS}")
        untraced.append(launcher.launch())
    residency: dict[str, list[int]] | None = None
    sequence: list[tuple[str, int]] | None = None
    read_ahead: set[tuple[str, int]] = set()
    ra_how = "not traced (no page-cache order)"
    how = RESIDENCY_WHOLE
    if cold_residency:
        mapped = {r.path for r in raws if r.op in ("mmap", "exec") and r.path in sizes}
        say("cold launch, for the pages of mapped files and the order they are read in (ftrace)")
        drop_caches()
        try:
            with PageCacheLog() as log:
                _launch(argv, cwd)
            sequence, read_ahead = log.pages(set(sizes))  # one call: the same files decide overlayfs' inodes
            ra_how = log.readahead_how
            residency, how = pages_by_path(sequence, mapped), RESIDENCY_ORDER
        except SmartioError as e:
            say(f"{e}; the pages resident afterwards (mincore) are read in file order")
            drop_caches()
            _launch(argv, cwd)
            residency, how = {}, RESIDENCY_MINCORE
            for p in mapped:
                pages = resident_pages(p)
                residency[p] = sorted(pages) if pages is not None else list(range((sizes[p] + PAGE - 1) // PAGE))
    files, ops = build(raws, first, last, sizes, residency)
    if sequence is not None:
        ops = interleave(Trace({}, files, ops), sequence, read_ahead).ops
    dirs = directory_sizes({f.path for f in files} | {o.path for o in ops if o.path})
    wall = min(untraced)
    think = sum(o.think_s for o in ops)
    busy = sum(o.dur_s for o in ops)
    scale = min(1.0, max(0.0, (wall - busy) / think)) if think > 0 else 1.0
    header = {
        "format": FORMAT, "version": VERSION, "command": argv, "cwd": cwd,
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "kernel": platform.release(), "host": platform.node(), "tool": _strace_version(strace),
        "traced_wall_s": round(last - first, 6), "traced_launch_s": round(traced, 6),
        "untraced_wall_s": round(wall, 6), "untraced_runs_s": [round(x, 6) for x in untraced],
        "think_scale": round(scale, 6),
        "executable": executable,
        "symlinks": links,
        "dirs": dirs,
        "residency": how,
        "readahead": ra_how,
        "notes": ["page faults on mapped files are approximated by reading the pages they brought in: at the `fault` "
                  "operations placed by the cold launch's page-cache order, or without it at mmap/exec",
                  "processes are replayed one operation after another, in the order the operations started"],
    }
    return Trace(header, files, ops)

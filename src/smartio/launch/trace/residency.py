"""The cold launch's page residency: which pages of its mapped files a cold launch brought into the page cache, and
in what order (ftrace's page-cache insertions, `PageCacheLog`; or mincore afterwards, `resident_pages`).

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

"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from pathlib import Path

from smartio.errors import SmartioError
from smartio.launch.trace.format import PAGE

RESIDENCY_ORDER = "page-cache insertions of a cold launch, in order (ftrace)"


RESIDENCY_MINCORE, RESIDENCY_WHOLE = "mincore after a cold launch", "whole mapped range"


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

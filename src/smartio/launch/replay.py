"""Replaying a launch trace (smartio.launch.trace) on a target directory, as Mobigen does (seed 002).

    with Layout(trace, "/mnt/flash") as layout:       # the trace's files, same sizes, under a scratch directory
        Replayer(trace, layout).launch()              # seconds from the first operation to the end

Why not fio, the project's one I/O engine: a launch is closed-loop (each operation waits for the one before, then
the program computes for a while) and most of its cost when cold is metadata (path lookups, inodes) and mapped
pages. fio's iolog replay (version 3) delays each I/O relative to the previous one's issue, in whole
milliseconds, so I/O time eats think time instead of adding to it; and it has no stat or mmap. The replayer is
therefore a loop of plain system calls: open, stat, close, pread/pwrite (of exactly the recorded bytes), fsync,
fdatasync, and for each mapped extent the reads a page fault makes (see FAULT_CHUNK). Think times are spent busy
(a launch computes between its I/Os, and sleeping would hand the CPU to the background writer and mistime gaps of
microseconds).
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import resource
import secrets
import shlex
import shutil
import signal
import statistics
import time
from pathlib import Path
from typing import Any

from smartio.errors import SmartioError, UsageError
from smartio.launch.trace import MAPPED, PAD_MAX, PAGE, Trace
from smartio.units import mib

SCRATCH_PREFIX = ".smartio-launch-"
CHUNK = 1 << 20
# Mapped pages are read as the kernel's fault path reads them: a page fault on a file mapping that misses the page
# cache reads the window around it (mm/filemap.c, do_sync_mmap_readahead: ra_pages, 128 KiB by default) and waits for
# it, one window per fault. The trace's extents already hold every page the launch's faults brought in, read-around
# and asynchronous readahead included (ftrace saw them enter the cache), so replay must read those and nothing more.
# It starts the reads of each mapped extent, in windows of this size, with POSIX_FADV_WILLNEED (force_page_cache_ra:
# exactly the missing pages, no readahead mark; at most max(read_ahead_kb, max_sectors_kb) per call, so on a device
# where both are below 128 KiB the touches read the rest page by page), then waits by touching each page through a
# mapping advised MADV_RANDOM (a fault on a page in flight waits for it; under VM_RAND_READ no fault reads ahead).
# The pages of a `readahead` operation (trace version 3: what the kernel's asynchronous readahead brought in while
# the program ran on) are started the same way and not waited for (on such a device, only the first
# max(read_ahead_kb, max_sectors_kb) of each window then).
# A pread() would also start asynchronous readahead wherever it met a page an earlier read marked PG_readahead, even
# on a POSIX_FADV_RANDOM fd (filemap_readahead): in the testbed such chains turned sqlite's and vim's scattered
# library faults into 1.4-2 MiB of sequential reads (0.3-0.5 MiB in the real launches), which the s5-emmc model
# serves at less than half the random cost.
FAULT_CHUNK = 128 << 10
# Replayer._run's account of a launch's time: what each kind of operation counts as, and the order of the figures.
SPENT_AS = {"lookup": "metadata", "stat": "metadata", "open": "metadata", "close": "metadata", "exec": "fault",
            "mmap": "fault", "fault": "fault", "readahead": "readahead", "read": "read", "write": "write",
            "fsync": "sync", "fdatasync": "sync", "exit": "think"}
BREAKDOWN = ("think", "metadata", "fault", "readahead", "read", "write", "sync", "cpu", "cpu_sys")



def require_space(directory: Path, need: int, what: str) -> None:
    """A UsageError on --target unless `directory`'s filesystem has `need` bytes and 64 MiB more free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if need + (64 << 20) > free:
        raise UsageError("--target", directory, f"too little space: {what} take {mib(need)} and 64 MiB are left to "
                         f"the filesystem, {mib(free)} available")

class Layout:
    """The trace's files laid out under `<dir>/.smartio-launch-<token>/`, each at its recorded path and size, filled
    with pseudo-random bytes (not zeros, which a device or filesystem might keep sparse) and synced. Removed on
    exit from the `with` block, also on Ctrl-C."""

    def __init__(self, trace: Trace, directory: str, root: Path | None = None) -> None:
        """`root`: the scratch directory of a layout made earlier (a test replays one under strace), which this
        object then neither makes nor removes."""
        self.trace = trace
        self.root = root or Path(directory) / f"{SCRATCH_PREFIX}{secrets.token_hex(4)}"
        self.paths = {f.id: self.root / f.path.lstrip("/") for f in trace.files}

    def check_space(self) -> None:
        require_space(self.root.parent, sum(-(-f.size // 4096) * 4096 for f in self.trace.files), "the trace's files")

    def __enter__(self) -> Layout:
        self.check_space()
        pattern = os.urandom(CHUNK)
        try:
            self.root.mkdir()
            for f in self.trace.files:
                p = self.paths[f.id]
                p.parent.mkdir(parents=True, exist_ok=True)
                self._fill(p, f.size, f.path, pattern)
            self._pad_directories()
            self._finish()
        except BaseException:
            self.remove()
            raise
        os.sync()
        return self

    def _pad_directories(self) -> None:
        """Every directory the launch went through, with as many entries as it had when recorded (empty files
        `.smartio-pad-N`, at most PAD_MAX per directory): a cold lookup then reads as many directory blocks."""
        for d, n in sorted(self.trace.header.get("dirs", {}).items()):
            where = self.root / d.lstrip("/")
            if not os.path.realpath(where).startswith(str(self.root.resolve())):
                continue
            where.mkdir(parents=True, exist_ok=True)
            have = sum(1 for _ in os.scandir(where))
            for i in range(have, min(int(n), PAD_MAX)):
                os.close(os.open(where / f".smartio-pad-{i}", os.O_CREAT | os.O_WRONLY, 0o600))

    def _finish(self) -> None:
        """What a layout needs beyond the files (an installed copy: its symbolic links and directories)."""

    def _fill(self, path: Path, size: int, source: str, pattern: bytes) -> None:
        with open(path, "wb") as out:
            left = size
            while left > 0:
                n = min(left, CHUNK)
                out.write(pattern[:n])
                left -= n
            out.flush()
            os.fsync(out.fileno())

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.remove()


class Replayer:
    """One launch = the trace's operations, in order, with think times scaled by the trace's `think_scale`."""

    def __init__(self, trace: Trace, layout: Layout) -> None:
        self.trace, self.layout = trace, layout
        self.scale = trace.think_scale
        biggest = max([o.size for o in trace.ops if o.op in ("read", "write")] + [1])
        self.buf = memoryview(bytearray(biggest))
        self.last_breakdown: dict[str, float] | None = None   # of the last launch(): see _run

    def calibrate(self, passes: int = 5, wall: float | None = None, typical: str = "shortest") -> dict[str, float]:
        """Set the think-time scale from this machine and target: the operations alone, warm (one pass to warm
        the cache, then `passes`), take T; the launch takes W warm without strace; think times are scaled so that
        they add up to W − T (within [0, 1] of what strace saw). A warm replay then lasts about as long as the warm
        launch by construction; what a cold one adds is the storage's.

        W is `wall` if given (the launch measured where it is compared, e.g. an installed copy on the target),
        else the recorded `untraced_wall_s`, measured on the files where the launch was recorded: in the testbed
        those are on virtiofs, whose lookups cost more warm than ext4's (vim: 130 ms there, 94 ms installed).
        `typical` says how W was taken from its launches, "shortest" (as `untraced_wall_s` is) or "median", and T
        is taken from the passes alike: a median W less a shortest T left sqlite's warm replays (75 % operations,
        which vary by ±5 % under TCG) 5 % longer than its real launches on average."""
        if typical not in ("shortest", "median"):
            raise ValueError(f"typical: {typical!r}")
        think = sum(o.think_s for o in self.trace.ops)
        if wall is None:
            wall = float(self.trace.header.get("untraced_wall_s") or 0.0)
        saved, self.scale = self.scale, 0.0
        try:
            self.launch()
            times = [self.launch() for _ in range(passes)]
        finally:
            self.scale = saved
        ops_s = min(times) if typical == "shortest" else statistics.median(times)
        if think > 0 and wall > 0:
            self.scale = min(1.0, max(0.0, (wall - ops_s) / think))
        return {"ops_warm_s": round(ops_s, 6), "think_recorded_s": round(think, 6), "wall_s": round(wall, 6),
                "think_scale": self.scale}

    def launch(self) -> float:
        """One launch, in a new child process (forked; timed inside it from its first operation), as a real launch
        is a new process: a scheduler that tells processes apart sees one per launch. bfq weight-raises a new
        process's queue as interactive; replayed in this long-lived process, sqlite's cold launch beside the
        sequential writer took 4.95 times the real one under bfq (0.97 under the other schedulers).

        Where the time went is left in `last_breakdown` (see _run)."""
        self.last_breakdown = None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                            # the child: plain system calls only, then _exit
            code = 0
            try:
                os.close(r)
                msg = json.dumps(self._run()).encode()
            except BaseException as e:          # reported to the parent, which raises
                msg, code = f"{type(e).__name__}: {e}".encode(errors="replace")[:4000], 1
            try:
                os.write(w, msg)
            finally:
                os._exit(code)
        os.close(w)
        try:
            chunks = []
            while chunk := os.read(r, 4096):
                chunks.append(chunk)
        finally:
            os.close(r)
            _, status = os.waitpid(pid, 0)
        data = b"".join(chunks)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not data.startswith(b"{"):
            cmd = self.trace.header.get("command")
            why = data.decode(errors="replace") if code >= 0 else \
                f"killed by {signal.Signals(-code).name}" + (" (an I/O error reading a mapped page?)"
                                                             if -code == signal.SIGBUS else "")
            raise SmartioError(f"replay of `{shlex.join(cmd) if isinstance(cmd, list) else 'the trace'}` failed: "
                               + (why or f"exit status {code}"))
        done = json.loads(data)
        self.last_breakdown = done["breakdown_s"]
        return float(done["wall_s"])

    def _run(self) -> dict[str, Any]:
        """The operations, timed. Run in the forked child: garbage collection is off, and the operations are
        copied into tuples before the clock starts, so that the timed loop takes no copy-on-write faults on the
        parent's objects (a refcount update writes the page an object sits on; gc walks them all).

        Returns {"wall_s": from the first operation to the end, "breakdown_s": {...}}: the seconds spent thinking
        (the busy waits), in each kind of operation (BREAKDOWN: "metadata" for lookup, stat, open and close;
        "fault" for mapped pages read and waited for; "readahead" started; "read"; "write"; "sync"), "cpu", the
        child's CPU time over the whole (user and system, getrusage as for a real launch), and "cpu_sys", its
        system part. A slow replay then shows whether it waited (storage) or computed (the CPU, or the emulator),
        and the kernel's share says whether that computing was the program's or the kernel's (faults, lookups)."""
        gc.disable()
        paths = self.layout.paths
        root = str(self.layout.root)
        fds: dict[int, int] = {}
        maps: dict[int, tuple[int, mmap.mmap]] = {}   # per file, the fd and mapping its mapped pages are read through
        buf = self.buf
        clock = time.perf_counter
        steps = [(o.think_s * self.scale, o.op, o.file, o.offset, o.size, o.extents, o.path, SPENT_AS[o.op])
                 for o in self.trace.ops]
        spent = dict.fromkeys(BREAKDOWN, 0.0)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = end = clock()
        try:
            for think, kind, fid, offset, size, extents, path, account in steps:
                ready = end + think
                while clock() < ready:
                    pass
                began = clock()
                spent["think"] += began - end
                if kind == "exit":
                    end = began
                    break
                if kind == "lookup":
                    try:
                        os.stat(root + (path or ""))
                    except OSError:
                        pass
                    end = clock()
                    spent[account] += end - began
                    continue
                assert fid is not None            # only exit has no file (checked when the trace is read)
                if kind == "stat":
                    os.stat(paths[fid])
                elif kind == "open":
                    if fid in fds:
                        os.close(fds.pop(fid))
                    fds[fid] = os.open(paths[fid], os.O_RDWR)
                elif kind == "close":
                    if fid in fds:
                        os.close(fds.pop(fid))
                elif kind in MAPPED:                # through the mapping's own fd, whatever the program closed
                    if extents and fid not in maps:
                        mfd = os.open(paths[fid], os.O_RDONLY)
                        try:
                            mem = mmap.mmap(mfd, 0, prot=mmap.PROT_READ)
                        except BaseException:
                            os.close(mfd)
                            raise
                        maps[fid] = mfd, mem
                        mem.madvise(mmap.MADV_RANDOM)
                    wait = kind != "readahead"      # the kernel's readahead: started, not waited for
                    for off, n in extents:
                        mfd, mem = maps[fid]
                        for o in range(off, off + n, FAULT_CHUNK):
                            k = min(FAULT_CHUNK, off + n - o)
                            os.posix_fadvise(mfd, o, k, os.POSIX_FADV_WILLNEED)
                            for page in range(o, o + k, PAGE) if wait else ():
                                mem[page]               # noqa: B018 (the touch is the point: it waits)
                else:
                    fd = fds.get(fid)
                    if fd is None:                  # an fd the launch inherited or got another way
                        fd = fds[fid] = os.open(paths[fid], os.O_RDWR)
                    if kind == "read":
                        os.preadv(fd, [buf[:size]], offset)
                    elif kind == "write":
                        os.pwritev(fd, [buf[:size]], offset)
                    elif kind == "fsync":
                        os.fsync(fd)
                    elif kind == "fdatasync":
                        os.fdatasync(fd)
                end = clock()
                spent[account] += end - began
        finally:
            for fd in fds.values():
                os.close(fd)
            for fd, mem in maps.values():
                mem.close()
                os.close(fd)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        spent["cpu"] = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
        spent["cpu_sys"] = cpu1.ru_stime - cpu0.ru_stime
        return {"wall_s": end - t0, "breakdown_s": {k: round(v, 6) for k, v in spent.items()}}


class Installed(Layout):
    """The application a trace recorded, installed under `<dir>/.smartio-launch-<token>/` to be run there in a
    chroot (`smartio bench launch --app TRACE`): its files with their real content (copied from the paths they had
    when recorded, which must still hold files of the recorded sizes), the symbolic links the program followed to
    them, and its working directory. Only what the recorded launch opened, stat()ed or mapped is there: a launch
    that goes another way (other arguments, files that changed) fails or reads less."""

    def __enter__(self) -> Installed:
        missing = [f.path for f in self.trace.files if not os.path.isfile(f.path) or os.path.getsize(f.path) != f.size]
        if missing:
            raise UsageError("--app", self.trace.header.get("path", "TRACE"), f"{len(missing)} of the recorded "
                             f"files are gone or changed size since the recording (e.g. {missing[0]}); record again")
        super().__enter__()
        return self

    def _fill(self, path: Path, size: int, source: str, pattern: bytes) -> None:
        shutil.copyfile(source, path)
        shutil.copystat(source, path)    # mode and times: Python checks a .pyc against its source's mtime
        with open(path, "rb+") as f:
            os.fsync(f.fileno())

    def _finish(self) -> None:
        for link, target in sorted(self.trace.header.get("symlinks", {}).items()):
            where = self.root / link.lstrip("/")
            # Never through a link that points out of the copy (an absolute target names a host path).
            inside = os.path.realpath(where.parent) + os.sep
            if not inside.startswith(str(self.root.resolve()) + os.sep):
                continue
            if where.is_symlink() or where.exists():
                continue
            where.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, where)
        cwd = self.trace.header.get("cwd") or "/"
        (self.root / cwd.lstrip("/")).mkdir(parents=True, exist_ok=True)

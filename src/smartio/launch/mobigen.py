"""Mobigen scripts (seed 002's AndroStep): an application's system calls as Mobibench replays them (`mobibench -g`),
read, laid out under a target directory and replayed with one thread per script thread.

    script = Script.read(Path("twitter"))                     # counts what it cannot replay, never fails on it
    with ScriptLayout(script, "/mnt/flash") as layout:         # the files it reads, under a scratch directory
        MobigenReplayer(script, layout).launch()               # seconds from the start to the last thread's end

The format (Mobigen's mobigen.rb writes it; Mobibench's do_script reads it): one call a line,
`TID TIME_US CALL ARGS...`, lines grouped by thread and in time order within one, TIME_US from the start of the
recording. The calls and their arguments:

    open PATH FLAGS FD       read FD SIZE          pread FD OFFSET SIZE     fsync FD [RET]    stat64 "PATH" RET
    close FD RET             write FD SIZE         pwrite FD OFFSET SIZE    fdatasync FD [RET] lstat64 "PATH" RET
    lseek FD OFFSET [WHENCE] fstat64 FD RET        access "PATH" RET        unlink "PATH" RET

A quoted PATH is a real path on the phone; an unquoted one (strace cut it short, or Mobigen made up the open of an fd
the trace used without opening it) stands for a file of its own, as in Mobibench (`temp_<tid>_<n>.dat`). FD is the
number the application saw; the replay maps it to its own (one table for the process, as fds are). Every path is
mapped under the scratch directory (`/data/x` becomes `<scratch>/root/data/x`); nothing is written outside it.

Where this differs from Mobibench, and why:
- Think times are slept (time.sleep, in slices of at most SLEEP_SLICE_S so that Ctrl-C ends a replay at once), never
  spun: Mobibench's threads usleep, but its main thread spins while it starts them and waits for their end (1 min
  55 s of CPU in a 2 min Twitter replay), which takes a core from the device's other work. A thread's think time is
  the gap between its call and its previous one in the script, slept after that call returns (closed loop: a slow
  call delays the rest of its thread, as it would have on the phone). The script has start times only, so the gap
  also holds the phone's own time in the previous call; a replay's total time is therefore the script's span plus
  about the replay's time in calls. `--no-think` runs every thread's calls back to back, all threads from the start.
- Files the script reads are laid out before the replay with the bytes it reads from them (pseudo-random, synced),
  so that its reads read: Mobibench opens every file that is not read-only with O_TRUNC and reads nothing back.
  The recorded flags are kept (O_CREAT, O_TRUNC, O_APPEND), and a file written is opened read-write.
- Calls on an fd the script never opened are skipped and counted, as Mobibench skips them (it cannot know the file).
  A call on an fd is bound to the open that preceded it in the script's time, in whichever thread, and waits for
  that open to have been replayed (with or without think times): threads run apart, but a file's life keeps its
  order, so a call misses its file only where the script has it so.
- Failed calls (the file is gone, a read on a directory) are counted per call, not fatal; their time is I/O time.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import resource
import secrets
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from smartio.errors import UsageError
from smartio.launch.replay import require_space

SCRATCH_PREFIX = ".smartio-mobigen-"
SLEEP_SLICE_S = 0.2
CHUNK = 1 << 20
# What each call counts as in a replay's breakdown (the launch replayer's names).
KIND = {"open": "metadata", "close": "metadata", "stat64": "metadata", "lstat64": "metadata", "fstat64": "metadata",
        "access": "metadata", "unlink": "metadata", "lseek": "metadata", "read": "read", "pread": "read",
        "write": "write", "pwrite": "write", "fsync": "sync", "fdatasync": "sync"}
ALIASES = {"stat": "stat64", "lstat": "lstat64", "fstat": "fstat64", "pread64": "pread", "pwrite64": "pwrite",
           "_llseek": "lseek", "llseek": "lseek", "lseek64": "lseek"}
BREAKDOWN = ("think", "io", "metadata", "read", "write", "sync", "cpu", "cpu_sys")
WHENCE = {"SEEK_SET": os.SEEK_SET, "SEEK_CUR": os.SEEK_CUR, "SEEK_END": os.SEEK_END,
          "0": os.SEEK_SET, "1": os.SEEK_CUR, "2": os.SEEK_END}
FLAG_BITS = {"O_CREAT": os.O_CREAT, "O_TRUNC": os.O_TRUNC, "O_APPEND": os.O_APPEND, "O_EXCL": os.O_EXCL}


@dataclasses.dataclass(frozen=True)
class Call:
    """One line of a script, parsed. `path` is the recorded path for the path calls and a quoted open, None for an
    unquoted open (a stand-in file of its own: `standin`, the line number); `fd` the application's fd."""
    line: int
    tid: int
    time_us: int
    call: str
    fd: int | None = None
    path: str | None = None
    offset: int = 0
    size: int = 0
    flags: str = ""
    ret: int | None = None
    whence: int = os.SEEK_SET

    @property
    def standin(self) -> bool:
        return self.call == "open" and self.path is None


@dataclasses.dataclass
class Script:
    path: str
    calls: list[Call]
    lines: int
    malformed: int = 0
    malformed_examples: list[str] = dataclasses.field(default_factory=list)
    unknown: Counter[str] = dataclasses.field(default_factory=Counter)
    failed_when_recorded: Counter[str] = dataclasses.field(default_factory=Counter)

    @property
    def threads(self) -> dict[int, list[Call]]:
        out: dict[int, list[Call]] = {}
        for c in self.calls:
            out.setdefault(c.tid, []).append(c)
        for calls in out.values():
            calls.sort(key=lambda c: (c.time_us, c.line))
        return out

    @property
    def span_s(self) -> float:
        return max((c.time_us for c in self.calls), default=0) / 1e6

    @classmethod
    def read(cls, path: Path, flag: str = "--replay") -> Script:
        try:
            text = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            raise UsageError(flag, path, "does not exist") from None
        except OSError as e:
            raise UsageError(flag, path, f"cannot read: {e.strerror}") from e
        return cls.parse(text, str(path), flag)

    @classmethod
    def parse(cls, text: str, name: str = "SCRIPT", flag: str = "--replay") -> Script:
        script = cls(name, [], 0)
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            script.lines += 1
            try:
                call = _parse_line(n, line)
            except FailedWhenRecorded as e:
                script.failed_when_recorded[str(e)] += 1
                continue
            except ValueError:
                script.malformed += 1
                if len(script.malformed_examples) < 5:
                    script.malformed_examples.append(f"line {n}: {line[:120]}")
                continue
            if isinstance(call, str):
                script.unknown[call] += 1
            else:
                script.calls.append(call)
        if not script.calls:
            why = (f"none of its {script.lines} lines is a call this replay knows" if script.lines else "it is empty")
            raise UsageError(flag, name, f"not a Mobigen script ({why}; a line is `TID TIME_US CALL ARGS...`, e.g. "
                             "`1 2876 pread 47 552178 30`)")
        return script

    def summary(self) -> dict[str, Any]:
        return {"format": "mobigen", "path": self.path, "lines": self.lines, "calls": len(self.calls),
                "threads": len(self.threads), "span_s": round(self.span_s, 6), "malformed": self.malformed,
                "malformed_examples": self.malformed_examples, "unknown": dict(sorted(self.unknown.items())),
                "failed_when_recorded": dict(sorted(self.failed_when_recorded.items())),
                "by_call": dict(sorted(Counter(c.call for c in self.calls).items()))}


class FailedWhenRecorded(Exception):
    """A line whose call failed on the phone and carries no size to replay (`read 51 -1`): counted, not replayed."""


def _int(s: str) -> int:
    return int(s, 0) if s.lower().startswith(("0x", "-0x")) else int(s)


def _parse_line(n: int, line: str) -> Call | str:
    """A Call, the name of a call this replay does not know (counted), or ValueError (malformed)."""
    parts = line.split(None, 3)
    if len(parts) < 3:
        raise ValueError("too few fields")
    tid, t = _int(parts[0]), _int(parts[1])
    if tid < 0 or t < 0:
        raise ValueError("negative tid or time")
    name = ALIASES.get(parts[2], parts[2])
    rest = parts[3] if len(parts) > 3 else ""
    if name not in KIND:
        return parts[2]
    path: str | None = None
    if rest.startswith('"'):
        end = rest.find('"', 1)
        if end < 0:
            raise ValueError("unterminated path")
        path, args = rest[1:end], rest[end + 1:].split()
        if not path:
            raise ValueError("empty path")
    else:
        args = rest.split()
    base = Call(n, tid, t, name)
    if name == "open":
        if path is None:                        # unquoted: a stand-in file of its own
            if len(args) != 3:
                raise ValueError("open PATH FLAGS FD")
            args = args[1:]
        if len(args) != 2:
            raise ValueError("open PATH FLAGS FD")
        if not args[0].startswith("O_"):
            raise ValueError("open flags")
        return dataclasses.replace(base, path=path, flags=args[0], fd=_int(args[1]))
    if name in ("stat64", "lstat64", "access", "unlink"):
        if path is None or len(args) > 1:
            raise ValueError(f'{name} "PATH" RET')
        return dataclasses.replace(base, path=path, ret=_int(args[0]) if args else None)
    if path is not None or not args:
        raise ValueError(f"{name} FD ...")
    fd = _int(args[0])
    if name in ("read", "write"):
        if len(args) != 2:
            raise ValueError(f"{name} FD SIZE")
        if _int(args[1]) < 0:       # Mobigen writes the call's result as its size: -1 when it failed (EAGAIN)
            raise FailedWhenRecorded(name)
        return dataclasses.replace(base, fd=fd, size=_int(args[1]))
    if name in ("pread", "pwrite"):
        if len(args) != 3 or _int(args[1]) < 0 or _int(args[2]) < 0:
            raise ValueError(f"{name} FD OFFSET SIZE")
        return dataclasses.replace(base, fd=fd, offset=_int(args[1]), size=_int(args[2]))
    if name == "lseek":
        if len(args) not in (2, 3) or (len(args) == 3 and args[2] not in WHENCE):
            raise ValueError("lseek FD OFFSET [WHENCE]")
        return dataclasses.replace(base, fd=fd, offset=_int(args[1]),
                                   whence=WHENCE[args[2]] if len(args) == 3 else os.SEEK_SET)
    if len(args) > 2:                               # close, fsync, fdatasync, fstat64: FD [RET]
        raise ValueError(f"{name} FD [RET]")
    return dataclasses.replace(base, fd=fd, ret=_int(args[1]) if len(args) == 2 else None)


def open_flags(recorded: str) -> int:
    """The flags a replayed open uses: read-only if recorded so, else read-write (a file opened write-only may be
    read back through a dup the script shows as the same fd), with the recorded O_CREAT, O_TRUNC, O_APPEND."""
    names = set(recorded.split("|"))
    if "O_RDONLY" in names and not names & {"O_WRONLY", "O_RDWR"}:
        return os.O_RDONLY
    return os.O_RDWR | sum(bit for name, bit in FLAG_BITS.items() if name in names and name != "O_EXCL")


class ScriptLayout:
    """The files a script works on, under `<dir>/.smartio-mobigen-<token>/`: `root/` holds each recorded path,
    `temp/` the stand-ins of unquoted opens. Before a replay every file the script opens or finds (stat, access
    returning 0) is there, as big as the script reads of it (pseudo-random bytes, synced); every path that is a
    parent of another is a directory. `reset()` puts that state back after a replay (the script truncates, writes
    and unlinks). Removed on exit from the `with` block, also on Ctrl-C."""

    def __init__(self, script: Script, directory: str) -> None:
        self.script = script
        self.root = Path(directory) / f"{SCRATCH_PREFIX}{secrets.token_hex(4)}"
        self.paths: dict[int, str] = {}          # line of a path call or open -> its path under root
        self.sizes: dict[str, int] = {}          # files to lay out -> size
        self.dirs: set[str] = set()
        self._plan()

    def where(self, recorded: str) -> str:
        """A recorded path's place under the scratch directory: normalised, `..` kept from climbing out."""
        rel = posixpath.normpath("/" + recorded).lstrip("/")
        return str(self.root / "root" / rel) if rel and rel != "." else str(self.root / "root")

    def _plan(self) -> None:
        fds: dict[int, tuple[str, int]] = {}      # fd -> (path, position), in time order over all threads
        exists: dict[str, bool] = {}
        need: dict[str, int] = {}
        for c in sorted(self.script.calls, key=lambda c: (c.time_us, c.line)):
            if c.call == "open":
                p = self.where(c.path) if c.path is not None else \
                    str(self.root / "temp" / f"temp_{c.tid}_{c.line}.dat")
                self.paths[c.line] = p
                exists.setdefault(p, (c.fd or 0) >= 0)
                need.setdefault(p, 0)
                if c.fd is not None and c.fd >= 0:
                    fds[c.fd] = (p, 0)
            elif c.path is not None:
                p = self.paths[c.line] = self.where(c.path)
                # the first call on a path says whether it was there: a stat, access or unlink that succeeded
                exists.setdefault(p, c.ret is None or c.ret >= 0)
            elif c.fd in fds:
                p, pos = fds[c.fd]
                if c.call in ("read", "write"):
                    if c.call == "read":
                        need[p] = max(need.get(p, 0), pos + c.size)
                    fds[c.fd] = (p, pos + c.size)
                elif c.call == "pread":
                    need[p] = max(need.get(p, 0), c.offset + c.size)
                elif c.call == "lseek" and c.whence == os.SEEK_SET:
                    fds[c.fd] = (p, c.offset)
                elif c.call == "close":
                    del fds[c.fd]
        every = set(exists)
        for p in every:                              # a parent of another path is a directory
            parent = os.path.dirname(p)
            while len(parent) > len(str(self.root)):
                self.dirs.add(parent)
                parent = os.path.dirname(parent)
        self.sizes = {p: need.get(p, 0) for p, there in exists.items() if there and p not in self.dirs}

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def check_space(self) -> None:
        require_space(self.root.parent, sum(-(-n // 4096) * 4096 + 4096 for n in self.sizes.values()),
                      "the script's files")

    def __enter__(self) -> ScriptLayout:
        if not self.root.parent.is_dir():
            raise UsageError("--target", self.root.parent, "is not a directory")
        self.check_space()
        try:
            self.root.mkdir()
            self._build()
        except BaseException:
            self.remove()
            raise
        return self

    def _build(self) -> None:
        pattern = os.urandom(CHUNK)
        (self.root / "temp").mkdir(exist_ok=True)
        (self.root / "root").mkdir(exist_ok=True)
        for d in sorted(self.dirs):
            os.makedirs(d, exist_ok=True)
        for p, size in sorted(self.sizes.items()):
            fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            try:
                left = size
                while left > 0:
                    left -= os.write(fd, pattern[:min(left, CHUNK)])
                os.fsync(fd)
            finally:
                os.close(fd)
        os.sync()

    def reset(self) -> None:
        """The state before a replay again: everything under the scratch directory made anew."""
        for sub in ("root", "temp"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        self._build()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.remove()


class MobigenReplayer:
    """One launch = the script's threads, each a thread here, replayed with their think times (or none). After
    each, `last_breakdown` (seconds: think time and time in calls summed over the threads, `io` being Mobibench's
    "Total IO time"; the process's CPU time) and `last_calls` (per call: durations, failures, skipped calls on fds
    never opened) say where the time went; the layout is reset for the next launch after the clock stops."""

    def __init__(self, script: Script, layout: ScriptLayout, think: bool = True, sync_call: str = "fsync") -> None:
        if sync_call not in ("fsync", "fdatasync"):
            raise UsageError("--sync-call", sync_call, "must be fsync or fdatasync")
        self.script, self.layout, self.think = script, layout, think
        self.sync_call = sync_call          # what the script's fsync() calls do: seed 002's F replays fdatasync()
        self.threads = script.threads
        biggest = max([c.size for c in script.calls if c.call in ("read", "write", "pread", "pwrite")] + [1])
        self.wbuf = os.urandom(min(biggest, 64 << 20))
        self.last_breakdown: dict[str, float] | None = None
        self.last_calls: dict[str, dict[str, Any]] | None = None
        self._used = False
        # In the script's time over all threads: each fd call's open (its line), and for an open the earlier open
        # of the same number it replaces when the script never recorded that one's close.
        self.uses: dict[int, int] = {}
        self.replaces: dict[int, int] = {}
        holder: dict[int, int] = {}
        for c in sorted(script.calls, key=lambda c: (c.time_us, c.line)):
            if c.fd is None:
                continue
            if c.call == "open":
                if c.fd >= 0:
                    if c.fd in holder:
                        self.replaces[c.line] = holder[c.fd]
                    holder[c.fd] = c.line
            elif c.fd in holder:
                self.uses[c.line] = holder[c.fd] if c.call != "close" else holder.pop(c.fd)

    def reset(self) -> None:
        """The layout's state before a replay, now rather than at the next launch's start (so that the page cache
        can be dropped in between)."""
        if self._used:
            self.layout.reset()
            self._used = False

    def launch(self) -> float:
        self.reset()
        self._used = True
        fds: dict[int, int] = {}                # open's line -> our fd, while open
        opened = {line: threading.Event() for line in set(self.uses.values())}
        lock = threading.Lock()
        stop = threading.Event()
        results: list[dict[str, Any]] = []
        failures: list[BaseException] = []
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        workers = [threading.Thread(target=self._thread, args=(calls, t0, fds, opened, lock, stop, results, failures),
                                    name=f"mobigen-{tid}", daemon=True) for tid, calls in self.threads.items()]
        try:
            for w in workers:
                w.start()
            for w in workers:
                while w.is_alive():
                    w.join(SLEEP_SLICE_S)
        except BaseException:
            stop.set()
            for w in workers:
                try:
                    w.join()
                except RuntimeError:        # not started: Ctrl-C came while the threads were being started
                    pass
            raise
        finally:
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
        wall = max((r["end"] for r in results), default=t0) - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        if failures:
            raise failures[0]
        spent = dict.fromkeys(BREAKDOWN, 0.0)
        calls: dict[str, dict[str, Any]] = {}
        for r in results:
            for k, v in r["spent"].items():
                spent[k] += v
            for name, c in r["calls"].items():
                acc = calls.setdefault(name, {"durations_s": [], "failed": 0, "skipped": 0})
                acc["durations_s"] += c["durations_s"]
                acc["failed"] += c["failed"]
                acc["skipped"] += c["skipped"]
        spent["cpu"] = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
        spent["cpu_sys"] = cpu1.ru_stime - cpu0.ru_stime
        self.last_breakdown = {k: round(v, 6) for k, v in spent.items()}
        self.last_calls = calls
        return wall

    def _thread(self, calls: list[Call], t0: float, fds: dict[int, int], opened: dict[int, threading.Event],
                lock: threading.Lock, stop: threading.Event, results: list[dict[str, Any]],
                failures: list[BaseException]) -> None:
        clock = time.perf_counter
        paths, wbuf = self.layout.paths, memoryview(self.wbuf)
        rbuf = bytearray(len(self.wbuf))
        spent = dict.fromkeys(BREAKDOWN, 0.0)
        per: dict[str, dict[str, Any]] = {}
        end = t0
        prev_us = 0
        try:
            for c in calls:
                if stop.is_set():
                    break
                if self.think:
                    ready = end + (c.time_us - prev_us) / 1e6
                    while (left := ready - clock()) > 0 and not stop.is_set():
                        time.sleep(min(left, SLEEP_SLICE_S))
                    now = clock()
                    spent["think"] += now - end
                prev_us = c.time_us
                acc = per.setdefault(c.call, {"durations_s": [], "failed": 0, "skipped": 0})
                fd, gen = -1, self.uses.get(c.line, -1)
                if c.fd is not None and c.call != "open":
                    if gen < 0:
                        acc["skipped"] += 1
                        end = clock()
                        continue
                    while not opened[gen].wait(SLEEP_SLICE_S) and not stop.is_set():
                        pass
                    if stop.is_set():
                        break
                    with lock:      # -1 if that open failed, or --no-think let another thread close it first
                        fd = fds.pop(gen, -1) if c.call == "close" else fds.get(gen, -1)
                began = clock()
                try:
                    self._do(c, fd, paths, wbuf, rbuf, fds, lock)
                except OSError:
                    acc["failed"] += 1
                finally:
                    if c.line in opened:
                        opened[c.line].set()
                end = clock()
                acc["durations_s"].append(end - began)
                spent["io"] += end - began
                spent[KIND[c.call]] += end - began
        except BaseException as e:          # a defect, not an I/O error: the launch raises it
            failures.append(e)
            stop.set()
        results.append({"end": end, "spent": spent, "calls": per})

    def _do(self, c: Call, fd: int, paths: dict[int, str], wbuf: memoryview, rbuf: bytearray, fds: dict[int, int],
            lock: threading.Lock) -> None:
        name = c.call
        if name == "read":
            os.readv(fd, [memoryview(rbuf)[:min(c.size, len(rbuf))]])
        elif name == "write":
            os.write(fd, wbuf[:c.size])
        elif name == "pread":
            os.preadv(fd, [memoryview(rbuf)[:min(c.size, len(rbuf))]], c.offset)
        elif name == "pwrite":
            os.pwrite(fd, wbuf[:c.size], c.offset)
        elif name == "fsync":
            (os.fdatasync if self.sync_call == "fdatasync" else os.fsync)(fd)
        elif name == "fdatasync":
            os.fdatasync(fd)
        elif name == "fstat64":
            os.fstat(fd)
        elif name == "lseek":
            os.lseek(fd, c.offset, c.whence)
        elif name == "close":
            os.close(fd)
        elif name == "open":
            new = os.open(paths[c.line], open_flags(c.flags), 0o600)
            if c.fd is None or c.fd < 0:    # it failed on the phone: the application had no fd to use
                os.close(new)
                return
            with lock:
                fds[c.line] = new
                old = fds.pop(self.replaces[c.line], None) if c.line in self.replaces else None
            if old is not None:             # the script reused the number without a close it recorded
                os.close(old)
        elif name == "stat64":
            os.stat(paths[c.line])
        elif name == "lstat64":
            os.lstat(paths[c.line])
        elif name == "access":
            if not os.access(paths[c.line], os.F_OK):
                raise FileNotFoundError(paths[c.line])
        elif name == "unlink":
            os.unlink(paths[c.line])


def call_table(per_launch: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per call, over every launch's calls pooled: count, failures, calls skipped (fd never opened), and the
    latency's mean and percentiles in ms."""
    import numpy as np

    out: dict[str, dict[str, Any]] = {}
    for name in sorted({k for calls in per_launch for k in calls}):
        d = [x for calls in per_launch for x in calls.get(name, {}).get("durations_s", [])]
        row: dict[str, Any] = {"n": len(d), "failed": sum(c.get(name, {}).get("failed", 0) for c in per_launch),
                               "skipped": sum(c.get(name, {}).get("skipped", 0) for c in per_launch)}
        if d:
            ms = np.array(d) * 1e3
            row.update(total_ms=round(float(ms.sum()), 3), mean_ms=round(float(ms.mean()), 4),
                       **{f"p{q}_ms": round(float(np.percentile(ms, q)), 4) for q in (50, 90, 99)},
                       max_ms=round(float(ms.max()), 4))
        out[name] = row
    return out


def is_mobigen(path: Path) -> bool:
    """Whether a file looks like a Mobigen script rather than a smartio launch trace (JSON lines)."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.strip():
                    return not line.lstrip().startswith("{")
    except OSError:
        return False
    return False

"""Recording block-layer events from tracefs, in a private ftrace instance.

blktrace needs debugfs files that these machines refuse to open, so we read the kernel's block
tracepoints directly. Recording happens in our own instance (`instances/smartio-<pid>`), with its own
ring buffer, clock (CLOCK_MONOTONIC), event switches and filters, so the global tracing state
(tracing_on, buffer size, enabled events, clock) is never touched; the instance is removed afterwards
and tracefs unmounted if we mounted it, also on Ctrl-C or on an error.

Events are read in binary from `per_cpu/cpuN/trace_pipe_raw` (ring-buffer pages) for nanosecond
timestamps and exact field values; the field layout comes from each event's `format` file, so the same
code reads a 6.1 guest and a 6.18 host.
"""

from __future__ import annotations

import errno
import os
import re
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from smartio.errors import NeedsRootError, SmartioError
from smartio.trace import events as ev

# tracepoint -> blktrace action. A request merge is reported as a back merge, as the kernel's blktrace does.
TRACEPOINTS = {
    "block_bio_queue": ev.QUEUE,
    "block_bio_backmerge": ev.BACKMERGE,
    "block_bio_frontmerge": ev.FRONTMERGE,
    "block_getrq": ev.GETRQ,
    "block_rq_insert": ev.INSERT,
    "block_rq_issue": ev.ISSUE,
    "block_rq_complete": ev.COMPLETE,
    "block_rq_requeue": ev.REQUEUE,
    "block_rq_merge": ev.BACKMERGE,
}
BUFFER_KB_PER_CPU = 8192  # 8 MiB per CPU: about 100k events, a few seconds of a busy disk between reads
RB_MISSED_EVENTS = 1 << 31
RB_MISSED_STORED = 1 << 30
RB_COMMIT_MASK = (1 << 30) - 1
TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP = 29, 30, 31


def find_tracefs() -> Path | None:
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "tracefs":
                return Path(parts[1].replace("\\040", " "))
    return None


@contextmanager
def mounted_tracefs() -> Iterator[Path]:
    """The tracefs mount point; mounts it in a temporary directory (and unmounts it after) if needed."""
    found = find_tracefs()
    if found is not None:
        yield found
        return
    where = Path(tempfile.mkdtemp(prefix="smartio-tracefs."))
    try:
        res = subprocess.run(["mount", "-t", "tracefs", "nodev", str(where)], capture_output=True, text=True)
        if res.returncode != 0:
            raise SmartioError(f"cannot mount tracefs on {where}: {res.stderr.strip()}")
        try:
            yield where
        finally:
            subprocess.run(["umount", str(where)], check=False)
    finally:
        os.rmdir(where)


@dataclass
class EventFormat:
    """Where one tracepoint's fields sit in its binary record (from its `format` file)."""

    name: str
    id: int
    fields: dict[str, tuple[int, int]]  # name -> (offset, size)

    @classmethod
    def load(cls, events_dir: Path, name: str) -> EventFormat:
        d = events_dir / "block" / name
        fields = {}
        for m in re.finditer(r"field:[^;]*?(\w+)(?:\[\d+\])?;\s*offset:(\d+);\s*size:(\d+);",
                             (d / "format").read_text()):
            fields[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        return cls(name, int((d / "id").read_text()), fields)

    def get_int(self, data: bytes, name: str) -> int:
        off, size = self.fields[name]
        return int.from_bytes(data[off:off + size], "little", signed=False)

    def get_str(self, data: bytes, name: str) -> str:
        off, size = self.fields[name]
        return data[off:off + size].split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass
class GlobalState:
    """The top-level tracing settings we promise not to change (checked after recording)."""

    values: dict[str, str]

    FILES = ("tracing_on", "buffer_size_kb", "trace_clock", "current_tracer", "set_event")

    @classmethod
    def read(cls, root: Path) -> GlobalState:
        return cls({f: (root / f).read_text() for f in cls.FILES if (root / f).exists()})


@dataclass
class Recorder:
    """One recording in a private tracefs instance. Use as a context manager; `poll()` drains buffers."""

    root: Path
    devs: list[int] = field(default_factory=list)         # kernel dev_t values to keep; empty = all
    part_to_disk: dict[int, int] = field(default_factory=dict)
    instance: Path | None = None
    formats: dict[int, EventFormat] = field(default_factory=dict)
    pages: dict[int, list[bytes]] = field(default_factory=dict)
    lost_events: int = 0
    page_size: int = 4096
    _fds: dict[int, int] = field(default_factory=dict)

    def __enter__(self) -> Recorder:
        if os.geteuid() != 0:
            raise NeedsRootError("recording block events (tracefs)")
        base = self.root / "instances"
        name = f"smartio-{os.getpid()}"
        self.instance = base / name
        try:
            os.mkdir(self.instance)
        except OSError as e:
            raise SmartioError(f"cannot create tracing instance {self.instance}: {e.strerror}") from None
        try:
            self._configure()
        except BaseException:
            self._teardown()
            raise
        return self

    def _configure(self) -> None:
        inst = self.instance
        assert inst is not None
        (inst / "tracing_on").write_text("0")
        (inst / "trace_clock").write_text("mono")
        (inst / "buffer_size_kb").write_text(str(BUFFER_KB_PER_CPU))
        sub_kb = inst / "buffer_subbuf_size_kb"
        self.page_size = int(sub_kb.read_text()) * 1024 if sub_kb.exists() else os.sysconf("SC_PAGE_SIZE")
        dev_filter = " || ".join(f"dev == {d}" for d in self.devs)
        for tp, _ in TRACEPOINTS.items():
            fmt = EventFormat.load(inst / "events", tp)
            self.formats[fmt.id] = fmt
            if dev_filter:
                (inst / "events" / "block" / tp / "filter").write_text(dev_filter)
            (inst / "events" / "block" / tp / "enable").write_text("1")
        for cpu_dir in sorted((inst / "per_cpu").glob("cpu*")):
            cpu = int(cpu_dir.name[3:])
            self._fds[cpu] = os.open(cpu_dir / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
            self.pages[cpu] = []
        (inst / "tracing_on").write_text("1")

    def poll(self) -> int:
        """Moves whatever the kernel has buffered into memory; returns the number of pages read."""
        got = 0
        for cpu, fd in self._fds.items():
            while True:
                try:
                    page = os.read(fd, self.page_size)
                except OSError as e:
                    if e.errno in (errno.EAGAIN, errno.EINTR):
                        break
                    raise
                if not page:
                    break
                self.pages[cpu].append(page)
                got += 1
        return got

    def stop(self) -> None:
        if self.instance is not None and self.instance.exists():
            (self.instance / "tracing_on").write_text("0")
        self.poll()

    def __exit__(self, *exc: object) -> None:
        self._teardown()

    def _teardown(self) -> None:
        try:
            if self.instance is not None and self.instance.exists():
                (self.instance / "tracing_on").write_text("0")
                self.poll()
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            if self.instance is not None and self.instance.exists():
                # Events must be off before the kernel lets the instance go.
                for tp in TRACEPOINTS:
                    (self.instance / "events" / "block" / tp / "enable").write_text("0")
                os.rmdir(self.instance)

    def decode(self) -> tuple[np.ndarray, dict[int, str]]:
        """Turns the raw ring-buffer pages into event records and a pid -> command table."""
        rows: list[tuple] = []
        comms: dict[int, str] = {}
        for cpu, pages in self.pages.items():
            for page in pages:
                self._decode_page(cpu, page, rows, comms)
        arr = np.array(rows, dtype=ev.EVENT_DTYPE) if rows else np.zeros(0, dtype=ev.EVENT_DTYPE)
        return arr, comms

    def _decode_page(self, cpu: int, page: bytes, rows: list[tuple], comms: dict[int, str]) -> None:
        if len(page) < 16:
            return
        ts, commit = struct.unpack_from("<QQ", page, 0)
        if commit & RB_MISSED_EVENTS:
            self.lost_events += 1  # at least one; the exact count is in the stats file
        end = 16 + (commit & RB_COMMIT_MASK)
        pos = 16
        while pos + 4 <= end:
            hdr = struct.unpack_from("<I", page, pos)[0]
            type_len, delta = hdr & 31, hdr >> 5
            if type_len == TYPE_PADDING:
                if delta == 0:
                    break
                pos += 4 + struct.unpack_from("<I", page, pos + 4)[0]
                continue
            if type_len == TYPE_TIME_EXTEND:
                ts += (struct.unpack_from("<I", page, pos + 4)[0] << 27) + delta
                pos += 8
                continue
            if type_len == TYPE_TIME_STAMP:
                ts = (struct.unpack_from("<I", page, pos + 4)[0] << 27) + delta | (ts & ~((1 << 59) - 1))
                pos += 8
                continue
            ts += delta
            if type_len == 0:
                length = struct.unpack_from("<I", page, pos + 4)[0] - 4
                data = page[pos + 8:pos + 8 + length]
                pos += 8 + length
            else:
                length = type_len * 4
                data = page[pos + 4:pos + 4 + length]
                pos += 4 + length
            self._decode_event(cpu, ts, data, rows, comms)

    def _decode_event(self, cpu: int, ts: int, data: bytes, rows: list[tuple], comms: dict[int, str]) -> None:
        etype, = struct.unpack_from("<H", data, 0)
        fmt = self.formats.get(etype)
        if fmt is None:
            return
        pid = struct.unpack_from("<i", data, 4)[0]
        code = TRACEPOINTS[fmt.name]
        dev = fmt.get_int(data, "dev")
        dev = self.part_to_disk.get(dev, dev)
        rwbs = fmt.get_str(data, "rwbs")
        tc = ev.rwbs_to_categories(rwbs) | ev.ACTION_CATEGORY[code]
        nsect = fmt.get_int(data, "nr_sector")
        error = 0
        if "error" in fmt.fields:
            error = abs(int.from_bytes(data[fmt.fields["error"][0]:fmt.fields["error"][0] + 4], "little",
                                       signed=True)) & 0xFFFF
        if "comm" in fmt.fields and pid > 0:
            comms.setdefault(pid, fmt.get_str(data, "comm"))
        rows.append((ev.MAGIC, 0, ts, fmt.get_int(data, "sector"), nsect * 512, code | tc << ev.TC_SHIFT,
                     max(pid, 0), dev, cpu, error, 0))

    def overruns(self) -> int:
        """Events the kernel dropped because the buffer was full (from the per-CPU stats)."""
        total = 0
        if self.instance is None or not self.instance.exists():
            return total
        for stats in (self.instance / "per_cpu").glob("cpu*/stats"):
            m = re.search(r"^overrun:\s*(\d+)", stats.read_text(), re.M)
            if m:
                total += int(m.group(1))
        return total


def partition_map() -> dict[int, int]:
    """Kernel dev_t of every partition -> that of its whole disk (blktrace reports the disk)."""
    out = {}
    for part in Path("/sys/class/block").iterdir():
        if (part / "partition").exists():
            disk = part.resolve().parent
            out[_sys_kdev(part)] = _sys_kdev(disk)
    return out


def _sys_kdev(path: Path) -> int:
    major, minor = (path / "dev").read_text().strip().split(":")
    return ev.kdev(int(major), int(minor))

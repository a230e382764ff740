"""The host side of `smartio bench sqlite`: check the target, run the repeats in a worker process, summarise,
clean up.

    doc = run_sqlite(SqliteSettings(journal="wal"), "/mnt/scratch", trace=False, command="smartio bench sqlite ...")
    doc["results"]["tx_per_s"]["mean"]

Everything goes into a scratch directory `.smartio-sqlite-<token>/` inside the target, removed afterwards, also on
Ctrl-C and SIGTERM. Each repeat runs on a fresh database file; the filesystem is synced (syncfs) before each one
so that no earlier writeback lands in its transactions.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import platform
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from smartio import __version__
from smartio.errors import MissingToolError, NeedsRootError, SmartioError, UsageError
from smartio.signals import sigterm_as_interrupt
from smartio.sqlite import fsjournal, shim
from smartio.sqlite.attribute import Layout, Repeat, per_transaction, save_bundle, summarise
from smartio.sqlite.settings import SqliteSettings
from smartio.storebench.stats import Stat

if TYPE_CHECKING:
    from smartio.trace.tracefs import Recorder

SCRATCH_PREFIX = ".smartio-sqlite-"


def check_target(path: str | None, settings: SqliteSettings) -> Path:
    if not path:
        raise UsageError("--target", "(missing)", "a target directory is required; the database is made in a "
                         "scratch directory inside it and removed afterwards")
    p = Path(path)
    if not p.exists():
        raise UsageError("--target", path, "does not exist")
    if not p.is_dir():
        raise UsageError("--target", path,
                         "is not a directory (smartio bench sqlite makes its scratch database in one)")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError("--target", path, "directory is not writable")
    st = os.statvfs(p)
    avail = st.f_bavail * st.f_frsize
    need = settings.space_needed()
    if need > avail:
        raise UsageError("--target", path, f"too little space: {settings.transactions} transactions of "
                         f"{settings.record_bytes} bytes need about {need >> 20} MiB, {avail >> 20} MiB available "
                         "(lower --transactions or --record-bytes)")
    return p.resolve()


def _syncfs(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(fd)
    finally:
        os.close(fd)


def _device_info(target: Path) -> dict[str, Any]:
    from smartio.blockdev import backing_of, read_scheduler

    b = backing_of(str(target))
    info: dict[str, Any] = {"fstype": b.fstype, "source": b.source}
    try:
        info["mount_options"] = fsjournal.mount_of(str(target))[3]
    except ValueError:
        pass
    if b.device is not None:
        current, _ = read_scheduler(b.device)
        info.update(name=b.device.name, disk=b.device.disk, size_bytes=b.device.size, scheduler=current)
    else:
        info["name"] = None
    return info


class _Worker:
    """Runs one repeat in a child process, with the shim preloaded when there is one."""

    def __init__(self, scratch: Path, settings: SqliteSettings, lib: Path | None, log_syncs: bool) -> None:
        self.scratch, self.settings, self.lib, self.log_syncs = scratch, settings, lib, log_syncs

    def run(self, name: str, **override: Any) -> tuple[dict[str, Any], shim.Counts | None, list[shim.SyncCall]]:
        s = self.settings
        spec = {"db": str(self.scratch / f"{name}.db"), "op": s.op, "journal": s.journal, "sync": s.sync,
                "transactions": s.transactions, "record_bytes": s.record_bytes, **override}
        out, counts, log = (self.scratch / f"{name}.{x}" for x in ("out.json", "counts", "syncs"))
        env = dict(os.environ)
        if self.lib is not None:
            env = shim.environment(self.lib, override.get("sync_call", s.sync_call), counts,
                                   log if self.log_syncs else None)
        cmd = [sys.executable, "-m", "smartio.sqlite.worker", json.dumps(spec), str(out)]
        res = subprocess.run(cmd, env=env)
        if res.returncode == 130 or res.returncode == -signal.SIGINT:
            raise KeyboardInterrupt
        if res.returncode != 0:
            raise SmartioError(f"the SQLite worker failed with exit code {res.returncode} ({name})")
        doc = json.loads(out.read_text())
        c = shim.Counts.read(counts) if self.lib is not None and counts.exists() else None
        calls = shim.read_log(log) if self.lib is not None and self.log_syncs else []
        for f in self.scratch.iterdir():          # this repeat's database and journals, its outputs
            if f.name.startswith(name + "."):
                f.unlink()
        return doc, c, calls


def _library_sync_call(worker: _Worker) -> str | None:
    """What the system's SQLite calls to sync, seen by the shim in a one-transaction probe (DELETE, FULL)."""
    _, counts, _ = worker.run("probe", transactions=1, journal="delete", sync="full", op="insert",
                              sync_call="library")
    return counts.library_call if counts else None


def repeat_summary(doc: dict[str, Any]) -> dict[str, float]:
    """One repeat's figures from the worker's document. `tx_per_s` is Mobibench's figure: the transactions over the
    time from the first one's start to the end of the run, which in WAL mode is the end of the checkpoint that closes
    it (Mobibench's clock stops after its sqlite3_wal_checkpoint). `tx_only_per_s` stops at the last commit; the two
    are the same figure in the rollback modes. `checkpoint_ms` is that checkpoint's time (0 outside WAL)."""
    starts, ends = np.array(doc["starts_ns"], dtype=np.int64), np.array(doc["ends_ns"], dtype=np.int64)
    lat = (ends - starts) / 1e6
    cp_start, cp_end = (int(x) for x in doc.get("checkpoint_ns") or (0, 0))
    last = max(int(ends[-1]), cp_end)
    span, tx_span = (last - starts[0]) / 1e9, (ends[-1] - starts[0]) / 1e9
    return {"tx_per_s": len(lat) / span if span > 0 else float("nan"),
            "tx_only_per_s": len(lat) / tx_span if tx_span > 0 else float("nan"),
            "checkpoint_ms": (cp_end - cp_start) / 1e6,
            "mean_ms": float(lat.mean()), "p99_ms": float(np.percentile(lat, 99)), "max_ms": float(lat.max())}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def run_sqlite(settings: SqliteSettings, target: str | None, *, trace: bool = False, trace_file: Path | None = None,
               command: str = "smartio bench sqlite", progress: bool = True) -> dict[str, Any]:
    """Run the workload `settings.repeats` times in `target`; returns the result document (docs/guide/bench.md)."""
    root = check_target(target, settings)
    if trace_file is not None and not trace:
        raise UsageError("--trace-file", trace_file, "needs --trace")
    if trace_file is not None and not trace_file.parent.is_dir():
        raise UsageError("--trace-file", trace_file, f"directory {trace_file.parent} does not exist")
    if trace and os.geteuid() != 0:
        raise NeedsRootError("--trace (recording block events with tracefs)")
    try:
        lib: Path | None = shim.build()
    except MissingToolError:
        if settings.sync_call != "library" or trace:
            raise
        lib = None            # as the library does, without counting its calls
    device = _device_info(root)
    layout = _layout(root, device) if trace else None
    started = _now()
    scratch = root / f"{SCRATCH_PREFIX}{secrets.token_hex(4)}"
    say = (lambda m: print(f"smartio bench sqlite: {m}", file=sys.stderr, flush=True)) if progress else (lambda m: None)
    per_repeat: list[dict[str, float]] = []
    counts: list[shim.Counts] = []
    repeats: list[Repeat] = []
    worker_doc: dict[str, Any] = {}
    with sigterm_as_interrupt():
        try:
            scratch.mkdir()
            worker = _Worker(scratch, settings, lib, log_syncs=trace)
            library_call = _library_sync_call(worker) if lib is not None else None
            if settings.sync_call != "library" and library_call is None:
                raise UsageError("--sync-call", settings.sync_call, "the system's SQLite made no fsync() or "
                                 "fdatasync() call through libc that the shim could see (built with SQLITE_NO_SYNC, "
                                 "or syncing some other way), so the call cannot be chosen with this library")
            recorder = _recording(layout) if layout is not None else contextlib.nullcontext(None)
            with recorder as rec:
                for r in range(settings.repeats):
                    _syncfs(scratch)
                    worker_doc, c, calls = worker.run(f"r{r}", seed=r + 1)
                    if rec is not None:
                        rec.poll()
                    per_repeat.append(repeat_summary(worker_doc))
                    if c is not None:
                        counts.append(c)
                        _check_issued(settings.sync_call, c)
                    repeats.append(Repeat(str(scratch / f"r{r}.db"), worker_doc["starts_ns"], worker_doc["ends_ns"],
                                          calls, worker_doc["final_extents"]))
                    say(f"repeat {r + 1}/{settings.repeats}: {per_repeat[-1]['tx_per_s']:.1f} tx/s, "
                        f"mean {per_repeat[-1]['mean_ms']:.2f} ms")
                events = rec.finish() if rec is not None else None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    results: dict[str, Any] = {
        "tx_per_s": Stat.of(p["tx_per_s"] for p in per_repeat).to_json(),
        "tx_only_per_s": Stat.of(p["tx_only_per_s"] for p in per_repeat).to_json(),
        "checkpoint_ms": Stat.of(p["checkpoint_ms"] for p in per_repeat).to_json(),
        "latency_ms": {k: Stat.of(p[f"{k}_ms"] for p in per_repeat).to_json() for k in ("mean", "p99", "max")},
        "per_repeat": per_repeat,
        "sync_calls": _sync_summary(settings, library_call, counts, lib is not None),
    }
    if events is not None and layout is not None:
        txs = per_transaction(events.events, repeats, layout)
        results["trace"] = summarise(txs, layout)
        results["trace"]["events"] = int(len(events.events))
        results["trace"]["lost_events"] = events.meta.get("lost_events", 0)
        if trace_file is not None:
            from smartio.trace.formats import write_ours

            write_ours(events, trace_file)
            save_bundle(trace_file, repeats, layout, {"settings": settings.to_json(), "device": device})
            results["trace"]["file"] = str(trace_file)
    return {
        "experiment": "sqlite",
        "target": {"path": str(root), "kind": "dir",
                   "description": f"directory {root} ({device.get('fstype')} on {device.get('source')})"},
        "device": device,
        "scheduler": device.get("scheduler"),
        "kernel": platform.release(),
        "host": platform.node(),
        "sqlite_version": worker_doc.get("sqlite_version", sqlite3.sqlite_version),
        "sqlite_library": _library_path(),
        "journal_mode": worker_doc.get("journal_mode"),
        "page_size": worker_doc.get("page_size"),
        "smartio_version": __version__,
        "command": command,
        "started": started,
        "finished": _now(),
        "settings": settings.to_json(),
        "results": results,
    }


def _check_issued(sync_call: str, c: shim.Counts) -> None:
    wrong = c.issued_fdatasync if sync_call == "fsync" else c.issued_fsync if sync_call == "fdatasync" else 0
    if wrong:
        raise SmartioError(f"--sync-call {sync_call}: the shim issued {wrong} call(s) of the other kind")


def _sync_summary(settings: SqliteSettings, library_call: str | None, counts: list[shim.Counts],
                  counted: bool) -> dict[str, Any]:
    if not counted:
        return {"library": None, "issued_as": "as the library does", "note": "no C compiler: calls not counted"}
    n = settings.transactions
    return {"library": library_call, "issued_as": library_call if settings.sync_call == "library"
            else settings.sync_call,
            "per_transaction": {k: Stat.of(getattr(c, k) / n for c in counts).to_json()
                                for k in ("fsync", "fdatasync", "issued_fsync", "issued_fdatasync")}}


def _library_path() -> str | None:
    """The libsqlite3 file Python's sqlite3 module is linked against (from this process's memory map)."""
    try:
        for line in open("/proc/self/maps"):
            if "libsqlite3" in line:
                return line.split()[-1]
    except OSError:
        pass
    return None


def _layout(root: Path, device: dict[str, Any]) -> Layout:
    source, _mnt, fstype, opts = fsjournal.mount_of(str(root))
    if not source.startswith("/dev/"):
        raise UsageError("--target", root, f"--trace needs a filesystem on a block device, not {source} ({fstype})")
    disk, offset, _ = fsjournal.disk_of_node(source)
    j = fsjournal.locate(source, fstype, opts)
    return Layout(disk, offset, list(j.ranges) if j else [],
                  j.description if j else f"{fstype}: no separate journal (counted as metadata)"
                  if fstype not in ("ext4", "ext3", "xfs") else f"{fstype}: journal not found (tools missing?)",
                  fstype)


class _Recording:
    """A tracefs recording of the filesystem's disk (and an external journal's) for the whole run."""

    rec: Recorder  # from __enter__ on

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> _Recording:
        import time

        from smartio.trace.tracefs import Recorder, mounted_tracefs, partition_map
        parts = partition_map()
        disks = {self.layout.disk, *(d for d, _, _ in self.layout.journal)}
        devs = sorted(disks | {p for p, d in parts.items() if d in disks})
        root = self.stack.enter_context(mounted_tracefs())
        self.rec = self.stack.enter_context(Recorder(root, devs, parts))
        self.start_ns = time.monotonic_ns()
        # Drain the ring buffer while the worker runs: a long repeat would overrun it otherwise.
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()
        self.stack.callback(self._join)
        return self

    def _drain(self) -> None:
        while not self.done.wait(0.2):
            self.poll()

    def _join(self) -> None:
        self.done.set()
        self.thread.join()

    def poll(self) -> None:
        with self.lock:
            self.rec.poll()

    def finish(self):
        import time

        from smartio.trace.events import Trace

        self._join()
        self.rec.stop()
        lost = self.rec.overruns()
        events, comms = self.rec.decode()
        return Trace(events, comms, {"tool": "smartio bench sqlite --trace", "kernel": platform.release(),
                                     "clock": "mono", "start_ns": self.start_ns, "end_ns": time.monotonic_ns(),
                                     "lost_events": lost})

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def _recording(layout: Layout) -> _Recording:
    return _Recording(layout)

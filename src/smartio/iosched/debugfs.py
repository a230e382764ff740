"""The smartio module's debugfs files (/sys/kernel/debug/block/<disk>/sched/, kernel/smartio-iosched.c) and their
parsers: one reader for every caller.

`stats` has a line per group of counters, a name and then `counter=value` fields:

    be_write inserted=3 merged=0 dispatched=3 completed=3 boosted=0
    anticipation holds=5 hits=2 expired=1 lower_class_reads=0
    qasio_meta detected=3 found_queued=1 found_dispatched=0 not_found=2 pending=0 boosted=1

`inflight` the same layout per kind (`seq_read queued=0 inflight=1`); `phase` one word (PHASES); `kprobes` a line
per probe; `qasio_log` the QASIO log (parse_qasio_log); `dispatch` and the `*_fifo_list` files one line per queued
request, as mq-deadline's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

DEBUGFS_BLOCK = Path("/sys/kernel/debug/block")

# sio_queue_debugfs_attrs, in its order.
FIFO_LISTS = tuple(f"{c}_{g}_fifo_list" for c in ("rt", "be", "idle")
                   for g in ("read", "sync_write", "boosted_write", "async_write"))
FILES = ("stats", "inflight", "phase", "kprobes", "qasio_log", "dispatch", *FIFO_LISTS)
PHASES = ("read", "anticipate", "window")      # sio_phase_names

# The QASIO log: "<ms since boot>.<us> <what> <dep> <start>+<sectors> <pid>" (sio_qlog_show).
QASIO_LOG_SIZE = 1024    # SIO_NR_QLOG: a full log may have lost what came before its first entry
QASIO_LOG_EVENTS = {"Q": "found queued", "D": "found dispatched", "P": "not queued yet", "R": "found on a retry",
                    "X": "never found", "d": "boosted write dispatched", "c": "boosted write completed"}

_INT = re.compile(r"-?\d+")


def sched_dir(disk: str, root: Path = DEBUGFS_BLOCK) -> Path:
    """The directory of a disk's scheduler files (the active scheduler's: the files differ per scheduler)."""
    return root / disk / "sched"


def read_file(disk: str, name: str, root: Path = DEBUGFS_BLOCK) -> str:
    """One file's text; OSError when it is missing (debugfs not mounted, another scheduler)."""
    return (sched_dir(disk, root) / name).read_text()


def read_files(disk: str, names: Iterable[str], root: Path = DEBUGFS_BLOCK) -> dict[str, str]:
    """The files of `names` that can be read, each stripped; the others are left out."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = read_file(disk, name, root).strip()
        except OSError:
            continue
    return out


def parse_stats(text: str) -> dict[str, dict[str, int]]:
    """`stats` (or `inflight`) as {line name: {counter: value}}; fields that are not `name=integer` are left out."""
    rows: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        name, *fields = line.split() or [""]
        if not name:
            continue
        row = rows.setdefault(name, {})
        for f in fields:
            k, eq, v = f.partition("=")
            if eq and _INT.fullmatch(v):
                row[k] = int(v)
    return rows


def flat_counters(text: str) -> dict[str, int]:
    """`stats` as {"be_write.dispatched": 2, "anticipation.holds": 5, ...}."""
    return {f"{name}.{k}": v for name, row in parse_stats(text).items() for k, v in row.items()}


def qasio_counters(text: str) -> dict[str, dict[str, int]]:
    """The qasio_* lines of `stats` as {dependency: {counter: value}}: `qasio_meta detected=3 ... boosted=1` is
    {"meta": {"detected": 3, ..., "boosted": 1}}, `qasio_discard async_inserted=0` {"discard": {...}}."""
    return {name.removeprefix("qasio_"): row for name, row in parse_stats(text).items() if name.startswith("qasio_")}


def parse_phase(text: str) -> str:
    """`phase`: one of PHASES."""
    phase = text.strip()
    if phase not in PHASES:
        raise ValueError(f"unknown smartio phase {phase!r}")
    return phase


def parse_qasio_log(text: str) -> list[dict[str, Any]]:
    """`qasio_log`'s entries, oldest first: {t (s, CLOCK_MONOTONIC), what, dep (None for d/c), start, sectors, pid}.
    pid is the waiting task (for d and c the write's submitter), None in logs of modules older than it."""
    out = []
    for line in text.splitlines():
        try:
            t, what, dep, rng, *rest = line.split()
            start, n = rng.split("+")
            out.append({"t": float(t) / 1e3, "what": what, "dep": None if dep == "-" else dep,
                        "start": int(start), "sectors": int(n), "pid": int(rest[0]) if rest else None})
        except ValueError:
            continue
    return out


def read_stats(disk: str, root: Path = DEBUGFS_BLOCK) -> dict[str, dict[str, int]]:
    """`stats` of a disk under smartio, parsed; OSError without it."""
    return parse_stats(read_file(disk, "stats", root))


def read_qasio_log(disk: str, root: Path = DEBUGFS_BLOCK) -> list[dict[str, Any]]:
    """`qasio_log` of a disk under smartio, parsed; OSError without it."""
    return parse_qasio_log(read_file(disk, "qasio_log", root))

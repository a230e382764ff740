"""Launch traces: the file-level I/O of an application's start-up, recorded with strace, kept as JSON lines.

    trace = record(["python3", "-c", "import json"], cwd="/tmp")
    trace.write(Path("json.launch"))
    Trace.read(Path("json.launch")).ops[0]

    format.py       the trace format: header, files, operations (Trace, FileEntry, Op)
    strace.py       strace's output parsed into operations on paths (parse_strace, RawOp)
    executables.py  the files the kernel maps at execve: a script's interpreter, an ELF's loader
    files.py        real paths, file sizes, the symbolic links and directories around a launch
    residency.py    the cold launch's page residency: ftrace's page-cache order, or mincore
    mapped.py       mapped extents from that order, and faults interleaved with the reads
    record.py       record(): the launches, the trace built with its think times and their scale
"""

from __future__ import annotations

from smartio.launch.trace.executables import exec_chain
from smartio.launch.trace.files import (
    SKIP_PREFIXES,
    directory_sizes,
    executable_of,
    file_sizes,
    resolve_paths,
    symlinks_along,
)
from smartio.launch.trace.format import (
    FORMAT,
    MAPPED,
    OPS,
    PAD_MAX,
    PAGE,
    READS_VERSIONS,
    VERSION,
    FileEntry,
    Op,
    Trace,
)
from smartio.launch.trace.mapped import interleave, mapped_extents, page_runs, remap
from smartio.launch.trace.record import UNTRACED_RUNS, build, record, strace_path
from smartio.launch.trace.residency import (
    RESIDENCY_MINCORE,
    RESIDENCY_ORDER,
    RESIDENCY_WHOLE,
    PageCacheLog,
    pages_by_path,
    resident_pages,
)
from smartio.launch.trace.strace import PATH_CALLS, SYSCALLS, RawOp, parse_strace

__all__ = [
    "FORMAT",
    "FileEntry",
    "MAPPED",
    "OPS",
    "Op",
    "PAD_MAX",
    "PAGE",
    "PATH_CALLS",
    "PageCacheLog",
    "READS_VERSIONS",
    "RESIDENCY_MINCORE",
    "RESIDENCY_ORDER",
    "RESIDENCY_WHOLE",
    "RawOp",
    "SKIP_PREFIXES",
    "SYSCALLS",
    "Trace",
    "UNTRACED_RUNS",
    "VERSION",
    "build",
    "directory_sizes",
    "exec_chain",
    "executable_of",
    "file_sizes",
    "interleave",
    "mapped_extents",
    "page_runs",
    "pages_by_path",
    "parse_strace",
    "record",
    "remap",
    "resident_pages",
    "resolve_paths",
    "strace_path",
    "symlinks_along",
]

"""Recording a launch (`record`): a warm-up launch, one under strace, untraced launches for its time without strace,
and as root a cold one for its mapped pages; the operations built with their think times (`build`).

Think times are the gaps between operations; under strace they include strace's own cost (two ptrace stops per
traced call). `think_scale` corrects for it: (untraced wall time − the operations' durations) / the sum of think
times, kept within [0, 1]; replay multiplies every think time by it. Paths under /proc, /sys and /dev, files
deleted before the launch ended, pipes and sockets are left out; directory reads (getdents) are not recorded.
Replay runs the operations of all processes one after another, in the order they started.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from smartio.errors import MissingToolError, SmartioError
from smartio.launch.trace.files import (
    SKIP_PREFIXES,
    directory_sizes,
    executable_of,
    file_sizes,
    resolve_paths,
    symlinks_along,
)
from smartio.launch.trace.format import FORMAT, PAGE, VERSION, FileEntry, Op, Trace
from smartio.launch.trace.mapped import interleave, mapped_extents
from smartio.launch.trace.residency import (
    RESIDENCY_MINCORE,
    RESIDENCY_ORDER,
    RESIDENCY_WHOLE,
    PageCacheLog,
    pages_by_path,
    resident_pages,
)
from smartio.launch.trace.strace import SYSCALLS, RawOp, parse_strace

UNTRACED_RUNS = 5


def build(raws: list[RawOp], first: float, last: float, sizes: dict[str, int],
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
        extents = mapped_extents(r.op, r.offset, r.size, size, pages, covered.setdefault(fid, set()))
        ops.append(Op(r.op, fid, r.offset, r.size, think, r.dur, r.pid, extents))
    ops.append(Op("exit", None, think_s=max(0.0, last - end)))
    return files, ops


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
    raws = resolve_paths(raws, asked)
    links = symlinks_along({p for p in asked if p.startswith("/") and not p.startswith(SKIP_PREFIXES)})
    sizes = file_sizes(raws)
    untraced = []
    launcher = CommandLauncher(argv, cwd)         # timed as `smartio bench launch` times it
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

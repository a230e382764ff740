"""Mapped pages: the extents an `mmap`, `exec`, `fault` or `readahead` operation reads, from a cold launch's page
order (`mapped_extents`, `remap`), and their faults placed among the reads as the launch made them (`interleave`).
"""

from __future__ import annotations

import dataclasses

from smartio.launch.trace.format import PAGE, VERSION, Op, Trace


def page_runs(pages: list[int], size: int) -> tuple[tuple[int, int], ...]:
    """Page indices as (offset, length) extents in their order (each run of consecutive ascending pages is one),
    clipped to the file's size."""
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p * PAGE:
            out[-1] = (out[-1][0], out[-1][1] + PAGE)
        else:
            out.append((p * PAGE, PAGE))
    return tuple((o, min(n, size - o)) for o, n in out if o < size)


def mapped_extents(op: str, offset: int, size: int, file_size: int, pages: list[int] | None,
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
    return page_runs(want, file_size)


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
        ext = mapped_extents(o.op, o.offset, o.size, sizes[o.file], residency.get(paths[o.file], []),
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
                          extents=page_runs([p for _, _, p in due[i:j]], sizes[fid])))
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

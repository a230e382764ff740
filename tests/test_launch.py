"""`smartio launch`: strace parsing, the trace format, replay fidelity to the recorded operations, and
real launches timed beside a real fio background writer. No VM; nothing here drops the page cache."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from smartio.cli import main
from smartio.errors import SmartioError
from smartio.launch import replay as rp, trace as tr
from smartio.launch.replay import FAULT_CHUNK, Layout, Replayer

STRACE = shutil.which("strace") or ""
needs_strace = pytest.mark.skipif(not STRACE, reason="strace is not installed (scripts/install-deps installs it)")
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (make deps installs it)")
PYTHON = os.path.realpath(sys.executable)


def _strace_files(tmp_path: Path, per_pid: dict[int, list[str]]) -> list[Path]:
    out = []
    for pid, lines in per_pid.items():
        p = tmp_path / f"st.{pid}"
        p.write_text("\n".join(lines) + "\n")
        out.append(p)
    return out


def test_parse_strace_tracks_positions_offsets_and_skips_failures(tmp_path):
    lines = [
        '100.000000 execve("/usr/bin/app", [...], 0x7ffd /* 3 vars */) = 0 <0.000400>',
        '100.001000 openat(AT_FDCWD</w>, "data.bin", O_RDONLY) = 3</w/data.bin> <0.000010>',
        '100.002000 read(3</w/data.bin>, ""..., 100) = 100 <0.000010>',
        '100.003000 read(3</w/data.bin>, ""..., 50) = 50 <0.000010>',
        '100.004000 lseek(3</w/data.bin>, 4096, SEEK_SET) = 4096 <0.000005>',
        '100.005000 read(3</w/data.bin>, ""..., 10) = 10 <0.000010>',
        '100.006000 pread64(3</w/data.bin>, ""..., 20, 8192) = 20 <0.000010>',
        '100.007000 dup(3</w/data.bin>) = 4</w/data.bin> <0.000003>',
        '100.008000 read(4</w/data.bin>, ""..., 5) = 5 <0.000010>',
        '100.009000 read(3</w/data.bin>, ""..., 5) = 0 <0.000010>',
        '100.010000 mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, 3</w/data.bin>, 0x1000) = 0x7f00 <0.000010>',
        '100.011000 mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f01 <0.00001>',
        '100.012000 openat(AT_FDCWD</w>, "/missing", O_RDONLY) = -1 ENOENT (No such file or directory) <0.00001>',
        '100.013000 newfstatat(AT_FDCWD</w>, "sub/x.py", {st_mode=S_IFREG|0644, st_size=1, ...}, 0) = 0 <0.00001>',
        '100.014000 newfstatat(3</w/data.bin>, "", {st_mode=S_IFREG|0644, st_size=9, ...}, AT_EMPTY_PATH) = 0 <0.1>',
        '100.015000 read(5<pipe:[1234]>, ""..., 10) = 10 <0.000010>',
        '100.016000 pwrite64(3</w/data.bin>, ""..., 30, 100) = 30 <0.000010>',
        '100.017000 fsync(3</w/data.bin>) = 0 <0.000200>',
        '100.018000 close(3</w/data.bin>) = 0 <0.000003>',
        '100.020000 +++ exited with 0 +++',
    ]
    raws, first, last = tr.parse_strace(_strace_files(tmp_path, {42: lines}))
    assert (first, last) == (100.0, 100.02)
    got = [(r.op, r.path, r.offset, r.size) for r in raws]
    assert got == [
        ("exec", "/usr/bin/app", 0, 0),
        ("open", "/w/data.bin", 0, 0),
        ("read", "/w/data.bin", 0, 100),
        ("read", "/w/data.bin", 100, 50),
        ("read", "/w/data.bin", 4096, 10),
        ("read", "/w/data.bin", 8192, 20),
        ("read", "/w/data.bin", 4106, 5),          # the dup'ed fd starts at the position of the one it copies
        ("mmap", "/w/data.bin", 4096, 8192),
        ("lookup", "/missing", 0, 0),                # a failed lookup still reads directories when cold
        ("stat", "/w/sub/x.py", 0, 0),
        ("write", "/w/data.bin", 100, 30),
        ("fsync", "/w/data.bin", 0, 0),
        ("close", "/w/data.bin", 0, 0),
    ]
    assert all(r.pid == 42 for r in raws)


def test_parse_strace_merges_processes_by_time(tmp_path):
    parent = ['10.0 execve("/bin/sh", [...], 0x1 /* 1 var */) = 0 <0.000100>',
              '10.3 read(3</a>, ""..., 10) = 10 <0.000010>', '10.5 +++ exited with 0 +++']
    child = ['10.2 read(3</b>, ""..., 7) = 7 <0.000010>', '10.4 +++ exited with 0 +++']
    raws, first, last = tr.parse_strace(_strace_files(tmp_path, {1: parent, 2: child}))
    assert [(r.pid, r.path) for r in raws] == [(1, "/bin/sh"), (2, "/b"), (1, "/a")]
    assert (first, last) == (10.0, 10.5)


def test_build_think_times_and_mapped_extents(tmp_path):
    raws = [tr.RawOp(1.0, 0.001, 1, "exec", "/bin/x"), tr.RawOp(1.002, 0.0005, 1, "read", "/lib/y", 0, 832),
            tr.RawOp(1.003, 0.0001, 1, "mmap", "/lib/y", 0, 5 * 4096),
            tr.RawOp(1.004, 0.0001, 1, "mmap", "/lib/y", 8192, 8192)]
    sizes = {"/bin/x": 3 * 4096 + 10, "/lib/y": 5 * 4096 - 100}
    residency = {"/bin/x": [0, 3], "/lib/y": [0, 1, 2, 4]}
    files, ops = tr.build(raws, 1.0, 1.01, sizes, residency)
    assert [f.path for f in files] == ["/bin/x", "/lib/y"]
    assert [o.op for o in ops] == ["exec", "read", "mmap", "mmap", "exit"]
    assert ops[0].extents == ((0, 4096), (3 * 4096, 10))            # resident pages only, clipped to the size
    assert ops[2].extents == ((4096, 8192), (4 * 4096, 4096 - 100))  # page 0 was read; page 3 is not resident
    assert ops[3].extents == ()                                      # its pages came with the mapping before
    assert [round(o.think_s, 6) for o in ops] == [0.0, 0.001, 0.0005, 0.0009, 0.0059]
    whole = tr.build(raws, 1.0, 1.01, sizes, None)[1]
    assert whole[2].extents == ((4096, 4 * 4096 - 100),)
    # In the order the cold launch read them: page 4 (a fault near the end) before pages 1-2.
    ordered = tr.build(raws, 1.0, 1.01, sizes, {"/bin/x": [3, 0], "/lib/y": [0, 4, 1, 2]})[1]
    assert ordered[0].extents == ((3 * 4096, 10), (0, 4096))
    assert ordered[2].extents == ((4 * 4096, 4096 - 100), (4096, 8192))


def test_remap_takes_another_launchs_page_order():
    raws = [tr.RawOp(1.0, 0.001, 1, "exec", "/bin/x"), tr.RawOp(1.002, 0.0005, 1, "read", "/lib/y", 0, 832),
            tr.RawOp(1.003, 0.0001, 1, "mmap", "/lib/y", 0, 5 * 4096)]
    sizes = {"/bin/x": 3 * 4096, "/lib/y": 5 * 4096}
    files, ops = tr.build(raws, 1.0, 1.01, sizes, {"/bin/x": [0], "/lib/y": [1]})
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "residency": "a"}, files, ops)
    other = {"/bin/x": [2, 0, 1], "/lib/y": [4, 0, 3]}
    back = tr.remap(t, other, "b")
    assert back.ops == tr.build(raws, 1.0, 1.01, sizes, other)[1]
    assert back.ops[0].extents == ((2 * 4096, 4096), (0, 8192)) and back.ops[2].extents == ((4 * 4096, 4096),
                                                                                             (3 * 4096, 4096))
    assert back.header["residency"] == "b" and t.header["residency"] == "a"


def test_interleave_puts_each_fault_before_the_first_read_that_came_after_it():
    """A cold launch's page-cache order across files places a mapping's pages among the program's reads."""
    files = [tr.FileEntry(0, "/lib/a.so", 10 * 4096), tr.FileEntry(1, "/data/b", 4 * 4096)]
    ops = [tr.Op("exec", 0, extents=((0, 4 * 4096), (8 * 4096, 2 * 4096))), tr.Op("read", 1, 0, 4096, think_s=0.1),
           tr.Op("read", 1, 2 * 4096, 4096, think_s=0.2), tr.Op("read", 1, 0, 4096), tr.Op("exit", None)]
    seq = [("/lib/a.so", 0), ("/lib/a.so", 1), ("/data/b", 0), ("/data/b", 1), ("/lib/a.so", 8), ("/lib/a.so", 9),
           ("/data/b", 2), ("/lib/a.so", 2), ("/lib/a.so", 3)]
    got = tr.interleave(tr.Trace({}, files, ops), seq).ops
    assert [(o.op, o.file, o.extents) for o in got] == [
        ("exec", 0, ()),
        ("fault", 0, ((0, 2 * 4096),)), ("read", 1, ()),
        ("fault", 0, ((8 * 4096, 2 * 4096),)), ("read", 1, ()),
        ("read", 1, ()),                                     # its page came long before: nothing due
        ("fault", 0, ((2 * 4096, 2 * 4096),)), ("exit", None, ())]
    assert [o.think_s for o in got if o.op == "read"] == [0.1, 0.2, 0.0]      # think times stay with their reads
    # A read anchors at its first page not read before (page 0 of b was); a mapped page a read covers is the read's.
    files2 = [files[0], tr.FileEntry(1, "/data/b", 8 * 4096)]
    ops2 = [tr.Op("read", 1, 0, 4096), tr.Op("exec", 0, extents=((0, 2 * 4096),)),
            tr.Op("read", 1, 0, 4 * 4096), tr.Op("read", 0, 4096, 4096), tr.Op("exit", None)]
    seq2 = [("/data/b", 0), ("/lib/a.so", 0), ("/data/b", 1), ("/data/b", 2), ("/data/b", 3), ("/lib/a.so", 1)]
    got2 = tr.interleave(tr.Trace({"version": 1}, files2, ops2), seq2)
    assert [(o.op, o.file, o.extents) for o in got2.ops] == [
        ("read", 1, ()), ("exec", 0, ()), ("fault", 0, ((0, 4096),)), ("read", 1, ()), ("read", 0, ()),
        ("exit", None, ())]                              # a.so's page 1: the read of it, never a fault too
    assert got2.header["version"] == tr.VERSION          # it has `fault` operations now
    # Pages the kernel read ahead go to `readahead` operations, each stretch apart from the faults around it.
    ahead = {("/lib/a.so", 1), ("/lib/a.so", 9), ("/lib/a.so", 3)}
    got3 = tr.interleave(tr.Trace({}, files, ops), seq, ahead).ops
    assert [(o.op, o.file, o.extents) for o in got3] == [
        ("exec", 0, ()),
        ("fault", 0, ((0, 4096),)), ("readahead", 0, ((4096, 4096),)), ("read", 1, ()),
        ("fault", 0, ((8 * 4096, 4096),)), ("readahead", 0, ((9 * 4096, 4096),)), ("read", 1, ()),
        ("read", 1, ()),
        ("fault", 0, ((2 * 4096, 4096),)), ("readahead", 0, ((3 * 4096, 4096),)), ("exit", None, ())]
    again3 = tr.remap(tr.Trace({}, files, got3), {"/lib/a.so": [0, 1, 2, 3, 8, 9]}, "test", seq, ahead)
    assert [(o.op, o.extents) for o in again3.ops] == [(o.op, o.extents) for o in got3]
    # Every mapped page is read exactly once, whatever the order; remap drops the faults of another launch.
    again = tr.remap(tr.Trace({}, files, got), {"/lib/a.so": [0, 1, 2, 3, 8, 9]}, "test")
    assert [o.op for o in again.ops] == ["exec", "read", "read", "read", "exit"]
    assert again.ops[0].extents == ((0, 4 * 4096), (8 * 4096, 2 * 4096))


def test_page_cache_log_orders_pages_per_file(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x" * 40960)
    b.write_bytes(b"y" * 4096)
    sa, sb = os.stat(a), os.stat(b)

    def line(st: os.stat_result, ofs: int, order: int = 0) -> str:
        return (f"  python3-7  [001] .....  12.5: mm_filemap_add_to_page_cache: dev {os.major(st.st_dev)}:"
                f"{os.minor(st.st_dev)} ino {st.st_ino:x} pfn=0x1234 ofs={ofs} order={order}\n")

    log = tr.PageCacheLog()
    log.text = ("# tracer: nop\n" + line(sa, 8 * 4096, 1) + line(sb, 0) + line(sa, 0) + line(sa, 8 * 4096)
                + "  x-1 [000] ..... 1.0: mm_filemap_add_to_page_cache: dev 0:1 ino 99 pfn=0x1 ofs=0 order=0\n")
    assert log.order({str(a), str(b)}) == {str(a): [8, 9, 0], str(b): [0]}   # first insertion only
    assert log.sequence({str(a), str(b)}) == [(str(a), 8), (str(a), 9), (str(b), 0), (str(a), 0)]   # across files
    # Through overlayfs: the pages are the lower filesystem's (another device), the inode number is the file's.
    log.text = (f"  p-1 [000] ..... 1.0: mm_filemap_add_to_page_cache: dev 0:999 ino {sb.st_ino:x} ofs=4096\n"
                f"  p-1 [000] ..... 1.1: mm_filemap_add_to_page_cache: dev {os.major(sa.st_dev)}:"
                f"{os.minor(sa.st_dev)} ino {sb.st_ino + 10 ** 9:x} ofs=0\n")
    assert log.order({str(a), str(b)}) == {str(a): [], str(b): [1]}
    log.text += "CPU:1 [LOST 12 EVENTS]\n"
    with pytest.raises(SmartioError, match="lost events"):
        log.order({str(a)})


def test_page_cache_log_tells_pages_read_ahead_by_the_task_inside_async_readahead(tmp_path):
    a = tmp_path / "a"
    a.write_bytes(b"x" * 40960)
    st = os.stat(a)

    def add(task: str, ofs: int) -> str:
        return (f"  {task}  [001] .....  12.5: mm_filemap_add_to_page_cache: dev {os.major(st.st_dev)}:"
                f"{os.minor(st.st_dev)} ino {st.st_ino:x} pfn=0x1234 ofs={ofs * 4096} order=0\n")

    def probe(task: str, name: str) -> str:
        return f"  {task}  [000] .....  12.4: {name}: (page_cache_async_ra+0x0/0x1e0)\n"

    log = tr.PageCacheLog()
    log.text = "".join([add("vim.basic-7", 0), probe("vim.basic-7", log.RA_START), add("vim.basic-7", 1),
                        add("kworker/u4:1-9", 2),          # another task meanwhile: not the readahead's
                        add("vim.basic-7", 3), probe("vim.basic-7", log.RA_END), add("vim.basic-7", 4),
                        probe("my-app-8", log.RA_START), add("my-app-8", 5)])   # never returned in the log
    assert log.pages({str(a)}) == ([(str(a), p) for p in range(6)], {(str(a), 1), (str(a), 3), (str(a), 5)})


@contextlib.contextmanager
def _cold_file(path: Path, pages: int) -> Iterator[int]:
    """A new file of `pages` random pages, synced and dropped from the page cache; yields an fd open on it."""
    path.write_bytes(os.urandom(pages << 12))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        yield fd
    finally:
        os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="tracefs needs root")
def test_page_cache_log_sees_a_cold_read(tmp_path):
    """A real trace: the pages of a file read cold come in the order they were read."""
    f = tmp_path / "data"
    with _cold_file(f, 64) as fd:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        with tr.PageCacheLog() as log:
            os.pread(fd, 4096, 40 << 12)
            os.pread(fd, 4096, 3 << 12)
    assert log.order({str(f)})[str(f)] == [40, 3]
    assert log.pages({str(f)})[1] == set()               # POSIX_FADV_RANDOM: no readahead at all


@pytest.mark.skipif(os.geteuid() != 0, reason="tracefs and kprobes need root")
def test_page_cache_log_sees_asynchronous_readahead(tmp_path):
    """A file read sequentially cold: the first window is read synchronously, the ones after it by the kernel's
    asynchronous readahead, which the kprobe on page_cache_async_ra tells apart (where kprobes work)."""
    f = tmp_path / "data"
    with _cold_file(f, 256) as fd, tr.PageCacheLog() as log:
        for off in range(0, 256 << 12, 4096):
            os.pread(fd, 4096, off)
    if not log.readahead_how.startswith("kprobe"):
        pytest.skip(log.readahead_how)
    pages = log.order({str(f)})[str(f)]
    ahead = {p for _, p in log.pages({str(f)})[1]}
    assert pages[0] == 0 and 0 not in ahead              # the first read waits for its own window
    assert ahead and ahead < set(pages) and max(ahead) > min(ahead)
    from smartio.trace.tracefs import mounted_tracefs

    with mounted_tracefs() as root:
        assert log._group not in (root / "kprobe_events").read_text()          # the probes are gone


def test_trace_round_trip_and_bad_traces(tmp_path):
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 0.5},
                 [tr.FileEntry(0, "/a", 10)], [tr.Op("read", 0, 0, 10, 0.1, 0.01, 7),
                                               tr.Op("fault", 0, extents=((0, 10),)),
                                               tr.Op("readahead", 0, extents=((0, 10),)), tr.Op("exit", None)])
    p = tmp_path / "t.launch"
    t.write(p)
    back = tr.Trace.read(p)
    assert back.files == t.files and back.ops == t.ops and back.think_scale == 0.5
    for text, why in (("", "not a smartio launch trace"), ("{]", "bad JSON"),
                      ('{"format": "smartio-launch-trace", "version": 9}', "version 9"),
                      ('{"format": "smartio-launch-trace", "version": 1}\n{"op": "read", "file": 3, "offset": 0, '
                       '"size": 1, "think_s": 0, "dur_s": 0}', "unknown file 3"),
                      ('{"format": "smartio-launch-trace", "version": 1}\n{"op": "fly"}', "malformed"),
                      ('{"format": "smartio-launch-trace", "version": 2}\n{"file": 0, "path": "/a", "size": 8192}\n'
                       '{"op": "fault", "file": 0, "offset": 0, "size": 0, "think_s": 0, "dur_s": 0, '
                       '"extents": [[4096, 8192]]}', "not inside its 8192 bytes"),
                      ('{"format": "smartio-launch-trace", "version": 2}\n{"file": 0, "path": "/a", "size": 8192}\n'
                       '{"op": "fault", "file": 0, "offset": 0, "size": 0, "think_s": 0, "dur_s": 0, '
                       '"extents": [[100, 10]]}', "not page-aligned")):
        p.write_text(text)
        with pytest.raises(Exception, match=why) as e:
            tr.Trace.read(p)
        assert getattr(e.value, "exit_code", None) == 2


def test_exec_chain_finds_the_dynamic_loader_and_script_interpreters(tmp_path):
    chain = tr.exec_chain(PYTHON)
    assert chain[-1] == PYTHON and len(chain) == 2 and "ld-linux" in chain[0]
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    chain = tr.exec_chain(str(script))
    assert chain[-1] == str(script) and os.path.realpath("/bin/sh") in chain


def test_resident_pages_sees_a_file_just_written(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * (3 * 4096))
    assert tr.resident_pages(str(p)) == {0, 1, 2}


def _expected(trace: tr.Trace, repeats: int) -> list[tuple]:
    """The system calls a replay must make on the laid-out files: stats and data transfers, in order."""
    path: dict[int | None, str] = {f.id: f.path for f in trace.files}
    one: list[tuple] = []
    for o in trace.ops:
        if o.op == "stat":
            one.append(("stat", path[o.file], 0, 0))
        elif o.op == "lookup":
            one.append(("lookup", o.path, 0, 0))
        elif o.op in ("read", "write"):
            one.append((o.op, path[o.file], o.offset, o.size))
        elif o.op in ("fsync",):
            one.append(("fsync", path[o.file], 0, 0))
        elif o.op in tr.MAPPED:
            one += [("willneed", path[o.file], x, min(FAULT_CHUNK, off + n - x)) for off, n in o.extents
                    for x in range(off, off + n, FAULT_CHUNK)]
    return one * repeats


_FADVISE = re.compile(r"^(\d+\.\d+) fadvise64\(\d+<([^>]*)>, (\d+), (\d+), POSIX_FADV_WILLNEED\) = 0")


def _willneeds(files: list[Path]) -> list[tr.RawOp]:
    """The POSIX_FADV_WILLNEED calls in strace output files (parse_strace, a recorder, has no use for them)."""
    out = []
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            if m := _FADVISE.match(line):
                out.append(tr.RawOp(float(m[1]), 0.0, 0, "willneed", m[2], int(m[3]), int(m[4])))
    return out


@needs_strace
def test_replay_reproduces_recorded_operations(tmp_path):
    """Record a real start-up, replay it under strace on a scratch directory, and compare: the same files, the
    same reads (offsets, sizes) and stats, in the same order; every recorded open is opened."""
    trace = tr.record([PYTHON, "-c", "import json"], str(tmp_path), cold_residency=False)
    files = {f.path for f in trace.files}
    assert any(p.endswith("json/__init__.py") for p in files)
    assert any(o.op == "read" for o in trace.ops) and any(o.op == "exec" for o in trace.ops)
    # think_scale is (untraced wall - traced call durations) / think, clamped to [0, 1]: for a 20 ms start-up on a
    # busy host strace's own cost can exceed the untraced run (0.0 in a CI run), so 0 is a valid answer.
    assert trace.ops[-1].op == "exit" and 0 <= trace.think_scale <= 1 and trace.header["untraced_wall_s"] > 0
    assert any(o.op == "lookup" for o in trace.ops)          # Python probes paths that do not exist
    libdir = os.path.dirname(next(p for p in files if p.endswith("json/__init__.py")))
    assert trace.header["dirs"][libdir] == len(os.listdir(libdir))
    tfile = tmp_path / "t.launch"
    trace.write(tfile)
    trace = tr.Trace.read(tfile)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with Layout(trace, str(scratch)) as layout:
        for f in trace.files:
            assert layout.paths[f.id].stat().st_size == f.size
        assert len(os.listdir(layout.root / libdir.lstrip("/"))) == trace.header["dirs"][libdir]
        code = ("import sys; from pathlib import Path; from smartio.launch.trace import Trace; "
                "from smartio.launch.replay import Layout, Replayer; t = Trace.read(Path(sys.argv[1])); "
                "r = Replayer(t, Layout(t, '', root=Path(sys.argv[2]))); r.launch(); r.launch()")
        out = tmp_path / "st"
        subprocess.run([STRACE, "-f", "-ff", "-q", "-ttt", "-T", "-y", "-s", "0", "-e",
                        f"trace={','.join((*tr.SYSCALLS, 'fadvise64'))}", "-o", str(out), "--", sys.executable,
                        "-c", code, str(tfile), str(layout.root)], check=True)
        outs = sorted(tmp_path.glob("st.*"))
        raws, _, _ = tr.parse_strace(outs)
        raws = sorted(raws + _willneeds(outs), key=lambda r: r.t)
        root = str(layout.root)
        seen = [(r.op, r.path[len(root):], r.offset, r.size) for r in raws if r.path and r.path.startswith(root + "/")
                and r.op in ("stat", "lookup", "read", "write", "fsync", "willneed")]
        opened = {r.path[len(root):] for r in raws if r.op == "open" and r.path and r.path.startswith(root)}
    assert not layout.root.exists()
    assert seen == _expected(trace, repeats=2)
    assert {f.path for o in trace.ops if o.op == "open" for f in trace.files if f.id == o.file} <= opened


def test_replayed_faults_read_no_more_than_their_extents(tmp_path):
    """A replayed fault reads its extent and nothing else, even through a page that an earlier read() marked for
    readahead: a pread() there starts asynchronous readahead, and chains of it turned a launch's scattered library
    faults into long sequential reads in the testbed (see replay.FAULT_CHUNK)."""
    page = 4096
    head = [tr.Op("open", 0), tr.Op("read", 0, 0, 832)]
    faults = [tr.Op("fault", 0, extents=((page, 3 * page),)), tr.Op("fault", 0, extents=((200 * page, 2 * page),))]
    files = [tr.FileEntry(0, "/lib/x.so", 256 * page)]

    def trace(ops: list[tr.Op]) -> tr.Trace:
        return tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 0.0}, files,
                        [*ops, tr.Op("exit", None)])

    def resident_after(t: tr.Trace, layout: Layout) -> set[int]:
        path = layout.paths[0]
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if tr.resident_pages(str(path)):
            pytest.skip("this filesystem keeps a synced file's pages after POSIX_FADV_DONTNEED (tmpfs?)")
        Replayer(t, Layout(t, "", root=layout.root)).launch()
        return tr.resident_pages(str(path)) or set()

    with Layout(trace(head), str(tmp_path)) as layout:
        by_read = resident_after(trace(head), layout)          # the read and its own readahead window
        if not {1, 2, 3} <= by_read:
            pytest.skip(f"a cold 832-byte read here brings in pages {sorted(by_read)}, not pages 0-3 and up")
        assert resident_after(trace(head + faults), layout) == by_read | {200, 201}


def test_a_replayed_fault_waits_for_every_page_it_starts_reading(tmp_path, monkeypatch):
    """Each window of a mapped extent: one POSIX_FADV_WILLNEED, then a touch of each of its pages (which is what
    waits for the read), in order, through a mapping advised MADV_RANDOM."""
    page = 4096
    calls: list[tuple] = []

    class Mapping:
        def __init__(self, fd: int, length: int, prot: int) -> None:
            calls.append(("mmap", length))

        def madvise(self, option: int) -> None:
            calls.append(("madvise", option))

        def __getitem__(self, i: int) -> int:
            calls.append(("touch", i))
            return 0

        def close(self) -> None:
            calls.append(("close",))

    monkeypatch.setattr(rp.mmap, "mmap", Mapping)
    monkeypatch.setattr(rp.os, "posix_fadvise", lambda fd, off, n, advice: calls.append(("advise", off, n, advice)))
    size = 80 * page
    extent = (4 * page, 40 * page)                       # 160 KiB: a 128 KiB window, then 32 KiB
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 0.0}, [tr.FileEntry(0, "/lib/y.so", size)],
                 [tr.Op("fault", 0, extents=(extent,)), tr.Op("exit", None)])
    with Layout(t, str(tmp_path)) as layout:
        try:
            Replayer(t, layout)._run()                  # in this process, to see its calls
        finally:
            gc.enable()
    first = [("advise", 4 * page, 32 * page, os.POSIX_FADV_WILLNEED)] + [("touch", p * page) for p in range(4, 36)]
    second = [("advise", 36 * page, 8 * page, os.POSIX_FADV_WILLNEED)] + [("touch", p * page) for p in range(36, 44)]
    assert calls == [("mmap", 0), ("madvise", rp.mmap.MADV_RANDOM), *first, *second, ("close",)]
    # The kernel's readahead (version 3): the same windows started, none waited for.
    calls.clear()
    t = tr.Trace(t.header, t.files, [tr.Op("readahead", 0, extents=(extent,)), tr.Op("fault", 0, extents=((0, page),)),
                                     tr.Op("exit", None)])
    with Layout(t, str(tmp_path)) as layout:
        try:
            Replayer(t, layout)._run()
        finally:
            gc.enable()
    need = os.POSIX_FADV_WILLNEED
    assert calls == [("mmap", 0), ("madvise", rp.mmap.MADV_RANDOM), ("advise", 4 * page, 32 * page, need),
                     ("advise", 36 * page, 8 * page, need), ("advise", 0, page, need), ("touch", 0), ("close",)]


def test_replay_times_think_and_io(tmp_path):
    ops = [tr.Op("open", 0, think_s=0.0), tr.Op("read", 0, 0, 4096, think_s=0.02), tr.Op("exit", None, think_s=0.03)]
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 0.5}, [tr.FileEntry(0, "/x/y", 8192)],
                 ops)
    with Layout(t, str(tmp_path)) as layout:
        r = Replayer(t, layout)
        wall = r.launch()
    assert 0.025 <= wall < 0.1          # (0.02 + 0.03) × 0.5 of think time, plus a cached read
    assert not list(tmp_path.iterdir())
    # Where the time went: the think times, the open, the read; the parts add up to the whole.
    b = r.last_breakdown
    assert b is not None and list(b) == list(rp.BREAKDOWN)
    assert 0.025 <= b["think"] < 0.05 and 0 < b["metadata"] < 0.02 and 0 < b["read"] < 0.02
    assert b["fault"] == b["readahead"] == b["write"] == b["sync"] == 0
    assert sum(v for k, v in b.items() if k not in ("cpu", "cpu_sys")) == pytest.approx(wall, abs=1e-5)


def test_replay_breakdown_tells_computing_from_waiting(tmp_path, monkeypatch):
    """Think time is spent busy, so it is CPU time; a sleep the replay waits in (here a slow fsync, standing for
    storage) is not."""
    ops = [tr.Op("open", 0), tr.Op("fsync", 0, think_s=0.3), tr.Op("exit", None)]
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 1.0}, [tr.FileEntry(0, "/x/y", 4096)],
                 ops)
    with Layout(t, str(tmp_path)) as layout:
        r = Replayer(t, layout)
        monkeypatch.setattr(os, "fsync", lambda fd: time.sleep(0.3))     # the forked child inherits it
        wall = r.launch()
    b = r.last_breakdown
    assert b is not None and wall >= 0.6
    assert 0.3 <= b["think"] < 0.4 and 0.3 <= b["sync"] < 0.4
    # The busy think time (all of it on an idle machine, less on a busy one), not the sleeping fsync.
    assert 0.02 <= b["cpu"] <= b["think"] + 0.05, b
    # A busy wait computes in the program, not in the kernel (a tick's slack: the split is sampled per tick).
    assert b["cpu_sys"] < 0.5 * b["cpu"] + 0.02, b


def test_replay_runs_each_launch_in_a_child_and_reports_its_failure(tmp_path):
    """A launch is a new process, as a real one is; what fails in it fails the launch with the child's error."""
    ops = [tr.Op("open", 0), tr.Op("read", 0, 0, 4096), tr.Op("exit", None)]
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "think_scale": 0.0, "command": ["app", "-x"]},
                 [tr.FileEntry(0, "/x/y", 8192)], ops)
    with Layout(t, str(tmp_path)) as layout:
        r = Replayer(t, layout)
        assert r.launch() >= 0
        layout.paths[0].unlink()
        with pytest.raises(SmartioError, match=r"replay of `app -x` failed: FileNotFoundError"):
            r.launch()


def _cli(*args: str) -> int:
    return main(["launch", *args])


@pytest.mark.parametrize("args, rc, message", [
    (["run", "--", "true"], 2, "--target (missing)"),
    (["run", "--target", "{tmp}"], 2, "give the command"),
    (["run", "--target", "{tmp}", "--", "no-such-command-x"], 2, "command not found"),
    (["run", "--target", "{tmp}", "--repeats", "0", "--", "true"], 2, "--repeats 0"),
    (["run", "--target", "{tmp}/nope", "--", "true"], 2, "does not exist"),
    (["run", "--target", "{tmp}", "--background-size", "x", "--", "true"], 2, "not a size"),
    (["run", "--target", "{tmp}", "--repeats", "1", "--", "false"], 1, "exited with 1"),
    (["replay", "{tmp}/none.launch", "--target", "{tmp}"], 2, "does not exist"),
    (["record", "--", "true"], 2, "-o (missing)"),
    (["record", "-o", "{tmp}/no/dir/t", "--", "true"], 2, "does not exist"),
])
def test_cli_errors_name_the_flag(tmp_path, capsys, monkeypatch, args, rc, message):
    monkeypatch.setenv("SMARTIO_DB", str(tmp_path / "r.db"))
    assert _cli(*[a.format(tmp=tmp_path) for a in args]) == rc
    assert message in capsys.readouterr().err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".smartio")]


def test_cold_without_root_is_exit_3(tmp_path, capsys, monkeypatch):
    import smartio.launch.measure as m

    monkeypatch.setattr(m, "is_root", lambda: False)
    assert _cli("run", "--target", str(tmp_path), "--cold", "--", "true") == 3
    assert "needs root" in capsys.readouterr().err


@needs_fio
def test_run_beside_a_background_writer(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SMARTIO_DB", str(tmp_path / "r.db"))
    target = tmp_path / "t"
    target.mkdir()
    out = tmp_path / "doc.json"
    rc = _cli("run", "--target", str(target), "--repeats", "2", "--background", "seq-write", "--background-size",
              "8M", "--background-warmup", "0.3", "--json", str(out), "--", "sleep", "0.2")
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    r = doc["results"]
    assert doc["mode"] == "run" and doc["settings"]["background"] == "seq-write"
    assert 0.2 <= r["min_s"] <= r["wall_s"]["mean"] <= r["max_s"] < 2
    assert r["wall_s"]["n"] == 2 and r["background_write_mib_s"]["mean"] > 0
    assert "wall time (ms)" in capsys.readouterr().out
    assert list(target.iterdir()) == []                  # the background's scratch file is gone
    assert main(["results", "show", str(doc["id"])]) == 0      # the stored document renders as the run printed it
    assert "seq-write (MiB/s)" in capsys.readouterr().out


@needs_strace
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chroot)")
def test_app_runs_the_installed_copy_in_a_chroot(tmp_path, capsys, monkeypatch):
    """`run --app TRACE`: the recorded files, with their content, mtimes and the symbolic links the program
    followed, are enough to launch it again from the target alone; removed afterwards."""
    monkeypatch.setenv("SMARTIO_DB", str(tmp_path / "r.db"))
    trace = tr.record(["/usr/bin/python3", "-c", "import json"], "/tmp", cold_residency=False)
    assert "/lib64" in trace.header["symlinks"] or not os.path.islink("/lib64")
    tfile = tmp_path / "t.launch"
    trace.write(tfile)
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "doc.json"
    assert _cli("run", "--app", str(tfile), "--target", str(target), "--repeats", "2", "--json", str(out)) == 0, \
        capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["app"] == str(tfile) and doc["argv"] == ["/usr/bin/python3", "-c", "import json"]
    assert doc["results"]["wall_s"]["n"] == 2
    assert list(target.iterdir()) == []
    # A command the copy cannot run (a module the recording never imported) fails the run, exit 1.
    rc = _cli("run", "--app", str(tfile), "--target", str(target), "--repeats", "1", "--",
              "/usr/bin/python3", "-c", "import sqlite3")
    assert rc == 1 and "exited with 1" in capsys.readouterr().err
    assert list(target.iterdir()) == []


def test_calibration_scales_think_time_to_the_untraced_launch(tmp_path):
    """Replay's think times add up to the untraced wall time less what the operations take here."""
    ops = [tr.Op("open", 0), tr.Op("read", 0, 0, 4096, think_s=0.05), tr.Op("exit", None, think_s=0.05)]
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "untraced_wall_s": 0.04, "think_scale": 1.0},
                 [tr.FileEntry(0, "/x/y", 4096)], ops)
    with Layout(t, str(tmp_path)) as layout:
        r = Replayer(t, layout)
        cal = r.calibrate()
        assert cal["ops_warm_s"] < 0.01 and cal["think_recorded_s"] == pytest.approx(0.1)
        assert r.scale == pytest.approx((0.04 - cal["ops_warm_s"]) / 0.1, abs=1e-4)
        assert 0.035 < r.launch() < 0.08
        cal = r.calibrate(wall=0.06)                    # the launch as measured where it is compared
        assert cal["wall_s"] == 0.06 and r.scale == pytest.approx((0.06 - cal["ops_warm_s"]) / 0.1, abs=1e-4)
    t.header["untraced_wall_s"] = 1.0                  # more than strace saw: never stretched beyond 1
    with Layout(t, str(tmp_path)) as layout:
        r = Replayer(t, layout)
        r.calibrate()
        assert r.scale == 1.0


def test_calibration_takes_the_operations_time_as_the_wall_time_was_taken(tmp_path):
    """A median wall time less the shortest pass would leave the replays longer than the launch they copy."""
    ops = [tr.Op("open", 0), tr.Op("exit", None, think_s=1.0)]
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "untraced_wall_s": 0.5, "think_scale": 1.0},
                 [tr.FileEntry(0, "/x/y", 4096)], ops)
    with Layout(t, str(tmp_path)) as layout:
        for typical, ops_s in (("shortest", 0.1), ("median", 0.3)):
            r = Replayer(t, layout)
            # The first pass warms the cache and is not counted.
            r.launch = functools.partial(next, iter([9.0, 0.3, 0.1, 0.5, 0.2, 0.4]))   # type: ignore[method-assign]
            cal = r.calibrate(wall=0.5, typical=typical)
            assert cal["ops_warm_s"] == ops_s and r.scale == pytest.approx(0.5 - ops_s)
        with pytest.raises(ValueError):
            r.calibrate(typical="mean")


def test_installed_copy_never_follows_a_link_out_of_itself(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"12345")
    outside = tmp_path / "outside"
    outside.mkdir()
    f = str(src / "f")
    t = tr.Trace({"format": tr.FORMAT, "version": tr.VERSION, "cwd": "/work",
                  "symlinks": {"/abs": str(outside), "/abs/escape": "x", "/rel": "abs", f + ".link": "f"}},
                 [tr.FileEntry(0, f, 5)], [tr.Op("exit", None)])
    target = tmp_path / "target"
    target.mkdir()
    from smartio.launch.replay import Installed

    with Installed(t, str(target)) as inst:
        assert (inst.root / f.lstrip("/")).read_bytes() == b"12345"
        assert os.readlink(inst.root / "abs") == str(outside) and os.readlink(inst.root / "rel") == "abs"
        assert os.readlink(inst.root / (f + ".link").lstrip("/")) == "f"
        assert (inst.root / "work").is_dir()
    assert list(outside.iterdir()) == []               # /abs/escape was not made through /abs
    assert list(target.iterdir()) == []


def test_command_is_timed_from_exec_to_exit(tmp_path):
    from smartio.launch.launcher import CommandLauncher

    sleeper = CommandLauncher(["sleep", "0.2"], str(tmp_path))
    wall = sleeper.launch()
    assert 0.2 <= wall < 0.35
    # Its CPU time beside the wall time: a sleep uses next to none, a busy loop all of its time.
    assert sleeper.last_breakdown is not None and sleeper.last_breakdown["cpu"] < 0.1
    spin = CommandLauncher([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass"],
                           str(tmp_path))
    wall = spin.launch()          # spins until it has used 0.3 s of CPU, however busy the machine
    assert spin.last_breakdown is not None and 0.3 <= spin.last_breakdown["cpu"] <= wall + 0.05
    # The kernel's part: arithmetic is the program's, reading /dev/zero the kernel's (it copies the zeros).
    # (Not the loop above: process_time() is a system call.)
    sums = CommandLauncher([sys.executable, "-c", "sum(range(20_000_000))"], str(tmp_path))
    sums.launch()
    assert sums.last_breakdown is not None and sums.last_breakdown["cpu_sys"] < 0.5 * sums.last_breakdown["cpu"]
    zeros = CommandLauncher([sys.executable, "-c", "import os, time\nfd = os.open('/dev/zero', os.O_RDONLY)\n"
                             "while time.process_time() < 0.3: os.read(fd, 1 << 20)"], str(tmp_path))
    zeros.launch()
    assert zeros.last_breakdown is not None and zeros.last_breakdown["cpu_sys"] > 0.5 * zeros.last_breakdown["cpu"]


@needs_strace
def test_record_follows_child_processes(tmp_path):
    data = tmp_path / "data.txt"
    data.write_bytes(b"x" * 10000)
    t = tr.record(["/bin/sh", "-c", f"cat {data} > /dev/null; head -c 100 {data} > /dev/null"], str(tmp_path),
                  cold_residency=False)
    fid = next(f.id for f in t.files if f.path == str(data))
    reads = [o for o in t.ops if o.file == fid and o.op == "read"]
    assert sum(o.size for o in reads) == 10000 + 100 and len({o.pid for o in reads}) == 2
    assert [o.offset for o in reads][0] == 0 and t.files[fid].size == 10000


def test_background_run_that_died_reports_why_and_closes_once():
    """A background fio that ended before stop() (here a program that fails at once): stop() says so with its exit
    code, not a traceback from reading a closed file; close() after that is a no-op (its group id is free again)."""
    import time

    from smartio.engine import Job, JobSet
    from smartio.engine.fio import BackgroundRun
    from smartio.errors import SmartioError

    run = BackgroundRun("/bin/false", JobSet(((Job("bg", "write", "/nonexistent", 4096, 0, 4096, 1),),)), "test")
    deadline = time.monotonic() + 10
    while run.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(SmartioError, match=r"fio ended early \(1\) in test"):
        run.stop()
    run.close()
    run.close()


def test_each_launch_counts_the_disk_reads_it_caused(tmp_path, monkeypatch):
    """Per launch, the requests and sectors the target's block device completed (its sysfs stat): how a replay's
    I/O is compared with the real launch's."""
    from smartio.blockdev import Device
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    stat = tmp_path / "sys" / "vdz" / "stat"
    stat.parent.mkdir(parents=True)
    done = [100, 8000]                                   # read requests, sectors read so far

    def show() -> None:
        stat.write_text(f"{done[0]} 4 {done[1]} 50 7 0 56 3 0 60 70 0 0 0 0 0 0\n")

    class Reader:
        def __init__(self) -> None:
            self.n = 0

        def launch(self) -> float:
            self.n += 1
            done[0] += 2 + self.n                        # 3, 4, 5 requests of 64 KiB each
            done[1] += (2 + self.n) * 128
            show()
            self.last_breakdown = {"think": 0.004, "fault": 0.001 * self.n, "cpu": 0.005}
            return 0.01

    show()
    monkeypatch.setattr(me, "SYS_BLOCK", tmp_path / "sys")
    target = open_target(str(tmp_path), writes=True, destroy_data=False)
    target.device = Device("vdz", "vdz", 1 << 30, "254:0")
    doc = me.measure(target, me.LaunchSettings(repeats=2), Reader(), what={"mode": "run"}, command="t", progress=False)
    r = doc["results"]                                   # the warm-up launch (3 requests) is not counted
    assert r["disk_read_requests"]["values"] == [4.0, 5.0] and r["disk_read_kib"]["values"] == [256.0, 320.0]
    from smartio.launch.report import render
    text = render({**doc, "argv": ["x"], "kernel": "k"})
    assert "disk reads per launch (requests)" in text and "disk reads per launch (KiB)" in text
    # Where each timed launch's time went, per launch (not the warm-up's).
    assert r["breakdown_s"]["fault"]["values"] == [0.002, 0.003] and r["breakdown_s"]["cpu"]["mean"] == 0.005
    assert "  in fault (ms)" in text and "CPU time of the launch (ms)" in text
    target.device = Device("gone", "gone", 1 << 30, "254:1")
    assert me.disk_io(target) is None


def test_a_cold_launch_series_starts_with_an_untimed_cold_launch(tmp_path, monkeypatch):
    """Cold: one launch after its own cache drop is not counted (it pays for what ran before it), unless
    cold_warmup is off; warm: the untimed launch that fills the cache."""
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    events: list[str] = []
    monkeypatch.setattr(me, "drop_caches", lambda: events.append("drop"))
    monkeypatch.setattr(me.time, "sleep", lambda s: events.append("settle"))

    class Clock:
        def launch(self) -> float:
            events.append("launch")
            return [9.0, 1.0, 2.0][events.count("launch") - 1]

    def run(**kw) -> dict:
        events.clear()
        target = open_target(str(tmp_path), writes=True, destroy_data=False)
        monkeypatch.setattr(me, "is_root", lambda: True)
        return me.measure(target, me.LaunchSettings(repeats=2, **kw), Clock(), what={"mode": "run"}, command="t",
                          progress=False)

    doc = run(cold=True)
    assert events == ["drop", "settle", "launch"] * 3 and doc["results"]["wall_s"]["values"] == [1.0, 2.0]
    assert doc["settings"]["warmup_launches"] == 1
    doc = run(cold=True, cold_warmup=False)
    assert events == ["drop", "settle", "launch"] * 2 and doc["results"]["wall_s"]["values"] == [9.0, 1.0]
    assert doc["settings"]["warmup_launches"] == 0
    doc = run(cold=False)
    assert events == ["launch"] * 3 and doc["results"]["wall_s"]["values"] == [1.0, 2.0]


@pytest.mark.parametrize("repeats, order", [
    ([2, 2], [0, 1, 1, 0]),
    ([3, 3], [0, 1, 1, 0, 0, 1]),
    ([3, 2], [0, 1, 0, 1, 0]),
    ([8, 2], [0, 0, 1, 0, 0, 0, 0, 1, 0, 0]),
    ([1, 1, 1], [0, 1, 2]),
    ([4], [0, 0, 0, 0]),
])
def test_interleaving_spreads_unequal_series_evenly(repeats, order):
    from smartio.launch.measure import interleaving

    assert interleaving(repeats) == order


def test_interleaved_arms_take_their_launches_in_turn(tmp_path, monkeypatch):
    """measure_interleaved: each arm's untimed warm-up first, then the arms' launches spread over each other
    (interleaving); one document per arm, with its own launches, repeats and command, naming the arms it was
    interleaved with."""
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    events: list[str] = []
    monkeypatch.setattr(me, "drop_caches", lambda: events.append("drop"))
    monkeypatch.setattr(me.time, "sleep", lambda s: None)
    monkeypatch.setattr(me, "is_root", lambda: True)
    clock = iter(range(1000, 2000))
    monkeypatch.setattr(me.time, "time", lambda: float(next(clock)))

    class Named:
        def __init__(self, name: str, base: float) -> None:
            self.name, self.base, self.n = name, base, 0

        def launch(self) -> float:
            events.append(self.name)
            self.n += 1
            self.last_breakdown = {"cpu": self.base / 10}
            return self.base + self.n            # the warm-up is launch 1

    target = open_target(str(tmp_path), writes=True, destroy_data=False)
    arms = [me.Arm(Named("real", 10.0), {"mode": "real", "app": "a"}, "c-real", 3),
            me.Arm(Named("replay", 20.0), {"mode": "replay", "app": "a"}, "c-replay", 2)]
    real, replay = me.measure_interleaved(target, me.LaunchSettings(cold=True, repeats=1), arms, progress=False)
    launches = [e for e in events if e != "drop"]
    assert launches == ["real", "replay", "real", "replay", "real", "replay", "real"]   # warm-ups, then spread
    assert events == [x for e in launches for x in ("drop", e)]     # every cold launch right after its own drop
    assert real["results"]["wall_s"]["values"] == [12.0, 13.0, 14.0] and real["settings"]["repeats"] == 3
    assert replay["results"]["wall_s"]["values"] == [22.0, 23.0] and replay["settings"]["repeats"] == 2
    assert (real["mode"], real["command"], real["interleaved_with"]) == ("real", "c-real", ["replay"])
    assert (replay["mode"], replay["command"], replay["interleaved_with"]) == ("replay", "c-replay", ["real"])
    assert replay["results"]["breakdown_s"]["cpu"]["values"] == [2.0, 2.0]
    assert real["started"] == replay["started"]
    # When each timed launch ran (for the host's load during it): in turn, the arms' spread over each other.
    spans = sorted([(*s, "real") for s in real["results"]["launch_unix_s"]]
                   + [(*s, "replay") for s in replay["results"]["launch_unix_s"]])
    assert [m for *_, m in spans] == launches[2:] and all(a <= b for a, b, _ in spans)
    # One arm is `measure`: no interleaved_with.
    doc = me.measure(target, me.LaunchSettings(repeats=2), Named("x", 1.0), what={"mode": "run"}, command="t",
                     progress=False)
    assert "interleaved_with" not in doc and doc["results"]["wall_s"]["values"] == [3.0, 4.0]
    with pytest.raises(ValueError):
        me.measure_interleaved(target, me.LaunchSettings(), [], progress=False)


def test_launches_beside_a_background_that_keeps_running(tmp_path, monkeypatch):
    """RunningBackground: a real fio writer started once, `head_s` before the launches, runs through several
    measurements (it is not started per launch); each launch's background throughput is what the device wrote
    while it ran; the writer's scratch file is gone afterwards, also when fio has failed."""
    from smartio.blockdev import Device
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    stat = tmp_path / "sys" / "vdz" / "stat"
    stat.parent.mkdir(parents=True)
    written = [0]

    def show() -> None:
        stat.write_text(f"5 0 40 1 7 0 {written[0]} 3 0 60 70 0 0 0 0 0 0\n")

    class Writes:
        def launch(self) -> float:
            written[0] += 2048 * 3                       # 3 MiB written while this 0.5 s launch ran
            show()
            return 0.5

    show()
    monkeypatch.setattr(me, "SYS_BLOCK", tmp_path / "sys")
    launches, scratch = tmp_path / "launch", tmp_path / "bg"
    launches.mkdir()
    scratch.mkdir()
    bg_target = open_target(str(scratch), writes=True, destroy_data=False)
    with me.RunningBackground(bg_target, "buffered-write", 1 << 20, head_s=0.2) as bg:
        pid = bg.run.proc.pid
        assert bg.age_s() >= 0.2 and list(scratch.iterdir())
        for _ in range(2):                               # two measurements, one writer
            target = open_target(str(launches), writes=True, destroy_data=False)
            target.device = Device("vdz", "vdz", 1 << 30, "254:0")
            doc = me.measure_interleaved(target, me.LaunchSettings(background="buffered-write", repeats=2),
                                         [me.Arm(Writes(), {"mode": "run"}, "t", 2)], progress=False,
                                         background_run=bg)[0]
            assert bg.run.proc.pid == pid and bg.run.running()
            assert doc["results"]["background_write_mib_s"]["values"] == [6.0, 6.0]
            assert doc["settings"]["background_running"]["since_s"] >= 0.2 and doc["fio_version"]
        with pytest.raises(ValueError, match="running 'buffered-write'"):
            me.measure_interleaved(target, me.LaunchSettings(background="seq-write"), [me.Arm(Writes(), {}, "t", 1)],
                                   progress=False, background_run=bg)
    assert list(scratch.iterdir()) == []
    from smartio.errors import UsageError
    with pytest.raises(UsageError, match="--background"):
        me.RunningBackground(bg_target, "none", 1 << 20, head_s=0)


def test_beside_a_running_background_cold_drops_do_not_sync_and_a_dead_writer_fails_the_cell(tmp_path, monkeypatch):
    """With background_run, a cold launch's cache drop skips the sync (it would wait out a buffered writer's dirty
    pages); the writer is checked before the warm-ups and around every launch, so a cell is never written as
    measured beside a writer that had died; a writer of another workload than the settings' is refused."""
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    events: list[str] = []
    monkeypatch.setattr(me, "drop_caches", lambda sync=True: events.append(f"drop sync={sync}"))
    monkeypatch.setattr(me.time, "sleep", lambda s: None)
    monkeypatch.setattr(me, "is_root", lambda: True)

    class Writer:
        name, engine = "seq-write", None
        alive_for = 99

        def check(self) -> None:
            events.append("check")
            self.alive_for -= 1
            if self.alive_for < 0:
                raise SmartioError("fio ended early (1) in background seq-write: gone")

        def age_s(self) -> float:
            return 31.0

    class Launch:
        def launch(self) -> float:
            events.append("launch")
            return 1.0

    target = open_target(str(tmp_path), writes=True, destroy_data=False)
    settings = me.LaunchSettings(cold=True, background="seq-write", repeats=2)
    doc = me.measure_interleaved(target, settings, [me.Arm(Launch(), {"mode": "real"}, "t", 2)], progress=False,
                                 background_run=Writer())[0]          # type: ignore[arg-type]
    assert events == ["check", "drop sync=False", "launch"] + ["drop sync=False", "check", "launch", "check"] * 2
    assert doc["settings"]["background_running"] == {"since_s": 31.0}
    assert doc["settings"]["background_warmup_s"] is None and doc["settings"]["background_write_mib_s_from"] == "device"
    assert doc["fio_version"] is None                                 # this fake has no engine
    dying = Writer()
    dying.alive_for = 4                                               # dies during the second timed launch
    with pytest.raises(SmartioError, match="fio ended early"):
        me.measure_interleaved(target, settings, [me.Arm(Launch(), {"mode": "real"}, "t", 2)], progress=False,
                               background_run=dying)                  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_background_that_cannot_start_leaves_nothing_behind(tmp_path, monkeypatch):
    from smartio.engine.fio import FioEngine
    from smartio.launch import measure as me
    from smartio.storebench.target import open_target

    class Broken:
        closed = False

        def wait_started(self) -> None:
            raise SmartioError("fio ended early (1) in background seq-write: no")

        def close(self) -> None:
            Broken.closed = True

    monkeypatch.setattr(FioEngine, "start", lambda self, jobs, label: Broken())
    bg = me.RunningBackground(open_target(str(tmp_path), writes=True, destroy_data=False), "seq-write", 1 << 20, 0)
    with pytest.raises(SmartioError, match="fio ended early"):
        bg.__enter__()
    assert Broken.closed and list(tmp_path.iterdir()) == []

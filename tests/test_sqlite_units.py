"""smartio sqlite: per-file attribution of block writes per transaction, on synthetic events and on a
trace recorded in the testbed (tests/data/sqlite/); the shim's log and counters; bad input; --sync-call for real."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from smartio.sqlite.attribute import Layout, Repeat, load_bundle, per_transaction, summarise
from smartio.sqlite.shim import Counts, SyncCall, read_log
from smartio.trace import events as ev

DATA = Path(__file__).parent / "data" / "sqlite"
DISK = ev.kdev(254, 0)


def _issue(t: int, sector: int, kib: float, rwbs: str, dev: int = DISK) -> tuple:
    tc = ev.rwbs_to_categories(rwbs) | ev.ACTION_CATEGORY[ev.ISSUE]
    return (ev.MAGIC, 0, t, sector, int(kib * 1024), ev.ISSUE | tc << ev.TC_SHIFT, 1, dev, 0, 0, 0)


def test_attribution_synthetic():
    # Two transactions of a DELETE-mode insert: the journal gets new blocks in the second one, which the final
    # FIEMAP (taken when the journal is long gone) cannot know; the sync log's extents can.
    layout = Layout(DISK, 2048, [(DISK, 100_000, 110_000)], "ext4 journal inode 8", "ext4")
    db, jr = "/m/r0.db", "/m/r0.db-journal"
    syncs = [SyncCall(1_100, 1_200, "fdatasync", "fsync", 0, jr, ((0, 8192 * 512, 4096),)),
             SyncCall(1_300, 1_400, "fdatasync", "fsync", 0, "/m", ()),
             SyncCall(2_100, 2_200, "fdatasync", "fsync", 0, jr, ((0, 9000 * 512, 8192),))]
    rep = Repeat(db, [1_000, 2_000], [1_900, 2_900], syncs, {db: [[0, 4096 * 512, 16384]]})
    events = np.array([
        _issue(900, 2048 + 4096, 4, "WS"),            # before the first transaction: not counted
        _issue(1_050, 2048 + 8192, 4, "WS"),          # journal (tx 1's extents)
        _issue(1_150, 100_008, 12, "WSM"),            # fs journal descriptor + metadata
        _issue(1_160, 0, 0, "FN"),                    # a flush
        _issue(1_170, 100_032, 4, "FWFS"),            # commit block, preflush + FUA
        _issue(1_500, 2048 + 4096 + 8, 4, "WS"),      # database (final extents)
        _issue(1_600, 500, 4, "WSM"),                 # other metadata
        _issue(1_700, 2048 + 4096, 4, "RS"),          # a read
        _issue(2_050, 2048 + 9000 + 8, 4, "WS"),      # journal: tx 2's extents only
        _issue(2_060, 2048 + 8192, 4, "WS"),          # tx 1's journal blocks, now nobody's: metadata
        _issue(2_070, 2048 + 9000, 0, "DS"),          # a discard carries no data write
        _issue(2_950, 100_040, 4, "WSM", ev.kdev(254, 16)),   # another disk: not recorded for this layout
    ], dtype=ev.EVENT_DTYPE)
    txs = per_transaction(events, [rep], layout)
    assert [t["writes"] for t in txs] == [5, 2]
    one, two = txs[0]["classes"], txs[1]["classes"]
    assert (one["journal"]["writes"], one["fs_journal"]["writes"], one["database"]["writes"],
            one["metadata"]["writes"]) == (1, 2, 1, 1)
    assert one["fs_journal"]["kib"] == 16 and txs[0]["first_fs_journal_kib"] == 12
    assert (txs[0]["flushes"], txs[0]["fua_writes"], txs[0]["reads"]) == (2, 1, 1)
    assert [s[1] for s in txs[0]["syncs"]] == ["journal", "directory"]
    assert (two["journal"]["writes"], two["metadata"]["writes"], two["database"]["writes"]) == (1, 1, 0)
    assert txs[1]["syncs"] == [["fdatasync->fsync", "journal"]]
    s = summarise(txs, layout)
    assert s["transactions"] == 1 and s["writes"]["mean"] == 2       # the first transaction is left out


def test_attribution_of_recorded_ext4_delete_trace():
    """A DELETE-mode insert run recorded in the testbed (ext4 on the emulated s5-emmc, fsync). The attribution by
    extents is checked against what the block layer says independently: who queued each request (the worker's
    `python` for SQLite's files, the jbd2 thread for the ext4 journal)."""
    events, repeats, layout, side = load_bundle(DATA / "ext4-delete.smtrace")
    assert side["settings"]["journal"] == "delete" and layout.fstype == "ext4" and layout.journal
    txs = per_transaction(events, repeats, layout)
    assert len(txs) == sum(len(r.starts_ns) for r in repeats)
    from smartio.trace.formats import read_trace

    comms = read_trace(DATA / "ext4-delete.smtrace").comms
    codes = events["action"] & 0xFFFF
    queued = {int(s): comms.get(int(p), "") for s, p in zip(events["sector"][codes == ev.QUEUE],
                                                          events["pid"][codes == ev.QUEUE], strict=True)}
    for tx in txs[1:]:
        kinds = {k for _, k, _, _, _ in tx["sequence"]}
        assert {"journal", "database", "fs_journal"} <= kinds, tx["sequence"]
        for _ms, kind, sector, _kib, _rwbs in tx["sequence"]:
            who = queued.get(sector, "")
            if kind == "fs_journal":
                assert who.startswith("jbd2/"), (sector, who)
            elif kind in ("journal", "database"):
                assert who.startswith("python"), (sector, who)
        # a rollback-journal write lies in the extents the journal's own sync logged in that transaction
        jsyncs = [s for s in repeats[tx["repeat"]].syncs if s.path.endswith("-journal")
                  and repeats[tx["repeat"]].starts_ns[tx["index"]] <= s.start_ns]
        assert jsyncs and all(s.asked == "fdatasync" and s.issued == "fsync" for s in jsyncs)
    s = summarise(txs, layout)
    # DELETE: the journal file is created and deleted every transaction, so its inode, directory entry and
    # bitmaps go through the ext4 journal: more than one commit's worth of fs-journal writes per insert.
    assert s["classes"]["fs_journal"]["writes"]["mean"] >= 4
    assert s["first_fs_journal_kib"]["mean"] >= 16


def test_sync_log_and_counts(tmp_path):
    log = tmp_path / "syncs"
    log.write_text("10 20 fdatasync fsync 0 /a\\040b/x.db-journal 2 0:4096:4096 4096:8192:4096\n"
                   "30 40 fsync fsync -1 /a\\040b 0\n")
    calls = read_log(log)
    assert calls[0].path == "/a b/x.db-journal" and calls[0].extents == ((0, 4096, 4096), (4096, 8192, 4096))
    assert calls[1].rc == -1 and calls[1].extents == ()
    (tmp_path / "c").write_text("fsync 0 fdatasync 12 issued_fsync 12 issued_fdatasync 0\n")
    c = Counts.read(tmp_path / "c")
    assert c.library_call == "fdatasync" and c.issued_fsync == 12


def _sqlite(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smartio", "sqlite", *args], capture_output=True, text=True,
                          env={**os.environ, "SMARTIO_DB": str(tmp / "results.db")}, timeout=120)


@pytest.mark.parametrize("args, flag", [
    ((), "--target (missing)"),
    (("--target", "/nonexistent/x"), "--target /nonexistent/x"),
    (("--target", "{tmp}", "--transactions", "0"), "--transactions 0"),
    (("--target", "{tmp}", "--record-bytes", "0"), "--record-bytes 0"),
    (("--target", "{tmp}", "--transactions", "9000000", "--record-bytes", "1000000"), "too little space"),
    (("--target", "{tmp}", "--trace-file", "{tmp}/t"), "--trace-file"),
])
def test_bad_input_is_exit_2(tmp_path, args, flag):
    p = _sqlite(*[a.format(tmp=tmp_path) for a in args], tmp=tmp_path)
    assert p.returncode == 2, p.stderr
    assert flag in p.stderr.format(tmp=tmp_path)
    assert not list(tmp_path.glob(".smartio-sqlite-*"))


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler for the shim")
@pytest.mark.parametrize("call", ["fsync", "fdatasync"])
def test_sync_call_is_what_the_kernel_sees(tmp_path, call):
    """strace, not the shim's own counters, says which system call SQLite's syncs became."""
    out = tmp_path / "doc.json"
    p = subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", str(tmp_path / "st"),
                        sys.executable, "-m", "smartio", "sqlite", "--target", str(tmp_path), "--transactions", "5",
                        "--repeats", "2", "--sync-call", call, "--json", str(out)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "SMARTIO_DB": str(tmp_path / "results.db")})
    assert p.returncode == 0, p.stderr
    # "<pid>  fdatasync(4</path/r0.db-journal>) = 0": the timed repeats' files are r<N>.db*; the probe (run as the
    # library does), the directory syncs (the probe's are not told apart by path) and the parent's results
    # database are left out.
    calls = [m.groups() for m in re.finditer(r"^\d+\s+(fsync|fdatasync)\(\d+<([^>]*)>", (tmp_path / "st").read_text(),
                                             re.M)]
    timed = [name for name, path in calls if re.search(r"/\.smartio-sqlite-[0-9a-f]+/r\d+\.db", path)]
    other = "fdatasync" if call == "fsync" else "fsync"
    assert timed.count(call) >= 2 * 2 * 5 and timed.count(other) == 0, calls[:30]
    doc = json.loads(out.read_text())
    per = doc["results"]["sync_calls"]["per_transaction"]
    assert per[f"issued_{call}"]["mean"] >= 2 and per[f"issued_{other}"]["mean"] == 0
    # the probe ran as the library does: Debian's libsqlite3 is built with HAVE_FDATASYNC
    assert doc["results"]["sync_calls"]["library"] == "fdatasync"
    assert any(name == "fdatasync" and "/probe.db" in path for name, path in calls)
    assert not list(tmp_path.glob(".smartio-sqlite-*"))

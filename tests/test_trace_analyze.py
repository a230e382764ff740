"""Trace analysis: cross-checked against blkparse and btt on recorded SQLite traces, and exact on a
hand-built trace where every figure can be worked out by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from smartio.cli import main
from smartio.trace import events as ev, formats, native
from smartio.trace.analyze import FLUSH, READ, analyze, without_final_completions
from smartio.trace.events import EVENT_DTYPE, Trace
from smartio.trace.files import attribute, fiemap, file_type
from smartio.trace.formats import read_trace
from smartio.trace.native import match

DATA = Path(__file__).parent / "data" / "traces"
MODES = ("delete", "truncate", "persist", "wal")
pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode", MODES)
def test_counts_and_bytes_match_blkparse(mode):
    t = read_trace(DATA / f"sqlite-{mode}")
    want = json.loads((DATA / f"sqlite-{mode}.expected.json").read_text())["blkparse"]
    mx = analyze(t)
    assert mx["events"] == want["events"]
    assert mx["write"]["bytes"] >> 10 == want["writes_completed_kib"]
    assert mx["read"]["bytes"] >> 10 == want["reads_completed_kib"]
    # blkparse counts every completion by its write bit: zero-byte completions (flushes, the end of a
    # flush sequence) land among its reads or writes; we count them apart.
    e = t.events
    c = (e["action"] & 0xFFFF) == ev.COMPLETE
    w = (e["action"] >> ev.TC_SHIFT & ev.TC_WRITE) != 0
    empty = e["bytes"] == 0
    assert mx["write"]["requests"] + int((c & w & empty).sum()) == want["writes_completed"]
    assert mx["read"]["requests"] + int((c & ~w & empty).sum()) == want["reads_completed"]
    assert mx["flush"]["requests"] == int((c & empty & ((e["action"] >> ev.TC_SHIFT & ev.TC_FLUSH) != 0)).sum())
    assert mx["event_counts"]["Q"] == want["reads_queued"] + want["writes_queued"]


def _btt_view(t: Trace) -> Trace:
    # btt measures a preflush or FUA write to its data completion, we to its final completion; without the
    # final completions ours stops at the data completion too.
    return without_final_completions(t)


@pytest.mark.parametrize("mode", MODES)
def test_latencies_match_btt(mode):
    t = _btt_view(read_trace(DATA / f"sqlite-{mode}"))
    want = json.loads((DATA / f"sqlite-{mode}.expected.json").read_text())["btt"]
    mx = analyze(t)
    r, w = mx["read"]["q2c_ms"], mx["write"]["q2c_ms"]
    # btt follows bios that carry data: our reads and writes together.
    assert r["n"] + w["n"] == want["q2c"]["n"]
    mean_s = (r["n"] * r["mean"] + w["n"] * w["mean"]) / (r["n"] + w["n"]) / 1e3
    assert mean_s == pytest.approx(want["q2c"]["avg_s"], abs=1e-9)
    assert max(r["max"], w["max"]) / 1e3 == pytest.approx(want["q2c"]["max_s"], abs=1e-9)
    assert min(r["quantiles"][0], w["quantiles"][0]) / 1e3 == pytest.approx(want["q2c"]["min_s"], abs=1e-9)
    # Percentiles of every bio's Q2C against btt's per-bio file (which rounds to 1 us).
    m = match(t.events)
    b = m.bios
    ours = np.percentile(b.q2c[(b.q2c >= 0) & (b.nbytes > 0)] / 1e9, [50, 90, 99])
    theirs = np.percentile(want["q2c_per_bio_s"], [50, 90, 99])
    np.testing.assert_allclose(ours, theirs, atol=1.5e-6)
    # btt's D2C is per bio: each request's D2C counted once per bio it carried.
    r = m.reqs
    q = (r.issue >= 0) & (r.nbios > 0) & (r.nbytes > 0)
    d2c = (r.time[q] - r.issue[q]) / 1e9
    nbios = r.nbios[q]
    assert int(nbios.sum()) == want["d2c"]["n"]
    assert float((d2c * nbios).sum() / nbios.sum()) == pytest.approx(want["d2c"]["avg_s"], abs=1e-9)
    assert d2c.max() == pytest.approx(want["d2c"]["max_s"], abs=1e-9)


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end), the slow obvious way: sort, then sweep."""
    total, reach, begin = 0, None, None
    for s, e in sorted(zip(start.tolist(), end.tolist(), strict=True)):
        if reach is None or s > reach:
            total += 0 if reach is None else reach - begin
            begin, reach = s, e
        else:
            reach = max(reach, e)
    return total + (0 if reach is None else reach - begin)


@pytest.mark.parametrize("mode", MODES)
def test_time_shares_are_unions_of_intervals(mode):
    # The C helper measures them in one backward pass; check against sorting every interval.
    t = read_trace(DATA / f"sqlite-{mode}")
    m = match(t.events)
    r, b = m.reqs, m.bios
    issued, done = r.issue >= 0, b.q2c >= 0
    assert m.busy_ns == _union_ns(r.issue[issued], r.time[issued]) > 0
    bare = issued & (r.nbios == 0)
    assert m.outstanding_ns == _union_ns(np.r_[b.time[done], r.issue[bare]],
                                         np.r_[b.time[done] + b.q2c[done], r.time[bare]])
    reads = done & (b.kind == READ) & (b.tc & ev.TC_META == 0)
    assert m.class_ns["read"] == _union_ns(b.time[reads], b.time[reads] + b.q2c[reads])
    flushes = done & (b.kind == FLUSH)
    assert m.class_ns["flush"] == _union_ns(b.time[flushes], b.time[flushes] + b.q2c[flushes])


def test_second_passes_give_the_same_answers(monkeypatch):
    # Outputs of unknown length get native.ROOM entries, then a second pass: force the second passes.
    t = read_trace(DATA / "sqlite-wal")
    want = analyze(t, top_n=20)
    monkeypatch.setattr(native, "ROOM", 1)
    again = read_trace(DATA / "sqlite-wal")
    assert again.comms == t.comms and len(again.comms) > 1
    assert analyze(again, top_n=20) == want


def test_per_cpu_files_merge_like_a_stable_sort(tmp_path):
    # Ties keep the order of the files; a file out of time order is sorted first, then merged.
    whole = read_trace(DATA / "sqlite-persist")
    both = np.concatenate([formats.read_blktrace(DATA / f"sqlite-persist.blktrace.{i}").events for i in (0, 1)])
    np.testing.assert_array_equal(whole.events, both[np.argsort(both["time"], kind="stable")])
    data = bytearray((DATA / "sqlite-persist.blktrace.1").read_bytes())
    a, b = len(data) - 48 * 3, len(data) - 48
    data[a:a + 48], data[b:b + 48] = data[b:b + 48], data[a:a + 48]
    (tmp_path / "x.blktrace.1").write_bytes(bytes(data))
    (tmp_path / "x.blktrace.0").write_bytes((DATA / "sqlite-persist.blktrace.0").read_bytes())
    shuffled = read_trace(tmp_path / "x")
    assert np.all(np.diff(shuffled.events["time"].astype(np.int64)) >= 0)
    assert sorted(shuffled.events.tobytes()[i:i + 48] for i in range(0, len(shuffled.events) * 48, 48)) == \
        sorted(whole.events.tobytes()[i:i + 48] for i in range(0, len(whole.events) * 48, 48))


def _ev(time, code, sector, nbytes, rwbs, pid=100):
    tc = ev.rwbs_to_categories(rwbs) | ev.ACTION_CATEGORY[code]
    return (ev.MAGIC, 0, time, sector, nbytes, code | tc << ev.TC_SHIFT, pid, ev.kdev(7, 0), 0, 0, 0)


def _hand_trace() -> Trace:
    # blkparse's action letters, I = insert
    Q, M, F, G, I, D, C = ev.QUEUE, ev.BACKMERGE, ev.FRONTMERGE, ev.GETRQ, ev.INSERT, ev.ISSUE, ev.COMPLETE  # noqa: E741
    rows = [
        # a 4 KiB read: Q2C 102 us, D2C 100 us
        _ev(0, Q, 800, 4096, "RS"), _ev(1_000, G, 800, 4096, "RS"), _ev(2_000, D, 800, 4096, "RS"),
        _ev(102_000, C, 800, 4096, "RS"),
        # two async 4 KiB writes back-merged into one 8 KiB request
        _ev(200_000, Q, 1000, 4096, "W"), _ev(200_100, G, 1000, 4096, "W"),
        _ev(201_000, Q, 1008, 4096, "W"), _ev(201_100, M, 1008, 4096, "W"),
        _ev(210_000, I, 1000, 8192, "W"), _ev(220_000, D, 1000, 8192, "W"), _ev(250_000, C, 1000, 8192, "W"),
        # two sync 4 KiB writes front-merged into one request starting at 2000
        _ev(300_000, Q, 2008, 4096, "WS"), _ev(300_100, G, 2008, 4096, "WS"),
        _ev(301_000, Q, 2000, 4096, "WS"), _ev(301_100, F, 2000, 4096, "WS"),
        _ev(310_000, D, 2000, 8192, "WS"), _ev(330_000, C, 2000, 8192, "WS"),
        # a flush, then a 64 KiB write rewriting block 125 (sectors 1000..1127)
        _ev(400_000, Q, 0, 0, "FWS"), _ev(400_100, G, 0, 0, "FWS"), _ev(401_000, D, 0, 0, "FN"),
        _ev(500_000, C, 2**64 - 1, 0, "FN"),
        _ev(600_000, Q, 1000, 65536, "WS"), _ev(600_100, G, 1000, 65536, "WS"), _ev(601_000, D, 1000, 65536, "WS"),
        _ev(700_000, C, 1000, 65536, "WS"),
        _ev(800_000, Q, 0, 0, "FWS"), _ev(800_100, G, 0, 0, "FWS"), _ev(801_000, D, 0, 0, "FN"),
        _ev(1_000_000, C, 2**64 - 1, 0, "FN"),
    ]
    return Trace(np.array(rows, dtype=EVENT_DTYPE), {100: "app"}, {"clock": "relative"})


def test_hand_built_trace_every_figure():
    mx = analyze(_hand_trace(), top_n=3)
    rd, wr = mx["read"], mx["write"]
    assert (rd["requests"], wr["requests"], rd["bios"], wr["bios"]) == (1, 3, 1, 5)
    assert mx["rw_ratio"]["text"] == "1/3.00"
    assert rd["d2c_ms"]["p50"] == pytest.approx(0.1) and rd["q2c_ms"]["p50"] == pytest.approx(0.102)
    # write D2C: 30, 20, 99 us; Q2C: 50, 49, 30, 29, 100 us
    assert wr["d2c_ms"]["p50"] == pytest.approx(0.030) and wr["d2c_ms"]["max"] == pytest.approx(0.099)
    assert sorted(wr["d2c_ms"]["quantiles"][i] for i in (0, 100)) == pytest.approx([0.020, 0.099])
    assert wr["q2c_ms"]["p50"] == pytest.approx(0.049) and wr["q2c_ms"]["mean"] == pytest.approx(0.0516)
    assert (wr["sync"], wr["async"], rd["sync"]) == (2, 1, 1)
    assert wr["size"]["share_le_4k"] == 0 and wr["size"]["share_le_16k"] == pytest.approx(2 / 3)
    assert wr["size"]["share_le_64k"] == 1.0
    # write blocks: 125, 126 (merged request), 250, 251, then 125..140 (64 KiB): 125 and 126 twice
    loc = wr["locality"]
    assert loc["blocks"] == 18 and loc["max_accesses"] == 2 and loc["share_accessed_once"] == pytest.approx(16 / 18)
    assert loc["top"][:2] == [[125, 2], [126, 2]]
    fl = mx["flush"]
    assert fl["requests"] == 2
    assert fl["between"]["requests"]["p50"] == 1 and fl["between"]["kib"]["p50"] == 64
    assert fl["between"]["seconds"]["p50"] == pytest.approx(500e-6)
    # issued..completed: 100 + 30 + 20 + 99 + 99 + 199 us of 1000 us, none overlapping
    assert mx["time_share"]["busy"] == pytest.approx(0.547)
    assert mx["time_share"]["outstanding_by_class"]["read"] == pytest.approx(0.102)
    assert mx["unmatched"] == {"bios_without_completion": 0, "completions_without_issue": 0}


def test_cli_writes_json_and_html(tmp_path, capsys):
    rc = main(["trace", "analyze", str(DATA / "sqlite-delete.smtrace"), "--json", str(tmp_path / "m.json"),
               "--html", str(tmp_path / "r.html")])
    assert rc == 0
    mx = json.loads((tmp_path / "m.json").read_text())
    assert mx["format"] == "smartio" and mx["write"]["requests"] > 0
    assert mx["source"]["command"][:1] == ["sh"]
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") >= 4
    assert "R/W ratio" in capsys.readouterr().out


def test_cli_bad_flags_are_exit_2(tmp_path, capsys):
    trace = str(DATA / "sqlite-wal")
    assert main(["trace", "analyze", trace, "--top", "0"]) == 2
    assert main(["trace", "analyze", trace, "--files", str(tmp_path / "none")]) == 2
    assert main(["trace", "analyze", trace, "--html", str(tmp_path / "no" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "--top 0" in err and "--files" in err and "--html" in err


def test_file_types_like_most():
    kinds = {n: file_type(Path(n), 0o644) for n in
             ("a.db", "a.db-journal", "a.db-wal", "a.db-shm", "lib.so", "base.apk", "x.xml", "s.dat", "notes")}
    assert kinds == {"a.db": "database", "a.db-journal": "journal", "a.db-wal": "wal", "a.db-shm": "wal",
                     "lib.so": "executable", "base.apk": "executable", "x.xml": "resource", "s.dat": "resource",
                     "notes": "other"}
    assert file_type(Path("run"), 0o755) == "executable"


def test_fiemap_maps_a_file_to_its_sectors(tmp_path):
    p = tmp_path / "f.db"
    p.write_bytes(os.urandom(64 * 1024))
    fd = os.open(p, os.O_RDONLY)
    try:
        extents = fiemap(fd)
    except OSError as e:
        pytest.skip(f"FIEMAP unsupported on {tmp_path}: {e}")
    finally:
        os.close(fd)
    if not extents:
        pytest.skip(f"{tmp_path} keeps no extents for a fresh file (tmpfs?)")
    assert sum(length for _, _, length in extents) >= 64 * 1024
    att = attribute(None, tmp_path)
    first = att.start[0]
    assert att.lookup(np.array([first, first + 1, 0], dtype=np.uint64)).tolist()[:2] == [0, 0]
    assert att.types == ["database"]


# --- pairing without G events, partial completions, flushes, FUA ------------------------------------------------

def _trace(rows) -> Trace:
    return Trace(np.array(rows, dtype=EVENT_DTYPE), {100: "app", 44: "kworker"}, {"clock": "relative"})


@pytest.mark.parametrize("mode", MODES)
def test_without_getrq_events_bios_still_pair(mode):
    # btt pairs bios with requests by their sectors; without the G events the same Q2C and submitters come out.
    t = read_trace(DATA / f"sqlite-{mode}")
    e = t.events
    no_g = Trace(e[(e["action"] & 0xFFFF) != ev.GETRQ], t.comms, t.meta)
    full, bare = match(e), match(no_g.events)
    np.testing.assert_array_equal(bare.bios.q2c, full.bios.q2c)
    assert (bare.bios.q2c[bare.bios.nbytes > 0] >= 0).all()
    np.testing.assert_array_equal(bare.reqs.pid, full.reqs.pid)
    np.testing.assert_array_equal(bare.reqs.nbios, full.reqs.nbios)
    assert analyze(no_g)["processes"] == analyze(t)["processes"]


def test_without_getrq_merged_bios_pair_by_sector_range():
    # blkparse's action letters, I = insert
    Q, M, F, I, D, C = ev.QUEUE, ev.BACKMERGE, ev.FRONTMERGE, ev.INSERT, ev.ISSUE, ev.COMPLETE  # noqa: E741
    t = _trace([
        # three 4 KiB writes of pid 100 end up in one 12 KiB request, issued by a worker: a back merge, a front
        # merge (both seen with M/F but no request to merge into, as in a trace without G), and no merge event
        _ev(0, Q, 1008, 4096, "W"), _ev(10, Q, 1016, 4096, "W"), _ev(20, M, 1016, 4096, "W"),
        _ev(30, Q, 1000, 4096, "W"), _ev(40, F, 1000, 4096, "W"),
        _ev(1_000, I, 1000, 12288, "W", pid=44), _ev(2_000, D, 1000, 12288, "W", pid=44),
        _ev(10_000, C, 1000, 12288, "W", pid=0),
    ])
    m = match(t.events)
    assert m.bios.q2c.tolist() == [10_000, 9_990, 9_970]
    assert m.reqs.nbios.tolist() == [3] and m.reqs.pid.tolist() == [100]


def test_partial_completions_count_one_request():
    Q, G, D, C = ev.QUEUE, ev.GETRQ, ev.ISSUE, ev.COMPLETE
    t = _trace([
        _ev(0, Q, 1000, 16384, "W"), _ev(100, G, 1000, 16384, "W"), _ev(1_000, D, 1000, 16384, "W"),
        # the driver completes it in two parts: 8 KiB, then the rest (blk_update_request advances the sector)
        _ev(5_000, C, 1000, 8192, "W", pid=0), _ev(9_000, C, 1016, 8192, "W", pid=0),
    ])
    mx = analyze(t)
    assert mx["write"]["requests"] == 1 and mx["write"]["bytes"] == 16384
    assert mx["write"]["d2c_ms"]["max"] == pytest.approx(0.008) and mx["write"]["q2c_ms"]["max"] == pytest.approx(0.009)
    assert mx["unmatched"] == {"bios_without_completion": 0, "completions_without_issue": 0}
    assert mx["write"]["locality"]["blocks"] == 4 and mx["write"]["locality"]["max_accesses"] == 1


def test_two_flushes_in_flight_are_not_mixed_up():
    Q, G, D, C = ev.QUEUE, ev.GETRQ, ev.ISSUE, ev.COMPLETE
    nosect = 2**64 - 1
    t = _trace([
        _ev(0, Q, 0, 0, "FWS"), _ev(10, G, 0, 0, "FWS"), _ev(20, Q, 0, 0, "FWS", pid=101),
        _ev(30, G, 0, 0, "FWS", pid=101),
        _ev(1_000, D, 0, 0, "FN", pid=44), _ev(2_000, D, 0, 0, "FN", pid=44),
        _ev(11_000, C, nosect, 0, "FN", pid=0), _ev(22_000, C, nosect, 0, "FN", pid=0),
    ])
    m = match(t.events)
    assert m.bios.q2c.tolist() == [11_000, 21_980]               # each flush bio to its own completion
    assert (m.reqs.time - m.reqs.issue).tolist() == [10_000, 20_000]   # first issued, first completed
    assert m.reqs.pid.tolist() == [100, 101]
    mx = analyze(t)
    assert mx["flush"]["requests"] == 2
    assert mx["unmatched"] == {"bios_without_completion": 0, "completions_without_issue": 0}
    # Two flushes the kernel made (no bios): the same.
    bare = match(_trace([_ev(1_000, D, 0, 0, "FN", pid=44), _ev(2_000, D, 0, 0, "FN", pid=44),
                         _ev(11_000, C, nosect, 0, "FN", pid=0), _ev(12_500, C, nosect, 0, "FN", pid=0)]).events)
    assert (bare.reqs.time - bare.reqs.issue).tolist() == [10_000, 10_500]


def _fua_write(final: bool):
    """A journal commit block as ext4 writes it on a device without FUA (recorded in sqlite-wal): preflush,
    the data, a post-flush, then the request's final completion (0 bytes at its sector)."""
    # blkparse's action letters, I = insert
    Q, G, I, D, C = ev.QUEUE, ev.GETRQ, ev.INSERT, ev.ISSUE, ev.COMPLETE  # noqa: E741
    nosect = 2**64 - 1
    rows = [
        _ev(0, Q, 32790, 1024, "FWFSM"), _ev(400, G, 32790, 1024, "FWFSM"),
        _ev(4_000, D, 0, 0, "FNF", pid=44), _ev(327_000, C, nosect, 0, "FNF", pid=0),
        _ev(329_000, I, 32790, 1024, "WSM", pid=44), _ev(330_000, D, 32790, 1024, "WSM", pid=44),
        _ev(333_000, C, 32790, 1024, "WSM", pid=0),
        _ev(335_000, D, 0, 0, "FNF", pid=44), _ev(419_000, C, nosect, 0, "FNF", pid=0),
    ]
    if final:
        rows.append(_ev(420_000, C, 32790, 0, "WSM", pid=0))
    rows.append(_ev(500_000, ev.QUEUE, 8, 4096, "R"))   # later I/O: the trace goes on
    return _trace(rows)


def test_fua_write_is_measured_to_its_final_completion():
    mx = analyze(_fua_write(final=True))
    wr = mx["write"]
    assert wr["requests"] == 1 and wr["bytes"] == 1024 and wr["sync"] == 1
    assert wr["q2c_ms"]["max"] == pytest.approx(0.420)   # to the final completion, after the post-flush
    assert wr["d2c_ms"]["max"] == pytest.approx(0.090)   # from the data's issue
    assert mx["flush"]["requests"] == 2
    # the final completion is this write's, not a stray completion of its own
    assert mx["unmatched"]["completions_without_issue"] == 0
    m = match(_fua_write(final=True).events)
    assert (m.reqs.kind == 4).sum() == 0                 # no OTHER request
    # Where the kernel sends no final completion (a device with FUA, no preflush), the data completion ends it.
    early = analyze(_fua_write(final=False))["write"]
    assert early["requests"] == 1 and early["q2c_ms"]["max"] == pytest.approx(0.333)


def test_time_shares_stay_unions_when_completions_are_deferred():
    # A FUA write deferred to its final completion and one that never gets one (emitted at the end, out of
    # order) leave the request columns sorted by completion time, as the sweeps need.
    t = _fua_write(final=False)
    m = match(t.events)
    assert np.all(np.diff(m.reqs.time) >= 0)
    issued = m.reqs.issue >= 0
    assert m.busy_ns == _union_ns(m.reqs.issue[issued], m.reqs.time[issued])


@pytest.mark.parametrize("mode", MODES)
def test_recorded_flush_sequences_end_at_their_final_completions(mode):
    # ext4 on a loop device (no FUA): every journal commit and fsync flush ends with a final completion of 0
    # bytes; each lengthens exactly one bio's Q2C past btt's, and none is left over as a request of its own.
    t = read_trace(DATA / f"sqlite-{mode}")
    e = t.events
    finals = int((((e["action"] & 0xFFFF) == ev.COMPLETE) & (e["bytes"] == 0)
                  & ((e["action"] >> ev.TC_SHIFT & ev.TC_FLUSH) == 0)).sum())
    ours, btt = match(e), match(_btt_view(t).events)
    assert finals > 0 and int((ours.bios.q2c > btt.bios.q2c).sum()) == finals
    assert (ours.bios.q2c >= btt.bios.q2c).all()
    assert int((ours.reqs.kind == 4).sum()) == 0     # OTHER
    assert analyze(t)["unmatched"] == {"bios_without_completion": 0, "completions_without_issue": 0}

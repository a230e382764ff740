"""Trace file formats: round trips, blkparse text against the binary it came from, and bad input."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from smartio.cli import main
from smartio.trace.formats import TraceFormatError, read_trace, write_blktrace, write_ours

DATA = Path(__file__).parent / "data" / "traces"
FIELDS = ("time", "sector", "bytes", "action", "pid", "device", "cpu", "error")
pytestmark = pytest.mark.timeout(60)


def _sorted(e: np.ndarray) -> np.ndarray:
    return e[np.lexsort((e["action"], e["sector"], e["time"]))]


def test_blkparse_text_reads_to_the_same_events_as_the_binary():
    text = read_trace(DATA / "sqlite-wal.blkparse.txt")
    binary = read_trace(DATA / "sqlite-wal")
    assert text.source_format == "blkparse" and binary.source_format == "blktrace"
    a, b = _sorted(text.events), _sorted(binary.events)
    for f in FIELDS:
        np.testing.assert_array_equal(a[f], b[f], err_msg=f)
    assert text.comms == binary.comms


def test_one_per_cpu_file_reads_the_whole_recording():
    whole = read_trace(DATA / "sqlite-delete")
    via_cpu1 = read_trace(DATA / "sqlite-delete.blktrace.1")
    assert len(whole) == len(via_cpu1) == 1776


def test_round_trips(tmp_path):
    t = read_trace(DATA / "sqlite-truncate")
    write_ours(t, tmp_path / "t.smtrace")
    write_blktrace(t, tmp_path / "t")
    for again in (read_trace(tmp_path / "t.smtrace"), read_trace(tmp_path / "t")):
        for f in FIELDS:
            # blktrace times are relative to the first event.
            want = t.events[f] - (t.events["time"][0] if f == "time" else 0)
            got = again.events[f] - (again.events["time"][0] if f == "time" else 0)
            np.testing.assert_array_equal(_sorted_field(again, got), _sorted_field(t, want), err_msg=f)
        assert again.comms == t.comms


def _sorted_field(t, values):
    e = t.events
    return values[np.lexsort((e["action"], e["sector"], e["time"]))]


@pytest.mark.skipif(subprocess.run(["which", "blkparse"], capture_output=True).returncode != 0,
                    reason="blkparse not installed (Debian package blktrace)")
def test_blkparse_reads_what_we_write(tmp_path):
    t = read_trace(DATA / "sqlite-persist.smtrace" if (DATA / "sqlite-persist.smtrace").exists()
                   else DATA / "sqlite-delete.smtrace")
    write_blktrace(t, tmp_path / "x")
    out = subprocess.run(["blkparse", "-i", "x"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert f"Events (7,0): {len(t)} entries" in out or f"{len(t)} entries" in out
    assert "Skips: 0 forward" in out


@pytest.mark.skipif(subprocess.run(["which", "blkparse"], capture_output=True).returncode != 0,
                    reason="blkparse not installed (Debian package blktrace)")
def test_events_on_cpu_1_only_still_read_by_blkparse_and_us(tmp_path):
    # blkparse looks for NAME.blktrace.0 first: a CPU without events gets an empty file, as with blktrace.
    t = read_trace(DATA / "sqlite-wal")
    t.events["cpu"] = 1
    paths = write_blktrace(t, tmp_path / "x")
    assert [p.stat().st_size == 0 for p in paths] == [True, False]
    out = subprocess.run(["blkparse", "-i", "x"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert f"{len(t)} entries" in out
    again = read_trace(tmp_path / "x")
    assert len(again) == len(t) and again.comms == t.comms


def _bad(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_truncated_blktrace_names_the_offset(tmp_path):
    data = (DATA / "sqlite-wal.blktrace.1").read_bytes()
    p = _bad(tmp_path, "cut.blktrace.0", data[:-20])
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert e.value.offset == len(data) - 48 and "truncated" in str(e.value)


def test_garbage_in_the_middle_names_the_offset(tmp_path):
    data = bytearray((DATA / "sqlite-wal.blktrace.1").read_bytes())
    data[4800:4848] = b"\xab" * 48
    p = _bad(tmp_path, "g.blktrace.0", bytes(data))
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert 4800 - 48 < e.value.offset <= 4800


def test_garbage_file_is_rejected(tmp_path):
    p = _bad(tmp_path, "noise", bytes(range(256)) * 40)
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert e.value.offset == 0


def test_big_endian_header_of_ours_is_rejected(tmp_path):
    data = bytearray((DATA / "sqlite-delete.smtrace").read_bytes())
    data[8:12] = bytes(reversed(data[8:12]))
    with pytest.raises(TraceFormatError) as e:
        read_trace(_bad(tmp_path, "be.smtrace", bytes(data)))
    assert e.value.offset == 8 and "big-endian" in str(e.value)


def test_byte_swapped_records_in_ours_are_rejected(tmp_path):
    t = read_trace(DATA / "sqlite-delete.smtrace")
    swapped = t.events.byteswap()
    data = bytearray((DATA / "sqlite-delete.smtrace").read_bytes())
    body = len(data) - len(t.events) * 48
    data[body:] = swapped.tobytes()
    with pytest.raises(TraceFormatError) as e:
        read_trace(_bad(tmp_path, "sw.smtrace", bytes(data)))
    assert e.value.offset == body


def test_byte_swapped_blktrace_reads_the_same_as_blkparse_does(tmp_path):
    # A big-endian machine's blktrace file is valid; blkparse reads it, so do we (not silently wrong).
    t = read_trace(DATA / "sqlite-wal.blktrace.0")
    data = (DATA / "sqlite-wal.blktrace.0").read_bytes()
    recs = []
    off = 0
    while off < len(data):
        rec = np.frombuffer(data, dtype=t.events.dtype, count=1, offset=off)
        plen = int(rec["pdu_len"][0])
        recs.append(rec.byteswap().tobytes() + data[off + 48:off + 48 + plen])
        off += 48 + plen
    p = _bad(tmp_path, "be.blktrace.0", b"".join(recs))
    be = read_trace(p)
    only0 = read_trace(DATA / "sqlite-wal")
    assert len(be) == int((only0.events["cpu"] == 0).sum())


def test_mixed_byte_order_is_an_error_with_offset(tmp_path):
    t = read_trace(DATA / "sqlite-delete.smtrace")
    write_blktrace(t, tmp_path / "m")
    p = tmp_path / "m.blktrace.0"
    data = bytearray(p.read_bytes())
    off = len(data) - 10 * 48
    data[off:off + 48] = np.frombuffer(bytes(data[off:off + 48]), dtype=t.events.dtype).byteswap().tobytes()
    (tmp_path / "mixed.blktrace.0").write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as e:
        read_trace(tmp_path / "mixed.blktrace.0")
    assert e.value.offset == off


def test_bad_blkparse_line_names_line_and_offset(tmp_path):
    lines = (DATA / "sqlite-wal.blkparse.txt").read_text().splitlines(keepends=True)
    lines[5] = "  7,0    0        6     0.000100000  1234  Q  WS banana\n"
    p = _bad(tmp_path, "bad.txt", "".join(lines).encode())
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert e.value.offset == sum(len(x.encode()) for x in lines[:5]) and "line 6" in str(e.value)


@pytest.mark.parametrize("content", [b"", b"SMIOTRC1\x10\x00", b"\x07\x74\x61\x65" + b"\0" * 30])
def test_cli_exit_code_2_for_bad_traces(tmp_path, capsys, content):
    p = _bad(tmp_path, "bad.blktrace.0" if content.startswith(b"\x07") else "bad", content)
    assert main(["trace", "analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert "offset" in err and str(p) in err


def test_cli_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["trace", "analyze", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


# --- numbers too large for the record fields are bad input, not a traceback -------------------------------------

_Q = "  8,0    0        1     0.000000000  1234  Q   R 100 + 8 [dd]\n"


@pytest.mark.parametrize("line", [
    "  8,0    0        2 99999999999999999999.000000000  1234  C   R 100 + 8 [0]\n",   # time past u64 ns
    "  8,0    0        2     0.000001000  99999999999  C   R 100 + 8 [0]\n",            # pid past u32
    "  8,0    0        2     0.000001000  1234  C   R 99999999999999999999999 + 8 [0]\n",  # sector past u64
    "  8,0    0        2     0.000001000  1234  C   R 100 + 9999999999 [0]\n",          # bytes past u32
    "  8,0    99999999999        2     0.000001000  1234  C   R 100 + 8 [0]\n",         # cpu past u32
    "  99999,0    0        2     0.000001000  1234  C   R 100 + 8 [0]\n",               # major past 12 bits
    "  8,0    0        2     0.000001000  1234  C   R 1" + "9" * 5000 + " + 8 [0]\n",   # Python's digit limit
], ids=["time", "pid", "sector", "bytes", "cpu", "major", "5000-digits"])
def test_too_large_number_in_blkparse_text_is_bad_input_naming_the_line(tmp_path, capsys, line):
    p = _bad(tmp_path, "big.txt", (_Q + line).encode())
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert e.value.offset == len(_Q) and "line 2" in str(e.value)
    assert main(["trace", "analyze", str(p)]) == 2
    assert "line 2" in capsys.readouterr().err


@pytest.mark.parametrize("events", [b"1e999", b"-1", b"2.5", b"99999999999999999999999999"],
                         ids=["infinite", "negative", "fraction", "huge"])
def test_bad_event_count_in_our_header_is_bad_input(tmp_path, capsys, events):
    hdr = b'{"events": ' + events + b', "comms": {}}'
    p = _bad(tmp_path, "bad.smtrace", b"SMIOTRC1" + len(hdr).to_bytes(4, "little") + hdr)
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert e.value.offset >= 0
    assert main(["trace", "analyze", str(p)]) == 2
    assert "offset" in capsys.readouterr().err


# --- tracefs text (trace-cmd report, cat trace) and compressed files ---------------------------------------------

# As Linux 6.1's include/trace/events/block.h prints them: block_bio ("%d,%d %s %llu + %u [%s]"), block_rq
# ("%d,%d %s %u (%s) %llu + %u [%s]") and block_rq_completion ("%d,%d %s (%s) %llu + %u [%d]"). A write queued by
# fio and issued by a kernel worker, a 16 KiB read, no block_getrq events.
TRACE_CMD = """\
cpus=2
             fio-1234  [001]   100.000001: block_bio_queue:      254,0 W 2048 + 8 [fio]
             fio-1234  [001]   100.000002: block_bio_queue:      254,0 W 2056 + 8 [fio]
             fio-1234  [001]   100.000004: block_rq_insert:      254,0 W 8192 () 2048 + 16 [fio]
    kworker/1:1H-44    [001]   100.000010: block_rq_issue:       254,0 W 8192 () 2048 + 16 [kworker/1:1H]
          <idle>-0     [001]   100.000210: block_rq_complete:    254,0 W () 2048 + 16 [0]
 systemd-journal-412   [000]   100.001000: block_bio_queue:      254,0 RA 4096 + 32 [systemd-journal]
 systemd-journal-412   [000]   100.001005: block_rq_issue:       254,0 RA 16384 () 4096 + 32 [systemd-journal]
          <idle>-0     [000]   100.001105: block_rq_complete:    254,0 RA () 4096 + 32 [0]
             fio-1234  [001]   100.002000: sched_switch:         prev_comm=fio prev_pid=1234 prev_prio=120
"""
CAT_TRACE = """\
# tracer: nop
#
# entries-in-buffer/entries-written: 8/8   #P:2
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
             fio-1234    [001] .....   100.000001: block_bio_queue: 254,0 W 2048 + 8 [fio]
             fio-1234    [001] .....   100.000002: block_bio_queue: 254,0 W 2056 + 8 [fio]
             fio-1234    [001] ...1.   100.000004: block_rq_insert: 254,0 W 8192 () 2048 + 16 [fio]
    kworker/1:1H-44      [001] ...1.   100.000010: block_rq_issue: 254,0 W 8192 () 2048 + 16 [kworker/1:1H]
          <idle>-0       [001] d.h1.   100.000210: block_rq_complete: 254,0 W () 2048 + 16 [0]
 systemd-journal-412     [000] .....   100.001000: block_bio_queue: 254,0 RA 4096 + 32 [systemd-journal]
 systemd-journal-412     [000] ...1.   100.001005: block_rq_issue: 254,0 RA 16384 () 4096 + 32 [systemd-journal]
          <idle>-0       [000] d.h1.   100.001105: block_rq_complete: 254,0 RA () 4096 + 32 [0]
"""


@pytest.mark.parametrize("text", [TRACE_CMD, CAT_TRACE], ids=["trace-cmd-report", "cat-trace"])
def test_tracefs_text_is_read_and_paired_without_getrq(tmp_path, text):
    from smartio.trace import events as ev
    from smartio.trace.analyze import analyze

    p = tmp_path / "block.txt"
    p.write_text(text)
    t = read_trace(p)
    assert t.source_format == "tracefs" and len(t) == 8
    e = t.events
    assert e["time"][0] == 100_000_001_000 and e["device"][0] == ev.kdev(254, 0) and e["cpu"][0] == 1
    assert [ev.ACTION_LETTER[int(a) & 0xFFFF] for a in e["action"]] == list("QQIDCQDC")
    assert e["bytes"].tolist() == [4096, 4096, 8192, 8192, 8192, 16384, 16384, 16384]
    assert t.comms[1234] == "fio" and t.comms[44] == "kworker/1:1H" and t.comms[412] == "systemd-journal"
    mx = analyze(t)
    # Both write bios reach the request that carried them (btt's Q2C), and the write is fio's, not the worker's.
    assert mx["write"]["q2c_ms"]["n"] == 2 and mx["write"]["q2c_ms"]["max"] == pytest.approx(0.209)
    assert mx["read"]["q2c_ms"]["n"] == 1 and mx["read"]["q2c_ms"]["max"] == pytest.approx(0.105)
    assert mx["unmatched"] == {"bios_without_completion": 0, "completions_without_issue": 0}
    procs = {p["comm"]: p for p in mx["processes"]}
    assert procs["fio"]["writes"] == 1 and "kworker/1:1H" not in procs
    assert procs["systemd-journal"]["reads"] == 1


def test_tracefs_text_from_a_newer_kernel_with_ioprio_is_read(tmp_path):
    # 6.x kernels after 6.1 print the I/O priority between the size and the command.
    p = tmp_path / "new.txt"
    p.write_text("  fio-7  [000] ..... 5.000000100: block_rq_issue: 8,0 WS 4096 () 64 + 8 be,0,4 [fio]\n"
                 "  <idle>-0  [000] d.h1. 5.000000900: block_rq_complete: 8,0 WS () 64 + 8 be,0,4 [0]\n")
    t = read_trace(p)
    assert t.events["sector"].tolist() == [64, 64] and t.events["time"].tolist() == [5_000_000_100, 5_000_000_900]


def test_malformed_tracefs_text_names_the_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text(TRACE_CMD.replace("254,0 W () 2048 + 16 [0]", "254,0 W () 2048 + [0]"))
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert "line 6" in str(e.value) and e.value.offset == TRACE_CMD.index("          <idle>-0     [001]   100.000210")


def _compress(kind: str, data: bytes) -> bytes:
    import gzip
    import lzma

    import zstandard

    compress: dict[str, Callable[[bytes], bytes]] = {
        "gz": gzip.compress, "xz": lzma.compress, "zst": zstandard.ZstdCompressor().compress}
    return compress[kind](data)


@pytest.mark.parametrize("kind", ["gz", "xz", "zst"])
@pytest.mark.parametrize("name", ["sqlite-wal.blkparse.txt", "sqlite-wal.blktrace.0", "sqlite-delete.smtrace",
                                  "tracefs"])
def test_compressed_traces_read_as_their_plain_files(tmp_path, kind, name):
    plain = tmp_path / ("block.txt" if name == "tracefs" else name)   # alone: no sibling per-CPU files
    plain.write_bytes(TRACE_CMD.encode() if name == "tracefs" else (DATA / name).read_bytes())
    packed = tmp_path / f"{plain.name}.{kind}"
    packed.write_bytes(_compress(kind, plain.read_bytes()))
    want, got = read_trace(plain), read_trace(packed)
    assert got.source_format == want.source_format
    np.testing.assert_array_equal(got.events, want.events)
    assert got.comms == want.comms


def test_compressed_per_cpu_blktrace_files_are_read(tmp_path):
    for cpu in (0, 1):
        src = DATA / f"sqlite-wal.blktrace.{cpu}"
        (tmp_path / f"w.blktrace.{cpu}.gz").write_bytes(_compress("gz", src.read_bytes()))
    np.testing.assert_array_equal(read_trace(tmp_path / "w").events, read_trace(DATA / "sqlite-wal").events)


@pytest.mark.parametrize("kind", ["gz", "xz", "zst"])
def test_truncated_compressed_file_is_exit_2(tmp_path, capsys, kind):
    packed = _compress(kind, (DATA / "sqlite-wal.blkparse.txt").read_bytes())
    p = tmp_path / f"t.txt.{kind}"
    p.write_bytes(packed[:len(packed) // 2])
    assert main(["trace", "analyze", str(p)]) == 2
    assert "compressed but cannot be decompressed" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--html", "--json"])
@pytest.mark.parametrize("where", ["afile/out", "adir"])
def test_analyze_output_paths_checked_before_reading(tmp_path, capsys, flag, where):
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "adir").mkdir()
    out = tmp_path / where
    assert main(["trace", "analyze", str(DATA / "sqlite-delete.smtrace"), flag, str(out)]) == 2
    captured = capsys.readouterr()
    assert f"`{flag} {out}`" in captured.err and captured.out == ""

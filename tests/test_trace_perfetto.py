"""Perfetto traces: the same figures as the tracefs text of the same recording, UFS command latency per tag, sync
calls, lost events and the clock, and clear errors for traces without block events or with broken packets.

The Perfetto files are written here with the official protos (the `perfetto` package's perfetto_trace_pb2), never
with smartio's reader's own idea of the format.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from smartio.cli import main
from smartio.trace import events as ev
from smartio.trace.analyze import analyze
from smartio.trace.formats import TraceFormatError, read_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the perfetto package (pip install perfetto) holds the official protos")
DATA = Path(__file__).parent / "data" / "traces"
TEXT = DATA / "sqlite-wal.tracefs.txt.gz"   # recorded by tests/data/traces/make_tracefs_text.py
pytestmark = pytest.mark.timeout(120)

# The tracefs text's event line, as `cat trace` prints it (the test's own reading, not smartio's).
LINE = re.compile(r"\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<sec>\d+)\.(?P<frac>\d+):\s+"
                  r"(?P<event>\w+):\s+(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>[A-Z]+)\s+(?:(?P<bytes>\d+)\s+)?"
                  r"(?:\((?P<cmd>[^)]*)\)\s+)?(?P<sector>\d+)\s+\+\s+(?P<nsect>\d+)(?:\s+\S+)?\s+\[(?P<tail>[^\]]*)\]$")
BIO = {"block_bio_queue", "block_bio_backmerge", "block_bio_frontmerge", "block_getrq"}


def _text_events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append(m.groupdict())
    return out


def _ftrace_event(e: dict) -> Any:
    fe = pb.FtraceEvent(timestamp=int(e["sec"]) * 10**9 + int(e["frac"].ljust(9, "0")), pid=int(e["pid"]))
    name = "block_rq_issue" if e["event"] == "block_rq_merge" else e["event"]
    body = getattr(fe, name)
    body.dev = ev.kdev(int(e["maj"]), int(e["min"]))
    body.sector, body.nr_sector, body.rwbs = int(e["sector"]), int(e["nsect"]), e["rwbs"]
    if name in BIO or name in ("block_rq_issue", "block_rq_insert"):
        body.comm = e["tail"]
    if name in ("block_rq_issue", "block_rq_insert"):
        body.bytes = int(e["bytes"] or 0)
        body.cmd = e["cmd"] or ""
    if name == "block_rq_complete":
        body.error = int(e["tail"])
    return fe


def perfetto_from_text(text: str, *, bundle: int = 50, compress_every: int = 0, lost: int = 0) -> bytes:
    """A Perfetto trace of the text's block events: a process tree first, bundles of up to `bundle` events of one
    CPU, interleaved between CPUs as traced writes them (so the file is not in time order), ftrace stats at the start
    and the end (`lost` overruns on CPU 1), and, with compress_every, every that many packets deflated into one
    compressed_packets packet."""
    events = _text_events(text)
    packets = [pb.TracePacket(process_tree=pb.ProcessTree(threads=[
        pb.ProcessTree.Thread(tid=pid, name=comm) for pid, comm in
        dict.fromkeys((int(e["pid"]), e["comm"].strip()) for e in events if int(e["pid"]) > 0)]))]
    for phase, overrun in ((pb.FtraceStats.START_OF_TRACE, 5), (pb.FtraceStats.END_OF_TRACE, 5 + lost)):
        packets.append(pb.TracePacket(ftrace_stats=pb.FtraceStats(phase=phase, cpu_stats=[
            pb.FtraceCpuStats(cpu=0, overrun=2), pb.FtraceCpuStats(cpu=1, overrun=overrun)])))
    stats_end = packets.pop()
    by_cpu: dict[int, list[dict]] = {}
    for e in events:
        by_cpu.setdefault(int(e["cpu"]), []).append(e)
    chunks = {cpu: [es[i:i + bundle] for i in range(0, len(es), bundle)] for cpu, es in by_cpu.items()}
    for k in range(max(len(c) for c in chunks.values())):
        for cpu in sorted(chunks, reverse=True):   # CPU 1's bundle before CPU 0's: out of time order
            if k < len(chunks[cpu]):
                packets.append(pb.TracePacket(trusted_packet_sequence_id=1, ftrace_events=pb.FtraceEventBundle(
                    cpu=cpu, event=[_ftrace_event(e) for e in chunks[cpu][k]])))
    packets.append(stats_end)
    if compress_every:
        grouped = []
        for i in range(0, len(packets), compress_every):
            inner = pb.Trace(packet=packets[i:i + compress_every]).SerializeToString()
            grouped.append(pb.TracePacket(compressed_packets=zlib.compress(inner)))
        packets = grouped
    return pb.Trace(packet=packets).SerializeToString()


def _figures(mx: dict) -> dict:
    return {k: v for k, v in mx.items() if k not in ("format", "source", "clock", "lost_events")}


@pytest.fixture(scope="module")
def text() -> str:
    return gzip.decompress(TEXT.read_bytes()).decode()


@pytest.mark.parametrize("variant", ["plain", "gzip", "compressed_packets"])
def test_perfetto_trace_gives_the_figures_of_the_tracefs_text_it_was_written_from(tmp_path, text, variant):
    blob = perfetto_from_text(text, compress_every=7 if variant == "compressed_packets" else 0)
    path = tmp_path / ("trace.perfetto-trace.gz" if variant == "gzip" else "trace.pftrace")
    path.write_bytes(gzip.compress(blob) if variant == "gzip" else blob)
    from_text, from_pf = read_trace(TEXT), read_trace(path)
    assert from_text.source_format == "tracefs" and from_pf.source_format == "perfetto"
    assert len(from_pf) == len(from_text) > 1500
    for f in ("time", "sector", "bytes", "action", "pid", "device", "cpu", "error"):
        np.testing.assert_array_equal(from_pf.events[f], from_text.events[f], err_msg=f)
    assert from_pf.comms == from_text.comms
    a, b = analyze(from_text), analyze(from_pf)
    assert _figures(a) == _figures(b)
    assert a["write"]["q2c_ms"]["n"] > 100 and a["read"]["d2c_ms"]["n"] > 100 and a["flush"]["requests"] > 10
    assert b["clock"] == "boot" and b["lost_events"] == 0 and b["format"] == "perfetto"


def test_lost_events_come_from_the_ftrace_stats(tmp_path, text):
    path = tmp_path / "lost.perfetto-trace"
    path.write_bytes(perfetto_from_text(text, lost=17))
    mx = analyze(read_trace(path))
    assert mx["lost_events"] == 17


def _ufs(ts: int, tag: int, send: bool, opcode: int = 0x28, new_style: bool = False) -> Any:
    fe = pb.FtraceEvent(timestamp=ts, pid=0)
    u = fe.ufshcd_command
    u.dev_name, u.tag, u.opcode, u.lba, u.transfer_len = "1d84000.ufshc", tag, opcode, 1000 + tag, 4096
    if new_style:
        u.str_t = 0 if send else 1
    else:
        u.str = "send_req" if send else "complete_rsp"
    return fe


def _block(ts: int, name: str, sector: int, rwbs: str = "R", comm: str = "app") -> Any:
    fe = pb.FtraceEvent(timestamp=ts, pid=321)
    body = getattr(fe, name)
    body.dev, body.sector, body.nr_sector, body.rwbs = ev.kdev(8, 0), sector, 8, rwbs
    if name != "block_rq_complete":
        body.comm = comm
    return fe


def test_ufs_commands_report_latency_per_tag(tmp_path):
    t0 = 10**9
    # Tag 3: two reads of 100 and 300 µs; tag 5: one write of 1 ms, its completion in the newer enum form; tag 7:
    # a send whose completion never came before the next send (unpaired), then a 50 µs read.
    events = [_block(t0, "block_rq_issue", 64), _block(t0 + 500_000, "block_rq_complete", 64),
              _ufs(t0 + 10_000, 3, True), _ufs(t0 + 110_000, 3, False),
              _ufs(t0 + 20_000, 5, True, 0x2A, new_style=True), _ufs(t0 + 1_020_000, 5, False, 0x2A, new_style=True),
              _ufs(t0 + 200_000, 3, True), _ufs(t0 + 500_000, 3, False),
              _ufs(t0 + 30_000, 7, True), _ufs(t0 + 40_000, 7, True), _ufs(t0 + 90_000, 7, False)]
    trace = pb.Trace(packet=[pb.TracePacket(ftrace_events=pb.FtraceEventBundle(cpu=0, event=events))])
    path = tmp_path / "ufs.pftrace"
    path.write_bytes(trace.SerializeToString())
    mx = analyze(read_trace(path))
    u = mx["ufs"]
    assert u["hosts"] == ["1d84000.ufshc"] and u["commands"] == 4 and u["unpaired_sends"] == 1
    assert u["by_tag"]["3"]["n"] == 2 and u["by_tag"]["3"]["mean"] == pytest.approx(0.2)
    assert u["by_tag"]["3"]["max"] == pytest.approx(0.3)
    assert u["by_tag"]["5"]["max"] == pytest.approx(1.0) and u["by_tag"]["7"]["max"] == pytest.approx(0.05)
    assert u["by_opcode"]["READ_10"]["n"] == 3 and u["by_opcode"]["WRITE_10"]["bytes"] == 4096
    assert mx["read"]["d2c_ms"]["max"] == pytest.approx(0.5)   # the block layer's, beside
    text = main_output(path)
    assert "UFS commands 4 on 3 tags" in text and "READ_10" in text and "clock boot; lost events" in text
    assert main(["trace", "analyze", str(path), "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "UFS commands (4 on 3 tags)" in page and "<th>tag 3</th><td>2</td>" in page


def main_output(path: Path) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["trace", "analyze", str(path)]) == 0
    return buf.getvalue()


def test_ext4_and_f2fs_sync_calls_are_paired_per_thread(tmp_path):
    t0 = 5 * 10**9

    def sync(ts, pid, name, **fields):
        fe = pb.FtraceEvent(timestamp=ts, pid=pid)
        getattr(fe, name).CopyFrom(getattr(pb, "".join(w.capitalize() for w in name.split("_")) + "FtraceEvent")(
            dev=ev.kdev(8, 2), **fields))
        return fe

    events = [_block(t0, "block_rq_issue", 8, "WS"), _block(t0 + 100_000, "block_rq_complete", 8, "WS"),
              sync(t0, 100, "ext4_sync_file_enter", ino=12, datasync=1),
              sync(t0 + 1_000, 101, "f2fs_sync_file_enter", ino=40),
              sync(t0 + 2_000_000, 100, "ext4_sync_file_exit", ino=12, ret=0),
              sync(t0 + 3_000_000, 100, "ext4_sync_file_enter", ino=13, datasync=0),
              sync(t0 + 7_000_000, 100, "ext4_sync_file_exit", ino=13, ret=-5),
              sync(t0 + 4_001_000, 101, "f2fs_sync_file_exit", ino=40, need_cp=1, datasync=0, ret=0)]
    tree = pb.ProcessTree(threads=[pb.ProcessTree.Thread(tid=100, name="sqlite"), pb.ProcessTree.Thread(
        tid=101, name="kworker")])
    trace = pb.Trace(packet=[pb.TracePacket(process_tree=tree),
                             pb.TracePacket(ftrace_events=pb.FtraceEventBundle(cpu=1, event=events))])
    path = tmp_path / "sync.perfetto-trace"
    path.write_bytes(trace.SerializeToString())
    sc = analyze(read_trace(path))["sync_calls"]
    assert sc["ext4"]["calls"] == 2 and sc["ext4"]["fdatasync"] == 1 and sc["ext4"]["errors"] == 1
    assert sc["ext4"]["latency_ms"]["max"] == pytest.approx(4.0) and sc["ext4"]["latency_ms"]["p50"] == pytest.approx(3)
    assert sc["ext4"]["processes"] == [{"pid": 100, "comm": "sqlite", "calls": 2}]
    assert sc["f2fs"]["calls"] == 1 and sc["f2fs"]["checkpoints"] == 1
    assert sc["f2fs"]["latency_ms"]["max"] == pytest.approx(4.0)


def test_block_io_start_and_done_stand_in_only_without_block_rq_events(tmp_path):
    def io(ts, name, sector):
        fe = pb.FtraceEvent(timestamp=ts, pid=9)
        body = getattr(fe, name)
        body.dev, body.sector, body.nr_sector, body.rwbs, body.comm = ev.kdev(8, 0), sector, 8, "R", "app"
        return fe

    only_io = [io(1000, "block_io_start", 64), io(9000, "block_io_done", 64)]
    both = only_io + [_block(1000, "block_rq_issue", 64), _block(9000, "block_rq_complete", 64)]
    for name, events, want in (("io", only_io, 1), ("both", both, 1)):
        path = tmp_path / f"{name}.pftrace"
        path.write_bytes(pb.Trace(packet=[pb.TracePacket(ftrace_events=pb.FtraceEventBundle(
            cpu=0, event=events))]).SerializeToString())
        t = read_trace(path)
        mx = analyze(t)
        assert len(t) == 2 and mx["read"]["requests"] == want and mx["read"]["d2c_ms"]["max"] == pytest.approx(0.008)


def test_trace_without_block_events_names_what_to_enable(tmp_path, capsys):
    fe = pb.FtraceEvent(timestamp=1, pid=1)
    fe.sched_switch.prev_comm = "init"
    path = tmp_path / "sched.perfetto-trace"
    path.write_bytes(pb.Trace(packet=[pb.TracePacket(ftrace_events=pb.FtraceEventBundle(
        cpu=0, event=[fe]))]).SerializeToString())
    assert main(["trace", "analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no block events" in err and str(path) in err and 'ftrace_events: "block/block_rq_issue"' in err
    assert 'name: "linux.ftrace"' in err


@pytest.mark.parametrize("cut", ["truncated", "garbage", "bad_blob"])
def test_broken_perfetto_traces_are_bad_input_with_the_offset(tmp_path, text, cut):
    blob = perfetto_from_text(text[:20000])
    if cut == "truncated":
        blob = blob[:len(blob) - 10]
    elif cut == "garbage":
        blob = blob[:300] + b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" + blob[300:]
    else:
        blob += pb.Trace(packet=[pb.TracePacket(compressed_packets=b"not deflate")]).SerializeToString()
    path = tmp_path / "broken.pftrace"
    path.write_bytes(blob)
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert str(path) in str(e.value) and e.value.offset > 0


def test_c_and_python_readers_of_tracefs_text_agree_line_by_line(tmp_path, text):
    # The C reader takes the usual lines and leaves the rest to tracefs_text_line, the reference reading of one
    # line: on every line C takes, both must give the same event and command name.
    from smartio.trace.formats import tracefs_text_line

    lines = [x for x in text.splitlines(keepends=True) if "block_" in x]
    # Odd but valid forms: a tgid column, no flags column, ns timestamps, a negative error, CRLF, names with
    # spaces and dashes, a zero-size preflush.
    lines += ["  jbd2/sda1-8-123 (  123) [001] d..1. 5.000001: block_rq_complete: 7,0 WS () 64 + 8 be,0,4 [-5]\r\n",
              "  kworker/u8:2-55   [000]   7.123456789: block_rq_issue: 7,0 FWFS 0 () 0 + 0 [kworker/u8:2]\n",
              "  a b-c-77 [001] ..... 8.5: block_bio_queue: 7,0 RA 80 + 8 [a b-c]\n",
              "  <...>-78 [001] ..... 8.6: block_rq_requeue: 7,0 W () 80 + 8 [0]\n"]
    path = tmp_path / "all.txt"
    path.write_text("".join(lines))
    got = read_trace(path)
    want: list[tuple] = []
    comms: dict[int, str] = {}
    for i, line in enumerate(lines):
        got_line = tracefs_text_line(path, 0, i + 1, line.encode())
        assert isinstance(got_line, tuple)
        row, comm = got_line
        want.append(row)
        if comm is not None:
            comms.setdefault(row[6], comm)
    want_events = np.array(want, dtype=ev.EVENT_DTYPE)
    want_events = want_events[np.argsort(want_events["time"], kind="stable")]
    for f in ("time", "sector", "bytes", "action", "pid", "device", "cpu", "error"):
        np.testing.assert_array_equal(got.events[f], want_events[f], err_msg=f)
    assert got.comms == comms and comms[123] == "jbd2/sda1-8" and comms[77] == "a b-c" and 78 not in comms
    from smartio.trace import native

    with native.Collector() as col:   # C itself took every one of these lines
        assert col.parse_text(path.read_bytes(), 0, True)[0] == 0 and col.info()["events"] == len(lines)


def test_c_reader_takes_a_damaged_line_only_as_the_python_reader_reads_it(tmp_path):
    # Every one-character deletion and every inserted space or dash, in three kinds of line: where C takes the
    # line as an event, tracefs_text_line must read the same event; where C skips it, so must Python; the lines C
    # leaves to Python are Python's alone.
    from smartio.trace import native
    from smartio.trace.formats import tracefs_text_line

    base = ["  jbd2/sda1-8-123 (  123) [001] d..1. 5.000001: block_rq_complete: 7,0 WS () 64 + 8 be,0,4 [-5]",
            "         python3-24630   [000] .....  1040.250082: block_rq_issue: 7,0 RM 1024 () 8742 + 2 be,0,4 [py]",
            "             fio-1234  [001]   100.000001: block_bio_queue:      254,0 W 2048 + 8 [fio]"]
    variants = {line[:i] + line[i + 1:] for line in base for i in range(len(line))}
    variants |= {line[:i] + c + line[i:] for line in base for i in range(len(line)) for c in " -"}
    taken = 0
    path = tmp_path / "x.txt"
    for line in sorted(variants):
        raw = (line + "\n").encode()
        with native.Collector() as col:
            rc, _ = col.parse_text(raw, 0, True)
            events = col.take_events() if rc == 0 else None
            names = {int(c["pid"]): bytes(c["name"]).decode() for c in col.comms()}
        if rc == 1:
            continue   # left to Python
        py: object
        try:
            py = tracefs_text_line(path, 0, 1, raw)
        except TraceFormatError:
            py = "error"
        assert events is not None
        if len(events) == 0:
            assert py is None, line
            continue
        taken += 1
        assert isinstance(py, tuple), line
        row, comm = py
        assert tuple(events[0].tolist()) == row, line
        assert names == ({row[6]: comm} if comm is not None else {}), line
    assert taken > 200


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_lines_and_packets_cut_between_pieces_read_whole(tmp_path, text, monkeypatch, piece):
    # The readers get the file in pieces (8 MiB in use); tiny pieces cut every line and packet somewhere.
    from smartio.trace import streams

    short = text[:text.index("\n", 30000) + 1]
    (tmp_path / "t.txt").write_text(short)
    (tmp_path / "t.pftrace").write_bytes(perfetto_from_text(short, compress_every=3))
    whole_text, whole_pf = read_trace(tmp_path / "t.txt"), read_trace(tmp_path / "t.pftrace")
    monkeypatch.setattr(streams, "PIECE", piece)
    for path, whole in ((tmp_path / "t.txt", whole_text), (tmp_path / "t.pftrace", whole_pf)):
        cut = read_trace(path)
        np.testing.assert_array_equal(cut.events, whole.events)
        assert cut.comms == whole.comms

"""`smartio bench qasio` and `compare --experiment qasio` without a VM: seed 001's M1-M5 as system calls, the
scaling, the latency summary, the module's counters, the tunables per --dependency, the tables, and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from smartio.cli import main
from smartio.errors import UsageError
from smartio.iosched.debugfs import parse_qasio_log, qasio_counters as parse_counters
from smartio.qasio import compare as qa, report
from smartio.qasio.run import dependency_tunables, summary
from smartio.qasio.workload import (
    PAPER,
    Params,
    counter_delta,
    explain_waits,
    ops,
    parse_benchmarks,
    percentile,
    setup_ops,
    summarise,
)

STATS = """\
rt_write inserted=0 merged=0 dispatched=0 completed=0 boosted=0
total inserted=812 merged=40 dispatched=772 completed=772
qasio_meta detected=12 found_queued=5 found_dispatched=4 not_found=3 pending=0 boosted=5
qasio_data detected=2 found_queued=0 found_dispatched=1 not_found=1 pending=0 boosted=0
qasio_sync detected=30 found_queued=20 found_dispatched=6 not_found=3 pending=1 boosted=21
qasio_discard async_inserted=0
"""


def test_paper_sizes_at_scale_one() -> None:
    """--scale 1 --count-scale 1 is section 6.1 exactly: 500 x (creat, 4KB write, fsync, close) for M1, ..."""
    p = Params(1.0, 1.0)
    m1 = Counter(o.call for o in ops("m1", p))
    assert m1 == {"creat": 500, "write": 500, "fsync": 500, "close": 500}
    assert {o.size for o in ops("m1", p) if o.call == "write"} == {4096}
    m2 = list(ops("m2", p))
    assert Counter(o.call for o in m2)["creat"] == 200
    assert {o.size for o in m2 if o.call == "write"} == {1 << 20}       # one write() of 1MB
    m3 = Counter(o.call for o in ops("m3", p))
    assert m3 == {"creat": 1, "write": 300 * 1024, "close": 1}         # 1KB writes up to 300MB
    m4 = list(ops("m4", p))
    assert [o.call for o in m4[:4]] == ["truncate", "open", "write", "close"] and len(m4) == 4 * 500
    assert {o.size for o in m4 if o.call == "write"} == {2 << 20}
    assert all(not o.timed for o in setup_ops("m4", p))                # "created manually before the execution"
    assert [o.call for o in ops("m5", p)] == ["creat", "write", "fsync", "close"]
    z = p.sizes
    assert z["background"] == PAPER["background"] == z["m5_big"] == 8 << 30
    wb = p.writeback()
    assert wb["dirty_expire_centisecs"] == 200                           # Android's 2 s
    assert wb["dirty_background_bytes"] == round(0.05 * (2 << 30) / 4096) * 4096


def test_scaling_keeps_the_pages_that_make_the_dependency() -> None:
    p = Params(0.1, 0.02)
    z = p.sizes
    assert z["m1_file"] == 4096 and z["m3_write"] == 1024 and z["m5_file"] == 4096
    assert z["m1_iterations"] == 10 and z["m2_iterations"] == 4 and z["m4_iterations"] == 10
    assert z["m2_file"] % 4096 == 0 and z["m2_file"] == 26 * 4096   # 0.1 MB to whole pages
    assert z["m3_total"] == round(300 * (1 << 20) * 0.002 / 4096) * 4096
    assert Params(1e-9, 1e-9).sizes["m2_iterations"] == 2               # never fewer than 2 iterations
    for bad in (0, 2, float("nan")):
        with pytest.raises(UsageError, match="--scale"):
            Params(bad, 0.1)


def test_percentile_and_summary() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5                          # numpy's linear interpolation
    assert percentile(list(range(101)), 99) == 99
    s = summarise({"creat": [0.001, 0.003], "fsync": [0.5]})
    assert s["creat"] == {"n": 2, "avg_ms": 2.0, "p99_ms": 2.98, "max_ms": 3.0}
    assert s["fsync"]["max_ms"] == 500.0 and "write" not in s


def test_counters_parse_and_delta() -> None:
    after = parse_counters(STATS)
    assert set(after) == {"meta", "data", "sync", "discard"}
    assert after["sync"]["boosted"] == 21 and after["discard"] == {"async_inserted": 0}
    before = parse_counters(STATS.replace("boosted=21", "boosted=1").replace("pending=1", "pending=0"))
    d = counter_delta(before, after)
    assert d["sync"]["boosted"] == 20 and d["sync"]["pending"] == 1 and d["meta"]["boosted"] == 0


def test_dependency_tunables() -> None:
    assert dependency_tunables("none") == {"qasio_boost": 0, "qasio_meta": 0, "qasio_data": 0, "qasio_sync": 0}
    assert dependency_tunables("all") == {"qasio_boost": 1, "qasio_meta": 1, "qasio_data": 1, "qasio_sync": 1}
    assert dependency_tunables("data") == {"qasio_boost": 1, "qasio_meta": 0, "qasio_data": 1, "qasio_sync": 0}
    assert dependency_tunables("discard") == {"qasio_boost": 1, "qasio_meta": 0, "qasio_data": 0, "qasio_sync": 0}
    with pytest.raises(UsageError):
        dependency_tunables("jcommit")


def _run(total: float, creat_max: float, bg: float, boosted: int) -> dict:
    counters = parse_counters(STATS.replace("boosted=21", f"boosted={boosted}"))
    return {"calls": {"creat": {"n": 10, "avg_ms": creat_max / 4, "p99_ms": creat_max * 0.9, "max_ms": creat_max},
                      "fsync": {"n": 10, "avg_ms": 50.0, "p99_ms": 90.0, "max_ms": 100.0},
                      "write": {"n": 10, "avg_ms": 0.1, "p99_ms": 0.2, "max_ms": 0.3}},
            "total_s": total, "background": {"bytes": 1, "runtime_s": 1.0, "mb_per_s": bg},
            "device_write_mb_per_s": bg, "counters": counters}


def _doc(runs: list[dict], dependency: str | None) -> dict:
    p = Params(0.1, 0.02)
    return {"settings": {"repeats": len(runs), "dependency": dependency, "scale": 0.1, "count_scale": 0.02,
                         "sizes": p.sizes, "writeback": p.writeback()},
            "target": {"description": "directory /mnt/t (ext4 on /dev/vda)"}, "scheduler": "smartio",
            "kernel": "6.1.0-56-cloud-amd64", "fio_version": "fio-3.33", "notes": [],
            "results": {"benchmarks": {"m1": summary(runs)}}}


def test_bench_report_and_repeats() -> None:
    doc = _doc([_run(10.0, 800.0, 2.0, 21), _run(12.0, 900.0, 2.2, 11)], "all")
    m1 = doc["results"]["benchmarks"]["m1"]
    assert m1["calls"]["creat"]["n"] == 20 and m1["calls"]["creat"]["max_ms"] == 900.0
    assert m1["boosted"]["sync"] == 32 and m1["total_s"]["n"] == 2 and m1["total_s"]["ci95"][0] < 11
    text = report.render_bench(doc)
    assert "M1" in text and "creat" in text and "sync=32" in text and "dirty_expire_centisecs=200" in text


def test_compare_tables_and_summary_line() -> None:
    runs = {"smartio:none": _doc([_run(20.0, 1000.0, 2.0, 0)], "none"),
            "smartio:all": _doc([_run(4.0, 30.0, 1.8, 21)], "all"),
            "smartio:meta": _doc([_run(8.0, 40.0, 1.9, 5)], "meta"),
            "mq-deadline": _doc([_run(18.0, 700.0, 2.1, 0)], None)}
    doc = {"runs": runs, "plan": json.loads(qa.QasioPlan(runs=tuple(runs), benchmarks=("m1",)).to_json()),
           "profile": {"name": "s5-emmc", "queue_depth": 2, "time_scale": 10.0}, "kernel": "6.1.0"}
    text = report.render_compare(doc)
    assert "Table 2" in text and "Figure 8" in text and "1435.54" in text     # the paper's M1 creat max
    line = report.summary_line(doc)
    kv = dict(x.split("=") for x in line.split())
    assert kv["m1_creat_max_none_ms"] == "1000.00" and kv["m1_creat_max_all_ms"] == "30.00"
    assert kv["m1_total_reduction_pct"] == "80.0" and kv["bg_throughput_loss_pct"] == "10.0"
    assert kv["best_other_m1_creat_max_ms"] == "700.00" and kv["boosted"] == "26"   # meta 5 + sync 21


def test_table2_per_setting_of_the_tunables() -> None:
    """Runs that carry tunables (`smartio:all:async_depth=960`) make a Table 2 of their own; the summary line takes
    the module's defaults if both NONE and ALL ran there, else the first setting that has both, and says which."""
    deep = "async_depth=960"
    runs = {"smartio:none": _doc([_run(20.0, 1000.0, 2.0, 0)], "none"),
            f"smartio:none:{deep}": _doc([_run(30.0, 5000.0, 2.0, 0)], "none"),
            f"smartio:all:{deep}": _doc([_run(5.0, 50.0, 1.9, 7)], "all"),
            "kyber": _doc([_run(18.0, 700.0, 2.1, 0)], None)}
    doc = {"runs": runs, "plan": json.loads(qa.QasioPlan(runs=tuple(runs), benchmarks=("m1",)).to_json()),
           "profile": {"name": "s5-emmc", "queue_depth": 2, "time_scale": 10.0}, "kernel": "6.1.0"}
    assert report.settings(runs) == {"": {"none": "smartio:none"},
                                     deep: {"none": f"smartio:none:{deep}", "all": f"smartio:all:{deep}"}}
    assert report.table2_pair(runs) == (deep, f"smartio:none:{deep}", f"smartio:all:{deep}")
    text = report.render_compare(doc)
    assert text.count("Table 2:") == 2 and "smartio with async_depth=960 with boosting off" in text
    kv = dict(x.split("=", 1) for x in report.summary_line(doc).split())
    assert kv["setting"] == deep and kv["m1_creat_max_none_ms"] == "5000.00" and kv["m1_creat_max_all_ms"] == "50.00"
    want = sum(sum(b["boosted"].values()) for b in runs[f"smartio:all:{deep}"]["results"]["benchmarks"].values())
    assert want > 0 and report.summary_line(doc).split()[-1] == f"boosted={want}"
    runs["smartio:all"] = _doc([_run(4.0, 30.0, 1.8, 21)], "all")
    assert report.table2_pair(runs) == ("", "smartio:none", "smartio:all")


def test_plan_and_runs_parse() -> None:
    assert qa.parse_runs("smartio:none,smartio:all,bfq") == ("smartio:none", "smartio:all", "bfq")
    for bad in ("smartio", "smartio:jcommit", "bfq:all", "cfq", "bfq,bfq", "smartio:async_depth=96",
                "smartio:all:profile", "smartio:all:async_depth=x", "none:nr=1"):
        with pytest.raises(UsageError):
            qa.parse_runs(bad)
    # A run may carry tunables, written after switching (e.g. a deeper async share, where async writes queue up).
    runs = qa.parse_runs("smartio:none:async_depth=96,smartio:all:async_depth=96,kyber:read_lat_nsec=2000000")
    spec, dep = qa.split_run(runs[1])
    assert (spec.name, spec.tunables, dep) == ("smartio", (("async_depth", 96),), "all")
    spec, dep = qa.split_run(runs[2])
    assert (spec.name, spec.tunables, dep) == ("kyber", (("read_lat_nsec", 2000000),), None)
    plan = qa.QasioPlan(benchmarks=("m1", "m5"))
    assert qa.QasioPlan.from_json(plan.to_json()) == plan
    assert qa.disk_size(plan) % (1 << 20) == 0 and qa.disk_size(plan) >= 512 << 20
    assert parse_benchmarks("M1, m3,m1") == ("m1", "m3")
    with pytest.raises(UsageError):
        parse_benchmarks("m6")


@pytest.mark.parametrize("argv, flag", [
    (["bench", "qasio", "--target", "/dev/shm", "--scale", "2"], "--scale"),
    (["bench", "qasio", "--target", "/dev/shm"], "--target"),                  # tmpfs: no writeback
    (["bench", "qasio", "--target", "/nonexistent"], "--target"),
    (["bench", "qasio", "--target", "/dev/shm", "--quick"], "--quick"),
    (["bench", "qasio", "--target", "/dev/shm", "--benchmarks", "m9"], "--benchmarks"),
    (["bench", "latency", "--target", "/dev/shm", "--dependency", "all"], "--dependency"),
    (["compare", "--experiment", "qasio", "--schedulers", "smartio:jcommit"], "--schedulers"),
])
def test_bad_input_exits_2(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert flag in capsys.readouterr().err


def test_writer_jobset_is_buffered_and_allocates(tmp_path: Path) -> None:
    from smartio.qasio.run import writer_jobset

    text = writer_jobset(tmp_path / "bg", 8 << 20).jobfile()
    assert "direct=0" in text and "fallocate=none" in text and "rw=write" in text and "time_based" in text


def test_background_fio_stops_with_results() -> None:
    """The writer runs until stopped and still reports what it wrote (fio answers SIGINT with its JSON). On /dev/shm,
    so that the test writes nothing to a disk."""
    import os
    import shutil
    import time

    from smartio.engine.fio import FioEngine
    from smartio.qasio.run import wait_for_writer, writer_jobset

    shm = Path("/dev/shm")
    if shutil.which("fio") is None or not os.access(shm, os.W_OK):
        pytest.skip("needs fio and a writable /dev/shm")
    path = shm / f"smartio-qasio-test-{os.getpid()}"
    w = FioEngine().start(writer_jobset(path, 4 << 20), "test")
    try:
        wait_for_writer(w, path)
        time.sleep(0.3)
        assert w.running()
        res = w.stop()
    finally:
        w.close()
        path.unlink(missing_ok=True)
    bg = res.jobs["bg"].write
    assert bg is not None and bg.bytes >= 4 << 20 and bg.runtime_ms > 0      # it looped over the file


def test_the_slowest_call_explained_from_the_qasio_log() -> None:
    """debugfs qasio_log lines (kernel/smartio-iosched.c, sio_qlog_show) against the calls' own times: what happened
    while the slowest truncate() waited, and a call the probes saw nothing for."""
    log = parse_qasio_log("1000.000 P data 800+8 312\n"
                          "1000.500 Q data 2048+8 312\n"
                          "1000.600 d - 2048+256 97\n"
                          "1002.250 c - 2048+256 97\n"
                          "1003.000 X data 800+8 312\n"
                          "garbage line\n"
                          "1500.000 D sync 4096+8\n")               # a module older than the pid column
    assert [e["what"] for e in log] == ["P", "Q", "d", "c", "X", "D"] and log[2]["dep"] is None
    assert [e["pid"] for e in log] == [312, 312, 97, 97, 312, None]
    got = explain_waits({"truncate": (0.9995, 0.004), "creat": (1.2, 0.1)}, log)
    assert got["truncate"] == {"ms": 4.0, "events": {"P": 1, "Q": 1, "d": 1, "c": 1, "X": 1},
                               "last_boosted_done_ms": 2.75, "log_covers": True}
    assert got["creat"]["events"] == {} and got["creat"]["log_covers"]
    text = report.wait_text(got["truncate"])
    assert text == ("1 found queued, 1 not queued yet, 1 never found; "
                    "1 write boosted, the last completed 2.8 ms into the call")
    no_boost = report.wait_text({**got["truncate"], "events": {"Q": 2}, "last_boosted_done_ms": None})
    assert no_boost == "2 found queued; 0 writes boosted"         # e.g. the waiter's own sync writes
    assert "no wait on a write the probes saw" in report.wait_text(got["creat"])
    full = [{**log[0], "t": 2.0 + i} for i in range(1024)]       # a full log that begins after the call began
    assert "no longer covers" in report.wait_text(explain_waits({"fsync": (1.5, 1.0)}, full)["fsync"])

"""smartio.testbed.hostload: other work's share of the host's CPUs while a testbed run goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smartio.launch import compare as launch_compare
from smartio.testbed import hostload

DATA = Path(__file__).parent / "data"
BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def test_busy_jiffies_leave_out_idle_and_iowait():
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert hostload.busy_jiffies("cpu  100 5 20 900 40 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n") == 131


def test_tree_jiffies_sums_the_root_and_its_descendants_only(tmp_path):
    def proc(pid: int, comm: str, ppid: int, utime: int, stime: int, reaped: int = 0) -> None:
        (tmp_path / str(pid)).mkdir()
        rest = ["S", str(ppid), *["0"] * 9, str(utime), str(stime), str(reaped), "0"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")

    proc(1, "init", 0, 1000, 1000)
    proc(10, "python3", 1, 5, 5, reaped=40)  # the root, with children it reaped
    proc(11, "qemu (x) y)", 10, 300, 100)    # a comm with spaces and ')'
    proc(12, "virtiofsd", 11, 7, 3)          # a grandchild
    proc(20, "make", 1, 50, 50)              # not ours
    (tmp_path / "self").mkdir()              # not a process
    assert hostload.tree_jiffies(10, tmp_path) == 10 + 40 + 400 + 10
    assert hostload.tree_jiffies(20, tmp_path) == 100


def _burner(seconds: float, detached: bool) -> subprocess.Popen[bytes]:
    """A process that keeps one CPU busy: a child of this process, or (detached) a grandchild whose parent has
    exited, so that init adopts it and it is no longer ours."""
    code = BURN.format(s=seconds)
    if detached:
        code = f"import os, sys\nif os.fork(): os._exit(0)\nexec({code!r})\n"
    return subprocess.Popen([sys.executable, "-c", code])


def _sampled(tmp_path: Path, detached: bool) -> list[tuple[float, float, float, float, float]]:
    with hostload.HostLoad(tmp_path / "load.csv", interval_s=0.25) as load:
        p = _burner(2.0, detached)
        time.sleep(2.2)
        p.wait()
    lines = (tmp_path / "load.csv").read_text().splitlines()
    assert lines[0] == hostload.COLUMNS and len(lines) - 1 == len(load.rows) >= 4
    return load.rows


def test_a_busy_child_counts_as_ours(tmp_path):
    rows = _sampled(tmp_path, detached=False)
    ours = sum(r[3] * r[1] for r in rows) / sum(r[1] for r in rows)
    assert ours > 0.4          # the child burns one CPU for most of the window


def test_a_child_reaped_between_two_samples_still_counts_as_ours(tmp_path):
    """A run shorter than the interval (a testbed boot of 4.5 s in CI): QEMU has exited and been reaped by the last
    sample, and its time is in this process's cutime/cstime then."""
    with hostload.HostLoad(tmp_path / "load.csv", interval_s=30) as load:
        # Until it has used 0.6 s of CPU, however busy the machine.
        p = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 0.6: pass"])
        p.wait()
    assert len(load.rows) == 1
    _, dt, busy, ours, _ = load.rows[0]
    assert ours * dt >= 0.55 and ours <= busy + 0.05


def test_a_busy_process_outside_the_tree_counts_as_other(tmp_path):
    rows = _sampled(tmp_path, detached=True)
    other = sum(r[4] * r[1] for r in rows) / sum(r[1] for r in rows)
    ours = sum(r[3] * r[1] for r in rows) / sum(r[1] for r in rows)
    assert other > 0.4 and other > ours


def test_summary_warning_and_note():
    load = hostload.HostLoad(Path("host-load.csv"), interval_s=5)
    assert load.summary()["other_cpus_mean"] is None and hostload.note(load.summary()) is None
    load.rows = [(0.0, 5.0, 1.2, 1.0, 0.2), (5.0, 15.0, 1.0, 1.0, 0.0)]
    s = load.summary()
    assert s["other_cpus_mean"] == 0.05 and s["other_cpus_max"] == 0.2 and s["samples"] == 2
    note = hostload.note(s)
    assert hostload.warning(s) is None and note is not None and "0.05 of its" in note and "scatter" not in note
    load.rows = [(0.0, 5.0, 2.0, 1.0, 1.0)]
    s = load.summary()
    warn, note = hostload.warning(s), hostload.note(s)
    assert warn is not None and "1.00 of its" in warn and "host-load.csv" in warn
    assert note is not None and "scatter more" in note
    assert hostload.note(None) is None


def test_a_launch_table_ends_with_the_host_load_when_recorded():
    doc = json.loads((DATA / "launch" / "run-20261126g" / "compare.json").read_text())
    before = launch_compare.render(doc)
    assert "host:" not in before
    doc["host_load"] = {"cpus": 2, "interval_s": 5.0, "samples": 10, "other_cpus_mean": 0.31,
                        "other_cpus_max": 1.4, "file": "host-load.csv"}
    after = launch_compare.render(doc)
    assert after.startswith(before.rsplit("\n", 1)[0]) and "host: other processes took 0.31 of its 2 CPUs" in after


def test_a_timing_gets_the_load_of_the_samples_it_overlaps(tmp_path):
    """hostload.read / during: each row covers the interval_s before its time; an interval gets the samples' mean
    weighted by overlap, an instant the sample it falls in, and nothing outside the samples; a row cut off by a run
    killed mid-write is left out, as is a file that is not a host-load file."""
    f = tmp_path / hostload.FILE
    f.write_text(f"{hostload.COLUMNS}\n105.000,5.000,1.0,1.0,0.000\n110.000,5.000,1.8,1.0,0.800\n"
                 "115.000,5.000,1.1,1.0,0.100\n120.0,5.0,1.")
    samples = hostload.read(f)
    assert samples == [(100.0, 105.0, 0.0), (105.0, 110.0, 0.8), (110.0, 115.0, 0.1)]
    assert hostload.during(samples, 106, 109) == pytest.approx(0.8)
    assert hostload.during(samples, 103, 107) == pytest.approx((2 * 0.0 + 2 * 0.8) / 4)
    assert hostload.during(samples, 100, 115) == pytest.approx(0.3)
    assert hostload.during(samples, 112, 112) == pytest.approx(0.1)
    assert hostload.during(samples, 116, 120) is None and hostload.during([], 0, 1) is None
    assert hostload.read(tmp_path / "absent.csv") == []
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert hostload.read(tmp_path / "other.csv") == []

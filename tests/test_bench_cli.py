"""`smartio bench`, `profile` and `results` end to end with real fio on small scratch files, and their errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smartio.blockdev import Backing
from smartio.engine.fake import ModelEngine
from smartio.errors import UsageError
from smartio.storebench.options import Settings
from smartio.storebench.runner import run_bench
from smartio.storebench.target import Target

pytestmark = pytest.mark.timeout(300)

FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed (make deps installs it)")
ROOT = os.geteuid() == 0


def smartio(*args: str, env: dict | None = None, db: Path | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, **(env or {})}
    if db is not None:
        e["SMARTIO_DB"] = str(db)
    return subprocess.run([sys.executable, "-m", "smartio", *args], capture_output=True, text=True, env=e,
                          timeout=280)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "scratch"
    d.mkdir()
    return d


SMALL = ["--size", "1M", "--repeats", "2"]


@needs_fio
def test_latency_json_results_db_and_cleanup(scratch, tmp_path):
    out, db = tmp_path / "lat.json", tmp_path / "r.db"
    p = smartio("bench", "latency", "--target", str(scratch), *SMALL, "--json", str(out), db=db)
    assert p.returncode == 0, p.stderr
    assert "seq read" in p.stdout and "iowait" in p.stdout
    doc = json.loads(out.read_text())
    for key in ("experiment", "target", "device", "scheduler", "kernel", "fio_version", "command", "results"):
        assert key in doc
    assert doc["fio_version"].startswith("fio-")
    assert set(doc["results"]["patterns"]) == {"seq_read", "seq_write", "rand_read", "rand_write"}
    assert doc["results"]["patterns"]["rand_read"]["mean_ms"]["n"] == 2
    assert list(scratch.iterdir()) == []          # scratch files removed
    ls = smartio("results", "list", db=db)
    assert ls.returncode == 0 and "latency" in ls.stdout
    show = smartio("results", "show", str(doc["id"]), "--json", db=db)
    assert json.loads(show.stdout)["results"] == doc["results"]


@needs_fio
def test_slowdown_keys_and_four_streams(scratch, tmp_path):
    out = tmp_path / "sd.json"
    p = smartio("bench", "slowdown", "--target", str(scratch), *SMALL, "--streams", "4", "--json", str(out),
                db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())["results"]
    assert r["streams"] == 4
    for kind in ("read_slowdown", "write_slowdown"):
        for mode in ("seq", "rand"):
            assert r[kind][mode] > 0
    assert "ReadSlowdown" in p.stdout and "4 reader(s) against 4 writer(s)" in p.stdout


@needs_fio
def test_all_on_a_file_target_reports_device_underneath(tmp_path):
    f = tmp_path / "target.img"
    f.write_bytes(b"")
    out = tmp_path / "all.json"
    p = smartio("bench", "all", "--target", str(f), "--size", "256K", "--repeats", "2", "--levels", "1,2",
                "--mixes", "50,100", "--json", str(out), "--plots", str(tmp_path / "plots"), db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert set(doc["results"]) == {"latency", "slowdown", "concurrency", "mixed"}
    params = doc["results"]["concurrency"]["results"]["parameters"]
    assert set(params) == {"seq_read", "seq_write", "rand_read", "rand_write"}
    assert all(v in (1, 2) for v in params.values())
    dev = doc["device"]
    assert dev.get("name") or "no block device" in dev.get("note", "")
    assert sorted(x.name for x in (tmp_path / "plots").iterdir()) == [
        "concurrency.png", "latency.png", "mixed.png", "slowdown.png"]


@needs_fio
def test_profile_prints_the_four_parameters(scratch, tmp_path):
    p = smartio("profile", "--target", str(scratch), "--size", "256K", "--repeats", "1", "--levels", "1,2",
                db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert [line.split("=")[0] for line in lines] == ["seq_read", "seq_write", "rand_read", "rand_write",
                                                      "write_pace_us", "write_pace_rand_us", "read_hold_us",
                                                      "write_slice_ms", "write_slice_rand_ms", "write_window_ms",
                                                      "write_merge_max_kb", "write_slice_kb"]
    assert all(line.split("=")[1] in ("1", "2") for line in lines[:4])
    # The write policy the device model derives from the alone write latencies and the write speedup.
    assert all(int(line.split("=")[1]) > 0 for line in lines[4:-3]) and lines[-3] == "write_window_ms=0"
    assert lines[-2] == "write_merge_max_kb=0"     # no limit (see smartio.flashdev.model.pacing)
    assert lines[-1] == "write_slice_kb=0"         # one slice per request, as the slices were sized


def sigint_default() -> None:
    """A job started in the background by a non-interactive shell (as CI may be) inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler: give the child the terminal's default, as an interactive user's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@needs_fio
def test_ctrl_c_removes_scratch_files(scratch, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "smartio", "bench", "latency", "--target", str(scratch),
                             "--size", "512M", "--repeats", "5"],
                            env={**os.environ, "SMARTIO_DB": str(tmp_path / "r.db")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + 60
    while not any(scratch.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert any(scratch.iterdir()), "fio never created its scratch file"
    os.killpg(proc.pid, signal.SIGINT)      # as a terminal's Ctrl-C: to fio and smartio alike
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert list(scratch.iterdir()) == []


# --- bad input: exit 2 and a message naming the flag and the value -----------------------------------------

def test_unknown_experiment(tmp_path):
    p = smartio("bench", "latencyy", "--target", str(tmp_path))
    assert p.returncode == 2 and "latencyy" in p.stderr


def test_missing_target():
    p = smartio("bench", "latency")
    assert p.returncode == 2 and "--target" in p.stderr
    p = smartio("bench", "latency", "--target", "/nonexistent/place")
    assert p.returncode == 2 and "`--target /nonexistent/place`: does not exist" in p.stderr


def test_too_little_space(scratch):
    p = smartio("bench", "latency", "--target", str(scratch), "--size", "900T")
    assert p.returncode == 2 and "too little space" in p.stderr and "--target" in p.stderr


def test_bad_size_and_levels(scratch):
    p = smartio("bench", "latency", "--target", str(scratch), "--size", "lots")
    assert p.returncode == 2 and "`--size lots`" in p.stderr
    p = smartio("bench", "concurrency", "--target", str(scratch), "--levels", "1,0")
    assert p.returncode == 2 and "`--levels 1,0`" in p.stderr


def test_fio_not_installed(scratch, tmp_path):
    p = smartio("bench", "latency", "--target", str(scratch), env={"PATH": str(tmp_path)})
    assert p.returncode == 2 and "fio" in p.stderr and "not installed" in p.stderr


def test_read_only_refuses_experiments_that_write(scratch):
    p = smartio("bench", "slowdown", "--target", str(scratch), "--read-only")
    assert p.returncode == 2 and "--read-only" in p.stderr


def test_scheduler_on_a_target_without_block_device(tmp_path):
    # A file on a filesystem with no block device of its own (NFS, FUSE, btrfs); memory-backed ones are refused
    # before this (tests/test_bench_targets.py).
    f = tmp_path / "f.img"
    f.write_bytes(b"\0" * 4096)
    target = Target(str(f), "file", None, Backing(None, "nfs4", "server:/export"))
    with pytest.raises(UsageError) as e:
        run_bench("latency", target, Settings(repeats=1, size=4096), ModelEngine(lambda job, others: 0.1),
                  scheduler="none", command="t", progress=False)
    assert e.value.flag == "--scheduler" and e.value.value == "none"


# --- block devices: refuse to destroy data, switch and restore the scheduler ---------------------------------

@pytest.fixture
def loopdev(tmp_path):
    if not ROOT or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup to make a loop device")
    img = tmp_path / "disk.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    p = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"losetup failed: {p.stderr.strip()}")
    dev = p.stdout.strip()
    yield dev, img
    subprocess.run(["losetup", "-d", dev])


@needs_fio
def test_device_with_filesystem_is_refused_unless_destroy_data(loopdev, tmp_path):
    dev, _ = loopdev
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 missing")
    subprocess.run(["mkfs.ext4", "-q", dev], check=True)
    p = smartio("bench", "latency", "--target", dev, "--size", "256K", "--repeats", "1", db=tmp_path / "r.db")
    assert p.returncode == 2 and "ext4" in p.stderr and "--destroy-data" in p.stderr
    # Reading is harmless: --read-only runs the read patterns on it.
    p = smartio("bench", "latency", "--target", dev, "--read-only", "--size", "256K", "--repeats", "1",
                db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    assert "seq write" not in p.stdout
    p = smartio("bench", "latency", "--target", dev, "--destroy-data", "--size", "256K", "--repeats", "1",
                db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr


@needs_fio
def test_scheduler_switched_for_the_run_and_restored(loopdev, tmp_path):
    dev, _ = loopdev
    sched = Path("/sys/block") / Path(dev).name / "queue" / "scheduler"
    before = sched.read_text()
    want = "mq-deadline" if "[mq-deadline]" not in before else "none"
    out = tmp_path / "o.json"
    p = smartio("bench", "latency", "--target", dev, "--scheduler", want, "--size", "256K", "--repeats", "1",
                "--json", str(out), db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["scheduler"] == want
    assert sched.read_text() == before


@needs_fio
def test_unknown_scheduler_is_refused(loopdev, tmp_path):
    dev, _ = loopdev
    p = smartio("bench", "latency", "--target", dev, "--scheduler", "cfq-please", "--size", "256K",
                "--repeats", "1", db=tmp_path / "r.db")
    assert p.returncode == 2 and "`--scheduler cfq-please`" in p.stderr

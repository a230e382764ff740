"""`smartio compare launch` for real: one VM session launches one application
(vim, the smallest of the set) cold under each of the five schedulers, from its copy installed on the emulated
disk; checks the table, compare.json, that every launch ran under its scheduler and that the device was restored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.results import Store

pytestmark = [pytest.mark.vm, pytest.mark.usefixtures("testbed_ready"),
              pytest.mark.skipif(shutil.which("strace") is None or shutil.which("vim.basic") is None,
                                 reason="needs strace and vim.basic (scripts/install-deps; apt-get install vim)")]

MODULE = Path(__file__).resolve().parents[1] / "kernel" / "smartio-iosched.ko"
SCHEDULERS = ["none", "mq-deadline", "kyber", "bfq", "smartio"]


@pytest.mark.timeout(620)
def test_one_application_launches_cold_under_each_scheduler(tmp_path):
    if not MODULE.is_file():
        pytest.skip(f"{MODULE} is not built (make module)")
    out = tmp_path / "cmp"
    # The VM's own timeout comes first: a guest that hangs is killed with its tasks' stacks in the failure.
    p = subprocess.run([sys.executable, "-m", "smartio", "compare", "launch", "--schedulers", ",".join(SCHEDULERS),
                        "--apps", "editor", "--caches", "cold", "--backgrounds", "none", "--modes", "real",
                        "--repeats", "1", "--out", str(out), "--timeout", "300"], capture_output=True, text=True,
                       timeout=360, env={**os.environ, "SMARTIO_DB": str(tmp_path / "host.db")})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "editor cold none real" in p.stdout
    doc = json.loads((out / "compare.json").read_text())
    assert doc["missing"] == [] and list(doc["cells"]) == SCHEDULERS
    assert doc["plots"] == [str(out / "launch.png")] and (out / "launch.png").stat().st_size > 10000
    guest = json.loads((out / "vm" / "out" / "launch-guest.json").read_text())
    assert [r["state"]["scheduler"] for r in guest["runs"]] == SCHEDULERS
    assert all(r["rc"] == 0 for r in guest["runs"])
    for label in SCHEDULERS:
        wall = doc["cells"][label]["editor.cold.none.real"]["wall_s"]["mean"]
        assert 0 < wall < 60
    assert guest["after"]["scheduler"] == guest["before"]["scheduler"]
    # The guest's kernel has kprobes: the pages vim's faults only read ahead are told from the ones it waited for.
    editor = doc["apps"]["editor"]
    assert editor["readahead"] == "kprobe page_cache_async_ra", editor["readahead"]
    assert editor["ops_by_kind"].get("readahead", 0) > 0 and editor["ops_by_kind"].get("fault", 0) > 0, editor
    # The host's load while the VM ran is on record and ends the table.
    assert doc["host_load"]["samples"] > 0 and "host: other processes took" in p.stdout
    assert guest["after"]["tunables"] == guest["before"]["tunables"]
    # --scheduler-clock device (the default): every scheduler's time tunables x the time scale (10)
    assert doc["plan"]["clock_scale"] == 10 and "x10 (device clock)" in p.stdout
    scaled = {"mq-deadline": ("read_expire", "5000"), "kyber": ("read_lat_nsec", "20000000"),
              "bfq": ("slice_idle_us", "80000"), "smartio": ("read_anticipation_us", "30000")}
    for r in guest["runs"]:
        if r["state"]["scheduler"] in scaled:
            name, value = scaled[r["state"]["scheduler"]]
            assert r["state"]["tunables"][name] == value, (r["state"]["scheduler"], r["state"]["tunables"])
    # --resume: a cell whose run file is gone (as a killed session leaves it) is measured in a new session, vm-2,
    # and only that one; the guest installs only the application it needs.
    (out / "vm" / "out" / "runs" / "kyber.editor.cold.none.real.json").unlink()
    p = subprocess.run([sys.executable, "-m", "smartio", "compare", "resume", str(out), "--timeout", "180"],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "SMARTIO_DB": str(tmp_path / "host.db")})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "4 cells measured in 1 session(s), 1 to go" in p.stderr
    again = json.loads((out / "vm-2" / "out" / "launch-guest.json").read_text())
    assert [r["scheduler"] for r in again["runs"]] == ["kyber"] and again["skipped"] == 4
    first_id = doc["id"]
    doc = json.loads((out / "compare.json").read_text())
    assert doc["missing"] == [] and [s["artifacts"] for s in doc["sessions"]] == ["vm", "vm-2"]
    # one run in the host's results database, stored again in its place with both sessions
    store = Store(tmp_path / "host.db")
    assert doc["id"] == first_id and [r.id for r in store.list()] == [first_id] and store.get(first_id) == doc
    assert "resumed: vm started" in p.stdout


@pytest.mark.timeout(520)
def test_real_and_replay_launches_in_turn_beside_a_writer_that_keeps_running(tmp_path):
    """The default way of a launch comparison, for real: under a scheduler the sequential writer starts once,
    BACKGROUND_HEAD_S before the first launch beside it, and runs through the cells; the real and the replay cell
    take their launches in turn; each launch's background throughput is what the device wrote meanwhile."""
    from smartio.launch.compare import BACKGROUND_HEAD_S

    if not MODULE.is_file():
        pytest.skip(f"{MODULE} is not built (make module)")
    out = tmp_path / "cmp"
    p = subprocess.run([sys.executable, "-m", "smartio", "compare", "launch", "--schedulers", "bfq",
                        "--apps", "editor", "--caches", "cold", "--backgrounds", "seq-write", "--modes",
                        "real,replay", "--repeats", "2", "--out", str(out), "--timeout", "420"], capture_output=True,
                       text=True, timeout=480, env={**os.environ, "SMARTIO_DB": str(tmp_path / "host.db")})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "bfq: background seq-write started" in p.stderr and "editor cold real and replay, interleaved" in p.stderr
    assert "taken in turn (interleaved)" in p.stdout
    doc = json.loads((out / "compare.json").read_text())
    assert doc["missing"] == [] and doc["plan"]["background_start"] == "once" and doc["plan"]["interleave"]
    runs = out / "vm" / "out" / "runs"
    real, replay = (json.loads((runs / f"bfq.editor.cold.seq-write.{m}.json").read_text()) for m in ("real", "replay"))
    assert real["interleaved_with"] == ["replay"] and replay["interleaved_with"] == ["real"]
    for d in (real, replay):
        assert d["settings"]["background_running"]["since_s"] >= BACKGROUND_HEAD_S
        assert d["results"]["wall_s"]["n"] == 2 and all(x > 0 for x in d["results"]["background_write_mib_s"]["values"])
    guest = json.loads((out / "vm" / "out" / "launch-guest.json").read_text())
    assert all(r["rc"] == 0 for r in guest["runs"]) and guest["after"]["scheduler"] == guest["before"]["scheduler"]

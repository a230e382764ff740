"""`smartio compare` for real: one VM session, two schedulers, tiny sizes. Checks the printed
Figure 11/12 tables, compare.json, that each run happened under its scheduler, and that the device's scheduler and
nr_requests were restored; and that a tunable the scheduler lacks is refused with exit 2, restoring the device."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.results import Store

pytestmark = [pytest.mark.vm, pytest.mark.usefixtures("testbed_ready")]

MODULE = Path(__file__).resolve().parents[1] / "kernel" / "smartio-iosched.ko"


def _compare(*args: str, out: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smartio", "compare", "--profile", "s5-emmc", *args,
                           "--out", str(out)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SMARTIO_DB": str(out.parent / "host.db")})


@pytest.fixture(scope="module", autouse=True)
def module_built() -> None:
    if not MODULE.is_file():
        pytest.skip(f"{MODULE} is not built (make module)")


@pytest.mark.timeout(420)
def test_two_schedulers_one_session(tmp_path):
    out = tmp_path / "cmp"
    p = _compare("--schedulers", "mq-deadline,smartio:read_anticipation_us=0", "--experiment", "both",
                 "--size", "64K", "--repeats", "1", "--mixes", "50", out=out, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.count("smartio compare: [") == 4            # progress from the guest, one line per step
    labels = ["mq-deadline", "smartio:read_anticipation_us=0"]
    for label in labels:
        assert re.search(rf"^{re.escape(label)}( +\d+\.\d\d){{6}}$", p.stdout, re.M), p.stdout
        assert re.search(rf"^{re.escape(label)} +\d+\.\d\d$", p.stdout, re.M), p.stdout   # Figure 12, 50 %
    assert "Figure 11" in p.stdout and "Figure 12" in p.stdout

    doc = json.loads((out / "compare.json").read_text())
    assert doc["schedulers"] == labels and doc["missing"] == []
    # kept in the host's results database, the guest's runs included
    assert f"stored as run {doc['id']}" in p.stderr
    assert Store(out.parent / "host.db").get(doc["id"]) == doc
    for label in labels:
        r = doc["results"][label]
        for key in ("read_slowdown", "write_slowdown", "efficiency"):
            assert set(r[key]) == {"seq", "rand"} and all(v > 0 for v in r[key].values())
        assert r["response_s"]["seq"]["50"] > 0
        # bench read the active scheduler from sysfs itself
        assert doc["runs"][label]["slowdown"]["device"]["scheduler"] == label.split(":")[0]
    smartio_run = doc["runs"]["smartio:read_anticipation_us=0"]["slowdown"]
    assert smartio_run["tunables"]["read_anticipation_us"] == "0"
    assert all(r["state"]["nr_requests"] == 128 for r in doc["device"]["per_run"])

    before, after = doc["device"]["before"], doc["device"]["after"]
    assert before["scheduler"] == "mq-deadline" and before["nr_requests"] < 128   # the VM's boot default
    assert after == before and doc["device"]["restored"] is True
    assert sorted(p.name for p in out.glob("*.png")) == ["fig11-slowdown.png", "fig12-mixed.png"]


@pytest.mark.timeout(240)
def test_unknown_tunable_is_refused_and_device_restored(tmp_path):
    out = tmp_path / "cmp"
    p = _compare("--schedulers", "smartio:no_such_tunable=1", "--size", "64K", "--repeats", "1", out=out,
                 timeout=220)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "no_such_tunable" in p.stderr.splitlines()[-1]
    guest = json.loads((out / "vm" / "out" / "guest.json").read_text())
    assert guest["runs"] == [] and guest["after"] == guest["before"]


@pytest.mark.timeout(420)
def test_sigterm_keeps_what_the_guest_finished(tmp_path):
    # A comparison under nohup or a job runner is stopped with SIGTERM (SIGINT is ignored there): it must end as
    # Ctrl-C does, with exit 130, compare.json holding the runs the guest finished, and no QEMU left behind. The
    # schedulers alternate repeat by repeat: it stops after mq-deadline's first, before kyber's.
    out = tmp_path / "cmp"
    p = subprocess.Popen([sys.executable, "-m", "smartio", "compare", "--profile", "s5-emmc", "--schedulers",
                          "mq-deadline,kyber", "--experiment", "slowdown", "--size", "64K", "--repeats", "2",
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "SMARTIO_DB": str(tmp_path / "host.db")}, start_new_session=True)
    assert p.stderr is not None
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "slowdown under mq-deadline done in" in line:
            p.terminate()
            break
    rest, _ = p.communicate(timeout=120)
    assert p.returncode == 130, "".join(seen)[-3000:]
    doc = json.loads((out / "compare.json").read_text())
    # of mq-deadline's two repeats the first ran, kyber's first comes next in the round: what ran is kept, and
    # what did not is said
    assert "mq-deadline" in doc["runs"] and doc["missing"] == [
        "slowdown under mq-deadline: 1 of 2 repeats", "slowdown under kyber"], doc["missing"]
    assert doc["runs"]["mq-deadline"]["slowdown"]["settings"]["repeats"] == 1
    assert Store(tmp_path / "host.db").get(doc["id"])["missing"] == doc["missing"]     # stored, interrupted as it is
    qemu = subprocess.run(["pgrep", "-s", str(p.pid), "-f", "qemu-system"], capture_output=True, text=True)
    assert qemu.stdout == "", f"QEMU still running: {qemu.stdout}"

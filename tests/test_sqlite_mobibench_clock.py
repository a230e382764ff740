"""smartio bench sqlite's transactions/s is Mobibench's: the clock runs from the first transaction's start to the
end of the run, which in WAL mode ends with a checkpoint (Mobibench's sqlite3_wal_checkpoint before it stops its
clock); the figure with the commits alone is kept beside it. Pinned on a recorded worker run (tests/data/sqlite/,
100 inserts in WAL, synchronous FULL, on this machine's ext4) and checked on the worker for real."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.sqlite.report import summary
from smartio.sqlite.run import repeat_summary

RECORDED = Path(__file__).parent / "data" / "sqlite" / "wal-100-inserts.worker.json"


def test_recorded_wal_run_counts_the_final_checkpoint():
    doc = json.loads(RECORDED.read_text())
    first, last_commit = doc["starts_ns"][0], doc["ends_ns"][-1]
    cp_start, cp_end = doc["checkpoint_ns"]
    assert doc["journal_mode"] == "wal" and len(doc["starts_ns"]) == 100
    assert last_commit <= cp_start < cp_end
    s = repeat_summary(doc)
    assert s["tx_per_s"] == pytest.approx(100 / ((cp_end - first) / 1e9), rel=1e-12)
    assert s["tx_only_per_s"] == pytest.approx(100 / ((last_commit - first) / 1e9), rel=1e-12)
    assert s["checkpoint_ms"] == pytest.approx((cp_end - cp_start) / 1e6)
    # this recording: 326.0 ms of commits, then a checkpoint of 7.98 ms
    assert s["tx_only_per_s"] == pytest.approx(306.7, abs=0.1) and s["tx_per_s"] == pytest.approx(299.4, abs=0.1)


def test_rollback_run_has_one_figure():
    doc = json.loads(RECORDED.read_text())
    doc["checkpoint_ns"] = [0, 0]                    # what the worker writes outside WAL
    s = repeat_summary(doc)
    assert s["tx_per_s"] == s["tx_only_per_s"] and s["checkpoint_ms"] == 0
    del doc["checkpoint_ns"]                         # a run recorded before the worker timed its checkpoint
    assert repeat_summary(doc)["tx_per_s"] == s["tx_per_s"]


def _doc(journal: str, worker_doc: dict) -> dict:
    from smartio.storebench.stats import Stat

    per = [repeat_summary(worker_doc)] * 2
    results = {k: Stat.of(p[k] for p in per).to_json() for k in ("tx_per_s", "tx_only_per_s", "checkpoint_ms")}
    results["latency_ms"] = {k: Stat.of(p[f"{k}_ms"] for p in per).to_json() for k in ("mean", "p99", "max")}
    results["sync_calls"] = {"library": "fdatasync", "issued_as": "fdatasync"}
    return {"settings": {"op": "insert", "journal": journal, "sync": "full", "sync_call": "library",
                         "transactions": 100, "record_bytes": 100, "repeats": 2},
            "device": {"fstype": "ext4", "source": "/dev/vda"}, "results": results, "sqlite_version": "3.40.1",
            "journal_mode": journal, "page_size": 4096, "kernel": "6.1", "scheduler": "none"}


def test_table_names_each_figure():
    doc = json.loads(RECORDED.read_text())
    wal = summary(_doc("wal", doc))
    assert re.search(r"transactions/s \(Mobibench's clock: checkpoint included\) +299\.4 ", wal)
    assert "transactions/s, commits only" in wal and "306.7" in wal and "final WAL checkpoint (ms)" in wal
    doc["checkpoint_ns"] = [0, 0]
    rollback = summary(_doc("delete", doc))
    assert "transactions/s (Mobibench's clock)" in rollback and "commits only" not in rollback


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_worker_times_a_checkpoint_in_wal_only(tmp_path, journal):
    spec = {"db": str(tmp_path / "r.db"), "op": "insert", "journal": journal, "sync": "full", "transactions": 5,
            "record_bytes": 100}
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-m", "smartio.sqlite.worker", json.dumps(spec), str(out)], check=True,
                   timeout=60)
    doc = json.loads(out.read_text())
    cp = doc["checkpoint_ns"]
    if journal == "wal":
        assert doc["ends_ns"][-1] <= cp[0] < cp[1]
        assert repeat_summary(doc)["tx_per_s"] < repeat_summary(doc)["tx_only_per_s"]
    else:
        assert cp == [0, 0]

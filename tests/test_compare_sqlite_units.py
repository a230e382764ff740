"""compare --experiment sqlite without a VM: what each optimisation means per filesystem, the plan's
steps and checks, the kernel flavour, and Table 2 / Figure 4 rendered from run documents fed to assemble()."""

from __future__ import annotations

import dataclasses
import json

import pytest

from smartio.errors import UsageError
from smartio.flashdev import load_profile
from smartio.sqlite import compare as sq
from smartio.sqlite.compare_report import headline, render
from smartio.testbed import kernelpkg


def test_optimisations_per_filesystem():
    assert sq.resolve("ext4", "B") == (sq.Config("fsync", "truncate", False), [])
    assert sq.resolve("ext4", "F+E+P+W") == (sq.Config("fdatasync", "wal", True), ["P n/a"])
    assert sq.resolve("xfs", "E") == (sq.Config("fsync", "truncate", True), [])
    assert sq.resolve("f2fs", "E") == (None, ["E n/a"])
    assert sq.resolve("btrfs", "F+E+P") == (sq.Config("fdatasync", "truncate", False), ["P n/a", "E n/a"])
    assert sq.resolve("nilfs2", "P") == (None, ["P n/a"])


def test_plan_steps_flavour_and_checks():
    plan = sq.SqlitePlan(filesystems=("ext4",), optimisations=("B", "W"), ops=("insert", "update"),
                         fig4_modes=("delete", "truncate"))
    steps = [(fs, c.key, ops) for fs, c, ops in plan.steps()]
    # B is TRUNCATE with fsync: Figure 4's TRUNCATE row reuses its insert run
    assert steps == [("ext4", "fsync-truncate", ("insert", "update")), ("ext4", "fsync-wal", ("insert", "update")),
                     ("ext4", "fsync-delete", ("insert",))]
    assert plan.flavour == kernelpkg.FLAVOUR
    assert sq.SqlitePlan(filesystems=("xfs", "nilfs2")).flavour == kernelpkg.GENERIC
    assert sq.SqlitePlan.from_json(plan.to_json()) == plan
    for kw, flag in (({"filesystems": ("zfs",)}, "--filesystems"), ({"optimisations": ("X",)}, "--optimisations"),
                     ({"transactions": 0}, "--transactions"), ({"sync": "fast"}, "--sync")):
        with pytest.raises(UsageError, match=flag):
            sq.SqlitePlan(**kw)


def test_generic_flavour_release_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("SMARTIO_CACHE", str(tmp_path))
    cloud = kernelpkg.KernelRelease("6.1.0-56", "6.1.192-2")
    generic = kernelpkg.KernelRelease("6.1.0-56", "6.1.192-2", kernelpkg.GENERIC)
    assert cloud.uname == "6.1.0-56-cloud-amd64" and generic.uname == "6.1.0-56-amd64"
    assert generic.dir.name == "6.1.0-56-6.1.192-2-amd64" and cloud.dir.name == "6.1.0-56-6.1.192-2"
    assert generic.private_headers == cloud.private_headers       # one linux-source extraction per version
    assert generic.vmlinuz.name == "vmlinuz-6.1.0-56-amd64"


def _stat(*v: float) -> dict:
    from smartio.storebench.stats import Stat

    return Stat.of(v).to_json()


def _run_doc(fs: str, tx: float, writes: float) -> dict:
    trace = {"writes": _stat(writes, writes), "flushes": _stat(2, 2), "syncs": _stat(1, 1),
             "classes": {c: {"writes": _stat(1, 1), "kib": _stat(4, 4)} for c in
                         ("database", "journal", "wal", "fs_journal", "metadata")},
             "first_fs_journal_kib": _stat(16, 16)}
    return {"kernel": "6.1.0-56-amd64", "sqlite_version": "3.40.1", "device": {"fstype": fs},
            "results": {"tx_per_s": _stat(tx * 0.9, tx * 1.1), "latency_ms": {"mean": _stat(1000 / tx, 1000 / tx)},
                        "sync_calls": {"library": "fdatasync"}, "trace": trace}}


def test_table2_and_figure4_from_runs(tmp_path):
    plan = sq.SqlitePlan(filesystems=("ext4", "f2fs"), optimisations=("B", "E", "P", "W", "F+E+P+W"),
                         ops=("insert",), fig4_modes=("truncate", "wal"))
    rates = {"fsync-truncate": 10.0, "fsync-truncate-extjournal": 12.0, "fsync-wal": 25.0,
             "fdatasync-wal-extjournal": 30.0, "fdatasync-wal": 40.0}
    for fs, cfg, _ops in plan.steps():
        f = tmp_path / sq.run_file(fs, cfg, "insert")
        f.parent.mkdir(exist_ok=True)
        f.write_text(json.dumps(_run_doc(fs, rates[cfg.key], 3.0 if cfg.journal == "wal" else 9.0)))
    prof = dataclasses.replace(load_profile("s5-emmc"), time_scale=10.0)
    doc = sq.assemble(plan, tmp_path, profile=prof, command="x", started="now", vm_result=None)
    assert doc["missing"] == []
    assert doc["table"]["f2fs"]["E"]["na"].startswith("f2fs has no separate journal")
    assert "REQ_POLLED" in doc["table"]["ext4"]["P"]["na"]
    assert doc["table"]["f2fs"]["F+E+P+W"]["config"] == "fdatasync-wal"
    text = render(doc)
    row = next(x for x in text.splitlines() if x.startswith("ext4") and " W " in x)
    assert "2.50" in row and "76" in row and "1.95" in row          # ours 25/10, the paper's 76 and 76/39
    assert "n/a (ext4 P, f2fs P)" in text and "n/a (f2fs E)" in text
    assert "Figure 4" in text and "TRUNCATE" in text
    h = headline(doc)
    assert h["ext4_B_ins"] == pytest.approx(10.0) and h["f2fs_FEPW_ins"] == pytest.approx(40.0)
    assert h["wal_ios_per_insert"] == 3.0 and h["delete_ios_per_insert"] is None   # DELETE was not in the plan

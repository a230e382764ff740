"""`smartio results show ID` renders every kind of run smartio stores: each `smartio bench` experiment and each
`smartio compare` experiment of the registry. The documents are real: recorded fio runs and comparisons, and short
runs of `bench sqlite` and `bench launch` made here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from smartio import registry
from smartio.cli import main
from smartio.compare.run import keep
from smartio.results import Store

DATA = Path(__file__).resolve().parent / "data"
pytestmark = pytest.mark.timeout(300)


def _bench(tmp_path: Path, *argv: str) -> dict[str, Any]:
    out = tmp_path / f"{argv[0]}.json"
    scratch = tmp_path / f"{argv[0]}-target"
    scratch.mkdir()
    db = tmp_path / "scratch.db"
    assert main(["bench", argv[0], "--target", str(scratch), "--json", str(out), "--db", str(db), *argv[1:]]) == 0
    return json.loads(out.read_text())


def _documents(tmp_path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """One document per (side, experiment), and a string its table shows."""
    docs: dict[str, tuple[str, dict[str, Any]]] = {}
    fio = {n: json.loads((DATA / "fio" / n / "document.json").read_text())
           for n in ("latency", "slowdown", "concurrency", "mixed")}
    for name, doc in fio.items():
        docs[f"bench {name}"] = ("", doc)
    # `bench all` holds each pattern's document under its name (storebench.runner.run_bench)
    docs["bench all"] = ("", {**fio["latency"], "experiment": "all", "results": fio})
    qasio = json.loads((DATA / "qasio" / "m1-three-runs" / "compare.json").read_text())
    docs["compare qasio"] = ("M1", qasio)
    docs["bench qasio"] = ("M1", next(iter(qasio["runs"].values())))
    sqlite = _bench(tmp_path, "sqlite", "--transactions", "5", "--repeats", "2", "--journal", "delete")
    docs["bench sqlite"] = ("transactions/s", sqlite)
    docs["bench launch"] = ("true", _bench(tmp_path, "launch", "--repeats", "2", "--", "true"))
    docs["compare launch"] = ("python-stdlib", json.loads((DATA / "launch" / "full-run" / "compare.json").read_text()))
    store = json.loads((DATA / "compare" / "bench-run-20261126" / "1r1w" / "compare.json").read_text())
    docs["compare both"] = ("Figure 11", store)
    docs["compare slowdown"] = ("Figure 11", {**store, "experiments": ["slowdown"]})
    docs["compare mixed"] = ("Figure 12", {**store, "experiments": ["mixed"]})

    from smartio.flashdev import load_profile
    from smartio.sqlite import compare as sq

    plan = sq.SqlitePlan(filesystems=("ext4",), optimisations=("B",), ops=("insert",), fig4_modes=())
    cfg, _ = sq.resolve("ext4", "B")
    assert cfg is not None
    runs = tmp_path / "sqlite-guest"
    (runs / sq.run_file("ext4", cfg, "insert")).parent.mkdir(parents=True)
    (runs / sq.run_file("ext4", cfg, "insert")).write_text(json.dumps(sqlite))
    docs["compare sqlite"] = ("ext4", sq.assemble(plan, runs, profile=load_profile("s5-emmc"),
                                                  command="smartio compare sqlite",
                                                  started="2026-12-02T00:00:00+00:00", vm_result=None))
    from test_mobigen_compare import SMALL, guest_out

    from smartio.compare.spec import parse_schedulers
    from smartio.launch import mobigen_compare as mg

    mplan = mg.MobigenPlan(script=str(SMALL.resolve()), schedulers=parse_schedulers("none,smartio"),
                           filesystems=("ext4",), optimisations=("B",))
    docs["compare mobigen"] = ("fastest under smartio", mg.assemble(
        mplan, guest_out(tmp_path / "mobigen", mplan), profile=load_profile("s5-emmc"),
        command="smartio compare mobigen", started="2026-12-02T00:00:00+00:00", vm_result=None))
    return docs


KINDS = ("bench latency", "bench slowdown", "bench concurrency", "bench mixed", "bench all", "bench qasio",
         "bench sqlite", "bench launch", "compare slowdown", "compare mixed", "compare both", "compare qasio",
         "compare sqlite", "compare launch", "compare mobigen")


def test_every_side_of_every_experiment_is_covered():
    sides = {f"bench {e.name}" for e in registry.EXPERIMENTS if e.bench} | {
        f"compare {e.name}" for e in registry.EXPERIMENTS if e.compare}
    assert sides == set(KINDS)


def test_results_show_renders_every_kind_of_stored_run(tmp_path, capsys):
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed (make deps installs it)")
    docs = _documents(tmp_path)
    assert set(docs) == set(KINDS)
    db = tmp_path / "results.db"
    ids = {}
    for kind, (_, doc) in docs.items():
        if kind.startswith("compare"):
            out = tmp_path / kind.replace(" ", "-")
            out.mkdir()
            keep({**doc, "run_uid": kind}, out, db)
            ids[kind] = json.loads((out / "compare.json").read_text())["id"]
        else:
            store = Store(db)
            ids[kind] = store.add(doc)
            store.close()
    capsys.readouterr()
    for kind, (shows, _) in docs.items():
        assert main(["results", "--db", str(db), "show", str(ids[kind])]) == 0, kind
        out = capsys.readouterr().out
        assert "no table for experiment" not in out, kind
        assert shows in out and len(out.splitlines()) > 3, f"{kind}:\n{out}"

"""Recorded fio JSON (tests/data/fio/<experiment>/, made with SMARTIO_RECORD_FIO on a real disk) replayed
through the experiments: the same numbers come out, and the tables render byte for byte as recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smartio.engine.fake import ReplayEngine
from smartio.errors import SmartioError
from smartio.report import tables
from smartio.storebench.options import Settings
from smartio.storebench.runner import check, run_bench

DATA = Path(__file__).parent / "data" / "fio"
EXPERIMENTS = ("latency", "slowdown", "concurrency", "mixed")


def _without_iowait(results: dict) -> dict:
    return {k: v for k, v in results.items() if k != "iowait_pct"}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_replay_reproduces_recorded_results(experiment, tmp_path):
    recorded = json.loads((DATA / experiment / "document.json").read_text())
    st = recorded["settings"]
    settings = Settings(repeats=st["repeats"], size=st["size_bytes"], bs=st["bs"], streams=st["streams"],
                        levels=tuple(recorded["results"].get("levels", (1, 2, 4, 8, 16, 32))),
                        mixes=tuple(recorded["results"].get("mixes", range(10, 101, 10))))
    target = check(experiment, str(tmp_path), settings, destroy_data=False)
    doc = run_bench(experiment, target, settings, ReplayEngine(DATA / experiment), scheduler=None,
                    command="test", progress=False)
    assert _without_iowait(doc["results"]) == _without_iowait(recorded["results"])
    assert list(tmp_path.iterdir()) == []   # replay touches no disk, and cleanup leaves nothing


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_tables_render_byte_for_byte(experiment):
    doc = json.loads((DATA / experiment / "document.json").read_text())
    golden = (DATA / experiment / "table.txt").read_text()
    assert tables.render(doc) + "\n" == golden


def test_replay_detects_changed_jobs(tmp_path):
    settings = Settings(repeats=2, size=2 << 20)   # not the recorded size: different jobs
    target = check("latency", str(tmp_path), settings, destroy_data=False)
    with pytest.raises(SmartioError, match="recorded run 1"):
        run_bench("latency", target, settings, ReplayEngine(DATA / "latency"), scheduler=None, command="t",
                  progress=False)

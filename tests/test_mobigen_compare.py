"""`smartio compare mobigen SCRIPT` (seed 002's Figure 10): the plan is checked before anything boots, the cells are
the filesystems' optimisations that apply (P and f2fs's E are n/a), and the host's document, table and plot come
from the guest's run files. The replay under F turns the script's fsync() into fdatasync(). The VM run itself
(tens of minutes under TCG) is not run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.compare.spec import parse_schedulers
from smartio.errors import UsageError
from smartio.launch import mobigen_compare as mg
from smartio.launch.mobigen import MobigenReplayer, Script, ScriptLayout

SMALL = Path(__file__).parent / "data" / "launch" / "mobigen-small.script"


def _plan(**kw) -> mg.MobigenPlan:
    return mg.MobigenPlan(script=str(SMALL.resolve()), schedulers=parse_schedulers("none,smartio"), **kw)


@pytest.mark.parametrize("kw, flag", [({"filesystems": ("ext3",)}, "--filesystems"),
                                      ({"optimisations": ("W",)}, "--optimisations"),
                                      ({"background": "dd"}, "--background"),
                                      ({"repeats": 0}, "--repeats"),
                                      ({"background_head_s": -1.0}, "--background-head")])
def test_a_bad_plan_names_its_flag(kw, flag):
    with pytest.raises(UsageError) as e:
        _plan(**kw)
    assert e.value.flag == flag


def test_cells_leave_out_what_cannot_apply():
    plan = _plan(optimisations=("B", "F", "E", "P"))
    assert plan.configs() == [("ext4", "B", "fsync", False), ("ext4", "F", "fdatasync", False),
                              ("ext4", "E", "fsync", True), ("f2fs", "B", "fsync", False),
                              ("f2fs", "F", "fdatasync", False)]
    assert mg.na("f2fs", "E") and mg.na("ext4", "P") and mg.na("ext4", "E") is None
    assert mg.MobigenPlan.from_json(plan.to_json()) == plan
    with pytest.raises(UsageError):
        mg.MobigenPlan(script="relative.script")


def _smartio(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smartio", *args], capture_output=True, text=True, timeout=60)


def test_a_missing_or_foreign_script_is_exit_2_before_anything_boots(tmp_path):
    p = _smartio("compare", "mobigen", str(tmp_path / "none.script"))
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "x.json").write_text('{"a": 1}\n')
    p = _smartio("compare", "mobigen", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "not a Mobigen script" in p.stderr
    p = _smartio("compare", "mobigen", str(SMALL), "--schedulers", "smartio:profile")
    assert p.returncode == 2 and "Concurrency Profiler" in p.stderr


def test_iowait_share_is_iowait_over_all_cpu_time():
    before, after = (50, 1000), (110, 1230)             # (iowait, total): +60 iowait of +230 in all
    assert mg.iowait_share(before, after) == pytest.approx(60 / 230)
    assert mg.iowait_share(before, before) == 0.0


def guest_out(tmp_path: Path, plan: mg.MobigenPlan, skip: tuple[str, ...] = ()) -> Path:
    """What the guest leaves: a run file per cell (two replays each; smartio's faster), and its record."""
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    for fs, opt, sync_call, _ in plan.configs():
        for spec in plan.schedulers:
            if f"{fs} {opt} {spec.label}" in skip:
                continue
            base = 4.0 if spec.name == "smartio" else 9.0
            reps = [{"wall_s": base + d, "io_s": base - 1 + d, "sync_s": 1.0, "iowait_share": 0.3 + d / 10,
                     "failed": 0, "skipped": 2, "calls": {"fsync": 3}} for d in (0.0, 0.5)]
            (out / mg.run_file(fs, opt, spec.label)).write_text(json.dumps({"replays": reps, "sync_call": sync_call}))
    (out / mg.GUEST_FILE).write_text(json.dumps({"kernel": "6.1.0-test", "script": Script.read(SMALL).summary(),
                                                 "runs": []}))
    return out


def test_the_document_table_and_plot_come_from_the_guests_files(tmp_path):
    from smartio.flashdev import load_profile

    plan = _plan()
    doc = mg.assemble(plan, guest_out(tmp_path, plan, skip=("f2fs F none",)), profile=load_profile("s5-emmc"),
                      command="smartio compare mobigen", started="2026-12-02T00:00:00+00:00", vm_result=None)
    assert doc["missing"] == ["f2fs F none"]
    cell = doc["table"]["ext4"]["B"]["smartio"]
    assert cell["wall_s"]["mean"] == pytest.approx(4.25) and cell["wall_s"]["n"] == 2
    assert cell["wall_s"]["ci95"][0] < 4.25 < cell["wall_s"]["ci95"][1]
    assert "na" in doc["table"]["f2fs"]["E"]
    text = mg.render(doc)
    assert "| ext4 | B | 9.25 [" in text and "| f2fs | E | n/a |" in text
    assert "fastest under smartio: ext4 B (4.25 s)" in text and "not measured: f2fs F none" in text
    assert "30.0 [" in text or "32.5 [" in text                  # iowait in %
    paths = mg.plot(doc, tmp_path)
    assert [p.name for p in paths] == [mg.PLOT_FILE] and paths[0].stat().st_size > 10_000


def test_f_replays_the_scripts_fsync_as_fdatasync(tmp_path, monkeypatch):
    script = Script.read(SMALL)
    calls = {"fsync": 0, "fdatasync": 0}
    real = {"fsync": os.fsync, "fdatasync": os.fdatasync}

    def counted(name: str):
        def call(fd: int) -> None:
            calls[name] += 1
            real[name](fd)
        return call

    monkeypatch.setattr(os, "fsync", counted("fsync"))
    monkeypatch.setattr(os, "fdatasync", counted("fdatasync"))
    recorded = sum(1 for c in script.calls if c.call == "fsync")
    with ScriptLayout(script, str(tmp_path)) as layout:
        calls.update(fsync=0, fdatasync=0)          # the layout syncs the files it lays out
        MobigenReplayer(script, layout, think=False, sync_call="fdatasync").launch()
        assert calls["fsync"] == 0 and calls["fdatasync"] >= 1
        assert calls["fdatasync"] <= recorded + sum(1 for c in script.calls if c.call == "fdatasync")
        calls.update(fsync=0, fdatasync=0)
        MobigenReplayer(script, layout, think=False).launch()
        assert calls["fsync"] >= 1
    with pytest.raises(UsageError):
        MobigenReplayer(script, layout, sync_call="sync")

"""`smartio compare --experiment launch` without a VM: the plan, and the document, table and
bench/launch's last line assembled from run files as the guest writes them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from smartio.compare.spec import parse_schedulers
from smartio.errors import UsageError
from smartio.flashdev import load_profile
from smartio.launch import compare as la
from smartio.storebench.stats import Stat
from smartio.testbed import hostload
from smartio.testbed.boot import Boot

PROFILE = dataclasses.replace(load_profile("s5-emmc"), time_scale=10.0)


def _plan(**kw) -> la.LaunchPlan:
    return la.LaunchPlan(schedulers=parse_schedulers("none,bfq,smartio,smartio:qasio_boost=0"),
                         apps=("python-stdlib", "sqlite"), caches=("cold",), modes=("real",), **kw)


def test_plan_round_trips_and_refuses_bad_input():
    p = _plan(repeats=2)
    assert la.LaunchPlan.from_json(p.to_json()) == p
    assert len(p.cells()) == 2 * 1 * 2 * 1
    for kw, flag in (({"apps": ("nope",)}, "--apps"), ({"backgrounds": ("read",)}, "--backgrounds"),
                     ({"repeats": 0}, "--repeats"), ({"modes": ()}, "--modes"),
                     ({"headline_repeats": 0}, "--headline-repeats"), ({"replay_repeats": 101}, "--replay-repeats"),
                     ({"replay_repeats": 5, "modes": ("real",)}, "--replay-repeats")):   # no replay cells
        with pytest.raises(UsageError, match=flag):
            la.LaunchPlan(schedulers=parse_schedulers("none"), **kw)


def test_headline_repeats_only_in_the_headline_cells():
    p = dataclasses.replace(_plan(repeats=3, headline_repeats=6), caches=la.CACHES, modes=la.MODES,
                            backgrounds=("none", la.HEADLINE_BG, "rand-write"))
    assert la.LaunchPlan.from_json(p.to_json()) == p
    many = {(c, b, m) for _, c, b, m in p.cells() if p.repeats_of(c, b, m) == 6}
    assert many == {("cold", "none", "real"), ("cold", la.HEADLINE_BG, "real")}
    assert all(p.repeats_of(c, b, m) == 3 for _, c, b, m in p.cells() if (c, b, m) not in many)
    assert _plan(repeats=4).repeats_of("cold", "none", "real") == 4


def test_replay_repeats_only_in_the_cold_replay_cells():
    p = la.LaunchPlan(schedulers=parse_schedulers("none,smartio"), apps=("python-stdlib", "sqlite"), repeats=3,
                      headline_repeats=6, replay_repeats=5)
    assert la.LaunchPlan.from_json(p.to_json()) == p
    got = {(c, b, m): p.repeats_of(c, b, m) for _, c, b, m in p.cells()}
    assert {k for k, n in got.items() if n == 5} == {("cold", "none", "replay"), ("cold", la.HEADLINE_BG, "replay")}
    assert {k for k, n in got.items() if n == 6} == {("cold", "none", "real"), ("cold", la.HEADLINE_BG, "real")}
    assert all(n == 3 for (c, _, _), n in got.items() if c == "warm")
    doc = {"plan": json.loads(p.to_json()), "profile": {"name": "s5-emmc", "queue_depth": 2, "time_scale": 10.0},
           "cells": {}, "headline": {}, "missing": []}
    assert "5 in the cold replay cells" in la.render(doc).splitlines()[0]


def _write(out: Path, label: str, app: str, bg: str, ms: float) -> None:
    f = out / la.run_file(label, app, "cold", bg, "real")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"results": {"wall_s": {"mean": ms / 1e3}}}))


def test_headline_from_run_files(tmp_path):
    plan = _plan()
    # idle, beside seq-write, per app (ms)
    times = {"none": (100, 200, 40, 100), "bfq": (100, 150, 40, 60), "smartio": (100, 110, 40, 44),
             "smartio:qasio_boost=0": (100, 130, 40, 50)}
    for label, (si, sb, qi, qb) in times.items():
        _write(tmp_path, label, "python-stdlib", "none", si)
        _write(tmp_path, label, "python-stdlib", "seq-write", sb)
        _write(tmp_path, label, "sqlite", "none", qi)
        _write(tmp_path, label, "sqlite", "seq-write", qb)
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert doc["missing"] == []
    h = doc["headline"]
    assert h["smartio"]["cold_bg_over_idle"] == pytest.approx((1.1 * 1.1) ** 0.5)
    assert h["none"]["cold_bg_over_idle"] == pytest.approx((2.0 * 2.5) ** 0.5)
    line = la.headline_line(doc)
    # best other excludes both smartio variants; smartio vs none from the geometric means of the busy times
    none_ms, sm_ms = (200 * 100) ** 0.5, (110 * 44) ** 0.5
    assert line == (f"smartio_cold_bg_over_idle={(1.21) ** 0.5:.3f} best_other_cold_bg_over_idle="
                    f"{(1.5 * 1.5) ** 0.5:.3f} smartio_vs_none_pct={(none_ms - sm_ms) / none_ms * 100:.1f}")
    table = la.render(doc)
    assert "python-stdlib cold seq-write real" in table and table.rstrip().endswith(line)


def test_every_background_over_idle_and_every_cells_interval(tmp_path):
    # The table per background: each scheduler's cold real launch beside it over idle, the geometric mean over the
    # applications, with its interval once every application has repeats; a cell shows its interval's half-width.
    plan = _plan(backgrounds=("none", "seq-write", "rand-write"))
    for label, slow in (("none", 2.0), ("smartio", 1.1)):
        for app, idle in (("python-stdlib", 1.0), ("sqlite", 0.4)):
            for bg, k in (("none", 1.0), ("seq-write", slow), ("rand-write", slow ** 0.5)):
                f = tmp_path / la.run_file(label, app, "cold", bg, "real")
                f.parent.mkdir(parents=True, exist_ok=True)
                values = [idle * k * x for x in (0.9, 1.0, 1.1)]
                f.write_text(json.dumps({"results": {"wall_s": {
                    "mean": idle * k, "values": values, "ci95": [idle * k * 0.75, idle * k * 1.2]}}}))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    ratio, ci = la.over_idle(doc["cells"]["smartio"], plan.apps, "rand-write")
    assert ratio is not None and ci is not None and ci[0] < ratio < ci[1] and ratio == pytest.approx(1.1 ** 0.5)
    assert la.over_idle(doc["cells"]["none"], plan.apps, "seq-write")[0] == pytest.approx(doc["headline"]["none"][
        "cold_bg_over_idle"])
    lines = la.background_lines(doc)
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2].splitlines()[2:]}
    assert list(rows) == ["seq-write", "rand-write"]
    assert rows["rand-write"][0] == f"{2.0 ** 0.5:.2f}" and rows["rand-write"][3] == f"{1.1 ** 0.5:.2f}"
    text = la.render(doc)
    assert "1000 ±25 %" in text and "Cold launch beside each background over idle" in text
    # With one launch per cell (--quick) there is no interval: the ratio alone, and the cell its mean alone.
    for f in tmp_path.rglob("*.json"):
        d = json.loads(f.read_text())
        d["results"]["wall_s"] = Stat.of([d["results"]["wall_s"]["mean"]]).to_json()
        f.write_text(json.dumps(d))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert f"{1.1 ** 0.5:.2f} [" not in "\n".join(la.background_lines(doc)) and "1000 ±" not in la.render(doc)
    # No idle background: nothing to divide by, no table.
    plan = dataclasses.replace(plan, backgrounds=("seq-write", "rand-write"))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.background_lines(doc) == [] and "Cold launch beside each" not in la.render(doc)


def test_plot_draws_what_the_run_has(tmp_path):
    # launch.png from a headline run (two panels: no replay) and from a run with only some cells (an interrupted
    # one, or idle only): every panel draws what there is and says when it has nothing, no exception.
    from PIL import Image

    plan = _plan()
    for label in ("none", "smartio"):
        for app, idle, busy in (("python-stdlib", 100, 200), ("sqlite", 40, 60)):
            _write(tmp_path, label, app, "none", idle)
            _write(tmp_path, label, app, "seq-write", busy)
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    with Image.open(la.plot(doc, tmp_path / "a.png")) as im:
        assert "emulated s5-emmc" in im.info["Description"]
    idle_only = la.assemble(dataclasses.replace(plan, backgrounds=("none",)), tmp_path, profile=PROFILE,
                            command="c", started="s", vm_result=None)
    assert all(h["cold_bg_over_idle"] is None for h in idle_only["headline"].values())
    assert la.plot(idle_only, tmp_path / "b.png").stat().st_size > 10000
    empty = la.assemble(plan, tmp_path / "nothing", profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.plot(empty, tmp_path / "c.png").stat().st_size > 10000


def _write_values(out: Path, label: str, app: str, bg: str, values: list[float]) -> None:
    f = out / la.run_file(label, app, "cold", bg, "real")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"results": {"wall_s": Stat.of(values).to_json()}}))


def test_targets_have_verdicts_from_intervals(tmp_path):
    # The three launch targets, each decided by its 95 % interval: "the lowest" from smartio's ratio over each
    # stock scheduler's (Welch on the logs of the four cells per application), so two ratios whose own intervals
    # overlap can still differ, and two that differ by less than the scatter tie (undecided).
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("none,mq-deadline,kyber,bfq,smartio"))
    spread = [0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02, 1.0]
    slows = {"none": 3.0, "mq-deadline": 2.0, "bfq": 1.055, "kyber": 1.04, "smartio": 1.03}
    for label, slow in slows.items():
        for app, idle in (("python-stdlib", 5.0), ("sqlite", 3.0)):
            _write_values(tmp_path, label, app, "none", [idle * x for x in spread])
            _write_values(tmp_path, label, app, "seq-write", [idle * slow * x for x in reversed(spread)])
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    vb, vk = la.versus(doc, "smartio", "bfq"), la.versus(doc, "smartio", "kyber")
    bfq_ci, smartio_ci = (la.over_idle(doc["cells"][k], plan.apps, "seq-write")[1] for k in ("bfq", "smartio"))
    assert vb and vk and bfq_ci and smartio_ci
    assert vb[0] < 1.03 / 1.055 < vb[1] < 1.0     # decided lower, though the ratios' own intervals overlap:
    assert bfq_ci[0] < smartio_ci[1]
    assert vk[0] < 1.0 < vk[1]
    lines = la.target_lines(doc)
    assert "at most 1.15: 1.030" in lines[1] and lines[1].endswith(": met")
    assert "bfq [" in lines[2] and "] lower" in lines[2] and "kyber [" in lines[2] and "] tie" in lines[2]
    assert lines[2].endswith(": undecided")
    assert lines[3].endswith("%: met") and lines[-1] == "  targets met 2/3, undecided 1"
    assert "\n".join(lines) in la.render(doc)
    # Higher than one, decided: not the lowest, whatever the others.
    for app, idle in (("python-stdlib", 5.0), ("sqlite", 3.0)):
        _write_values(tmp_path, "kyber", app, "seq-write", [idle * 0.9 * x for x in spread])
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    lines = la.target_lines(doc)
    assert "kyber [" in lines[2] and "] higher" in lines[2] and lines[2].endswith(": NOT met")
    # Lower than all four that ran: met. Lower than those that ran, but one of the five not run: not shown.
    for app, idle in (("python-stdlib", 5.0), ("sqlite", 3.0)):
        _write_values(tmp_path, "kyber", app, "seq-write", [idle * 1.2 * x for x in spread])
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.target_lines(doc)[2].endswith(": met") and la.target_lines(doc)[-1] == "  targets met 3/3, undecided 0"
    plan2 = dataclasses.replace(plan, schedulers=parse_schedulers("none,kyber,bfq,smartio"))
    doc = la.assemble(plan2, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    lines = la.target_lines(doc)
    assert "mq-deadline not measured" in lines[2] and lines[2].endswith(": not measured")
    # Without none the third target is not measured either; with one launch per cell nothing is decided.
    plan3 = dataclasses.replace(plan, schedulers=parse_schedulers("kyber,bfq,smartio"))
    doc = la.assemble(plan3, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.target_lines(doc)[-1] == "  targets met 1/3, undecided 0, not measured 2"
    for f in tmp_path.rglob("*.json"):
        d = json.loads(f.read_text())
        d["results"]["wall_s"] = Stat.of(d["results"]["wall_s"]["values"][:1]).to_json()
        f.write_text(json.dumps(d))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.target_lines(doc)[-1] == "  targets met 0/3, undecided 0, not measured 3"
    # No smartio, no targets.
    doc = la.assemble(dataclasses.replace(plan, schedulers=parse_schedulers("none,bfq")), tmp_path, profile=PROFILE,
                      command="c", started="s", vm_result=None)
    assert la.target_lines(doc) == []


def test_off_the_cpu_takes_each_launchs_cpu_time_out(tmp_path):
    # Off the CPU: each launch's time less its own CPU time. Two schedulers whose wall times differ only by CPU time
    # that scatters (as under TCG) tie on the wall and are told apart off the CPU, where smartio waits 5 % more
    # beside the writer than bfq; the table, the diagnostic line and the targets (still on the wall) say so.
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("bfq,smartio"))
    cpu = [0.5, 1.5, 0.8, 1.2, 0.6, 1.4, 0.9, 1.1]              # the same CPU scatter everywhere
    wait = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0]
    for label, slow in (("bfq", 1.0), ("smartio", 1.05)):
        for app, base in (("python-stdlib", 3.0), ("sqlite", 2.0)):
            for bg, k in (("none", 1.0), ("seq-write", slow)):
                cpus = cpu if bg == "none" else cpu[::-1]
                walls = [base * k * w + c for w, c in zip(wait, cpus, strict=True)]
                f = tmp_path / la.run_file(label, app, "cold", bg, "real")
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps({"results": {"wall_s": Stat.of(walls).to_json(),
                                                     "breakdown_s": {"cpu": Stat.of(cpus).to_json()}}}))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    cell = doc["cells"]["smartio"][la.headline_key("sqlite", "seq-write")]
    assert la.launch_values(cell, "off_cpu") == pytest.approx([2.0 * 1.05 * w for w in wait])
    assert la.launch_values(cell) == cell["wall_s"]["values"]
    ratio, ci = la.over_idle(doc["cells"]["smartio"], plan.apps, "seq-write", "off_cpu")
    assert ratio == pytest.approx(1.05) and ci and ci[0] < 1.05 < ci[1] < 1.06
    wall, off = la.versus(doc, "smartio", "bfq"), la.versus(doc, "smartio", "bfq", "off_cpu")
    assert wall and off and wall[0] < 1 < wall[1] and 1 < off[0] < 1.05 < off[1]
    text = la.render(doc)
    assert "The same, off the CPU" in text and "1.05 [" in text
    assert "off the CPU, smartio's over each one's (a diagnostic, not a target): bfq [" in text
    assert text.count("] higher") == 1 and "] tie: " in text          # the target's line is on the wall: a tie
    # A run that kept no CPU time per launch (or not one per launch) has nothing off the CPU, and says nothing.
    for f in tmp_path.rglob("*.json"):
        d = json.loads(f.read_text())
        d["results"]["breakdown_s"]["cpu"]["values"] = d["results"]["breakdown_s"]["cpu"]["values"][:3]
        f.write_text(json.dumps(d))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.launch_values(doc["cells"]["bfq"][la.headline_key("sqlite", "none")], "off_cpu") is None
    assert la.over_idle(doc["cells"]["bfq"], plan.apps, "seq-write", "off_cpu") == (None, None)
    assert "off the CPU" not in la.render(doc)


def test_ratios_across_the_sessions_of_a_resumed_run_are_marked(tmp_path, monkeypatch):
    # A resumed run's ratio whose idle and busy launches come from different sessions (another boot, perhaps another
    # machine) is not side by side: the table marks it and says why; the target line says so for the lowest.
    plan = _plan()
    first, second = tmp_path / "vm" / "out", tmp_path / "vm-2" / "out"
    for label in ("none", "bfq", "smartio"):
        for app in ("python-stdlib", "sqlite"):
            _write_values(first, label, app, "none", [1.0, 1.1, 0.9])
            _write_values(second if label == "bfq" else first, label, app, "seq-write", [1.5, 1.6, 1.4])
    doc = la.assemble(plan, [first, second], profile=PROFILE, command="c", started="s", vm_result=None)
    assert doc["cell_sessions"]["bfq"][la.headline_key("sqlite", "seq-write")] == "vm-2"
    assert la.mixes_sessions(doc, la.headline_cells(plan.apps, ("bfq",), "seq-write"))
    assert not la.mixes_sessions(doc, la.headline_cells(plan.apps, ("none", "smartio"), "seq-write"))
    rows = {ln.split()[0]: ln for ln in la.background_lines(doc)[2].splitlines()[2:]}
    assert rows["seq-write"].count(" *") == 1 and rows["seq-write"].rstrip().endswith("]")    # bfq's, not smartio's
    assert "not measured side by side" in la.render(doc)
    lines = la.target_lines(doc)
    assert "bfq [" in lines[2] and "(from different sessions)" in lines[2] and "none [" in lines[2]
    assert lines[2].count("(from different sessions)") == 1
    assert "sessions" not in lines[1] and "sessions" not in lines[3]
    # smartio's own launches beside the writer from the second session: its ratio over idle and over none too.
    for app in ("python-stdlib", "sqlite"):
        (first / la.run_file("smartio", app, "cold", "seq-write", "real")).rename(
            second / la.run_file("smartio", app, "cold", "seq-write", "real"))
    doc = la.assemble(plan, [first, second], profile=PROFILE, command="c", started="s", vm_result=None)
    lines = la.target_lines(doc)
    assert lines[1].endswith("(from different sessions)") and lines[3].endswith("(from different sessions)")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda *a, **k: figs.append(plt.gcf()))   # keep the figure to read it
    la.plot(doc, tmp_path / "m.png")
    monkeypatch.undo()
    labels = [ax.get_xlabel() for f in figs for ax in f.axes]
    assert any(t.startswith("not side by side") and "bfq beside seq-write" in t and "smartio beside" in t
               for t in labels)
    # One session: nothing to mark.
    doc = la.assemble(plan, first, profile=PROFILE, command="c", started="s", vm_result=None)
    assert doc["cell_sessions"] is None and not la.mixes_sessions(doc, la.headline_cells(plan.apps, ("bfq",), "none"))
    assert "side by side" not in la.render(doc)


def test_missing_runs_are_listed(tmp_path):
    plan = _plan()
    _write(tmp_path, "none", "sqlite", "none", 10)
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert "none python-stdlib cold none real" in doc["missing"]
    assert la.headline_line(doc).startswith("smartio_cold_bg_over_idle=n/a")
    assert "missing:" in la.render(doc)


def test_scheduler_clock_follows_the_device(tmp_path, monkeypatch):
    # The testbed slows the device (and TCG the programs) by the time scale: every scheduler's time tunables are
    # multiplied by it (--scheduler-clock device, the default), the spec's own tunables written after and kept.
    import smartio.blockdev as bd
    from smartio.compare import guest
    from smartio.compare.spec import SchedulerSpec, clock_text, with_clock

    assert with_clock(_plan(), PROFILE).clock_scale == 10
    assert with_clock(_plan(clock_scale=1.0), PROFILE).clock_scale == 1
    assert "x10" in clock_text({"clock_scale": 10.0}) and "defaults" in clock_text({})
    q = tmp_path / "block" / "vdz" / "queue"
    (q / "iosched").mkdir(parents=True)
    (q / "nr_requests").write_text("128\n")
    defaults = {"read_anticipation_us": "3000", "write_slice_ms": "100", "write_pace_us": "0", "qasio_boost": "1"}
    for k, v in defaults.items():
        (q / "iosched" / k).write_text(v + "\n")
    (q / "scheduler").write_text("[smartio] none\n")
    monkeypatch.setattr(bd, "SYS", tmp_path)
    monkeypatch.setattr(bd, "is_root", lambda: True)
    monkeypatch.setattr(guest, "_write", lambda path, value: None)       # the fake sysfs cannot switch
    dev = bd.Device("vdz", "vdz", 1 << 30, "254:0")
    assert guest.scale_clock_tunables(dev, "smartio", 10.0) == {"read_anticipation_us": 30000,
                                                                "write_slice_ms": 1000, "write_pace_us": 0}
    assert (q / "iosched" / "qasio_boost").read_text().strip() == "1"
    assert guest.scale_clock_tunables(dev, "smartio", 1.0) == {} and guest.scale_clock_tunables(dev, "none", 10) == {}
    for k, v in defaults.items():
        (q / "iosched" / k).write_text(v + "\n")
    guest.switch(dev, SchedulerSpec("smartio", (("write_slice_ms", 7),)), 64, clock_scale=10.0)
    got = bd.read_tunables(dev)
    assert got["read_anticipation_us"] == "30000" and got["write_slice_ms"] == "7"


def test_scheduler_clock_is_refused_where_it_does_nothing(capsys):
    from smartio.cli import main

    assert main(["compare", "--experiment", "mixed", "--scheduler-clock", "guest"]) == 2
    assert "--scheduler-clock" in capsys.readouterr().err


def test_headline_carries_95_percent_intervals(tmp_path):
    plan = _plan(repeats=3)
    for label, busy in (("none", (200, 210, 190)), ("smartio", (110, 115, 105))):
        for app in plan.apps:
            for bg, vals in (("none", (100, 98, 102)), ("seq-write", busy)):
                f = tmp_path / la.run_file(label, app, "cold", bg, "real")
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps({"results": {"wall_s": {"mean": sum(vals) / 3e3,
                                                                "values": [v / 1e3 for v in vals]}}}))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    h = doc["headline"]["smartio"]
    lo, hi = h["cold_bg_over_idle_ci95"]
    assert lo < h["cold_bg_over_idle"] < hi and hi < 1.3
    lo, hi = h["cold_bg_over_none_ci95"]
    assert lo < 110 / 200 < hi
    assert doc["headline"]["bfq"]["cold_bg_over_idle_ci95"] is None      # bfq's runs are missing
    assert "smartio: cold seq-write/idle 95 % interval [" in la.render(doc)


def test_replay_fidelity_per_cell(tmp_path):
    """Replay against real per (application, cache, background): the geometric mean over the schedulers of
    replay / real, within 15 % or not (from the means where no launch times were kept, by the ratio's 95 %
    interval where they were), and both launches' disk reads per launch where the run recorded them."""
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("none,smartio"), apps=("sqlite",),
                               caches=("cold", "warm"), backgrounds=("none",), modes=("real", "replay"))
    walls = {("none", "cold"): (4.0, 3.2), ("smartio", "cold"): (4.0, 3.6),     # 0.8 and 0.9: 0.849
             ("none", "warm"): (0.1, 0.11), ("smartio", "warm"): (0.1, 0.11)}  # 1.1
    for (label, cache), (real, rep) in walls.items():
        for mode, wall in (("real", real), ("replay", rep)):
            f = tmp_path / la.run_file(label, "sqlite", cache, "none", mode)
            f.parent.mkdir(parents=True, exist_ok=True)
            res: dict = {"wall_s": {"mean": wall}}
            if cache == "cold":
                res |= {"disk_read_requests": {"mean": 200 if mode == "real" else 220},
                        "disk_read_kib": {"mean": 20480},
                        "breakdown_s": {"cpu": {"mean": 2.0 if mode == "real" else 1.0},
                                        "cpu_sys": {"mean": 1.5 if mode == "real" else 0.2}}}
            f.write_text(json.dumps({"results": res}))
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    rows = {r["cache"]: r for r in la.fidelity(doc)}
    assert rows["cold"]["replay_over_real"] == pytest.approx((0.8 * 0.9) ** 0.5) and rows["cold"]["within"] == "no"
    assert rows["warm"]["replay_over_real"] == pytest.approx(1.1) and rows["warm"]["within"] == "yes"
    assert rows["warm"]["ci95"] is None
    assert rows["cold"]["real_read_requests"] == 200 and rows["cold"]["replay_read_requests"] == 220
    assert "real_read_requests" not in rows["warm"]
    text = la.render(doc)
    assert "in 1 of 2 cells; not within in 1, undecided in 0" in text and "200 / 20.0" in text
    assert "220 / 20.0" in text
    assert "CPU s (kernel), real / replay" in text and "2.00 (1.50) / 1.00 (0.20)" in text
    # With launch times, the interval decides: the same 1.1 from launches that scatter widely is undecided, from
    # tight ones within; a tight 0.849 is not within.
    for spread, verdict in ((0.3, "undecided"), (0.001, "yes")):
        for label in ("none", "smartio"):
            for mode, wall in (("real", 0.1), ("replay", 0.11)):
                f = tmp_path / la.run_file(label, "sqlite", "warm", "none", mode)
                f.write_text(json.dumps({"results": {"wall_s": {"mean": wall, "values": [
                    wall * (1 - spread), wall, wall * (1 + spread)]}}}))
        doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
        warm = next(r for r in la.fidelity(doc) if r["cache"] == "warm")
        assert warm["within"] == verdict, warm
        assert warm["ci95"][0] < 1.1 < warm["ci95"][1]
    # Without replays there is nothing to compare.
    assert la.fidelity({**doc, "plan": {**doc["plan"], "modes": ["real"]}}) == []


def test_a_resumed_run_measures_only_what_no_earlier_session_finished(tmp_path, monkeypatch, capsys):
    """--resume DIR: a new VM session in DIR (artifacts vm-2, vm-3, ...) with DIR's plan, profile and time scale;
    the guest skips the cells an earlier session wrote; the document is the whole run's, a cell measured twice
    counting from the later session, and lists the sessions."""
    import smartio.compare.run as cr

    plan = _plan()
    booted: list[tuple[la.LaunchPlan, Path]] = []

    guests: list[Boot] = []

    def fake_guest(module, plan_json, assemble_doc, *, out, existing_out, boot, **kw):
        gp = la.LaunchPlan.from_json(plan_json)
        art = out / (f"vm-{len(cr.session_dirs(out)) + 1}" if cr.session_dirs(out) else "vm")
        booted.append((gp, art))
        guests.append(boot)
        for spec, (app, _, bg, _) in gp.steps()[:3]:   # this session finishes three cells (all cold, real)
            _write(art / "out", spec.label, app, bg, 100 + len(booted))
        (art / "run.json").write_text(json.dumps({"started": f"s{len(booted)}", "duration_s": 5.0}))
        return assemble_doc(art / "out", None, "t"), out

    monkeypatch.setattr(cr, "run_in_guest", fake_guest)
    monkeypatch.setattr(cr, "check_testbed", lambda: None)
    monkeypatch.setattr(cr, "module_for", lambda names, kernel="6.1": [])
    monkeypatch.setattr(la.host, "plot", lambda doc, path: path)
    out = tmp_path / "run"
    doc, d = la.run_launch_compare(plan, profile="s5-emmc", out=out, timeout=60, command="c", time_scale=10.0,
                                   boot=Boot(cpus=1, kernel_args=("tsc=reliable",)))
    assert d == out.resolve() and booted[0][0].done == () and booted[0][1].name == "vm"
    assert doc["vm"] == {"cpus": 1, "default_args": ["init_on_alloc=0"], "kernel_args": ["tsc=reliable"]}
    assert len(doc["missing"]) == len(plan.steps()) - 3 and doc["sessions"] is None
    assert doc["plan"]["done"] == [] and json.loads((out / la.START_FILE).read_text())["time_scale"] == 10.0
    # Resumed: the plan comes from the run; the three cells are skipped, three more measured, in vm-2.
    doc, _ = la.run_launch_compare(None, profile="ignored", out=None, timeout=60, command="c", resume=out)
    gp, art = booted[1]
    assert art.name == "vm-2" and len(gp.done) == 3 and gp.steps() == plan.steps()[3:]
    assert len(doc["missing"]) == len(plan.steps()) - 6
    assert [(s["artifacts"], s["cells"]) for s in doc["sessions"]] == [("vm", 3), ("vm-2", 3)]
    assert "3 cells measured in 1 session(s), 13 to go" in capsys.readouterr().err
    # Every session boots the guest the run started with.
    assert guests == [Boot(cpus=1, kernel_args=("tsc=reliable",))] * 2 and doc["vm"]["kernel_args"] == ["tsc=reliable"]
    assert "(1 vCPU, kernel args init_on_alloc=0 tsc=reliable)" in la.render(doc)
    # A cell measured again counts from the later session.
    spec, (app, cache, bg, mode) = plan.steps()[0]
    _write(art / "out", spec.label, app, bg, 999)
    doc = la.assemble(plan, [out / "vm" / "out", art / "out"], profile=PROFILE, command="c", started="s",
                      vm_result=None)
    assert doc["cells"][spec.label][f"{app}.{cache}.{bg}.{mode}"]["wall_s"]["mean"] == pytest.approx(0.999)
    # Nothing left: no VM, the document from what is there.
    for spec, (app, _, bg, _) in plan.steps():
        _write(art / "out", spec.label, app, bg, 50)
    booted.clear()
    doc, _ = la.run_launch_compare(None, profile="s5-emmc", out=None, timeout=60, command="c", resume=out)
    assert booted == [] and doc["missing"] == [] and (out / "compare.json").exists()
    with pytest.raises(UsageError, match="resume .* holds no launch comparison"):
        la.run_launch_compare(None, profile="s5-emmc", out=None, timeout=60, command="c", resume=tmp_path)
    (tmp_path / la.START_FILE).write_text("{not json")
    with pytest.raises(UsageError, match="resume .* cannot read .*launch-run.json"):
        la.run_launch_compare(None, profile="s5-emmc", out=None, timeout=60, command="c", resume=tmp_path)


@pytest.mark.parametrize("args, message", [
    (["resume", "{tmp}/nope"], "is not a directory"),
    (["resume", "{tmp}", "--apps", "editor"], "unrecognized arguments: --apps editor"),
    (["resume", "{tmp}", "--quick", "--repeats", "2"], "unrecognized arguments: --quick --repeats 2"),
    (["resume", "{tmp}", "--cpus", "1"], "unrecognized arguments: --cpus 1"),
    (["resume", "{tmp}", "--kernel-arg", "tsc=reliable"], "unrecognized arguments: --kernel-arg"),
    (["resume", "{tmp}", "--separate"], "unrecognized arguments: --separate"),
    (["resume", "{tmp}", "--background-start", "once"], "unrecognized arguments: --background-start"),
    # the old spellings, rewritten to the new grammar with a notice
    (["--experiment", "launch", "--resume", "{tmp}", "--apps", "editor"], "unrecognized arguments: --apps editor"),
    (["--experiment", "mixed", "--resume", "{tmp}"], "unrecognized arguments: --resume"),
])
def test_resume_refuses_what_would_change_the_plan(tmp_path, capsys, args, message):
    from smartio.cli import main

    assert main(["compare", *[a.format(tmp=tmp_path) for a in args]]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--cpus", "0"], "`--cpus 0`: must be a whole number from 1 to 64"),
    (["--experiment", "launch", "--cpus", "65"], "from 1 to 64"),
    (["--experiment", "sqlite", "--kernel-arg", "a b"], "must be one kernel argument, without spaces"),
    (["--experiment", "qasio", "--kernel-arg", ""], "must be one kernel argument"),
    (["--kernel-arg", "console=ttyS1"], "the testbed sets console=*, rdinit=*, smartio.* itself"),
])
def test_compare_refuses_a_guest_it_cannot_boot_before_anything_is_made(tmp_path, monkeypatch, capsys, args,
                                                                         message):
    from smartio.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["compare", *args]) == 2
    assert message in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_resumed_plan_takes_the_run_uid_from_start_file_else_compare_json(tmp_path):
    # A run's row in the results database follows it across --resume sessions; a compare.json that a killed session
    # left unreadable does not stop a run whose START_FILE is there from resuming (it then gets a new row).
    plan = _plan(repeats=2)
    start = {"plan": json.loads(plan.to_json()), "profile": "s5-emmc", "time_scale": 10.0}
    (tmp_path / la.START_FILE).write_text(json.dumps(start | {"run_uid": "from-start"}))
    (tmp_path / "compare.json").write_text(json.dumps({"run_uid": "from-doc"}))
    assert la.resumed_plan(tmp_path) == (plan, "s5-emmc", 10.0, "from-start")
    (tmp_path / la.START_FILE).write_text(json.dumps(start))             # written before run_uid existed
    assert la.resumed_plan(tmp_path)[3] == "from-doc"
    (tmp_path / "compare.json").write_text('{"run_uid": "cut off')
    assert la.resumed_plan(tmp_path) == (plan, "s5-emmc", 10.0, None)


def test_resumed_boot_is_how_the_run_started(tmp_path):
    # A run from before the settings were kept booted 2 vCPUs with the kernel's own defaults: its later sessions
    # do too (no default arguments; Debian's kernel then zeroes pages on allocation).
    assert la.resumed_boot(tmp_path) == Boot(cpus=2, default_args=())    # no START_FILE (then its compare.json)
    (tmp_path / la.START_FILE).write_text(json.dumps({"plan": {}}))
    assert la.resumed_boot(tmp_path) == Boot(cpus=2, default_args=())
    # A "vm" without default_args was written while they were init_on_alloc=0.
    (tmp_path / la.START_FILE).write_text(json.dumps({"vm": {"cpus": 1, "kernel_args": ["tsc=reliable"]}}))
    assert la.resumed_boot(tmp_path) == Boot(cpus=1, default_args=("init_on_alloc=0",), kernel_args=("tsc=reliable",))
    # The testbed's own arguments as the run recorded them, whatever today's are.
    vm_record = {"cpus": 2, "default_args": ["nosmt"], "kernel_args": []}
    (tmp_path / la.START_FILE).write_text(json.dumps({"vm": vm_record}))
    assert la.resumed_boot(tmp_path).args() == ["nosmt"]


def test_resumed_kernel_is_the_one_the_run_started_on(tmp_path):
    assert la.resumed_kernel(tmp_path) == "6.1"                           # no START_FILE
    (tmp_path / la.START_FILE).write_text(json.dumps({"plan": {}}))       # a run from before the choice
    assert la.resumed_kernel(tmp_path) == "6.1"
    (tmp_path / la.START_FILE).write_text(json.dumps({"plan": {}, "kernel": "6.12"}))
    assert la.resumed_kernel(tmp_path) == "6.12"


def test_many_missing_cells_are_counted_per_scheduler_few_are_named():
    many = [f"{s} editor cold {bg} real" for s in ("kyber", "bfq") for bg in ("none", "seq-write", "rand-write",
                                                                                 "buffered-write", "x", "y")]
    assert la.missing_lines(many, ["none", "kyber", "bfq"]) == [
        '  missing: 12 cells (kyber 6, bfq 6); the document\'s "missing" names them']
    assert la.missing_lines(many[:2], ["kyber"]) == ["  missing: kyber editor cold none real, kyber editor cold "
                                                     "seq-write real"]
    assert la.missing_lines([], ["kyber"]) == []


def test_a_run_still_measuring_is_reprinted_from_its_cell_files(tmp_path, monkeypatch):
    """bench/launch --analyze on a run whose session is still going (or was killed before it wrote compare.json):
    the cells its sessions wrote since count, the kernel comes from a session's run.json or its guest's record;
    a compare.json with every cell there is stands, named by the kernel its sessions recorded; cell files that
    cannot be assembled again fall back to compare.json; a directory with neither is a usage error."""
    import smartio.compare.run as cr

    plan = _plan()
    steps = plan.steps()

    def first_session(module, plan_json, assemble_doc, *, out, **kw):
        for spec, (app, _, bg, _) in steps[:2]:
            _write(out / "vm" / "out", spec.label, app, bg, 100)
        # Killed before it wrote compare.json: the cells, the guest's record, run.json (interrupted), no VM result.
        (out / "vm" / "out" / la.GUEST_FILE).write_text(json.dumps({"kernel": "6.1.0-first", "before": {}}))
        assert la.current_document(out)[1] == ("no compare.json yet (a run still going, or stopped before it wrote "
                                               "it): reprinted from its cell files")
        (out / "vm" / "run.json").write_text(json.dumps({"kernel": "6.1.0-first", "interrupted": True}))
        return assemble_doc(out / "vm" / "out", None, "t"), out

    monkeypatch.setattr(cr, "run_in_guest", first_session)
    monkeypatch.setattr(cr, "check_testbed", lambda: None)
    monkeypatch.setattr(cr, "module_for", lambda names, kernel="6.1": [])
    monkeypatch.setattr(la.host, "plot", lambda doc, path: path)
    out = tmp_path / "run"
    kept, _ = la.run_launch_compare(plan, profile="s5-emmc", out=out, timeout=60, command="c", time_scale=10.0)
    assert len(kept["missing"]) == len(steps) - 2 and kept["kernel"] == "6.1.0-first"   # not the VM's: interrupted
    assert la.current_document(out) == (json.loads((out / "compare.json").read_text()), None)
    # A second session, going: three more cells and its guest's record (and a cell being written), no run.json.
    going = out / "vm-2" / "out"
    for spec, (app, _, bg, _) in steps[2:5]:
        _write(going, spec.label, app, bg, 200)
    (going / la.run_file("smartio", "sqlite", "cold", "none", "real")).with_suffix(".json.part").write_text("{")
    (going / la.GUEST_FILE).write_text(json.dumps({"kernel": "6.1.0-now", "before": {}, "after": None}))
    doc, note = la.current_document(out)
    assert note == (f"3 cell(s) measured since {out / 'compare.json'} was written (a run still going, or stopped "
                    "before it wrote it): reprinted from its cell files")
    assert len(doc["missing"]) == len(steps) - 5 and doc["kernel"] == "6.1.0-now"
    assert doc["run_uid"] == kept["run_uid"] and doc["plan"] == kept["plan"]
    assert "kernel 6.1.0-now" in la.render(doc) and "vm-2 started ?, 3 cells" in la.render(doc)
    # A guest record torn by a kill is skipped; so is a session's torn run.json.
    (going / la.GUEST_FILE).write_text('{"kern')
    (out / "vm-2" / "run.json").write_text("")
    assert la.current_document(out)[0]["kernel"] == "6.1.0-first"
    # A compare.json with every cell there is, written before cell_sessions existed: it stands, and which session
    # measured each cell comes from the cells.
    (out / "compare.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "cell_sessions"}))
    got, note = la.current_document(out)
    assert note is None and got["run_uid"] == doc["run_uid"]
    where = [got["cell_sessions"][spec.label][f"{app}.{cache}.{bg}.{mode}"]
             for spec, (app, cache, bg, mode) in steps[:5]]
    assert where == ["vm", "vm", "vm-2", "vm-2", "vm-2"]
    # Cells that cannot be assembled again: compare.json, said so.
    bad = going / la.run_file("none", "sqlite", "cold", "seq-write", "real")
    bad.write_text("{torn")
    doc2, note = la.current_document(out)
    assert doc2 == json.loads((out / "compare.json").read_text())
    assert note and note.startswith("its cell files could not be assembled again (") and "reprinted from" in note
    bad.unlink()
    with pytest.raises(UsageError, match="holds no launch comparison"):
        la.current_document(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "compare.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read .*compare.json: not a JSON document"):
        la.current_document(tmp_path / "bad")
    (tmp_path / "bad" / "compare.json").write_text(json.dumps({"experiment": "mixed"}))
    with pytest.raises(UsageError, match="is a 'mixed' comparison, not a launch one"):
        la.current_document(tmp_path / "bad")


def test_the_headline_counts_a_scheduler_once_every_application_has_both_cells(tmp_path):
    """Mid-run, a scheduler with one application measured must not be the best other (nor smartio's figure)."""
    plan = _plan()
    for label, (idle, busy) in {"none": (100, 300), "bfq": (100, 110), "smartio": (100, 105)}.items():
        _write(tmp_path, label, "python-stdlib", "none", idle)
        _write(tmp_path, label, "python-stdlib", "seq-write", busy)
    for label in ("none",):
        _write(tmp_path, label, "sqlite", "none", 40)
        _write(tmp_path, label, "sqlite", "seq-write", 120)
    doc = la.assemble(plan, tmp_path, profile=PROFILE, command="c", started="s", vm_result=None)
    assert [k for k, v in doc["headline"].items() if v["complete"]] == ["none"]
    assert la.headline_line(doc) == ("smartio_cold_bg_over_idle=n/a best_other_cold_bg_over_idle=3.000 "
                                     "smartio_vs_none_pct=n/a")


def test_real_and_replay_cells_are_measured_together_unless_separate():
    """A real cell and the replay cell of the same scheduler, application, cache and background form one group
    (their launches taken in turn); --separate, a cell done in an earlier session, or a plan without replays leave
    cells alone. Every step is in exactly one group, in order."""
    p = la.LaunchPlan(schedulers=parse_schedulers("none,kyber"), apps=("editor",), caches=("cold",))
    groups = p.groups()
    assert [[s for s in g] for _, g in groups] == [p.steps()[i:i + 2] for i in range(0, len(p.steps()), 2)]
    assert [i for i, _ in groups] == [0, 2, 4, 6]
    assert all([c[3] for _, c in g] == ["real", "replay"] and g[0][0] == g[1][0] and g[0][1][:3] == g[1][1][:3]
               for _, g in groups)
    assert all(len(g) == 1 for _, g in dataclasses.replace(p, interleave=False).groups())
    assert all(len(g) == 1 for _, g in dataclasses.replace(p, modes=("real",)).groups())
    half = dataclasses.replace(p, done=(la.cell_id("none", "editor", "cold", "none", "real"),))
    assert [len(g) for _, g in half.groups()] == [1, 2, 2, 2] and half.groups()[0][1][0][1][3] == "replay"
    assert [s for _, g in half.groups() for s in g] == half.steps()
    assert la.LaunchPlan.from_json(p.to_json()).interleave
    backwards = dataclasses.replace(p, modes=("replay", "real"))     # paired whatever the order of --modes
    assert all([c[3] for _, c in g] == ["replay", "real"] for _, g in backwards.groups())


def test_a_run_stored_before_interleaving_resumes_with_its_cells_apart(tmp_path, capsys):

    plan = la.LaunchPlan(schedulers=parse_schedulers("none"), apps=("editor",))
    old = json.loads(plan.to_json())
    del old["interleave"], old["background_start"]
    (tmp_path / la.START_FILE).write_text(json.dumps({"plan": old, "profile": "s5-emmc", "time_scale": 10.0}))
    assert la.resumed_plan(tmp_path)[0] == dataclasses.replace(plan, interleave=False, background_start="each-launch")
    (tmp_path / la.START_FILE).unlink()
    (tmp_path / "compare.json").write_text(json.dumps({"experiment": "launch", "plan": old,
                                                       "profile": {"name": "s5-emmc", "time_scale": 10.0}}))
    assert not la.resumed_plan(tmp_path)[0].interleave
    assert la.resumed_plan(tmp_path)[0].background_start == "each-launch"
    doc = {"plan": old, "profile": {"name": "s5-emmc", "queue_depth": 2, "time_scale": 10.0}, "cells": {},
           "headline": {}, "missing": []}
    assert "measured one cell after the other" in la.render(doc)
    assert "started anew a second before every launch" in la.render(doc)
    text = la.render({**doc, "plan": json.loads(plan.to_json())})
    assert "taken in turn (interleaved)" in text and "started once per scheduler, 30 s before" in text
    assert "background workloads" not in la.render({**doc, "plan": {**old, "backgrounds": ["none"]}})
    # A new run interleaves unless --separate.
    from smartio.cli import build_parser
    from smartio.cli.compare import launch_plan_from_args
    for extra, want, start in (([], True, "once"), (["--separate"], False, "once"),
                               (["--background-start", "each-launch"], True, "each-launch")):
        a = build_parser().parse_args(["compare", "--experiment", "launch", *extra])
        assert (launch_plan_from_args(a).interleave, launch_plan_from_args(a).background_start) == (want, start)


def test_a_background_started_once_runs_through_its_cells_in_a_row():
    """background_start "once": under each scheduler the cells of one background come together (the guest starts
    it once for them), real and replay still side by side; "each-launch" keeps the application-first order."""
    p = la.LaunchPlan(schedulers=parse_schedulers("none,bfq"), apps=("editor", "sqlite"),
                      backgrounds=("none", "seq-write", "buffered-write"))
    bgs = [c[2] for c in p.cells()]
    assert bgs == sorted(bgs, key=p.backgrounds.index) and len(p.cells()) == 2 * 2 * 3 * 2
    assert all(len(g) == 2 for _, g in p.groups())
    assert sorted(p.cells()) == sorted(dataclasses.replace(p, background_start="each-launch").cells())
    assert [c[0] for c in dataclasses.replace(p, background_start="each-launch").cells()][:12] == ["editor"] * 12
    with pytest.raises(UsageError, match="--background-start"):
        dataclasses.replace(p, background_start="sometimes")


def test_smartios_rules_per_launch_from_its_counters(tmp_path):
    # bench/launch --analyze: what smartio's rules did per launch in each cell beside a background, from the
    # cumulative counters the guest keeps after each cell (less the previous cell's, per scheduler and session).
    plan = dataclasses.replace(_plan(), apps=("sqlite",), modes=("real", "replay"))

    def stats(writes: int, slices: int, antic: int, boosted: int) -> dict:
        return {"stats": f"be_read inserted=9 dispatched=9\nbe_write inserted={writes} merged=0 dispatched={writes}\n"
                         f"rt_write dispatched=1\nevents requeued=0 write_slice_expired={slices}\n"
                         f"anticipation holds=50 hits=40 expired={antic}\nsingle_write holds=7\n"
                         f"qasio_meta detected=3 boosted={boosted}\nqasio_sync boosted=1\ndepth nr_requests=128",
                "phase": "read"}

    runs = []
    for bg, counters in (("none", stats(10, 0, 0, 0)), ("seq-write", stats(130, 8, 20, 3))):
        for mode in ("real", "replay"):     # cells measured together: one record per mode, the same counters
            runs.append({"scheduler": "smartio", "app": "sqlite", "cache": "cold", "background": bg, "mode": mode,
                         "interleaved_with": [m for m in ("real", "replay") if m != mode], "rc": 0,
                         "counters": counters})
        _write_values(tmp_path / "vm" / "out", "smartio", "sqlite", bg, [1.0, 1.1])
    runs.append({"scheduler": "bfq", "app": "sqlite", "cache": "cold", "background": "seq-write", "mode": "real",
                 "rc": 0, "counters": {}})
    # the replay cells: two launches each, as the real ones
    for bg in ("none", "seq-write"):
        f = tmp_path / "vm" / "out" / la.run_file("smartio", "sqlite", "cold", bg, "replay")
        f.write_text(json.dumps({"results": {"wall_s": Stat.of([1.0, 1.2]).to_json()}}))
    (tmp_path / "vm" / "out" / la.GUEST_FILE).write_text(json.dumps({"runs": runs}))
    doc = la.assemble(plan, tmp_path / "vm" / "out", profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.parse_stats("anticipation holds=5 expired=2 x=y\nphase read") == {"anticipation.holds": 5,
                                                                                "anticipation.expired": 2}
    rows = la.rule_counts(tmp_path, doc)
    assert [(r["cell"], r["launches"]) for r in rows] == [("sqlite cold none real+replay", 4),
                                                          ("sqlite cold seq-write real+replay", 4)]
    busy = rows[1]      # less the idle cell's counters, over 4 launches (two real, two replay)
    assert busy["writes"] == pytest.approx((131 - 11) / 4) and busy["slices expired"] == pytest.approx(2.0)
    assert busy["anticipations ran out"] == pytest.approx(5.0) and busy["boosted"] == pytest.approx(0.75)
    assert busy["single-write holds"] == 0
    lines = la.rule_lines(tmp_path, doc)
    assert len(lines[2].splitlines()) == 3 and "seq-write" in lines[2] and " none " not in lines[2]
    # A run kept without its guest record (tests/data's compare.json alone) has nothing to say.
    assert la.rule_lines(tmp_path / "elsewhere", doc) == []


def test_rules_per_launch_of_cells_measured_apart_and_in_a_later_session(tmp_path):
    # Cells measured one after the other (--separate) each have their own counters; a later session of a resumed
    # run starts from a new switch, so its first cell counts from there and says so; counters that went back (the
    # module reloaded) count from zero.
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("smartio"), apps=("sqlite",),
                               modes=("real", "replay"), backgrounds=("none", "seq-write", "rand-write"))

    def run(bg: str, mode: str, writes: int) -> dict:
        return {"scheduler": "smartio", "app": "sqlite", "cache": "cold", "background": bg, "mode": mode, "rc": 0,
                "counters": {"stats": f"be_write inserted={writes} dispatched={writes}"}}

    first, second = tmp_path / "vm" / "out", tmp_path / "vm-2" / "out"
    for out, cells in ((first, [("none", "real", 10), ("none", "replay", 20), ("seq-write", "real", 120),
                                ("seq-write", "replay", 320)]),
                       (second, [("rand-write", "real", 1000), ("rand-write", "replay", 500)])):
        for bg, mode, _ in cells:
            f = out / la.run_file("smartio", "sqlite", "cold", bg, mode)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps({"results": {"wall_s": Stat.of([1.0, 1.1, 1.2, 1.3]).to_json()}}))
        (out / la.GUEST_FILE).write_text(json.dumps({"runs": [run(*c) for c in cells]}))
    doc = la.assemble(plan, [first, second], profile=PROFILE, command="c", started="s", vm_result=None)
    rows = {(r["cell"], r["session"]): r for r in la.rule_counts(tmp_path, doc)}
    assert [(r["writes"], r["since_switch"]) for r in rows.values()] == [
        (2.5, True), (2.5, False), (25.0, False), (50.0, False), (250.0, True), (125.0, True)]
    assert list(rows)[3] == ("sqlite cold seq-write replay", "vm")
    text = "\n".join(la.rule_lines(tmp_path, doc))
    assert "session" in text and "sqlite cold rand-write real +" in text and "counted from the switch" in text
    assert "sqlite cold seq-write real +" not in text and " none " not in text


def test_runs_are_pooled_per_target_and_runs_that_measure_otherwise_refused(tmp_path):
    # Three runs of smartio and bfq, smartio a little lower in each, by less than one run's scatter decides: each
    # run ties, their pooling is printed beside them, and runs of another profile are refused. The targets other
    # schedulers decide are "not measured" where none of the runs had them.
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("bfq,smartio"))
    spread = [0.9, 0.95, 1.0, 1.05, 1.1, 0.97]
    runs = []
    for i, shift in enumerate((0.98, 1.0, 1.02)):
        out = tmp_path / f"run{i}"
        for label, slow in (("bfq", 1.10), ("smartio", 1.05)):
            for app, idle in (("python-stdlib", 5.0), ("sqlite", 3.0)):
                _write_values(out, label, app, "none", [idle * shift * x for x in spread])
                _write_values(out, label, app, "seq-write", [idle * shift * slow * x for x in reversed(spread)])
        doc = la.assemble(plan, out, profile=PROFILE, command="c", started="s", vm_result=None)
        tie = la.versus(doc, "smartio", "bfq")
        assert tie is not None and tie[0] < 1 < tie[1]
        runs.append((f"run{i}", doc))
    text = "\n".join(la.pool_lines(runs))
    pooled = next(line for line in text.splitlines() if line.startswith("pooled"))
    assert pooled.count("(3 runs)") == 2 and "0.955 [" in pooled       # 1.05 / 1.10, the same in every run
    assert "beside seq-write over idle at most 1.15: met" in text
    assert "the lowest over idle: bfq tie: undecided (only bfq measured)" in text
    assert "faster than none beside seq-write: not measured" in text
    with pytest.raises(UsageError, match="at least two runs"):
        la.pool_lines(runs[:1])
    other = {**runs[1][1], "profile": {**runs[1][1]["profile"], "name": "s7-ufs"}}
    with pytest.raises(UsageError, match="`--pool run1`: another profile than run0"):
        la.pool_lines([runs[0], ("run1", other)])


def test_launches_other_work_on_the_host_disturbed_are_marked_and_the_targets_checked_without_them(tmp_path):
    # A burst of other work on the host (host-load.csv) during three of smartio's launches beside the writer makes
    # them slow, and smartio ties bfq; the report marks those launches by the host's load alone and decides the
    # targets again without them, where smartio is lower. The full figures stay the headline.
    plan = dataclasses.replace(_plan(), schedulers=parse_schedulers("bfq,smartio"))
    out = tmp_path / "vm" / "out"
    spread = [0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02, 1.0]
    t = 1000.0
    for label, slow in (("bfq", 1.06), ("smartio", 1.0)):
        for app, idle in (("python-stdlib", 5.0), ("sqlite", 3.0)):
            for bg, k in (("none", 1.0), ("seq-write", slow)):
                walls = [idle * k * x for x in spread]
                burst = label == "smartio" and app == "python-stdlib" and bg == "seq-write"
                if burst:
                    walls[:3] = [w * 1.6 for w in walls[:3]]
                spans = []
                for w in walls:
                    spans.append([t, t + w])
                    t += w + 1.0
                f = out / la.run_file(label, app, "cold", bg, "real")
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps({"results": {"wall_s": Stat.of(walls).to_json(), "launch_unix_s": spans}}))
                if burst:
                    hot = (spans[0][0], spans[2][1])
    rows = []
    for end in range(1005, int(t) + 10, 5):
        rows.append(f"{end:.3f},5.000,1.5,1.0,{0.7 if end - 5 < hot[1] and end > hot[0] else 0.02:.3f}")
    (tmp_path / "vm" / hostload.FILE).write_text(hostload.COLUMNS + "\n" + "\n".join(rows) + "\n")
    doc = la.assemble(plan, out, profile=PROFILE, command="c", started="s", vm_result=None)
    busy = doc["cells"]["smartio"][la.headline_key("python-stdlib", "seq-write")]
    assert la.disturbed(busy) == [True] * 3 + [False] * 5 and busy["host_other_cpus"]["from"] == "launch"
    assert la.disturbed(doc["cells"]["bfq"][la.headline_key("python-stdlib", "seq-write")]) == [False] * 8
    full, check = la.versus(doc, "smartio", "bfq"), la.versus(la.without_disturbed(doc), "smartio", "bfq")
    assert full and check and full[0] < 1 < full[1] and check[1] < 1
    assert la.without_disturbed(doc)["cells"]["smartio"][la.headline_key("python-stdlib", "seq-write")][
        "wall_s"]["values"] == busy["wall_s"]["values"][3:]
    text = la.render(doc)
    assert "host: 3 of 64 launches were taken while other processes used more than 0.25" in text
    assert "in the headline cells: smartio python-stdlib seq-write 3/8" in text
    # The table marks the cell, so a figure taken during the burst is seen where it is read.
    row = next(line for line in text.splitlines() if line.startswith("python-stdlib cold seq-write real"))
    assert row.count("!") == 1 and row.rstrip().endswith("!3/8") and "!k/n: k of the cell's n launches" in text
    # Every per-launch figure of a filtered cell is recomputed from the launches kept; filtering twice changes
    # nothing more.
    check_doc = la.without_disturbed(doc)
    kept = check_doc["cells"]["smartio"][la.headline_key("python-stdlib", "seq-write")]
    assert kept["wall_s"] == Stat.of(busy["wall_s"]["values"][3:]).to_json()
    assert kept["min_s"] == min(busy["wall_s"]["values"][3:]) and len(kept["launch_unix_s"]) == 5
    assert la.disturbed(kept) == [False] * 5 and la.without_disturbed(check_doc) == check_doc
    after = text.split("the targets again without those launches")[1]
    assert "bfq [" in after and "] lower" in after
    assert "] tie" in text.split("the targets again without those launches")[0]
    # Host values that are not one per launch (a cell measured again) mark nothing, and do not break the report.
    odd = {**busy, "host_other_cpus": {"values": [0.9, 0.9], "from": "launch"}}
    assert la.disturbed(odd) is None
    la.render({**doc, "cells": {**doc["cells"], "smartio": {**doc["cells"]["smartio"],
                                                            la.headline_key("python-stdlib", "seq-write"): odd}}})
    # A run file without its launches' times: the cell's start to its end for each launch.
    f = out / la.run_file("smartio", "python-stdlib", "cold", "seq-write", "real")
    d = json.loads(f.read_text())
    del d["results"]["launch_unix_s"]
    d |= {"started": "1970-01-01T00:16:40+00:00", "finished": "1970-01-01T00:30:00+00:00"}
    f.write_text(json.dumps(d))
    cell = la.assemble(plan, out, profile=PROFILE, command="c", started="s", vm_result=None)["cells"]["smartio"][
        la.headline_key("python-stdlib", "seq-write")]
    assert cell["host_other_cpus"]["from"] == "cell" and len(set(cell["host_other_cpus"]["values"])) == 1
    # No host-load file (a run stored before it was kept): no marks, no lines.
    (tmp_path / "vm" / hostload.FILE).unlink()
    doc = la.assemble(plan, out, profile=PROFILE, command="c", started="s", vm_result=None)
    assert la.disturbance_lines(doc) == [] and "host:" not in la.render(doc)


def test_a_stored_cell_takes_the_host_load_of_its_run_file_only_for_the_same_launches():
    # compare.json written before cells carried the host's load: the run file's is added when it holds the same
    # launches, not when a resumed session measured the cell again since.
    stored = {"wall_s": {"values": [1.0, 2.0]}}
    again = {"wall_s": {"values": [1.0, 2.0]}, "host_other_cpus": {"values": [0.0, 0.5], "from": "launch"}}
    assert la.host._with_host_load(stored, again)["host_other_cpus"] == again["host_other_cpus"]
    other = {**again, "wall_s": {"values": [1.5, 2.5, 3.0]}}
    assert la.host._with_host_load(stored, other) == stored and la.host._with_host_load(stored, None) == stored


class ScriptedLauncher:
    """Warm launches that take the given times, in order."""

    def __init__(self, times):
        self.times = iter(times)

    def launch(self):
        return next(self.times)


def test_a_calibration_in_a_slow_spell_is_taken_again_and_the_lowest_median_kept():
    waits: list[float] = []
    slow = [9.0, 0.78, 0.79, 0.80, 0.79, 0.81]      # one untimed launch, then five: median 0.79
    fast = [9.0, 0.51, 0.52, 0.53, 0.52, 0.52]      # median 0.52
    # the set-up's median (0.61) was in a spell itself: a switch at 0.52 is within it, and lowers the floor
    floor = {"app": 0.61}
    assert la.settled_warm(ScriptedLauncher(fast), floor, "app", sleep=waits.append) == [0.52]
    assert waits == [] and floor == {"app": 0.52}
    # the next switch falls in a spell: taken again after a wait, and the floor stays the lowest
    assert la.settled_warm(ScriptedLauncher(slow + fast), floor, "app", sleep=waits.append) == [0.79, 0.52]
    assert waits == [la.SPELL_WAIT_S] and floor == {"app": 0.52}
    # a spell that does not end: SPELL_ROUNDS medians, no more
    waits.clear()
    medians = la.settled_warm(ScriptedLauncher(slow * la.SPELL_ROUNDS), floor, "app", sleep=waits.append)
    assert medians == [0.79] * la.SPELL_ROUNDS and len(waits) == la.SPELL_ROUNDS - 1
    assert floor == {"app": 0.52}
    # above the floor but within SPELL_TOLERANCE: one median, and the floor does not rise
    waits.clear()
    assert la.settled_warm(ScriptedLauncher([9.0] + [0.55] * 5), floor, "app", sleep=waits.append) == [0.55]
    assert waits == [] and floor == {"app": 0.52}
    # a machine that is slower for good: its first median sets the floor of a new session
    floor = {"app": 0.79}
    assert la.settled_warm(ScriptedLauncher(slow), floor, "app", sleep=waits.append) == [0.79]

"""`smartio compare` on the host, without a VM: scheduler specs and bad input (exit 2), and the document, tables and
plots built from a recorded guest output (tests/data/compare/two-schedulers: mq-deadline and smartio on s5-emmc,
both experiments, recorded with `smartio compare --schedulers mq-deadline,smartio --size 256K --repeats 1
--experiment both --mixes 20,80`)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import types
from pathlib import Path
from typing import Any

import pytest

from smartio.cli import main
from smartio.compare.spec import SchedulerSpec, parse_schedulers
from smartio.errors import UsageError
from smartio.storebench import compare_report as report
from smartio.storebench.compare import Plan, assemble, disk_size, merge_runs, rounds, run_compare
from smartio.testbed.boot import Boot, text_of

pytestmark = pytest.mark.timeout(60)

DATA = Path(__file__).parent / "data" / "compare" / "two-schedulers"


def _plan() -> Plan:
    return Plan.from_json((DATA / "plan.json").read_text())


def _doc(guest_out: Path = DATA) -> dict:
    # The profile as it was when recorded (profiles.toml may have been recalibrated since).
    recorded = json.loads((DATA / "profile.json").read_text())
    profile = types.SimpleNamespace(record=lambda: recorded)
    return assemble(_plan(), guest_out, profile=profile, command="test", started="t", vm_result=None)


def test_scheduler_specs_with_tunables():
    specs = parse_schedulers("none, mq-deadline,smartio:read_anticipation_us=0:write_slice_ms=50")
    assert [s.name for s in specs] == ["none", "mq-deadline", "smartio"]
    assert specs[2].tunables == (("read_anticipation_us", 0), ("write_slice_ms", 50))
    assert specs[2].label == "smartio:read_anticipation_us=0:write_slice_ms=50"
    assert SchedulerSpec.parse(specs[2].label) == specs[2]


def test_profiled_spec():
    spec = SchedulerSpec.parse("smartio:profile:write_pace_us=100")
    assert spec.profiled and spec.tunables == (("write_pace_us", 100),)
    assert spec.label == "smartio:profile:write_pace_us=100" and SchedulerSpec.parse(spec.label) == spec
    assert not SchedulerSpec.parse("smartio").profiled


def test_plan_travels_as_json():
    plan = Plan(parse_schedulers("bfq,smartio:profile,smartio:read_anticipation_us=2000"), experiment="both", streams=4,
                size="1M", repeats=2, mixes="10,90")
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.bench_args("slowdown") == ["--target", "/dev/vda", "--destroy-data", "--streams", "4",
                                           "--repeats", "2", "--size", "1M"]
    assert plan.bench_args("mixed")[-2:] == ["--mixes", "10,90"]
    # the bench scripts' mixed workload with its own size and repeats; the slowdown runs keep theirs
    both = dataclasses.replace(plan, mixed_size="512K", mixed_repeats=8)
    assert Plan.from_json(both.to_json()) == both
    assert both.bench_args("mixed")[-6:] == ["--repeats", "8", "--size", "512K", "--mixes", "10,90"]
    assert both.bench_args("slowdown")[-4:] == ["--repeats", "2", "--size", "1M"]
    with pytest.raises(UsageError, match="--repeats-mixed"):
        dataclasses.replace(plan, mixed_repeats=0)


@pytest.mark.parametrize("argv, flag, words", [
    (["--schedulers", "cfq"], "--schedulers", "unknown scheduler 'cfq'"),
    (["--schedulers", ""], "--schedulers", "at least one"),
    (["--schedulers", "bfq,bfq"], "--schedulers", "listed twice"),
    (["--schedulers", "smartio:read_anticipation_us"], "--schedulers", "not a tunable setting"),
    (["--schedulers", "none:nr=1"], "--schedulers", "no tunables"),
    (["--schedulers", "bfq:profile"], "--schedulers", "only smartio"),
    (["--schedulers", "none", "--profile", "s9-emmc"], "--profile", "unknown profile"),
    (["--schedulers", "none", "--size", "5000"], "--size", "multiple of 4 KiB"),
    (["--schedulers", "none", "--repeats", "0"], "--repeats", "at least 1"),
    (["--schedulers", "none", "--nr-requests", "0"], "--nr-requests", "between"),
    (["--schedulers", "none", "--timeout", "0"], "--timeout", "positive"),
    (["--schedulers", "none", "--kernel", "5.x"], "--kernel", "must be 6.1, 6.12, newest or an exact release"),
    (["--experiment", "sqlite", "--kernel", "latest"], "--kernel", "must be 6.1, 6.12, newest"),
    # the guest experiments share the checks (run.vm_profile): nan and inf are refused too
    (["--experiment", "sqlite", "--time-scale", "nan"], "--time-scale", "positive"),
    (["--experiment", "launch", "--timeout", "inf"], "--timeout", "positive"),
    (["--experiment", "qasio", "--time-scale", "-1"], "--time-scale", "positive"),
])
def test_bad_input_exits_2_naming_the_flag(argv, flag, words, capsys, tmp_path):
    assert main(["compare", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"`{flag} " in err and words in err, err
    assert not (tmp_path / "out").exists()   # refused before anything ran


def test_document_from_recorded_guest_output():
    doc = _doc()
    assert doc["schedulers"] == ["mq-deadline", "smartio"] and doc["missing"] == []
    assert doc["device"]["restored"] is True
    assert [r["state"]["scheduler"] for r in doc["device"]["per_run"]] == ["mq-deadline"] * 2 + ["smartio"] * 2
    assert all(r["state"]["nr_requests"] == 128 for r in doc["device"]["per_run"])
    for label in doc["schedulers"]:
        run = json.loads((DATA / "runs" / f"{label}.slowdown.json").read_text())
        r = doc["results"][label]
        assert run["device"]["scheduler"] == label        # bench itself saw the scheduler active
        assert r["read_slowdown"]["seq"] == run["results"]["read_slowdown"]["seq"]
        assert r["write_slowdown"]["rand"] == run["results"]["write_slowdown"]["rand"]
        eff = run["results"]["detail"]["seq"]["efficiency"]["mean"]
        assert r["efficiency"]["seq"] == eff
        assert eff == pytest.approx(1 / r["read_slowdown"]["seq"] + 1 / r["write_slowdown"]["seq"], rel=1e-3)
        assert set(r["response_s"]["seq"]) == {"20", "80"}


def test_tables_render_byte_for_byte():
    assert report.render(_doc()) + "\n" == (DATA / "table.txt").read_text()


def test_missing_run_and_unrestored_device_are_reported(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(DATA, out)
    (out / "runs" / "smartio.slowdown.json").unlink()
    record = json.loads((out / "guest.json").read_text())
    record["after"]["scheduler"] = "smartio"
    (out / "guest.json").write_text(json.dumps(record))
    doc = _doc(out)
    assert doc["missing"] == ["slowdown under smartio"]
    assert doc["device"]["restored"] is False
    assert "read_slowdown" not in doc["results"]["smartio"]
    text = report.render(doc)
    assert re.search(r"^smartio +\(missing\) ", text, re.M) and "not measured: slowdown under smartio" in text
    assert report.verdicts(doc) == []      # one scheduler measured: nothing to decide between


def test_a_scheduler_short_of_its_repeats_is_reported_missing_them(tmp_path):
    """Interrupted between rounds, or with a repeat failed, a scheduler has fewer repeats than the plan: its figures
    stay, and `missing` says how many it has, so a table never compares 2 repeats with 1 unsaid."""
    out = tmp_path / "out"
    shutil.copytree(DATA, out)
    doc = assemble(dataclasses.replace(_plan(), repeats=2), out, profile=types.SimpleNamespace(record=lambda: {}),
                   command="test", started="t", vm_result=None)
    assert doc["missing"] == [f"{e} under {s}: 1 of 2 repeats" for s in ("mq-deadline", "smartio")
                              for e in ("slowdown", "mixed")]
    assert doc["results"]["smartio"]["read_slowdown"]["seq"] > 0


def test_the_verdict_lines_name_only_what_the_intervals_decide():
    """One repeat decides nothing (the two-scheduler run); the recorded bench run's 8 repeats decide smartio:profile
    for the lowest read slowdown and the highest efficiency, seq and rand, over the four others."""
    one = report.verdicts(_doc())
    assert one[0] == ("seq: lowest read slowdown undecided between mq-deadline (1.86), smartio (3.21); "
                      "highest efficiency undecided between mq-deadline (1.14), smartio (0.96)"), one
    assert one[-1].startswith("(undecided:")
    run = json.loads((DATA.parent / "bench-run-20261126" / "1r1w" / "compare.json").read_text())
    assert report.verdicts(run) == [
        "seq: lowest read slowdown smartio:profile (1.95); highest efficiency smartio:profile (1.16)",
        "rand: lowest read slowdown smartio:profile (1.81); highest efficiency smartio:profile (1.16)"]


def test_plots_are_pngs(tmp_path):
    paths = report.write_plots(_doc(), tmp_path)
    assert [p.name for p in paths] == ["fig11-slowdown.png", "fig12-mixed.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_disk_holds_every_stream():
    assert disk_size(Plan(parse_schedulers("none"), streams=4, size="100M")) >= 8 * (100 << 20)
    assert disk_size(Plan(parse_schedulers("none"), size="64K")) == 256 << 20
    mixed = Plan(parse_schedulers("smartio:profile"), experiment="mixed", size="200M")
    assert disk_size(mixed) >= 4 * (200 << 20)     # the Concurrency Profiler's 4 streams


def test_spec_errors_are_usage_errors():
    with pytest.raises(UsageError, match="kyber2"):
        SchedulerSpec.parse("kyber2")


def test_the_schedulers_alternate_repeat_by_repeat():
    """One repeat of every scheduler per round, the order reversed every other round: a drift over the run falls on
    all alike, and no scheduler always runs after the same one. The mixed workload's own repeats go on alone."""
    plan = Plan(parse_schedulers("none,bfq,smartio"), repeats=3)
    assert [(r, s.label) for r, s, _ in rounds(plan)] == [
        (1, "none"), (1, "bfq"), (1, "smartio"), (2, "smartio"), (2, "bfq"), (2, "none"),
        (3, "none"), (3, "bfq"), (3, "smartio")]
    both = Plan(parse_schedulers("none,smartio"), experiment="both", repeats=1, mixed_repeats=2)
    assert [(r, s.label, e) for r, s, e in rounds(both)] == [
        (1, "none", "slowdown"), (1, "none", "mixed"), (1, "smartio", "slowdown"), (1, "smartio", "mixed"),
        (2, "smartio", "mixed"), (2, "none", "mixed")]
    assert both.bench_args("mixed", repeats=1)[-4:-2] == ["--repeats", "1"]
    assert both.bench_settings("mixed", repeats=1).repeats == 1


def _scaled(doc: dict, factor: float) -> dict:
    """A copy of a one-repeat bench document whose contended latencies are `factor` times the recorded ones."""
    out = json.loads(json.dumps(doc))
    for d in out["results"]["detail"].values():
        for k, st in d.items():
            if k.endswith("_with_writer_ms") or k.endswith("_with_reader_ms") or re.fullmatch(r"\d+", k):
                st["values"] = [v * factor for v in st["values"]]
                st["mean"] = st["values"][0]
    return out


def test_repeats_run_apart_merge_into_the_document_of_one_run():
    """A scheduler's repeats, run in different rounds, make one document: each figure from the samples of all
    repeats, as one run of them would have computed it, with an interval; the settings say how many repeats."""
    one = json.loads((DATA / "runs" / "smartio.slowdown.json").read_text())
    two = _scaled(one, 1.5)
    merged = merge_runs([one, two], ["runs/smartio.slowdown.1.json", "runs/smartio.slowdown.2.json"], "smartio bench")
    assert merged["settings"]["repeats"] == 2 and merged["repeat_files"][1] == "runs/smartio.slowdown.2.json"
    assert merged["command"] == "smartio bench"
    assert "id" not in merged and merged["finished"] == two["finished"]
    for mode in ("seq", "rand"):
        r1 = one["results"]["read_slowdown"][mode]
        assert merged["results"]["read_slowdown"][mode] == pytest.approx((r1 + 1.5 * r1) / 2, rel=1e-5)
        st = merged["results"]["detail"][mode]["efficiency"]
        assert st["n"] == 2 and st["ci95"][0] < st["mean"] < st["ci95"][1]
        assert merged["results"]["detail"][mode]["read_alone_ms"]["values"] == \
            2 * one["results"]["detail"][mode]["read_alone_ms"]["values"]
    mixed = json.loads((DATA / "runs" / "smartio.mixed.json").read_text())
    m = merge_runs([mixed, _scaled(mixed, 3.0)], ["a", "b"], "c")["results"]
    for mode, by_mix in mixed["results"]["response_s"].items():
        for mix, t in by_mix.items():
            assert m["response_s"][mode][mix] == pytest.approx(2 * t, rel=1e-5)
    assert "io_time_sum_s" not in m     # the recorded documents are older than it
    a, b = mixed, _scaled(mixed, 3.0)
    for d, t in ((a, 2.0), (b, 4.0)):
        d["results"]["io_time_sum_s"] = {mode: {mix: t for mix in by_mix}
                                         for mode, by_mix in mixed["results"]["response_s"].items()}
    assert {t for by_mix in merge_runs([a, b], ["a", "b"], "c")["results"]["io_time_sum_s"].values()
            for t in by_mix.values()} == {3.0}


def test_guest_keeps_the_schedulers_counters_after_a_run(tmp_path, monkeypatch):
    """compare records what the scheduler counted (smartio's stats: paced writes, slice expiries) beside each run,
    so a figure can be traced to the rule that made it; files a scheduler lacks are left out, nothing fails."""
    from smartio.blockdev import Device
    from smartio.compare import guest

    sched = tmp_path / "vda" / "sched"
    sched.mkdir(parents=True)
    (sched / "stats").write_text("be read inserted=10\npacing paced_writes=3\n")
    (sched / "phase").write_text("read\n")
    (sched / "be_read_fifo_list").write_text("")
    monkeypatch.setattr(guest, "DEBUGFS_BLOCK", tmp_path)
    dev = Device(name="vda", disk="vda", size=1 << 30, major_minor="254:0")
    assert guest.scheduler_counters(dev) == {"stats": "be read inserted=10\npacing paced_writes=3", "phase": "read"}
    assert guest.scheduler_counters(Device(name="vdb", disk="vdb", size=1, major_minor="254:16")) == {}


def test_header_names_the_mixed_workloads_own_repeats():
    """bench/compare-schedulers --repeats-mixed: the tables say how many repeats each experiment had."""
    doc = json.loads((Path(__file__).parent.parent / "runs/storebench-compare-20261127/1r1w/compare.json").read_text())
    assert "; repeats: 8\n" in report.render(doc) + "\n"
    for runs in doc["runs"].values():
        runs["mixed"]["settings"]["repeats"] = 4
    text = report.render(doc)
    assert "repeats: 8 slowdown, 4 mixed" in text and "; repeats: 8\n" not in text + "\n"


def test_tables_and_plots_say_how_the_guest_booted():
    """--cpus and --kernel-arg change what is measured: a document that keeps them ("vm") says them in its header
    and plot line, the testbed's own arguments first; one from before they were kept says nothing rather than
    guess."""
    doc = json.loads((Path(__file__).parent.parent / "runs/storebench-compare-20261127/1r1w/compare.json").read_text())
    assert "vm" not in doc and text_of(doc) is None and "vCPU" not in report.render(doc)
    doc["vm"] = Boot(cpus=1, default_args=(), kernel_args=("tsc=reliable", "nohz=off")).record()
    assert text_of(doc) == "1 vCPU, kernel args tsc=reliable nohz=off"
    assert f"kernel {doc['kernel']} (1 vCPU, kernel args tsc=reliable nohz=off);" in report.render(doc)
    doc["vm"] = Boot(default_args=()).record()
    assert text_of(doc) == "2 vCPUs" and "2 vCPUs" in report._provenance(doc, "slowdown")
    doc["vm"] = Boot(kernel_args=("tsc=reliable",)).record()
    assert text_of(doc) == "2 vCPUs, kernel args init_on_alloc=0 tsc=reliable"
    doc["vm"] = {"cpus": 2, "kernel_args": []}         # written before default_args was kept: init_on_alloc=0
    assert text_of(doc) == "2 vCPUs, kernel args init_on_alloc=0"


def test_compare_boots_the_guest_it_was_asked_for_and_keeps_it_also_on_ctrl_c(tmp_path, monkeypatch):
    """The slowdown/mixed path hands the vCPUs and kernel arguments to the testbed, and the document kept after an
    interrupt records them."""
    import smartio.compare.run as cr

    seen: dict[str, Any] = {}
    out = tmp_path / "o"

    def fake_run(argv, spec, **kw):
        seen.update(kw, spec=spec)
        (out / "vm" / "out").mkdir(parents=True)     # the guest had begun
        raise KeyboardInterrupt

    monkeypatch.setattr(cr.vm, "run", fake_run)
    monkeypatch.setattr(cr, "check_testbed", lambda: None)
    plan = Plan(parse_schedulers("none"), experiment="slowdown", streams=1, quick=True)
    boot = Boot(cpus=1, kernel_args=("tsc=reliable",))
    with pytest.raises(KeyboardInterrupt):
        run_compare(plan, profile="s5-emmc", out=out, boot=boot, db=tmp_path / "r.db")
    spec = seen["spec"]
    assert (spec.boot.cpus, spec.boot.default_args, spec.boot.kernel_args) == (1, ("init_on_alloc=0",),
                                                                               ("tsc=reliable",))
    assert (spec.disks, spec.artifacts, seen["stream"]) == (1, out.resolve() / "vm", "stdout")
    assert json.loads((out / "compare.json").read_text())["vm"] == boot.record()


@pytest.mark.parametrize("experiment", ["qasio", "sqlite"])
def test_guest_experiments_hand_their_boot_to_the_testbed(tmp_path, monkeypatch, experiment):
    import smartio.compare.run as cr
    from smartio.qasio import compare as qa
    from smartio.sqlite import compare as sq

    seen: dict[str, Any] = {}

    def fake_guest(module, plan_json, assemble_doc, **kw):
        seen.update(kw)
        return {}, tmp_path

    monkeypatch.setattr(cr, "run_in_guest", fake_guest)
    boot = Boot(cpus=1)
    if experiment == "qasio":
        monkeypatch.setattr(cr, "module_for", lambda names, kernel: [])
        qa.run_qasio_compare(qa.QasioPlan(runs=qa.DEFAULT_RUNS), profile="s5-emmc", time_scale=None, out=None,
                             timeout=60, command="c", boot=boot, kernel="6.12")
    else:
        sq.run_sqlite_compare(sq.SqlitePlan(), profile="s5-emmc", time_scale=None, out=None, timeout=60,
                              command="c", boot=boot, kernel="6.12")
    assert seen["boot"] == boot and seen["kernel"] == "6.12"

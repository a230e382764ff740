"""The scripts in bench/ run as the README shows them, `bench/NAME ...`, without an activated venv,
and end with a message rather than a traceback on bad input. They are not run in full here:
they are benchmarks, minutes long."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from smartio.storebench.stats import log_ratio_ci

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "bench").iterdir()
                 if p.is_file() and os.access(p, os.X_OK) and p.read_bytes().startswith(b"#!/usr/bin/env python3"))


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    """A shell with no venv: `python3` on PATH is the base interpreter without any site-packages (no numpy,
    matplotlib or smartio), as on a machine where nothing but the repository's .venv has them."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    (bindir / "python3").write_text(f"#!/bin/sh\nexec {base} -S \"$@\"\n")
    (bindir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bindir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    assert subprocess.run(["python3", "-c", "import numpy"], env=env, capture_output=True).returncode != 0
    return env


def test_there_are_bench_scripts():
    assert {"trace-throughput", "storebench-vs-fio", "compare-schedulers"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_runs_without_an_activated_venv(script, bare_env):
    p = subprocess.run([str(REPO / "bench" / script), "--help"], env=bare_env, capture_output=True, text=True,
                       cwd=REPO, timeout=100)
    assert p.returncode == 0, p.stderr
    assert "usage:" in p.stdout and "Traceback" not in p.stderr


def test_every_bench_script_goes_through_venv_module():
    """bench/_venv.py re-runs a script under .venv and makes SIGTERM an interrupt: a script with a copy of its own
    (four had one) died silently on SIGTERM, its VM's results unsaved."""
    assert [s for s in SCRIPTS if "\nimport _venv" not in (REPO / "bench" / s).read_text()] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_bench_script_ends_on_sigterm_as_on_ctrl_c(tmp_path: Path, sig: int) -> None:
    """SIGTERM (a job runner's stop, `kill`) runs the script's finally blocks (where the VM is stopped and what was
    measured saved) and ends it with "bench/NAME: interrupted" and status 130, not silently or with a traceback."""
    script = tmp_path / "fake"
    script.write_text(f"import sys, time\nsys.path.insert(0, {str(REPO / 'bench')!r})\nimport _venv  # noqa\n"
                      "try:\n    print('ready', flush=True)\n    time.sleep(60)\n"
                      "finally:\n    print('finally ran', flush=True)\n")
    p = subprocess.Popen([str(REPO / ".venv" / "bin" / "python"), str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode in (130, -signal.SIGINT), (p.returncode, err)
    assert out == "finally ran\n" and err == "bench/fake: interrupted\n", (out, err)


@pytest.mark.parametrize("target", ["/nonexistent/place", "FILE"])
def test_storebench_vs_fio_with_a_bad_target_is_exit_2_without_a_traceback(target, bare_env, tmp_path):
    if target == "FILE":
        target = str(tmp_path / "a-file")
        Path(target).write_text("not a directory\n")
    p = subprocess.run([str(REPO / "bench" / "storebench-vs-fio"), "--target", target, "--size", "1M",
                        "--conc-size", "256K", "--levels", "1,2", "--repeats", "1"],
                       env=bare_env, capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and f"`--target {target}`" in p.stderr


def test_storebench_vs_fio_passes_on_smartios_refusal_of_a_memory_backed_target(bare_env, tmp_path):
    # A directory smartio refuses (memory-backed): its message and exit code, not a CalledProcessError.
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    p = subprocess.run([str(REPO / "bench" / "storebench-vs-fio"), "--target", str(shm), "--size", "256K",
                        "--conc-size", "256K", "--levels", "1", "--repeats", "1"],
                       env=bare_env, capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "memory" in p.stderr
    assert not [x for x in shm.iterdir() if x.name.startswith(".bench-")]


def test_qasio_targets_of_benchmarks_not_run_say_not_measured() -> None:
    # A run of M1 alone (recorded: tests/data/qasio/m1-three-runs) printed "does NOT hold" for M3 and M4's targets.
    p = subprocess.run([str(REPO / "bench" / "qasio"), "--analyze", str(REPO / "tests/data/qasio/m1-three-runs")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "not measured: M3 write() max" in p.stdout and "not measured: M4 truncate() max" in p.stdout
    assert "does NOT hold: M1 creat() max" in p.stdout and "holds: requests were boosted" in p.stdout
    assert p.stdout.rstrip().splitlines()[-1].startswith("m1_creat_max_none_ms=4383.91 ")


def test_qasio_analyze_of_a_run_with_tunables_in_its_setting() -> None:
    # The deep setting's run (runs/qasio-table2-deep-20261125: smartio with async_depth=960, nr_requests 1024) has a
    # summary line with `setting=async_depth=960`; splitting it on every '=' gave a traceback instead of the targets.
    p = subprocess.run([str(REPO / "bench" / "qasio"), "--analyze", str(REPO / "runs/qasio-table2-deep-20261125")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "holds: M4 truncate() max reduced" in p.stdout and "does NOT hold: M1 total time" in p.stdout
    assert " setting=async_depth=960 " in p.stdout.rstrip().splitlines()[-1]


def test_launch_headline_run_reprints_and_decides_the_targets() -> None:
    # A headline-only run (cold real cells, 8 launches each; tests/data/launch/headline-20261126f): the last line is
    # the geometric mean over the applications of cold seq-write over idle, and the targets are decided by it.
    data = REPO / "tests/data/launch/headline-20261126f"
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads((data / "compare.json").read_text())

    def ratio(label: str) -> float:
        cells = doc["cells"][label]
        xs = [cells[f"{a}.cold.seq-write.real"]["wall_s"]["mean"] / cells[f"{a}.cold.none.real"]["wall_s"]["mean"]
              for a in doc["plan"]["apps"]]
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    best_other = min(ratio(s) for s in doc["cells"] if not s.startswith("smartio"))
    assert p.stdout.rstrip().splitlines()[-1].startswith(
        f"smartio_cold_bg_over_idle={ratio('smartio'):.3f} best_other_cold_bg_over_idle={best_other:.3f} ")
    assert "smartio: cold seq-write/idle 95 % interval [0.999, 1.102]" in p.stdout


def test_launch_run_without_the_headline_background_reprints(tmp_path: Path) -> None:
    # tests/data/launch/bgs-20261126h: cold real launches idle and beside rand-write and buffered-write only. No
    # headline can be computed (it is beside seq-write): the table is printed, the last line says n/a, and the plot
    # says there is no headline instead of failing.
    data = REPO / "tests/data/launch/bgs-20261126h"
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data), "--plot", str(tmp_path / "b.png")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "editor cold buffered-write real" in p.stdout and "sqlite cold rand-write real" in p.stdout
    assert p.stdout.rstrip().splitlines()[-1] == ("smartio_cold_bg_over_idle=n/a best_other_cold_bg_over_idle=n/a "
                                                  "smartio_vs_none_pct=n/a")
    assert (tmp_path / "b.png").stat().st_size > 10000


def test_launch_run_with_readahead_operations_and_the_host_load_reprints() -> None:
    # tests/data/launch/ra-editor-20261126k: vim cold, idle and beside seq-write, real and replayed, 4 launches per
    # cell under the six schedulers, after the traces learnt the kernel's asynchronous readahead (version 3) and the
    # testbed the host's load. The reprint ends its table with the host's line; the document says how vim's pages
    # were read.
    data = REPO / "tests/data/launch/ra-editor-20261126k"
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data)], capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "host: other processes took 0.02 of its 2 CPUs on average" in p.stdout
    assert p.stdout.rstrip().splitlines()[-1].startswith("smartio_cold_bg_over_idle=1.124 ")
    editor = json.loads((data / "compare.json").read_text())["apps"]["editor"]
    assert editor["readahead"] == "kprobe page_cache_async_ra" and editor["ops_by_kind"]["readahead"] == 10


def test_launch_run_with_a_time_breakdown_reprints_it() -> None:
    # tests/data/launch/breakdown-20261127: vim cold, idle and beside seq-write, real and replayed, 6 launches per cell
    # under mq-deadline, kyber and smartio, each launch with its CPU time (and a replay's time by kind of operation).
    # Replay is within 15 % in both cells; the table sets both modes' CPU time beside their reads.
    data = REPO / "tests/data/launch/breakdown-20261127"
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data)], capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rows = {ln.split("  ")[0]: ln for ln in p.stdout.splitlines() if ln.startswith("editor cold ")}
    assert "0.98 [0.89, 1.06]" in rows["editor cold none"] and rows["editor cold none"].endswith("0.88 / 0.75")
    assert "1.04 [0.97, 1.12]" in rows["editor cold seq-write"]
    assert "in 2 of 2 cells" in p.stdout
    cells = json.loads((data / "compare.json").read_text())["cells"]
    assert set(cells["kyber"]["editor.cold.none.replay"]["breakdown_s"]) == {
        "think", "metadata", "fault", "readahead", "read", "write", "sync", "cpu"}
    assert set(cells["kyber"]["editor.cold.none.real"]["breakdown_s"]) == {"cpu"}


def test_launch_plot_is_drawn_from_a_recorded_run(tmp_path: Path) -> None:
    # The launch comparison prints a table and a plot. A run writes launch.png beside compare.json; --analyze
    # --plot draws it from a recorded run. The PNG says what it shows in its Description chunk.
    from PIL import Image

    png = tmp_path / "launch.png"
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(REPO / "tests/data/launch/run-20261126d"),
                        "--plot", str(png)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"plot: {png}" in p.stderr
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 1000
        assert "emulated s5-emmc" in im.info["Description"] and "6 in the headline's" in im.info["Description"]
    # Without a run to draw from, --plot is a usage error, before anything boots.
    p = subprocess.run([str(REPO / "bench" / "launch"), "--plot", str(tmp_path / "x.png")], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "--plot goes with --analyze" in p.stderr and not (tmp_path / "x.png").exists()
    # A directory that cannot be written is reported in one line.
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(REPO / "tests/data/launch/full-run"),
                        "--plot", str(tmp_path / "no" / "such" / "x.png")], capture_output=True, text=True)
    assert p.returncode == 1 and "cannot write" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("run", ["full-run", "run-20261126d", "run-20261126g", "full-20261127b"])
def test_launch_headline_agrees_with_the_recorded_full_run(run: str) -> None:
    # Launch table from one run (tests/data/launch/full-run: 6 schedulers x 24 cells, 3 launches each, 8 in the 6
    # cold real cells idle and beside seq-write; run-20261126d: 6 there and 5 in the cold replay cells; run-20261126g,
    # on the device model of 9c1b753 with rule 10: the same and 4 elsewhere; full-20261127b, all four backgrounds
    # in three sessions, zeroing off: 10 in the cold real cells, 5 in the cold replay cells, 3 elsewhere): the last
    # line is recomputed here from the cells, geometric means over the applications of cold seq-write over idle.
    data = REPO / "tests/data/launch" / run
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads((data / "compare.json").read_text())
    apps = doc["plan"]["apps"]

    def gmean(xs: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    def cold(label: str, bg: str) -> list[float]:
        return [doc["cells"][label][f"{a}.cold.{bg}.real"]["wall_s"]["mean"] for a in apps]

    def slowdown(s: str) -> float:
        return gmean([b / i for b, i in zip(cold(s, "seq-write"), cold(s, "none"), strict=True)])

    ratio = {s: slowdown(s) for s in doc["cells"]}
    best_other = min(v for s, v in ratio.items() if not s.startswith("smartio"))
    none_ms, sm_ms = gmean(cold("none", "seq-write")), gmean(cold("smartio", "seq-write"))
    want = (f"smartio_cold_bg_over_idle={ratio['smartio']:.3f} best_other_cold_bg_over_idle={best_other:.3f} "
            f"smartio_vs_none_pct={(none_ms - sm_ms) / none_ms * 100:.1f}")
    assert p.stdout.rstrip().splitlines()[-1] == want
    assert len(apps) == 3 and len(doc["cells"]) == 6 and doc["missing"] == []
    n = doc["plan"]["headline_repeats"]
    assert {len(v["wall_s"]["values"]) for c in doc["cells"].values() for k, v in c.items()
            if k.endswith((".cold.none.real", ".cold.seq-write.real"))} == {n}
    assert {len(v["wall_s"]["values"]) for c in doc["cells"].values() for k, v in c.items()
            if ".warm." in k} == {doc["plan"]["repeats"]}
    assert {len(v["wall_s"]["values"]) for c in doc["cells"].values() for k, v in c.items()
            if ".cold." in k and k.endswith(".replay")} == {doc["plan"].get("replay_repeats") or doc["plan"]["repeats"]}
    assert f"{n} in the cold real cells" in p.stdout.splitlines()[0]
    # 24 cells per two backgrounds (3 applications x cold/warm x backgrounds x real/replay), then replay against
    # real per application, cache and background (12 per two), counted within 15 % from the same cells.
    bgs = doc["plan"]["backgrounds"]
    cells = len(apps) * 2 * len(bgs)
    assert sum(line.startswith(tuple(apps)) for line in p.stdout.splitlines()) == cells * 2 + cells
    verdicts = []
    for a in apps:
        for c in ("cold", "warm"):
            for bg in bgs:
                ci = log_ratio_ci([(doc["cells"][s][f"{a}.{c}.{bg}.replay"]["wall_s"]["values"],
                                    doc["cells"][s][f"{a}.{c}.{bg}.real"]["wall_s"]["values"]) for s in doc["cells"]])
                assert ci is not None
                lo, hi = ci
                verdicts.append("yes" if 0.85 <= lo and hi <= 1.15 else "no" if lo > 1.15 or hi < 0.85
                                else "undecided")
    n = {v: verdicts.count(v) for v in ("yes", "no", "undecided")}
    assert (f"in {n['yes']} of {cells} cells; not within in {n['no']}, undecided in {n['undecided']}"
            in p.stdout), p.stdout


@pytest.mark.parametrize("run, last_line, verdicts", [
    # 2026-11-25, `--repeats 6 --repeats-4 5`, commit af811fe
    ("bench-full-run", "smartio_read_slowdown_seq=2.024 best_other_read_slowdown_seq=5.166 "
     "smartio_write_slowdown_seq=1.542 smartio_efficiency=1.144 best_other_efficiency=1.057 targets_met=14/34 "
     "ci_max_halfwidth_pct=64.7 undecided=17",
     {"  mixed seq 90% reads": " NOT met", "  mixed rand 50% reads": " met"}),
    # 2026-11-26, `--repeats 8 --repeats-4 5`, commit 245e8f1 (a reader's own writes unheld: rule 9)
    ("bench-run-20261126", "smartio_read_slowdown_seq=1.951 best_other_read_slowdown_seq=4.918 "
     "smartio_write_slowdown_seq=1.550 smartio_efficiency=1.162 best_other_efficiency=1.045 targets_met=20/34 "
     "ci_max_halfwidth_pct=123.6 undecided=12",
     {"  mixed seq 90% reads": " undecided", "  mixed rand 50% reads": " met",
      "  4R4W rand efficiency, highest of all": " undecided"}),
    # 2026-11-26, `--repeats 8 --repeats-4 5`, commit 7be7715 (the model's merged requests charged as a stream after
    # their first page, rule 10): 1R1W rand and 4R4W met; the stock schedulers, which merge writes, now tie or beat
    # smartio in the mixed workload
    ("bench-run-20261126j", "smartio_read_slowdown_seq=1.823 best_other_read_slowdown_seq=5.308 "
     "smartio_write_slowdown_seq=1.532 smartio_efficiency=1.203 best_other_efficiency=1.056 targets_met=17/34 "
     "ci_max_halfwidth_pct=24.9 undecided=6",
     {"  1R1W rand read slowdown ": " met", "  mixed rand 10% reads": " NOT met",
      "  4R4W rand efficiency, highest of all": " met"}),
    # 2026-11-27, `--repeats 8 --repeats-4 5`, commit caf0bad (`profile --apply` writes write_merge_max_kb=0): all
    # nine random mixes met; the sequential ones tie, which the model with merging says is all any order can do
    ("../../../runs/storebench-compare-20261127", "smartio_read_slowdown_seq=1.930 best_other_read_slowdown_seq=4.824 "
     "smartio_write_slowdown_seq=1.541 smartio_efficiency=1.174 best_other_efficiency=1.052 targets_met=21/34 "
     "ci_max_halfwidth_pct=53.1 undecided=4",
     {"  mixed rand 10% reads": " met", "  mixed seq 10% reads": " NOT met", "  1R1W rand read slowdown ": " undecided",
      "  4R4W seq efficiency, highest of all": " undecided"}),
])
def test_compare_schedulers_analyze_reprints_a_recorded_run(run: str, last_line: str,
                                                           verdicts: dict[str, str]) -> None:
    """bench/compare-schedulers --analyze on a run recorded in tests/data/compare/: its targets as decided by the
    ratio's interval, and the last line's figures."""
    data = REPO / "tests/data/compare" / run
    p = subprocess.run([str(REPO / "bench" / "compare-schedulers"), "--analyze", str(data)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith(last_line)
    assert "recorded run" in p.stdout and "Figure 12" in p.stdout
    for start, verdict in verdicts.items():
        line = next(x for x in p.stdout.splitlines() if x.startswith(start))
        assert line.endswith(verdict) and (verdict == " NOT met" or "NOT met" not in line), line


def test_compare_schedulers_analyze_of_a_missing_run(tmp_path) -> None:
    p = subprocess.run([str(REPO / "bench" / "compare-schedulers"), "--analyze", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "cannot read the recorded run" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["--skip-mixed"], ["--analyze", "runs/storebench-compare-20261127"]])
def test_compare_schedulers_refuses_repeats_mixed_without_mixes(args) -> None:
    p = subprocess.run([str(REPO / "bench" / "compare-schedulers"), *args, "--repeats-mixed", "8"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--repeats-mixed goes with" in p.stderr and "Traceback" not in p.stderr


def test_launch_analyze_of_a_directory_without_a_run_says_so(tmp_path: Path) -> None:
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == (f"bench/launch: error: `--analyze {tmp_path}`: holds no launch comparison "
                                "(no compare.json or cell files)")


def test_launch_pool_of_recorded_runs_and_of_too_few(tmp_path: Path) -> None:
    # Two recorded runs of smartio and bfq beside the running writer (8 launches per cell each) pooled; one run, or
    # a directory without a run, is refused with a message and exit 2.
    data = REPO / "tests/data/launch"
    runs = [str(data / "running-writer-20261127b"), str(data / "antic-20261127")]
    p = subprocess.run([str(REPO / "bench" / "launch"), "--pool", *runs], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Pooled over 2 runs") and "(2 runs)" in p.stdout
    assert "the lowest over idle: bfq " in p.stdout
    for args, says in (([runs[0]], "pooling needs at least two runs"),
                       ([runs[0], str(tmp_path)], "holds no launch comparison"),
                       ([runs[0], runs[1], "--analyze", runs[0]], "--pool goes alone")):
        p = subprocess.run([str(REPO / "bench" / "launch"), "--pool", *args], capture_output=True, text=True)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("run, replay_line, last", [
    # kyber, bfq and bfq:timeout_sync=125; python-stdlib and vim cold, idle and beside a sequential writer started
    # once per scheduler; real and replay in turn, 5 launches each: replay within 15 % in every cell, decided.
    ("interleave-20261127", "in 4 of 4 cells; not within in 0, undecided in 0",
     "smartio_cold_bg_over_idle=n/a best_other_cold_bg_over_idle=0.960 smartio_vs_none_pct=n/a"),
    # smartio, bfq and kyber, the three applications cold and real, 5 launches each, the writer running throughout:
    # bfq's 1.00 is below smartio's 1.08 (no none: no percentage).
    ("running-writer-20261127", None,
     "smartio_cold_bg_over_idle=1.082 best_other_cold_bg_over_idle=0.998 smartio_vs_none_pct=n/a"),
    # smartio and bfq alone, 8 launches per cell: a tie over idle.
    ("running-writer-20261127b", None,
     "smartio_cold_bg_over_idle=1.026 best_other_cold_bg_over_idle=1.008 smartio_vs_none_pct=n/a"),
])
def test_launch_runs_with_a_running_writer_reprint(run: str, replay_line: str | None, last: str) -> None:
    # The table says how it was measured, and bench/launch's last line is the recorded run's.
    data = REPO / "tests/data/launch" / run
    p = subprocess.run([str(REPO / "bench" / "launch"), "--analyze", str(data)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "background workloads started once per scheduler, 30 s before the first launch" in p.stdout
    if replay_line:
        assert "real and replay launches of a cell taken in turn (interleaved)" in p.stdout
        assert replay_line in p.stdout
    assert p.stdout.rstrip().splitlines()[-1] == last


def test_iosched_cost_analyze_reprints_a_stored_run(tmp_path: Path) -> None:
    """bench/iosched-cost --analyze on the run kept in runs/iosched-cost-20261204 (recorded before the clock was
    chosen: the guest read the HPET) prints its tables and its last line again, the figures its notes give."""
    subprocess.run(["tar", "xJf", str(REPO / "runs/iosched-cost-20261204/run.tar.xz"), "-C", str(tmp_path)],
                   check=True)
    p = subprocess.run([str(REPO / "bench" / "iosched-cost"), "--analyze", str(tmp_path / "cost2")],
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "guest clocksource: hpet"
    assert p.stdout.strip().splitlines()[-1] == (
        "smartio_iops_over_mqdl=0.915 smartio_cpu_per_io_over_mqdl=1.090 bfq_iops_over_mqdl=0.638 "
        "held_wakeups_per_s=0.0 adaptive_iops_over_mqdl=0.920 adaptive_cpu_per_io_over_mqdl=1.080")


@pytest.mark.parametrize("args, message", [
    (["--clocksource", "hpet"], "invalid choice: 'hpet'"),
    (["--schedulers", "smartio:adaptive"], "is not NAME"),
    (["--workloads", "seqread"], "--workloads seqread: choose from"),
    (["--module", str(REPO / "README.md"), "--module", "/nonexistent/old.ko"],
     "--module /nonexistent/old.ko: no such file"),
    (["--schedulers", "smartio-bare-ins"], "'smartio-bare-ins': an elevator's name has at most 15 characters"),
])
def test_iosched_cost_refuses_bad_input_before_it_boots(args: list[str], message: str) -> None:
    p = subprocess.run([str(REPO / "bench" / "iosched-cost"), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_iosched_cost_leaves_an_earlier_run_as_it_was(tmp_path: Path) -> None:
    """--out naming an earlier run's directory: refused before anything is written there (its bench.json and
    guest.sh were overwritten, and the guest booted to fail on art/)."""
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "console.log").write_text("an earlier run\n")
    (tmp_path / "bench.json").write_text("{}")
    p = subprocess.run([str(REPO / "bench" / "iosched-cost"), "--out", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "holds a run already" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["art", "bench.json"]
    assert (tmp_path / "bench.json").read_text() == "{}"

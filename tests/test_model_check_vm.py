"""The model and the module agree. A reader beside a writer (seq and rand) under the smartio module on the
emulated s5-emmc, with the profiler's pacing, traced in the guest; every issue of the trace is checked against the
policy's pure twin (smartio.iosched.policy.decide), which must have made the same choice.

Why not 100 %: the module reads its clock under its lock before the issue event is traced (blk_mq_start_request
in virtio-blk's queue_rq), and records a completion in sio_finish_request, after block_rq_complete is traced;
under TCG these gaps are tens of µs and sometimes over a millisecond (a cold code path, a descheduled vCPU), so an
issue near the end of a pace or a hold can be judged on either side. The check allows 200 µs (modelcheck.TOLERANCE_US)
and reports the strict figure beside it. Measured (docs/results/device-model.md): 99.3 to 100 % per mode in
four runs (one on a busy host), 98.6 to 100 % of the contested issues; one more timing artefact in ~150 issues
costs 0.7 %, hence 95 % and 90 %.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from smartio.testbed.modelcheck import Run, record_and_check
from smartio.trace.modelcheck import format_text

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1000), pytest.mark.usefixtures("testbed_ready")]

MIN_AGREEMENT = 0.95          # of all issues checked, per mode
MIN_CONTESTED = 0.90          # of the issues where a read and a write were both queued
MIN_CHECKED = 100             # issues of requests the trace saw inserted: the run exercised the scheduler
MIN_CONTESTED_ISSUES = 20     # issues with a read and a write queued: they competed


def shortfalls(runs: list[Run]) -> list[str]:
    """Where the agreement falls short of the thresholds, per mode (empty: the model and the module agree)."""
    return [f"{run.mode}: agreement {run.result.rate():.1%} (at least {MIN_AGREEMENT:.0%}), contested "
            f"{run.result.rate(contested_only=True):.1%} (at least {MIN_CONTESTED:.0%})" for run in runs
            if run.result.rate() < MIN_AGREEMENT or run.result.rate(contested_only=True) < MIN_CONTESTED]


def test_the_policy_twin_makes_the_modules_dispatch_choices(tmp_path: Path) -> None:
    """A second recording when the first falls short: the timing artefacts come in bursts when the host is busy
    (at stop 35's CI: 4 of 39 contested issues in one mode, all a hold judged on the other side of its end, with
    dispatch delays up to 28 ms). A real difference between the model and the module shows in both."""
    module = os.environ.get("SMARTIO_TEST_MODULE")
    reports: list[str] = []
    for attempt in (1, 2):
        r, runs = record_and_check(tmp_path / f"run{attempt}", module=Path(module) if module else None)
        before = "".join(f"{x}\n" for x in reports)
        assert r.failure is None, before + str(r.failure)
        assert r.rc == 0, f"{before}guest script failed (exit {r.rc}):\n{r.output_log.read_text()[-4000:]}"
        report = "\n".join(f"== {run.mode}\n{format_text(run.result)}" for run in runs)
        (tmp_path / f"replay-{attempt}.txt").write_text(report + "\n")
        for run in runs:
            assert run.result.skipped <= 2, before + report       # only what was queued before the recording began
        # The run exercised the scheduler: enough issues, and reads and writes really competed. How often they
        # competed is a matter of timing too (19 contested issues in one 3 s rand recording, 29 in another), so a
        # recording short of it is taken again, as one short of the agreement is.
        short = [f"{run.mode}: {len(run.result.checks)} issues checked (at least {MIN_CHECKED}), "
                 f"{sum(c.contested for c in run.result.checks)} contested (at least {MIN_CONTESTED_ISSUES})"
                 for run in runs if len(run.result.checks) < MIN_CHECKED
                 or sum(c.contested for c in run.result.checks) < MIN_CONTESTED_ISSUES]
        short += shortfalls(runs)
        reports.append(f"-- recording {attempt}: {'; '.join(short) or 'agrees'}\n{report}")
        if not short:
            if attempt > 1:    # passed on the second recording: say what the first one showed
                warnings.warn("the first recording fell short, the second agreed:\n" + reports[0], stacklevel=1)
            return
    pytest.fail("the model and the module disagree, or the run did not exercise them, in two recordings:\n"
                + "\n".join(reports))

"""Statistics over repeats and the arithmetic of every experiment, on a synthetic engine (no disk)."""

from __future__ import annotations

import math

import pytest

from smartio.engine import Job
from smartio.engine.fake import ModelEngine
from smartio.storebench import REGISTRY
from smartio.storebench.context import RunContext
from smartio.storebench.options import Settings
from smartio.storebench.stats import Stat
from smartio.storebench.target import Target


def test_stat_mean_std_ci():
    s = Stat.of([1.0, 2.0, 3.0, 4.0], positive=False)
    assert s.mean == 2.5
    assert s.std == pytest.approx(math.sqrt(5 / 3))
    half = 3.182446 * s.std / 2          # t(0.975, df=3) * s / sqrt(4)
    assert (s.ci95_low, s.ci95_high) == pytest.approx((2.5 - half, 2.5 + half))


def test_t_quantile_is_exact_beyond_30_degrees_of_freedom():
    # The hand-typed table jumped to the normal 1.96 after 30 degrees of freedom; t(0.975, 39) = 2.0227.
    values = [float(i % 7 - 3) for i in range(40)]   # negative values: the plain t interval
    s = Stat.of(values)
    assert s.ci95_high - s.mean == pytest.approx(2.022691 * s.std / math.sqrt(40), rel=1e-6)


def test_interval_of_a_positive_quantity_never_goes_below_zero():
    # Three spread-out latencies: mean - t * s / sqrt(n) is far below zero.
    values = [0.1, 0.2, 5.0]
    s = Stat.of(values)
    assert 0 < s.ci95_low < min(values) and s.ci95_high > max(values)
    # The t interval of the logarithms, turned back: around the geometric mean.
    logs = [math.log(v) for v in values]
    lmean = sum(logs) / 3
    lhalf = 4.302653 * math.sqrt(sum((x - lmean) ** 2 for x in logs) / 2) / math.sqrt(3)
    assert (s.ci95_low, s.ci95_high) == pytest.approx((math.exp(lmean - lhalf), math.exp(lmean + lhalf)))
    assert s.to_json()["ci_method"] == "log-t"
    # A zero (an idle CPU's iowait share) has no logarithm: the t interval, its lower end raised to 0.
    z = Stat.of([0.0, 0.0, 9.0])
    assert z.ci95_low == 0.0 and z.ci95_high == pytest.approx(3 + 4.302653 * math.sqrt(27) / math.sqrt(3))


def test_stat_single_value_has_no_interval():
    s = Stat.of([7.0]).to_json()
    assert s["mean"] == 7.0 and s["std"] is None and s["ci95"] == [None, None]


def _ctx(engine, **kw) -> RunContext:
    settings = Settings(repeats=kw.pop("repeats", 2), size=1 << 20, **kw)
    return RunContext(engine, Target("/nowhere", "file", None), settings, cpu_times=lambda: (0, 0))


def _model(job: Job, others: list[Job]) -> float:
    """An S5-like device: reads suffer from writers, writes barely from readers."""
    reading = "read" in job.rw
    writers = sum("write" in o.rw for o in others)
    readers = sum("read" in o.rw for o in others)
    if reading:
        return 1.0 * (6.0 if writers else 1.0)
    return 2.0 * (1.25 if readers else 1.0)


def test_slowdown_ratios_and_efficiency():
    res = REGISTRY["slowdown"].run(_ctx(ModelEngine(_model)))
    assert res["read_slowdown"] == {"seq": pytest.approx(6.0), "rand": pytest.approx(6.0)}
    assert res["write_slowdown"] == {"seq": pytest.approx(1.25), "rand": pytest.approx(1.25)}
    assert res["detail"]["seq"]["efficiency"]["mean"] == pytest.approx(1 / 6 + 1 / 1.25)


def test_slowdown_measures_both_kinds_alone_before_either_beside_the_other():
    # A scheduler that learns from writes alone (smartio's auto_pace) paces a writer beside a reader once it has
    # seen one; measured before any write went alone, the first repeat's reads were the unpaced ones.
    seen_alone = set()

    def learning(job: Job, others: list[Job]) -> float:
        if not others:
            seen_alone.add(job.rw)
            return 1.0
        return 1.5 if "write" in seen_alone or "randwrite" in seen_alone else 6.0

    engine = ModelEngine(learning)
    res = REGISTRY["slowdown"].run(_ctx(engine, repeats=1))
    assert res["read_slowdown"] == {"seq": pytest.approx(1.5), "rand": pytest.approx(1.5)}
    kinds = [("beside" if js.exitall else "alone") for js in engine.runs]
    assert kinds == ["alone", "alone", "beside", "beside"] * 2


def test_slowdown_four_streams_run_four_against_four():
    engine = ModelEngine(_model)
    REGISTRY["slowdown"].run(_ctx(engine, streams=4, repeats=1))
    contended = [js for js in engine.runs if js.exitall]
    assert contended and all(len(js.jobs) == 8 for js in contended)
    assert all(sum(j.time_based_s is not None for j in js.jobs) == 4 for js in contended)


def test_concurrency_parameter_is_the_n_of_maximal_speedup():
    # Per-I/O latency grows with company so that speedup = n / (1 + 0.5 (n - 1)^2) peaks at N = 2 (1.33).
    def model(job: Job, others: list[Job]) -> float:
        return 1 + 0.5 * len(others) ** 2
    res = REGISTRY["concurrency"].run(_ctx(ModelEngine(model), levels=(1, 2, 4, 8)))
    for p in ("seq_read", "seq_write", "rand_read", "rand_write"):
        sp = res["speedup"][p]
        expected = {n: n / (1 + 0.5 * (n - 1) ** 2) for n in (1, 2, 4, 8)}
        assert sp == {str(n): pytest.approx(v, abs=1e-6) for n, v in expected.items()}
        assert res["parameters"][p] == 2


def test_read_only_runs_only_read_patterns():
    engine = ModelEngine(_model)
    res = REGISTRY["latency"].run(_ctx(engine, read_only=True))
    assert set(res["patterns"]) == {"seq_read", "rand_read"}
    assert all("write" not in j.rw for js in engine.runs for j in js.jobs)


def test_mixed_response_is_the_time_to_complete_and_the_io_sum_keeps_nanoseconds():
    # The paper's response time is the workload's time to complete (fio's runtime, whole ms). The sum of the I/Os'
    # latencies (lat_ns, nanoseconds) stays beside it: it depends on how many I/Os the scheduler admits.
    lat_ms = 0.7539371
    res = REGISTRY["mixed"].run(_ctx(ModelEngine(lambda job, others: lat_ms), mixes=(50,), repeats=2))
    ios = (1 << 20) // 4096
    assert res["response_measure"] == "time to complete"
    assert res["response_s"]["seq"]["50"] == round(ios * lat_ms) / 1000
    assert res["detail"]["seq"]["50"]["values"] == [round(ios * lat_ms) / 1000] * 2
    # (documents keep 6 decimals: 1 us)
    assert res["io_time_sum_s"]["seq"]["50"] == pytest.approx(ios * lat_ms / 1000, abs=1e-6)


def test_mixed_sweeps_read_shares_at_queue_depth():
    engine = ModelEngine(_model)
    res = REGISTRY["mixed"].run(_ctx(engine, mixes=(10, 50, 100), iodepth=128))
    assert list(res["response_s"]["seq"]) == ["10", "50", "100"]
    assert all(j.iodepth == 128 and j.rwmixread in (10, 50, 100) for js in engine.runs for j in js.jobs)
    assert all(js.ioengine == "libaio" for js in engine.runs)


def test_ratio_interval_is_welchs_on_the_logs():
    import numpy as np
    from scipy import stats as sps

    from smartio.storebench.stats import log_ratio_ci

    a, b = [15.9, 14.6, 14.5, 16.2], [2.9, 2.94, 3.15]
    r = sps.ttest_ind(np.log(a), np.log(b), equal_var=False).confidence_interval(0.95)
    ci = log_ratio_ci([(a, b)])
    assert ci is not None
    lo, hi = ci
    assert (lo, hi) == pytest.approx((math.exp(r.low), math.exp(r.high)), rel=1e-9)
    gm = math.exp(np.mean(np.log(a)) - np.mean(np.log(b)))
    assert lo < gm < hi
    # Two applications: centred on the geometric mean of the two ratios, narrower than either alone
    ci2 = log_ratio_ci([(a, b), ([6.0, 6.2, 5.9], [3.0, 3.05, 2.95])])
    assert ci2 is not None
    lo2, hi2 = ci2
    assert lo2 < math.sqrt(gm * math.exp(np.mean(np.log([6.0, 6.2, 5.9])) - np.mean(np.log([3.0, 3.05, 2.95])))) < hi2
    assert log_ratio_ci([(a, [3.0])]) is None and log_ratio_ci([(a, [3.0, 0.0])]) is None and log_ratio_ci([]) is None


def test_pooled_log_ci_counts_the_runs_spread_about_each_other():
    from scipy.stats import t

    from smartio.storebench.stats import pooled_log_ci

    assert pooled_log_ci([]) is None and pooled_log_ci([(0.1, 0.01)]) is None
    # Runs that agree: no spread between them (tau 0), the weights' own variance 1 / sum(1 / v), Student's t with
    # runs - 1 degrees of freedom (three runs: 4.30, where one run's interval of that variance would take 1.96).
    def pooled(estimates: list[tuple[float, float]]) -> tuple[float, float, float, float]:
        got = pooled_log_ci(estimates)
        assert got is not None
        return got

    mid, lo, hi, tau = pooled([(-0.03, 0.0004)] * 3)
    half = t.ppf(0.975, 2) * math.sqrt(0.0004 / 3)
    assert tau == 0 and mid == pytest.approx(math.exp(-0.03))
    assert (lo, hi) == pytest.approx((math.exp(-0.03 - half), math.exp(-0.03 + half)))
    # Weighted: the narrower run counts more.
    mid, *_ = pooled([(0.0, 0.0001), (0.1, 0.01)])
    assert 1.0 < mid < math.exp(0.01)
    # Runs that disagree far beyond their own intervals: the spread between them is estimated (DerSimonian-Laird)
    # and the pooled interval covers all of them, where the runs' own intervals alone would give a narrow one.
    ys = [-0.10, 0.0, 0.10, 0.05]
    mid, lo, hi, tau = pooled([(y, 0.0001) for y in ys])
    assert tau > 0.05 and lo < math.exp(min(ys)) < math.exp(max(ys)) < hi
    assert math.log(hi / lo) > 5 * (2 * 1.96 * math.sqrt(0.0001 / 4))


def test_log_quotient_ci_is_log_ratio_ci_with_more_samples_a_side():
    # One sample a side: log_ratio_ci. A ratio of two ratios, (a/b)/(c/d) = (a*d)/(b*c): centred on the quotient of
    # the geometric means (four samples' variances add, whatever their sign), and
    # None when a sample cannot give an interval.
    from smartio.storebench.stats import log_quotient_ci, log_ratio_ci

    a, b, c, d = [2.0, 2.1, 1.9], [1.0, 1.02, 0.98], [3.0, 3.3, 2.7], [1.5, 1.6, 1.4]
    assert log_quotient_ci([((a,), (b,))]) == pytest.approx(log_ratio_ci([(a, b)]))
    ci = log_quotient_ci([((a, d), (b, c))])
    assert ci is not None
    lo, hi = ci
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    centre = g(a) * g(d) / (g(b) * g(c))
    assert lo < centre < hi and math.sqrt(lo * hi) == pytest.approx(centre)
    assert log_quotient_ci([((b, c), (a, d))]) == pytest.approx((1 / hi, 1 / lo))    # upside down: 1 / it
    assert log_quotient_ci([((a, d), (b, [3.0]))]) is None and log_quotient_ci([]) is None
    assert log_quotient_ci([((a,), ())]) is None
    # Width and degrees of freedom: one ratio's interval is Welch's interval of the difference of the mean logs.
    from scipy.stats import ttest_ind

    w = ttest_ind([math.log(x) for x in c], [math.log(x) for x in b], equal_var=False).confidence_interval(0.95)
    assert log_ratio_ci([(c, b)]) == pytest.approx((math.exp(w.low), math.exp(w.high)))

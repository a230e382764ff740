"""Summary statistics over repeats: mean, sample standard deviation and a 95 % confidence interval.

Everything smartio measures over repeats is a quantity that cannot be negative (latency, slowdown, speedup,
efficiency, response time, iowait share), and a symmetric interval `mean ± t·s/√n` around such a quantity can
reach below zero when the repeats are few and spread out (with 3 repeats t = 4.30). So by default the interval is
taken on the log scale: Student's t interval of the logarithms of the values, turned back with exp. That is
`[g / f, g · f]` with g the geometric mean and f = exp(t · s_log / √n): it is never below zero, it is asymmetric
around the mean (wider above), and it is the usual interval for ratios such as slowdown and speedup. When a value
is 0 (an idle CPU's iowait share) the logarithm does not exist, and the interval is Student's t on the values
themselves, its lower end raised to 0. `positive=False`, or a negative value, gives the plain t interval. The t
quantiles come from scipy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

CI_LOG, CI_T, CI_T_CLIPPED = "log-t", "t", "t, clipped at 0"


@lru_cache(maxsize=256)
def t95(df: float) -> float:
    """Two-sided 95 % quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t  # scipy takes ~0.3 s to import: only when an interval is computed

    return float(t.ppf(0.975, df))


@dataclasses.dataclass(frozen=True)
class Stat:
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    n: int
    values: tuple[float, ...]
    method: str = CI_LOG       # how the interval was taken: CI_LOG, CI_T or CI_T_CLIPPED

    @classmethod
    def of(cls, values: Iterable[float], positive: bool = True) -> Stat:
        """`positive`: the quantity cannot be negative, so its interval is taken on the log scale."""
        v = tuple(float(x) for x in values)
        if not v:
            raise ValueError("no values")
        n = len(v)
        mean = math.fsum(v) / n
        if n == 1:
            return cls(mean, float("nan"), float("nan"), float("nan"), 1, v, CI_T)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
        t = t95(n - 1)
        if positive and all(x > 0 for x in v):
            logs = [math.log(x) for x in v]
            lmean = math.fsum(logs) / n
            lstd = math.sqrt(math.fsum((x - lmean) ** 2 for x in logs) / (n - 1))
            half = t * lstd / math.sqrt(n)
            return cls(mean, std, math.exp(lmean - half), math.exp(lmean + half), n, v, CI_LOG)
        half = t * std / math.sqrt(n)
        if positive and all(x >= 0 for x in v):
            return cls(mean, std, max(mean - half, 0.0), mean + half, n, v, CI_T_CLIPPED)
        return cls(mean, std, mean - half, mean + half, n, v, CI_T)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        out: dict[str, Any] = {"mean": num(self.mean), "std": num(self.std),
                               "ci95": [num(self.ci95_low), num(self.ci95_high)],
                               "n": self.n, "values": [round(x, 6) for x in self.values]}
        if self.n > 1:
            out["ci_method"] = self.method
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Stat:
        nan = float("nan")
        lo, hi = d.get("ci95") or [None, None]
        return cls(d["mean"], nan if d["std"] is None else d["std"], nan if lo is None else lo,
                   nan if hi is None else hi, d["n"], tuple(d.get("values", ())), d.get("ci_method", CI_T))


def log_ratio_ci(pairs: Iterable[tuple[Iterable[float], Iterable[float]]]) -> tuple[float, float] | None:
    """95 % interval of a ratio of two measured quantities, or of the geometric mean of several such ratios (one per
    pair `(numerator repeats, denominator repeats)`, independent samples): Welch's t on the logarithms, the
    difference of the mean logs averaged over the pairs, its variance sum(s²/n) / k², and the degrees of freedom
    of Welch-Satterthwaite. It is centred on the ratio of geometric means. None when a sample has fewer than 2
    values or a value is not positive."""
    return log_quotient_ci([((num,), (den,)) for num, den in pairs])


def log_quotient_stats(groups: Iterable[tuple[Iterable[Iterable[float]], Iterable[Iterable[float]]]]
                       ) -> tuple[float, float, float] | None:
    """log_quotient_ci's parts: the mean log quotient, its variance and its degrees of freedom (Welch-Satterthwaite;
    inf when the variance is 0)."""
    parts: list[tuple[float, float, int]] = []      # (mean log, s²/n, n) of every sample
    diffs = []
    for nums, dens in groups:
        nums, dens = tuple(nums), tuple(dens)
        if not nums or not dens:
            return None
        diff = 0.0
        for sign, samples in ((1, nums), (-1, dens)):
            for sample in map(tuple, samples):
                if len(sample) < 2 or any(x <= 0 for x in sample):
                    return None
                logs = [math.log(x) for x in sample]
                m = math.fsum(logs) / len(logs)
                var = math.fsum((x - m) ** 2 for x in logs) / (len(logs) - 1)
                parts.append((m, var / len(logs), len(logs)))
                diff += sign * m
        diffs.append(diff)
    if not diffs:
        return None
    k = len(diffs)
    var = math.fsum(v for _, v, _ in parts) / k ** 2
    centre = math.fsum(diffs) / k
    if var == 0:
        return centre, 0.0, math.inf
    return centre, var, var ** 2 / math.fsum((v / k ** 2) ** 2 / (n - 1) for _, v, n in parts)


def log_quotient_ci(groups: Iterable[tuple[Iterable[Iterable[float]], Iterable[Iterable[float]]]]
                    ) -> tuple[float, float] | None:
    """95 % interval of a product of measured quantities over a product of others, or of the geometric mean of
    several such quotients (one per group `(numerator samples, denominator samples)`, every sample independent):
    log_ratio_ci with more than one sample on a side. A ratio of two ratios, e.g. one scheduler's launch beside a
    writer over its idle one against another scheduler's, is `((busy_a, idle_b), (idle_a, busy_b))`; the sum of
    the mean logs' variances does not care for their signs. None when a side has no sample, a sample has fewer than
    2 values or a value is not positive."""
    st = log_quotient_stats(groups)
    return None if st is None else log_stats_ci(st)


def log_stats_ci(st: tuple[float, float, float]) -> tuple[float, float]:
    """The 95 % interval, exp'd, of a mean log `(centre, variance, degrees of freedom)` (log_quotient_stats)."""
    centre, var, df = st
    half = t95(df) * math.sqrt(var) if var else 0.0
    return math.exp(centre - half), math.exp(centre + half)


def pooled_log_ci(estimates: Sequence[tuple[float, float]]) -> tuple[float, float, float, float] | None:
    """Random-effects pooling of one quantity measured in k >= 2 independent runs, each an estimate `(mean log,
    its variance)`, for runs that differ by more than their own scatter (each VM session of the testbed moves every
    scheduler's launches by a few %): DerSimonian-Laird's between-run variance tau², weights 1 / (v + tau²), and
    the interval of Hartung-Knapp-Sidik-Jonkman, Student's t with k - 1 degrees of freedom on the runs' weighted
    spread about the pooled mean, its variance never below the weights' own (1 / their sum). Returns (pooled ratio,
    95 % low, high, tau), exp'd; None for fewer than 2 runs."""
    k = len(estimates)
    if k < 2:
        return None
    ys, vs = [y for y, _ in estimates], [max(v, 1e-300) for _, v in estimates]
    w = [1 / v for v in vs]
    fixed = math.fsum(wi * y for wi, y in zip(w, ys, strict=True)) / math.fsum(w)
    q = math.fsum(wi * (y - fixed) ** 2 for wi, y in zip(w, ys, strict=True))
    c = math.fsum(w) - math.fsum(wi * wi for wi in w) / math.fsum(w)
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    w = [1 / (v + tau2) for v in vs]
    mu = math.fsum(wi * y for wi, y in zip(w, ys, strict=True)) / math.fsum(w)
    spread = math.fsum(wi * (y - mu) ** 2 for wi, y in zip(w, ys, strict=True)) / (k - 1)
    half = t95(k - 1) * math.sqrt(max(spread, 1.0) / math.fsum(w))
    return math.exp(mu), math.exp(mu - half), math.exp(mu + half), math.sqrt(tau2)


def merge_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """One Stat (as JSON) over the values of several, as if they had been measured in one run."""
    return Stat.of([x for s in stats for x in s["values"]]).to_json()

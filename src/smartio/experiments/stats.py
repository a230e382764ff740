"""Summary statistics over repeats: mean, sample standard deviation and a 95 % confidence interval."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom; beyond, the normal 1.96 is close enough.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclasses.dataclass(frozen=True)
class Stat:
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    n: int
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat":
        v = tuple(float(x) for x in values)
        if not v:
            raise ValueError("no values")
        n = len(v)
        mean = math.fsum(v) / n
        if n == 1:
            return cls(mean, float("nan"), float("nan"), float("nan"), 1, v)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
        half = t95(n - 1) * std / math.sqrt(n)
        return cls(mean, std, mean - half, mean + half, n, v)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {"mean": num(self.mean), "std": num(self.std), "ci95": [num(self.ci95_low), num(self.ci95_high)],
                "n": self.n, "values": [round(x, 6) for x in self.values]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Stat":
        nan = float("nan")
        lo, hi = d.get("ci95") or [None, None]
        return cls(d["mean"], nan if d["std"] is None else d["std"], nan if lo is None else lo,
                   nan if hi is None else hi, d["n"], tuple(d.get("values", ())))

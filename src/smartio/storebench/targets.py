"""Issue 11's targets, checked on comparison documents (pure: `bench/compare-schedulers` prints them, tests feed
recorded documents). Every check uses the 95 % intervals, not just the means:

  met        the whole interval is on the right side: a figure's interval below a bound; for "lowest", the 95 %
             interval of my figure over each other scheduler's (Welch's t on the logarithms of both runs' repeats,
             as every figure's own interval is taken) below 1; for "highest", above 1. Whether two schedulers
             differ is a question about their ratio: two intervals that merely overlap can still differ at 95 %
             (non-overlap is a test at about 99.5 %). Figures recorded without their repeats' values fall back to
             my interval lying wholly below (above) the other's;
  undecided  the means are on the right side but the interval does not settle it (more repeats or longer runs);
  NOT met    the mean is on the wrong side.

A figure measured once has no interval: it can be NOT met but never met.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from smartio.storebench.stats import log_ratio_ci

# Seed 000, Figures 11 and 12: the phone's SmartIO. The bounds: 1R1W seq read below the paper's 1.72.
BOUNDS = {  # (streams, mode) -> (read bound, write bound), and the paper's figures where it has them
    (1, "seq"): (1.5, 1.51),
    (1, "rand"): (1.97, 1.83),
    (4, "seq"): (5.12, 6.12),
    (4, "rand"): (8.75, 9.32),
}
PAPER = {(1, "seq"): (1.72, 1.51), (1, "rand"): (1.97, 1.83), (4, "seq"): (5.12, 6.12)}
PAPER_MIXED_REDUCTION_VS_CFQ = {"seq": -42.0, "rand": -49.0}
HALFWIDTH_PCT = 10.0
MODES = ("seq", "rand")


@dataclasses.dataclass(frozen=True)
class Figure:
    mean: float
    lo: float | None
    hi: float | None
    values: tuple[float, ...] = ()     # the repeats, when recorded

    @classmethod
    def of(cls, stat: dict[str, Any]) -> Figure:
        lo, hi = stat.get("ci95") or (None, None)
        return cls(stat["mean"], lo, hi, tuple(stat.get("values") or ()))

    @property
    def halfwidth_pct(self) -> float | None:
        if self.lo is None or self.hi is None or not self.mean:
            return None
        return (self.hi - self.lo) / 2 / abs(self.mean) * 100

    def text(self, fmt: str = "{:.2f}") -> str:
        if self.lo is None or self.hi is None:
            return fmt.format(self.mean) + " [n=1]"
        return f"{fmt.format(self.mean)} [{fmt.format(self.lo)}, {fmt.format(self.hi)}]"


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    value: str
    target: str
    verdict: str          # "met", "undecided", "NOT met"


def below(f: Figure, bound: float) -> str:
    if f.mean > bound:
        return "NOT met"
    return "met" if f.hi is not None and f.hi <= bound else "undecided"


def ratio_ci(mine: Figure, other: Figure) -> tuple[float, float] | None:
    """95 % interval of mine / other from both figures' repeats (None without at least 2 positive values each)."""
    return log_ratio_ci([(mine.values, other.values)])


def _beats(mine: Figure, other: Figure, lower: bool) -> bool:
    """Is mine decidedly below (`lower`) or above the other: by their ratio's interval, else by apart intervals."""
    ci = ratio_ci(mine, other)
    if ci is not None:
        return ci[1] < 1 if lower else ci[0] > 1
    if lower:
        return mine.hi is not None and other.lo is not None and mine.hi < other.lo
    return mine.lo is not None and other.hi is not None and mine.lo > other.hi


def _extreme(mine: Figure, others: list[Figure], lower: bool) -> str:
    """Lower (`lower`) or higher than every other (undecided with nothing to beat)."""
    if not others:
        return "undecided"
    if any(mine.mean >= o.mean if lower else mine.mean <= o.mean for o in others):
        return "NOT met"
    return "met" if all(_beats(mine, o, lower) for o in others) else "undecided"


def lowest(mine: Figure, others: list[Figure]) -> str:
    return _extreme(mine, others, lower=True)


def highest(mine: Figure, others: list[Figure]) -> str:
    return _extreme(mine, others, lower=False)


def slowdown_figures(doc: dict[str, Any], label: str, mode: str) -> dict[str, Figure] | None:
    run = doc["runs"].get(label, {}).get("slowdown")
    if not run:
        return None
    d = run["results"]["detail"][mode]
    return {k: Figure.of(d[k]) for k in ("read_slowdown", "write_slowdown", "efficiency")}


def mixed_figures(doc: dict[str, Any], label: str, mode: str) -> dict[str, Figure] | None:
    run = doc["runs"].get(label, {}).get("mixed")
    if not run:
        return None
    return {mix: Figure.of(s) for mix, s in run["results"]["detail"][mode].items()}


def slowdown_checks(doc: dict[str, Any], mine: str, others: list[str]) -> list[Check]:
    """The bounds, lowest read slowdown and highest efficiency, seq and rand; others without a run are left out
    (and named in the target column as missing)."""
    first = next((d["slowdown"] for d in doc["runs"].values() if "slowdown" in d), None)
    if first is None:
        return [Check(f"slowdown: {mine}", "(missing)", "measured", "NOT met")]
    n = first["results"]["streams"]
    checks = []
    for mode in MODES:
        me = slowdown_figures(doc, mine, mode)
        them = {o: f for o in others if (f := slowdown_figures(doc, o, mode))}
        missing = "".join(f", {o} missing" for o in others if o not in them)
        w = f"{n}R{n}W {mode}"
        if me is None:
            checks.append(Check(f"{w}: {mine}", "(missing)", "measured", "NOT met"))
            continue
        rb, wb = BOUNDS.get((n, mode), (math.inf, math.inf))
        paper = PAPER.get((n, mode))
        note = f" [paper {paper[0]} / {paper[1]}]" if paper else ""
        checks += [
            Check(f"{w} read slowdown", me["read_slowdown"].text(), f"<= {rb}{note}", below(me["read_slowdown"], rb)),
            Check(f"{w} write slowdown", me["write_slowdown"].text(), f"<= {wb}", below(me["write_slowdown"], wb)),
            Check(f"{w} read slowdown, lowest of all", me["read_slowdown"].text(),
                  "< " + ", ".join(f"{o} {f['read_slowdown'].mean:.2f}" for o, f in them.items()) + missing,
                  lowest(me["read_slowdown"], [f["read_slowdown"] for f in them.values()])),
            Check(f"{w} efficiency, highest of all", me["efficiency"].text(),
                  ">= " + ", ".join(f"{o} {f['efficiency'].mean:.2f}" for o, f in them.items()) + missing,
                  highest(me["efficiency"], [f["efficiency"] for f in them.values()])),
        ]
    return checks


def mixed_checks(doc: dict[str, Any], mine: str, others: list[str]) -> tuple[list[Check], dict[str, dict[str, float]]]:
    """Lowest total response time at every mix, and the average reduction against each other scheduler (%, mean
    over the mixes of mine / theirs - 1; negative = faster, as the paper prints it)."""
    checks, reduction = [], {}
    for mode in MODES:
        me = mixed_figures(doc, mine, mode)
        if me is None:
            checks.append(Check(f"mixed {mode}: {mine}", "(missing)", "measured", "NOT met"))
            continue
        them = {o: f for o in others if (f := mixed_figures(doc, o, mode))}
        for mix in sorted(me, key=int):
            checks.append(Check(f"mixed {mode} {mix}% reads, lowest response", me[mix].text("{:.3f}") + " s",
                                "< " + ", ".join(f"{o} {f[mix].mean:.3f}" for o, f in them.items()),
                                lowest(me[mix], [f[mix] for f in them.values()])))
        reduction[mode] = {o: 100 * sum(me[m].mean / f[m].mean - 1 for m in me) / len(me) for o, f in them.items()}
    return checks, reduction


def halfwidths(docs: list[dict[str, Any]], labels: list[str]) -> list[tuple[float, str]]:
    """The 95 % half-width (% of the mean) of every figure the targets use, for the schedulers `labels`, widest
    first; a figure measured once counts as infinitely wide."""
    out = []
    for doc in docs:
        for label in (x for x in doc["schedulers"] if x in labels):
            for mode in MODES:
                s = slowdown_figures(doc, label, mode) or {}
                m = mixed_figures(doc, label, mode) or {}
                n = "" if not s else next(d["slowdown"] for d in doc["runs"].values()
                                          if "slowdown" in d)["results"]["streams"]
                named = {**{f"{n}R{n}W {mode} {k} under {label}": f for k, f in s.items()},
                         **{f"mixed {mode} {x}% under {label}": f for x, f in m.items()}}
                for name, f in named.items():
                    h = f.halfwidth_pct
                    out.append((math.inf if h is None else h, name))
    return sorted(out, reverse=True)

"""Issue 11's targets, checked on comparison documents (pure: `bench/compare-schedulers` prints them, tests feed
recorded documents). Every check uses the 95 % intervals, not just the means:

  met        the whole interval is on the right side (below a bound; for "lowest", below every other scheduler's
             whole interval; for "highest", above it);
  undecided  the means are on the right side but the intervals overlap (more repeats or longer runs decide it);
  NOT met    the mean is on the wrong side.

A figure measured once has no interval: it can be NOT met but never met.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

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

    @classmethod
    def of(cls, stat: dict[str, Any]) -> Figure:
        lo, hi = stat.get("ci95") or (None, None)
        return cls(stat["mean"], lo, hi)

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


def lowest(mine: Figure, others: list[Figure]) -> str:
    """Lower than every other: met when my interval lies below all of theirs (undecided with nothing to beat)."""
    if not others:
        return "undecided"
    if any(mine.mean >= o.mean for o in others):
        return "NOT met"
    if mine.hi is None or any(o.lo is None or mine.hi >= o.lo for o in others):
        return "undecided"
    return "met"


def highest(mine: Figure, others: list[Figure]) -> str:
    neg = [Figure(-o.mean, None if o.hi is None else -o.hi, None if o.lo is None else -o.lo) for o in others]
    return lowest(Figure(-mine.mean, None if mine.hi is None else -mine.hi, None if mine.lo is None else -mine.lo),
                  neg)


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

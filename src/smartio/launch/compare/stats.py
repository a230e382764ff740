"""A cell's launch times and the ratios the comparison is decided on: a scheduler's cold launch beside a background
over its idle one, over none's, and one scheduler's quotient over another's, with their 95 % intervals.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Literal

from smartio.launch.compare.plan import HEADLINE_BG, headline_key
from smartio.storebench.stats import log_quotient_ci, log_ratio_ci


def gmean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


Measure = Literal["wall", "off_cpu"]


def launch_values(cell: dict[str, Any], measure: Measure = "wall") -> list[float] | None:
    """A cell's launches in `measure`: "wall", each launch's time; "off_cpu", each launch's time off the CPU (its
    time less its own CPU time, user and kernel, from wait4: what it spent waiting for I/O or for a CPU). Under
    TCG a launch's CPU time varies between launches by far more than what a scheduler changes (python-stdlib's
    kernel part 0.5 to 1.5 s across 12 cold launches beside the writer), and all of it lands in the wall time;
    off the CPU it does not. Two caveats: a scheduler's own CPU time, spent in the launch's context, drops out too
    (a scheduler that costs CPU there looks better off the CPU than on the clock), and wait4 counts the child's
    CPU time from fork, the clock from exec, so off the CPU is a little low (a warm launch of 0.1 s can come out
    at zero or below). None when the cell kept no launch times, or, off the CPU, no CPU time per launch or a launch
    not above zero."""
    walls = cell["wall_s"].get("values")
    if not walls:
        return None
    if measure == "wall":
        return list(walls)
    cpus = cell.get("breakdown_s", {}).get("cpu", {}).get("values")
    if not cpus or len(cpus) != len(walls):
        return None
    off = [w - c for w, c in zip(walls, cpus, strict=True)]
    return off if min(off) > 0 else None


def over_idle(cells: dict[str, Any], apps: list[str] | tuple[str, ...], bg: str, measure: Measure = "wall"
              ) -> tuple[float | None, tuple[float, float] | None]:
    """One scheduler's cold real launch beside background `bg` over its idle one, in `measure` (`launch_values`):
    the geometric mean over the applications that have both, and its 95 % interval (Welch on the logs) when every
    application has both."""
    ratios, pairs = [], []
    for app in apps:
        idle, busy = cells.get(headline_key(app, "none")), cells.get(headline_key(app, bg))
        if not (idle and busy):
            continue
        if measure == "wall":
            ratios.append(busy["wall_s"]["mean"] / idle["wall_s"]["mean"])
            pairs.append((busy["wall_s"].get("values", ()), idle["wall_s"].get("values", ())))
        elif (b := launch_values(busy, measure)) and (i := launch_values(idle, measure)):
            ratios.append(statistics.fmean(b) / statistics.fmean(i))
            pairs.append((b, i))
    complete = pairs and len(pairs) == len(apps)
    return gmean(ratios), log_ratio_ci(pairs) if complete else None


def over_none(cells: dict[str, Any], none: dict[str, Any], apps: list[str] | tuple[str, ...]
              ) -> tuple[float, float] | None:
    """95 % interval of one scheduler's cold real launch beside the writer over none's (geometric mean over the
    applications, Welch on the logs), when every application has both cells."""
    groups = over_none_groups(cells, none, apps)
    return log_quotient_ci(groups) if groups else None


def over_none_groups(cells: dict[str, Any], none: dict[str, Any], apps: list[str] | tuple[str, ...]
                     ) -> list[tuple[tuple[list[float]], tuple[list[float]]]] | None:
    """One scheduler's cold real launches beside the writer over none's, per application, as `log_quotient_stats`
    takes them; None unless every application has both cells."""
    keys = [headline_key(a, HEADLINE_BG) for a in apps]
    if not keys or not all(k in cells and k in none for k in keys):
        return None
    return [((launch_values(cells[k]) or [],), (launch_values(none[k]) or [],)) for k in keys]


def headline_groups(doc: dict[str, Any], a: str, b: str | None = None, measure: Measure = "wall"
                    ) -> list[tuple[tuple[list[float], ...], tuple[list[float], ...]]] | None:
    """Scheduler `a`'s cold real launches beside the writer over its idle ones, per application (over `b`'s
    quotient when given), as `log_quotient_stats` takes them; None unless every application has every cell."""
    ca, cb = doc["cells"].get(a, {}), doc["cells"].get(b, {}) if b else {}
    groups: list[tuple[tuple[list[float], ...], tuple[list[float], ...]]] = []
    for app in doc["plan"]["apps"]:
        busy, idle = headline_key(app, HEADLINE_BG), headline_key(app, "none")
        if not all(k in c for c in ((ca, cb) if b else (ca,)) for k in (busy, idle)):
            return None
        va = [launch_values(ca[k], measure) or [] for k in (busy, idle)]
        if b is None:
            groups.append(((va[0],), (va[1],)))
        else:
            vb = [launch_values(cb[k], measure) or [] for k in (busy, idle)]
            groups.append(((va[0], vb[1]), (va[1], vb[0])))
    return groups or None


def versus(doc: dict[str, Any], a: str, b: str, measure: Measure = "wall") -> tuple[float, float] | None:
    """95 % interval of scheduler `a`'s cold launch beside the writer over idle, over scheduler `b`'s, in `measure`
    (`launch_values`; geometric mean over the applications, Welch on the logs of all four cells' launches): below
    1, `a`'s launches suffer less from the writer. None unless both have all their headline cells."""
    groups = headline_groups(doc, a, b, measure)
    return log_quotient_ci(groups) if groups else None

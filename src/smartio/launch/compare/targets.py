"""Issue 14's targets for smartio, decided by their 95 % intervals, in one run (`target_lines`) and pooled over
several (`pool_lines`); the headline line bench/launch prints.
"""

from __future__ import annotations

import collections
import functools
import math
from typing import Any

from smartio.errors import UsageError
from smartio.launch.compare.plan import HEADLINE_BG, headline_key
from smartio.launch.compare.stats import headline_groups, over_idle, over_none, over_none_groups, versus
from smartio.storebench.stats import log_quotient_stats, log_stats_ci, pooled_log_ci


def mixes_sessions(doc: dict[str, Any], cells: list[tuple[str, str]]) -> bool:
    """Do these (scheduler, cell) come from more than one session of a resumed run? Their ratio then divides
    launches measured in different VM boots, perhaps on different machines (a guest that runs half as fast makes
    a cold launch take half as long again): not side by side."""
    where = doc.get("cell_sessions") or {}
    return len({where.get(label, {}).get(key) for label, key in cells} - {None}) > 1


def headline_cells(apps: list[str] | tuple[str, ...], labels: tuple[str, ...], bg: str) -> list[tuple[str, str]]:
    """The (scheduler, cell) pairs a ratio over idle beside `bg` divides, for every scheduler in `labels`."""
    return [(label, headline_key(a, b)) for label in labels for a in apps for b in ("none", bg)]


def headline_line(doc: dict[str, Any]) -> str:
    """bench/launch's last line: smartio's cold launch beside the writer over idle, the best other scheduler's,
    and how much faster smartio's cold launch beside the writer is than none's (%)."""
    # A scheduler counts once every application has both cells (older documents: all did).
    h = {k: v for k, v in doc["headline"].items() if v.get("complete", True)}
    s = (h.get("smartio") or {}).get("cold_bg_over_idle")
    others = [v["cold_bg_over_idle"] for k, v in h.items() if not k.startswith("smartio") and v["cold_bg_over_idle"]]
    sm, no = (h.get("smartio") or {}).get("cold_bg_ms"), (h.get("none") or {}).get("cold_bg_ms")
    pct = (no - sm) / no * 100 if sm and no else None

    def f(x: float | None, fmt: str) -> str:
        return "n/a" if x is None else fmt.format(x)

    return (f"smartio_cold_bg_over_idle={f(s, '{:.3f}')} best_other_cold_bg_over_idle="
            f"{f(min(others) if others else None, '{:.3f}')} smartio_vs_none_pct={f(pct, '{:.1f}')}")


def interval_lines(doc: dict[str, Any]) -> list[str]:
    """The 95 % intervals of the headline: cold launch beside the writer over idle (geometric mean over the
    applications, Welch on the logs), and beside the writer, how much faster than under none (%)."""
    out = []
    for label, h in doc["headline"].items():
        ci, cn = h.get("cold_bg_over_idle_ci95"), h.get("cold_bg_over_none_ci95")
        if not ci:
            continue
        text = f"  {label}: cold {HEADLINE_BG}/idle 95 % interval [{ci[0]:.3f}, {ci[1]:.3f}]"
        if cn and label != "none":
            text += f"; faster than none by [{(1 - cn[1]) * 100:.1f}, {(1 - cn[0]) * 100:.1f}] %"
        out.append(text)
    return out


MAX_OVER_IDLE = 1.15       # issue 14: smartio's cold launch beside the writer at most 1.15 x its idle one


MIN_FASTER_THAN_NONE = 0.20    # ... and at least 20 % faster than none's


STOCK = ("none", "mq-deadline", "kyber", "bfq")     # "the lowest of the five": smartio and these


def _side(ci: tuple[float, float]) -> str:
    """Where an interval of one scheduler's ratio over another's lies against 1: lower, higher or a tie."""
    return "lower" if ci[1] < 1 else "higher" if ci[0] > 1 else "tie"


def _verdict(ci: tuple[float, float] | None, bound: float, at_least: bool = False) -> str:
    """Is the quantity at most `bound` (at least, with `at_least`): met (its whole interval is), NOT met (none of
    it), undecided (the interval straddles the bound), or not measured (no interval: a cell lacking, or one launch)."""
    if not ci:
        return "not measured"
    lo, hi = (-ci[1], -ci[0]) if at_least else ci
    bound = -bound if at_least else bound
    return "met" if hi <= bound else "NOT met" if lo > bound else "undecided"


def target_lines(doc: dict[str, Any]) -> list[str]:
    """Issue 14's three targets for `smartio`, each with its 95 % interval (unrounded, from the launches) and a
    verdict (`_verdict`): beside the writer within 1.15 x idle; the lowest over idle of the five, i.e. below each
    stock scheduler at its defaults (smartio's ratio over each one's, `versus`: met only when all four were run and
    each is decided below; NOT met when one is decided above, which with four comparisons at 2.5 % one-sided each
    says so wrongly up to 10 % of the time); at least 20 % faster than none beside the writer."""
    cells, apps = doc["cells"].get("smartio", {}), doc["plan"]["apps"]
    ratio, ci = over_idle(cells, apps, HEADLINE_BG)
    if ratio is None:
        return []
    verdicts = [_verdict(ci, MAX_OVER_IDLE)]
    apart = " (from different sessions)"
    lines = ["Issue 14's targets for smartio (95 % intervals; met: the whole interval on the right side)",
             f"  beside {HEADLINE_BG} over idle at most {MAX_OVER_IDLE:g}: {ratio:.3f}"
             + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f": {verdicts[0]}"
             + (apart if mixes_sessions(doc, headline_cells(apps, ("smartio",), HEADLINE_BG)) else "")]
    parts, each = [], []
    for label in STOCK:
        v = versus(doc, "smartio", label) if label in doc["cells"] else None
        word = _side(v) if v else "not measured"
        each.append({"lower": "met", "higher": "NOT met", "tie": "undecided"}.get(word, word))
        if v and mixes_sessions(doc, headline_cells(apps, ("smartio", label), HEADLINE_BG)):
            word += apart
        parts.append(f"{label} " + (f"[{v[0]:.3f}, {v[1]:.3f}] " if v else "") + word)
    lowest = ("NOT met" if "NOT met" in each else "met" if all(e == "met" for e in each)
              else "undecided" if "undecided" in each else "not measured")
    verdicts.append(lowest)
    lines.append(f"  the lowest over idle (smartio's over each one's): {'; '.join(parts)}: {lowest}")
    cn = over_none(cells, doc["cells"].get("none", {}), apps)
    faster = None if not cn else (1 - cn[1], 1 - cn[0])
    verdicts.append(_verdict(faster, MIN_FASTER_THAN_NONE, at_least=True))
    lines.append(f"  at least {MIN_FASTER_THAN_NONE * 100:g} % faster than none beside {HEADLINE_BG}: "
                 + (f"[{faster[0] * 100:.1f}, {faster[1] * 100:.1f}] %: " if faster else "") + verdicts[-1]
                 + (apart if faster and mixes_sessions(doc, [(label, headline_key(a, HEADLINE_BG))
                                                            for label in ("smartio", "none") for a in apps]) else ""))
    counts = collections.Counter(verdicts)
    lines.append(f"  targets met {counts['met']}/3, undecided {counts['undecided']}"
                 + (f", not measured {n}" if (n := counts["not measured"]) else ""))
    return lines


def pool_lines(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Issue 14's targets pooled over several runs (`bench/launch --pool`): each run's estimate of smartio's cold
    launch beside the writer over idle, of its quotient over each stock scheduler's, and over none's launch beside
    the writer, with that run's own 95 % interval, then all runs' together (`pooled_log_ci`: random effects, the
    runs' spread about each other counted, Student's t with runs - 1 degrees of freedom) and their verdicts. Runs
    that differ in profile, time scale or applications measure different things: UsageError."""
    from smartio.report.tables import grid

    if len(runs) < 2:
        raise UsageError("--pool", " ".join(name for name, _ in runs), "pooling needs at least two runs")
    first = runs[0][1]
    for name, doc in runs[1:]:
        for what, get in (("profile", lambda d: d["profile"]["name"]), ("time scale", lambda d: d["plan"].get(
                "time_scale")), ("applications", lambda d: list(d["plan"]["apps"]))):
            if get(doc) != get(first):
                raise UsageError("--pool", name, f"another {what} than {runs[0][0]} ({get(doc)} against "
                                 f"{get(first)}): its launches measure something else")
    stock = [label for label in STOCK if any(label in doc["cells"] for _, doc in runs)]

    def faster_groups(doc: dict[str, Any]) -> list[Any] | None:
        return over_none_groups(doc["cells"].get("smartio", {}), doc["cells"].get("none", {}), doc["plan"]["apps"])

    columns: list[tuple[str, Any]] = [("smartio beside the writer/idle", lambda d: headline_groups(d, "smartio"))]
    columns += [(f"that over {label}'s", functools.partial(lambda d, lb: headline_groups(d, "smartio", lb), lb=label))
                for label in stock]
    columns.append(("smartio/none beside the writer", faster_groups))
    estimates: list[list[tuple[float, float] | None]] = []
    rows = []
    for name, doc in runs:
        row, est = [name + (" (resumed)" if doc.get("sessions") else "")], []
        for _, groups_of in columns:
            st = log_quotient_stats(g) if (g := groups_of(doc)) else None
            est.append(None if st is None else (st[0], st[1]))
            ci = None if st is None else log_stats_ci(st)
            row.append("-" if st is None or ci is None else f"{math.exp(st[0]):.3f} [{ci[0]:.3f}, {ci[1]:.3f}]")
        estimates.append(est)
        rows.append(row)
    pooled = []
    prow, trow = ["pooled"], ["between-run spread (tau, log)"]
    for i in range(len(columns)):
        have = [x for e in estimates if (x := e[i]) is not None]
        p = pooled_log_ci(have)
        pooled.append(p)
        prow.append("-" if p is None else f"{p[0]:.3f} [{p[1]:.3f}, {p[2]:.3f}] ({len(have)} runs)")
        trow.append("-" if p is None else f"{p[3]:.3f}")
    lines = [f"Pooled over {len(runs)} runs (cold real launches, geometric mean over {', '.join(first['plan']['apps'])}"
             f"; each run's estimate with its own 95 % interval, then random effects over the runs: DerSimonian-"
             f"Laird, Hartung-Knapp's t with runs - 1 degrees of freedom)",
             grid(["run", *[c for c, _ in columns]], [*rows, prow, trow])]

    def ci_of(p: tuple[float, float, float, float] | None) -> tuple[float, float] | None:
        return None if p is None else (p[1], p[2])

    idle = _verdict(ci_of(pooled[0]), MAX_OVER_IDLE)
    sides = [(label, _side(ci) if (ci := ci_of(p)) else "not measured")
             for label, p in zip(stock, pooled[1:-1], strict=True)]
    each = [{"lower": "met", "higher": "NOT met", "tie": "undecided"}.get(w, w) for _, w in sides]
    lowest = ("NOT met" if "NOT met" in each else "met" if len(each) == len(STOCK) and all(e == "met" for e in each)
              else "undecided" if "undecided" in each else "not measured")
    cn = ci_of(pooled[-1])
    faster = None if not cn else (1 - cn[1], 1 - cn[0])
    lines += ["Issue 14's targets over the pooled runs (a check across VM sessions; the issue asks for one run's "
              "table)",
              f"  beside {HEADLINE_BG} over idle at most {MAX_OVER_IDLE:g}: {idle}",
              "  the lowest over idle: " + "; ".join(f"{label} {w}" for label, w in sides) + f": {lowest}"
              + ("" if len(stock) == len(STOCK) else f" (only {', '.join(stock)} measured)"),
              f"  at least {MIN_FASTER_THAN_NONE * 100:g} % faster than none beside {HEADLINE_BG}: "
              + (f"[{faster[0] * 100:.1f}, {faster[1] * 100:.1f}] %: " if faster else "")
              + _verdict(faster, MIN_FASTER_THAN_NONE, at_least=True)]
    return lines


def off_cpu_lines(doc: dict[str, Any]) -> list[str]:
    """smartio against each stock scheduler off the CPU (`versus` in "off_cpu"): a diagnostic beside the targets,
    which are on the launch time."""
    parts = []
    for label in STOCK:
        if label in doc["cells"] and (v := versus(doc, "smartio", label, "off_cpu")):
            parts.append(f"{label} [{v[0]:.3f}, {v[1]:.3f}] {_side(v)}")
    return [f"  off the CPU, smartio's over each one's (a diagnostic, not a target): {'; '.join(parts)}"] \
        if parts else []

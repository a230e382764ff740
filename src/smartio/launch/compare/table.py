"""The launch comparison's text report (`render`): the cells per scheduler, each background over idle, replay
fidelity, the targets, and what is missing.
"""

from __future__ import annotations

import collections
from typing import Any

from smartio.compare.spec import clock_text
from smartio.flashdev.profiles import device_line
from smartio.launch.compare.disturbance import disturbance_lines, disturbed
from smartio.launch.compare.plan import BACKGROUND_HEAD_S, HEADLINE_BG
from smartio.launch.compare.replay_fidelity import fidelity_lines
from smartio.launch.compare.stats import Measure, over_idle
from smartio.launch.compare.targets import (
    headline_cells,
    headline_line,
    interval_lines,
    mixes_sessions,
    off_cpu_lines,
    target_lines,
)
from smartio.testbed import hostload
from smartio.testbed.boot import text_of


def _cell_text(r: dict[str, Any]) -> str:
    """A cell's mean launch time (ms) and its 95 % interval's wider half, as % of the mean; then `!k/n` when k of
    its n launches were taken while other work on the host took its CPUs (`disturbed`)."""
    w = r["wall_s"]
    text = f"{w['mean'] * 1e3:.0f}"
    if (ci := w.get("ci95")) and None not in ci and w["mean"] > 0:     # one launch: [None, None]
        text += f" ±{max(ci[1] - w['mean'], w['mean'] - ci[0]) / w['mean'] * 100:.0f} %"
    if (marks := disturbed(r)) and any(marks):
        text += f" !{sum(marks)}/{len(marks)}"
    return text


def background_lines(doc: dict[str, Any]) -> list[str]:
    """Per background workload of the run: each scheduler's cold real launch beside it over idle (geometric mean
    over the applications, 95 % interval), the headline's measure for every background."""
    from smartio.report.tables import grid

    plan = doc["plan"]
    bgs = [b for b in plan["backgrounds"] if b != "none"]
    labels = [s for s in plan["schedulers"] if s in doc["cells"]]
    if (not bgs or not labels or "none" not in plan["backgrounds"] or "cold" not in plan["caches"]
            or "real" not in plan["modes"]):
        return []
    def rows(measure: Measure) -> list[list[str]]:
        out = []
        for bg in bgs:
            row = [bg]
            for label in labels:
                r, ci = over_idle(doc["cells"][label], plan["apps"], bg, measure)
                mark = " *" if mixes_sessions(doc, headline_cells(plan["apps"], (label,), bg)) else ""
                row.append("-" if r is None else f"{r:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + mark)
            out.append(row)
        return out

    lines = ["", "Cold launch beside each background over idle (real launches, geometric mean over the applications, "
             "95 % interval)", grid(["background", *labels], wall := rows("wall"))]
    off = rows("off_cpu")
    if any(x != "-" for row in off for x in row[1:]):
        lines += ["", "The same, off the CPU (each launch's time less its own CPU time: what the scheduler decides, "
                  "without TCG's scatter of CPU time; the schedulers' own CPU time drops out too)",
                  grid(["background", *labels], off)]
    if any(x.endswith(" *") for row in wall for x in row[1:]):
        lines.append("  * idle and busy launches from different sessions of this resumed run (other VM boots, perhaps "
                     "other machines): not measured side by side; doc[\"cell_sessions\"] says which")
    return lines


def render(doc: dict[str, Any]) -> str:
    from smartio.report.tables import grid

    plan = doc["plan"]
    hr, rr = plan.get("headline_repeats"), plan.get("replay_repeats")
    over = f"{plan['repeats']} launches" + (f", {hr} in the cold real cells, idle and beside {HEADLINE_BG}"
                                            if hr and hr != plan["repeats"] else "") \
        + (f", {rr} in the cold replay cells" if rr and rr != plan["repeats"] else "")
    lines = [f"Launch time per scheduler (ms, mean over {over}; ± the 95 % interval's half-width, % of the mean), "
             f"profile {doc['profile']['name']} ({device_line(doc['profile'])}); {clock_text(plan)}; "
             f"kernel {doc.get('kernel') or '?'}" + (f" ({g})" if (g := text_of(doc)) else "")]
    if {"real", "replay"} <= set(plan["modes"]):
        lines.append("  real and replay launches of a cell " + ("taken in turn (interleaved)" if plan.get("interleave")
                                                               else "measured one cell after the other"))
    if any(b != "none" for b in plan["backgrounds"]):
        lines.append(f"  background workloads started once per scheduler, {BACKGROUND_HEAD_S:g} s before the first "
                     "launch beside them, running through their cells" if plan.get("background_start") == "once" else
                     "  background workloads started anew a second before every launch")
    if sessions := doc.get("sessions"):
        lines.append("  resumed: " + "; ".join(f"{s['artifacts']} started {s.get('started') or '?'}, "
                                               f"{s['cells']} cells" for s in sessions))
    lines.append("")
    cols = [(a, c, b, m) for a in plan["apps"] for c in plan["caches"] for b in plan["backgrounds"]
            for m in plan["modes"]]
    header = ["scheduler", *[f"{a} {c} {b} {m}" for a, c, b, m in cols], f"cold {HEADLINE_BG}/idle"]
    rows = []
    for label in plan["schedulers"]:
        c = doc["cells"].get(label, {})
        row = [label] + [_cell_text(c[k]) if (k := f"{a}.{cc}.{b}.{m}") in c else "-" for a, cc, b, m in cols]
        h = doc["headline"].get(label, {})
        r, ci = h.get("cold_bg_over_idle"), h.get("cold_bg_over_idle_ci95")
        rows.append([*row, "-" if r is None else f"{r:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")])
    # One column per cell is wide: print it transposed, a row per cell.
    t_rows = [[h, *[r[i] for r in rows]] for i, h in enumerate(header[1:], start=1)]
    lines.append(grid(["cell", *plan["schedulers"]], t_rows))
    if any("!" in v for r in t_rows for v in r[1:]):
        lines.append(f"  !k/n: k of the cell's n launches were taken while other processes used more than "
                     f"{hostload.DISTURBED_CPUS:g} of the host's CPUs (under TCG the guest's code then runs slower)")
    lines += background_lines(doc)
    lines += fidelity_lines(doc)
    lines += ["", *target_lines(doc), *off_cpu_lines(doc), *interval_lines(doc), *disturbance_lines(doc),
              "  " + headline_line(doc)]
    if host := hostload.note(doc.get("host_load")):
        lines.append(f"  {host}")
    lines += missing_lines(doc["missing"], plan["schedulers"])
    return "\n".join(lines)


MISSING_NAMED = 8       # more missing cells than this are counted per scheduler (the document names them all)


def missing_lines(missing: list[str], schedulers: list[str]) -> list[str]:
    """The cells a run has not measured (yet: a stopped run goes on with `compare resume`): named when few, else counted
    per scheduler, so that a half-done run of 288 cells does not end in a wall of names."""
    if len(missing) <= MISSING_NAMED:
        return [f"  missing: {', '.join(missing)}"] if missing else []
    per = collections.Counter(m.split(" ", 1)[0] for m in missing)
    counts = ", ".join(f"{s} {per[s]}" for s in schedulers if per[s])
    return [f"  missing: {len(missing)} cells ({counts}); the document's \"missing\" names them"]

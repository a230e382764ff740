"""The launch comparison's figure, launch.png (`plot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smartio.compare.spec import clock_text
from smartio.flashdev.profiles import device_line
from smartio.launch.compare.plan import HEADLINE_BG, headline_key
from smartio.launch.compare.replay_fidelity import REPLAY_TOLERANCE, fidelity
from smartio.launch.compare.stats import over_idle
from smartio.launch.compare.targets import headline_cells, mixes_sessions
from smartio.testbed.boot import text_of

PLOT_FILE = "launch.png"


HEADLINE_TARGET = 1.15          # issue 14: smartio's cold launch beside the writer within 1.15x of idle


def plot(doc: dict[str, Any], path: Path) -> Path:
    """launch.png: (1) per scheduler, the cold launch beside each background over idle (geometric mean over the
    applications, 95 % interval; beside seq-write it is the headline) against 1 and the 1.15 target; (2) per
    application, the cold launch beside the writer per scheduler (s, 95 % interval) with the idle launch as a tick
    on each bar; (3) replay against real per application, cache and background, with the 15 % band, when the run
    replayed."""
    from smartio.report import plots

    plan, cells = doc["plan"], doc["cells"]
    labels = [s for s in plan["schedulers"] if s in cells]
    rows = fidelity(doc)
    fig, axes = plots.figure(ncols=3 if rows else 2, width=17 if rows else 12, height=4.8)
    ax = axes[0]
    # Per scheduler, the cold launch beside each background over idle; seq-write's is the headline.
    bgs = [b for b in plan["backgrounds"] if b != "none"] or [HEADLINE_BG]
    series = {}
    for bg in bgs:
        ratios = [over_idle(cells[s], plan["apps"], bg) for s in labels]
        series[bg if len(bgs) > 1 else ""] = [{"mean": r or 0.0, "ci95": list(ci) if ci else [None, None]}
                                              for r, ci in ratios]
    plots.bars(ax, labels, series, "cold launch beside the background / idle" if len(bgs) > 1
               else f"cold launch beside {HEADLINE_BG} / idle", baseline=1)
    if HEADLINE_BG in bgs:
        ax.axhline(HEADLINE_TARGET, color="tab:red", ls="--", lw=0.8, label=f"target {HEADLINE_TARGET} ({HEADLINE_BG})")
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title("Cold launch over idle (geometric mean over the applications)", fontsize=9)
    apart = [f"{s} beside {bg}" for bg in bgs for s in labels
             if mixes_sessions(doc, headline_cells(plan["apps"], (s,), bg))]
    if apart:
        ax.set_xlabel("not side by side (idle and busy launches from different sessions): " + "; ".join(apart),
                      fontsize=6, color="tab:red", wrap=True)
    if not any(st["mean"] for stats in series.values() for st in stats):
        ax.text(0.5, 0.5, f"no headline: the run has no cold real launch\nboth idle and beside {HEADLINE_BG}",
                transform=ax.transAxes, ha="center", va="center", color="dimgrey")

    ax = axes[1]
    # Bars: the cold real launch beside the writer (idle where the run had no writer), ticks: the idle one.
    bar_bg = HEADLINE_BG if any(headline_key(a, HEADLINE_BG) in cells[s] for s in labels for a in plan["apps"]) \
        else "none"
    apps = [a for a in plan["apps"] if any(headline_key(a, bar_bg) in cells[s] for s in labels)]

    def wall(label: str, app: str) -> dict[str, Any]:
        w = cells[label].get(headline_key(app, bar_bg), {}).get("wall_s", {})
        return {"mean": w.get("mean", 0.0), "ci95": w.get("ci95") or [None, None]}

    drawn = plots.bars(ax, apps, {s: [wall(s, a) for a in apps] for s in labels},
                       f"cold launch beside {bar_bg} (s)" if bar_bg != "none" else "cold launch, idle (s)")
    if bar_bg != "none":
        for s in labels:
            for a, bar in zip(apps, drawn[s], strict=True):
                if idle := cells[s].get(headline_key(a, "none")):
                    ax.plot([bar.get_x(), bar.get_x() + bar.get_width()], [idle["wall_s"]["mean"]] * 2,
                            color="black", lw=1.5)
        ax.plot([], [], color="black", lw=1.5, label="idle (cold)")
    if apps:
        ax.legend(fontsize=7)
    else:
        if ax.get_legend():
            ax.get_legend().remove()
        ax.text(0.5, 0.5, "no cold real launch in this run", transform=ax.transAxes, ha="center", va="center",
                color="dimgrey")
    ax.set_title("Per application" + (" (bars: beside the writer; ticks: idle)" if bar_bg != "none" else ""),
                 fontsize=9)

    if rows:
        ax = axes[2]
        ys = list(range(len(rows)))[::-1]
        lo, hi = 1 - REPLAY_TOLERANCE, 1 + REPLAY_TOLERANCE
        ax.axvspan(lo, hi, color="tab:green", alpha=0.12)
        for y, r in zip(ys, rows, strict=True):
            ci = r["ci95"]
            err = [[r["replay_over_real"] - ci[0]], [ci[1] - r["replay_over_real"]]] if ci else None
            color = {"yes": "tab:green", "no": "tab:red"}.get(r["within"], "tab:orange")
            ax.errorbar([r["replay_over_real"]], [y], xerr=err, fmt="o", color=color, capsize=3)
        ax.set_yticks(ys, [f"{r['app']} {r['cache']} {r['background']}" for r in rows], fontsize=7)
        ax.axvline(1, color="grey", lw=0.6)
        ax.set_xlabel(f"replay / real launch time, 95 % interval\n(shaded: within {REPLAY_TOLERANCE:.0%}; green "
                      "within, orange undecided, red not)", fontsize=8)
        ax.set_title("Replay against real (geometric mean over the schedulers)", fontsize=9)
    fig.suptitle(f"Application launch per scheduler on emulated {doc['profile']['name']}")
    hr = plan.get("headline_repeats") or plan["repeats"]
    plots.stamp(fig, "; ".join([f"emulated {doc['profile']['name']} ({device_line(doc['profile'])})",
                                f"{plan['repeats']} launches per cell, {hr} in the headline's",
                                clock_text(plan), f"kernel {doc.get('kernel') or '?'}",
                                *([g] if (g := text_of(doc)) else []), str(doc.get("started", "?"))]))
    plots.save(fig, path)
    return path

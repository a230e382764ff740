"""PNG plots (matplotlib, no display needed): every figure smartio draws, for bench results, comparisons and
trace reports, and the helpers they share.

Every figure carries its provenance in a footer line (device or emulated profile, scheduler, sizes, repeats,
kernel, date) and in the PNG's Description text chunk, so a PNG read on its own says what it shows. Error bars are
the 95 % confidence intervals of the documents (asymmetric, never below zero; see experiments.stats), and axes of
quantities that cannot be negative start at zero.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import matplotlib

matplotlib.use("Agg")   # before pyplot is imported (hence E402 below): no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from smartio.report.tables import PRETTY, ci_errors, runs  # noqa: E402
from smartio.units import mib  # noqa: E402

DPI = 110


# --- shared ------------------------------------------------------------------------------------------------

def figure(ncols: int = 1, width: float = 6, height: float = 4, sharey: bool = False) -> tuple[Figure, Any]:
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), sharey=sharey)
    return fig, axes


def stamp(fig: Figure, provenance: str) -> None:
    """Writes the provenance line at the foot of the figure (and keeps it for the PNG's metadata)."""
    fig.text(0.01, 0.005, provenance, fontsize=6.5, color="dimgrey", ha="left", va="bottom", wrap=True)
    fig._smartio_provenance = provenance  # type: ignore[attr-defined]  # ours, read back by save()


def save(fig: Figure, dest: Path | IO[bytes], dpi: int = DPI) -> None:
    """Lays the figure out (room for the footer), writes it as PNG to a path or a binary buffer, and closes it."""
    provenance = getattr(fig, "_smartio_provenance", None)
    fig.tight_layout(rect=(0, 0.06 if provenance else 0, 1, 1))
    meta = {"Software": "smartio", **({"Description": provenance} if provenance else {})}
    fig.savefig(dest, format="png", dpi=dpi, metadata=meta)
    plt.close(fig)


def discard(fig: Figure) -> None:
    """Closes a figure that turned out to have nothing to show."""
    plt.close(fig)


def png_bytes(fig: Figure, dpi: int = 90) -> bytes:
    buf = io.BytesIO()
    save(fig, buf, dpi)
    return buf.getvalue()


def _errs(stats: Sequence[dict[str, Any]]) -> list[list[float]] | None:
    """Asymmetric error bars (below, above) for matplotlib, or None when no stat has an interval."""
    pairs = [ci_errors(s) for s in stats]
    if all(p is None for p in pairs):
        return None
    return [[p[0] if p else 0.0 for p in pairs], [p[1] if p else 0.0 for p in pairs]]


def bars(ax: Axes, groups: Sequence[str], series: Mapping[str, Sequence[dict[str, Any]]], ylabel: str,
         baseline: float | None = None) -> dict[str, list[Rectangle]]:
    """Grouped bars of Stats with their CIs: one group per entry of `groups`, one bar per series in each. Returns
    each series' bars, in the order of `groups`, for marks drawn on them."""
    width = 0.8 / max(len(series), 1)
    drawn = {}
    for i, (name, stats) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        drawn[name] = list(ax.bar(xs, [s["mean"] for s in stats], width * 0.95, yerr=_errs(stats), capsize=3,
                                  label=name).patches)
    ax.set_xticks(range(len(groups)), groups, rotation=20 if max(map(len, groups), default=0) > 8 else 0,
                  ha="right" if max(map(len, groups), default=0) > 8 else "center")
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.6)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    if len(series) > 1:
        ax.legend()
    return drawn


def lines(ax: Axes, xs: Sequence[float], series: Mapping[str, Sequence[dict[str, Any]]], xlabel: str, ylabel: str,
          styles: dict[str, str] | None = None) -> None:
    """Lines of Stats against x, with CI error bars; the y axis starts at zero."""
    for name, stats in series.items():
        ax.errorbar(xs, [s["mean"] for s in stats], yerr=_errs(stats), marker="o", capsize=3, label=name,
                    linestyle=(styles or {}).get(name, "-"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend()


def provenance(doc: dict[str, Any], profile: dict[str, Any] | None = None) -> str:
    """Where a bench document's numbers come from, in one line."""
    dev = doc.get("device") or {}
    s = doc.get("settings") or {}
    r = doc.get("results") or {}
    prof = profile or ({"name": doc["profile"]} if doc.get("profile") else None)
    where = f"device {dev['name']}" if dev.get("name") else (dev.get("note") or "device ?")
    parts = [where + (f" (emulated {prof['name']})" if prof else ""), f"scheduler {doc.get('scheduler') or '?'}"]
    size = r.get("size_bytes", s.get("size_bytes"))
    if size:
        parts.append(f"{mib(size)} per stream" if doc.get("experiment") != "mixed" else f"{mib(size)}")
    bs = r.get("bs", s.get("bs"))
    if bs:
        parts.append(f"{bs // 1024} KiB requests")
    if r.get("iodepth"):
        parts.append(f"queue depth {r['iodepth']}")
    if s.get("repeats"):
        parts.append(runs(s["repeats"]))
    parts += [f"kernel {doc.get('kernel', '?')}", str(doc.get("started", "?"))]
    return "; ".join(parts)


# --- bench results -----------------------------------------------------------------------------------------

def concurrency(doc: dict[str, Any]) -> Figure:
    """Speedup of concurrent over serial I/O against N (the paper's Figure 7)."""
    r = doc["results"]
    fig, ax = figure()
    for p, m in r["detail"].items():
        stats = list(m.values())
        ax.errorbar([int(n) for n in m], [s["mean"] for s in stats], yerr=_errs(stats), marker="o", capsize=3,
                    label=PRETTY[p])
    ax.set_xscale("log", base=2)
    ax.set_xticks(r["levels"], [str(n) for n in r["levels"]])
    ax.set_xlabel("concurrent streams N")
    ax.set_ylabel("speedup over serial")
    ax.set_ylim(bottom=0)
    ax.set_title("Concurrency speedup (95 % CI)")
    ax.axhline(1, color="grey", lw=0.6)
    ax.legend()
    stamp(fig, provenance(doc))
    return fig


def slowdown(doc: dict[str, Any]) -> Figure:
    """Read and write slowdown, seq and rand (the paper's Figure 4(b))."""
    r = doc["results"]
    fig, ax = figure(width=5.5)
    modes = list(r["detail"])
    bars(ax, modes, {kind.replace("_", " "): [r["detail"][m][kind] for m in modes]
                     for kind in ("read_slowdown", "write_slowdown")},
         "latency with company / alone", baseline=1)
    ax.legend()
    ax.set_title(f"Slowdown, {r['streams']}R{r['streams']}W (95 % CI)")
    stamp(fig, provenance(doc))
    return fig


def mixed(doc: dict[str, Any]) -> Figure:
    """Total response time against the share of reads (the paper's Figure 12)."""
    r = doc["results"]
    fig, ax = figure()
    lines(ax, r["mixes"], {mode: [d[str(x)] for x in r["mixes"]] for mode, d in r["detail"].items()},
          "reads (%)", "total response time (s)", styles={"rand": "--"})
    ax.set_title(f"Mixed workload, queue depth {r['iodepth']} (95 % CI)")
    stamp(fig, provenance(doc))
    return fig


def latency(doc: dict[str, Any]) -> Figure:
    r = doc["results"]
    fig, ax = figure(width=5.5)
    names = list(r["patterns"])
    bars(ax, [PRETTY[p] for p in names], {"mean": [r["patterns"][p]["mean_ms"] for p in names]},
         "mean response time (ms)")
    ax.set_title("Latency alone (95 % CI)")
    stamp(fig, provenance(doc))
    return fig


FIGURES = {"latency": latency, "slowdown": slowdown, "concurrency": concurrency, "mixed": mixed}


def write_plots(doc: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    docs = doc["results"].items() if doc["experiment"] == "all" else [(doc["experiment"], doc)]
    paths = []
    for name, d in docs:
        save(FIGURES[name](d), out / f"{name}.png")
        paths.append(out / f"{name}.png")
    return paths


# --- the fleet results service (smartio serve) ------------------------------------------------------------------
# Drawn per request, as SVG with its text kept as text (so a page's labels are searchable and selectable); names
# come from submitters, so mathtext is off: a model called "$x$" is drawn as typed.

PATTERN_ORDER = ("seq_read", "seq_write", "rand_read", "rand_write")


def svg_bytes(fig: Figure) -> bytes:
    """The figure as SVG (text as text, no mathtext), laid out with room for its footer; closes it."""
    provenance = getattr(fig, "_smartio_provenance", None)
    fig.tight_layout(rect=(0, 0.06 if provenance else 0, 1, 1))
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "smartio"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _plain(texts: Sequence[Text]) -> None:
    """Texts that hold submitters' names: drawn as typed ("$x$" stays "$x$"), never as mathtext."""
    for text in texts:
        text.set_parse_math(False)


def fleet_ranking(rows: Sequence[Mapping[str, Any]], title: str, footer: str) -> Figure:
    """Figure 6: total bandwidth of the top models, stacked by pattern; each bar labelled with the model and n."""
    n = max(len(rows), 1)
    fig, ax = figure(width=7.5, height=1.2 + 0.32 * n)
    labels = [f"{r['model']}  (n={r['n']})" + ("  [emulated]" if r.get("emulated") else "") for r in rows]
    left = [0.0] * len(rows)
    ys = list(range(len(rows)))
    for p in PATTERN_ORDER:
        widths = [float(r["median"].get(p, 0.0)) for r in rows]
        ax.barh(ys, widths, left=left, label=PRETTY.get(p, p), height=0.7)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("total bandwidth (MB/s), the sum of each pattern's median")
    ax.set_xlim(left=0)
    ax.set_title(title, fontsize=10)
    if rows:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no device has enough runs yet", ha="center", va="center", transform=ax.transAxes)
    stamp(fig, footer)
    _plain([*ax.get_yticklabels(), ax.title])
    return fig


def fleet_ecdf(series: Mapping[str, Sequence[float]], xlabel: str, title: str, footer: str,
               log: bool = True) -> Figure:
    """Figures 5 and 3(b): the ECDF across devices of each series' values (sorted), one step line per series."""
    fig, ax = figure(width=6.5, height=4.2)
    drawn = False
    for name, values in series.items():
        if not values:
            continue
        ys = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
        ax.step([values[0], *values], ys, where="post", label=f"{PRETTY.get(name, name)} ({len(values)} devices)")
        drawn = True
    if drawn and log and all(v > 0 for vs in series.values() for v in vs):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of devices")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no device has enough runs yet", ha="center", va="center", transform=ax.transAxes)
    stamp(fig, footer)
    return fig


def fleet_history(points: Sequence[tuple[str, Mapping[str, float]]], title: str, footer: str) -> Figure:
    """One device's runs over time: each run's bandwidth per pattern, stacked, in the order they were made."""
    fig, ax = figure(width=7, height=3.8)
    xs = list(range(len(points)))
    bottom = [0.0] * len(points)
    for p in PATTERN_ORDER:
        hs = [float(bw.get(p, 0.0)) for _, bw in points]
        ax.bar(xs, hs, bottom=bottom, label=PRETTY.get(p, p), width=0.7)
        bottom = [a + b for a, b in zip(bottom, hs, strict=True)]
    ax.set_xticks(xs, [when[:10] for when, _ in points], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("total bandwidth (MB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    if points:
        ax.legend(fontsize=8)
    stamp(fig, footer)
    _plain([ax.title])
    return fig


def fleet_side_by_side(names: Sequence[str], values: Sequence[Mapping[str, float]], ylabel: str, title: str,
                       footer: str) -> Figure:
    """Two (or more) runs' values per pattern, as grouped bars."""
    fig, ax = figure(width=6.5, height=3.8)
    patterns = [p for p in PATTERN_ORDER if any(p in v for v in values)]
    width = 0.8 / max(len(names), 1)
    for i, (name, v) in enumerate(zip(names, values, strict=True)):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(patterns))]
        ax.bar(xs, [float(v.get(p, 0.0)) for p in patterns], width * 0.95, label=name)
    ax.set_xticks(range(len(patterns)), [PRETTY.get(p, p) for p in patterns])
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    legend = ax.legend(fontsize=8)
    stamp(fig, footer)
    _plain([ax.title, *legend.get_texts()])
    return fig

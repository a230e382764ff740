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

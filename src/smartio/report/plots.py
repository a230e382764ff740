"""PNG plots of result documents (matplotlib, no display needed): the curves people would rather look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from smartio.report.tables import PRETTY, half_ci  # noqa: E402


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def concurrency(doc: dict[str, Any], out: Path) -> Path:
    """Speedup of concurrent over serial I/O against N (the paper's Figure 7)."""
    r = doc["results"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for p, m in r["detail"].items():
        ns = [int(n) for n in m]
        means = [m[n]["mean"] for n in m]
        errs = [half_ci(m[n]) or 0.0 for n in m]
        ax.errorbar(ns, means, yerr=errs, marker="o", capsize=3, label=PRETTY[p])
    ax.set_xscale("log", base=2)
    ax.set_xticks(r["levels"], [str(n) for n in r["levels"]])
    ax.set_xlabel("concurrent streams N")
    ax.set_ylabel("speedup over serial")
    ax.set_title("Concurrency speedup (95 % CI)")
    ax.axhline(1, color="grey", lw=0.6)
    ax.legend()
    return _save(fig, out / "concurrency.png")


def slowdown(doc: dict[str, Any], out: Path) -> Path:
    """Read and write slowdown, seq and rand (the paper's Figure 4(b))."""
    r = doc["results"]
    fig, ax = plt.subplots(figsize=(5, 4))
    modes = list(r["detail"])
    for i, kind in enumerate(("read_slowdown", "write_slowdown")):
        vals = [r["detail"][m][kind]["mean"] for m in modes]
        errs = [half_ci(r["detail"][m][kind]) or 0.0 for m in modes]
        ax.bar([x + i * 0.38 for x in range(len(modes))], vals, 0.36, yerr=errs, capsize=3,
               label=kind.replace("_", " "))
    ax.set_xticks([x + 0.19 for x in range(len(modes))], modes)
    ax.axhline(1, color="grey", lw=0.6)
    ax.set_ylabel("latency with company / alone")
    ax.set_title(f"Slowdown, {r['streams']}R{r['streams']}W")
    ax.legend()
    return _save(fig, out / "slowdown.png")


def mixed(doc: dict[str, Any], out: Path) -> Path:
    """Total response time against the share of reads (the paper's Figure 12)."""
    r = doc["results"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, d in r["detail"].items():
        ax.plot(r["mixes"], [d[str(x)]["mean"] for x in r["mixes"]], marker="o",
                linestyle="-" if mode == "seq" else "--", label=mode)
    ax.set_xlabel("reads (%)")
    ax.set_ylabel("response time (s)")
    ax.set_title(f"Mixed workload, queue depth {r['iodepth']}")
    ax.legend()
    return _save(fig, out / "mixed.png")


def latency(doc: dict[str, Any], out: Path) -> Path:
    r = doc["results"]
    fig, ax = plt.subplots(figsize=(5, 4))
    names = list(r["patterns"])
    ax.bar([PRETTY[p] for p in names], [r["patterns"][p]["mean_ms"]["mean"] for p in names],
           yerr=[half_ci(r["patterns"][p]["mean_ms"]) or 0.0 for p in names], capsize=3)
    ax.set_ylabel("mean response time (ms)")
    ax.set_title("Latency alone")
    return _save(fig, out / "latency.png")


PLOTS = {"latency": latency, "slowdown": slowdown, "concurrency": concurrency, "mixed": mixed}


def write_plots(doc: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    docs = doc["results"].items() if doc["experiment"] == "all" else [(doc["experiment"], doc)]
    return [PLOTS[name](d, out) for name, d in docs]

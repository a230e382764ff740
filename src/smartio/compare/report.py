"""Tables and plots of a comparison document: the paper's Figure 11 (slowdown per scheduler) and Figure 12 (mixed
workload response time per scheduler). Pure functions of the document, so tests render recorded ones byte for byte.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from smartio.report.tables import _grid, _mib, _pm, half_ci

MODES = ("seq", "rand")


def _header(doc: dict[str, Any]) -> str:
    p, s = doc["profile"], doc["settings"] or {}
    disks = f", disks over {doc['disk_transport']}" if doc.get("disk_transport") else ""
    return (f"  profile {p['name']} (queue depth {p['queue_depth']}, time scale {p['time_scale']:g}{disks}); "
            f"kernel {doc['kernel']}; {doc['fio_version']}; repeats: {s.get('repeats', '?')}")


def _slowdown_detail(doc: dict[str, Any], label: str) -> dict[str, Any] | None:
    run = doc["runs"].get(label, {}).get("slowdown")
    return run["results"]["detail"] if run else None


def best(doc: dict[str, Any], key: str, mode: str = "seq", lowest: bool = True,
         exclude: str | None = None) -> tuple[str, float] | None:
    """The scheduler with the lowest (or highest) results.<label>.<key>.<mode>, optionally leaving one out."""
    vals = [(label, r[key][mode]) for label, r in doc["results"].items()
            if key in r and label != exclude and r[key][mode] is not None]
    if not vals:
        return None
    return (min if lowest else max)(vals, key=lambda x: x[1])


def slowdown_table(doc: dict[str, Any]) -> str:
    """Figure 11: read and write slowdown, seq and rand, and efficiency, one row per scheduler."""
    first = next(d["slowdown"] for d in doc["runs"].values() if "slowdown" in d)
    n, size = first["results"]["streams"], first["results"]["size_bytes"]
    header = ["scheduler", *[f"read {m}" for m in MODES], *[f"write {m}" for m in MODES],
              *[f"efficiency {m}" for m in MODES]]
    rows = []
    for label in doc["schedulers"]:
        d = _slowdown_detail(doc, label)
        if d is None:
            rows.append([label, *["(missing)"] * (len(header) - 1)])
            continue
        rows.append([label, *[_pm(d[m]["read_slowdown"], "{:.2f}") for m in MODES],
                     *[_pm(d[m]["write_slowdown"], "{:.2f}") for m in MODES],
                     *[_pm(d[m]["efficiency"], "{:.2f}") for m in MODES]])
    title = (f"Figure 11: slowdown per scheduler, {n} reader(s) against {n} writer(s), "
             f"{first['results']['bs'] // 1024} KiB requests, {_mib(size)} per stream (mean ± 95 % CI)")
    lines = [title, _header(doc), "", _grid(header, rows), "",
             "  slowdown = response time beside the other kind / alone; "
             "efficiency = 1/read slowdown + 1/write slowdown"]
    low = best(doc, "read_slowdown")
    eff = best(doc, "efficiency", lowest=False)
    if low and eff:
        lines.append(f"  lowest seq read slowdown: {low[0]} ({low[1]:.2f}); "
                     f"highest seq efficiency: {eff[0]} ({eff[1]:.2f})")
    return "\n".join(lines)


def _fmt_s(v: float | None) -> str:
    return "nan" if v is None or math.isnan(v) else f"{v:.2f}"


def mixed_table(doc: dict[str, Any]) -> str:
    """Figure 12: total response time of the mixed workload against the share of reads, per scheduler."""
    first = next(d["mixed"] for d in doc["runs"].values() if "mixed" in d)
    r = first["results"]
    mixes = [str(x) for x in r["mixes"]]
    blocks = [f"Figure 12: mixed workload, total response time in seconds per scheduler, {_mib(r['size_bytes'])}, "
              f"queue depth {r['iodepth']} (means); columns: % reads", _header(doc)]
    for mode in MODES:
        rows = []
        for label in doc["schedulers"]:
            resp = doc["results"].get(label, {}).get("response_s")
            rows.append([label, *([_fmt_s(resp[mode][x]) for x in mixes] if resp else ["(missing)"] * len(mixes))])
        blocks += ["", f"{mode}:", _grid(["scheduler", *[f"{x}%" for x in mixes]], rows)]
    return "\n".join(blocks)


def render(doc: dict[str, Any]) -> str:
    parts = []
    if any("slowdown" in d for d in doc["runs"].values()):
        parts.append(slowdown_table(doc))
    if any("mixed" in d for d in doc["runs"].values()):
        parts.append(mixed_table(doc))
    if doc.get("missing"):
        parts.append("not measured: " + "; ".join(doc["missing"]))
    return "\n\n".join(parts)


def plot_slowdown(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [x for x in doc["schedulers"] if _slowdown_detail(doc, x)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    width = 0.38
    for ax, mode in zip(axes, MODES):
        for i, kind in enumerate(("read_slowdown", "write_slowdown")):
            stats = [_slowdown_detail(doc, x)[mode][kind] for x in labels]
            errs = [half_ci(s) or 0.0 for s in stats]
            ax.bar([j + (i - 0.5) * width for j in range(len(labels))], [s["mean"] for s in stats], width,
                   yerr=errs if any(errs) else None, capsize=3, label=kind.replace("_", " "))
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
        ax.axhline(1, color="grey", lw=0.6)
        ax.set_title(f"{mode}")
    axes[0].set_ylabel("response time beside the other kind / alone")
    axes[0].legend()
    n = next(d["slowdown"] for d in doc["runs"].values() if "slowdown" in d)["results"]["streams"]
    fig.suptitle(f"Slowdown per scheduler, {n}R{n}W on {doc['profile']['name']} (95 % CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_mixed(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for label in doc["schedulers"]:
            resp = doc["results"].get(label, {}).get("response_s")
            if resp:
                xs = sorted(resp[mode], key=int)
                ax.plot([int(x) for x in xs], [resp[mode][x] for x in xs], marker="o", label=label)
        ax.set_xlabel("reads (%)")
        ax.set_title(mode)
    axes[0].set_ylabel("total response time (s)")
    axes[0].legend()
    fig.suptitle(f"Mixed workload per scheduler on {doc['profile']['name']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(doc: dict[str, Any], out: Path) -> list[Path]:
    """fig11-slowdown.png and/or fig12-mixed.png in `out`, for the experiments the document holds."""
    paths = []
    if any("slowdown" in d for d in doc["runs"].values()):
        paths.append(plot_slowdown(doc, out / "fig11-slowdown.png"))
    if any("mixed" in d for d in doc["runs"].values()):
        paths.append(plot_mixed(doc, out / "fig12-mixed.png"))
    return paths

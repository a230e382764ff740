"""Tables and plots of a comparison document: the paper's Figure 11 (slowdown per scheduler) and Figure 12 (mixed
workload response time per scheduler). Pure functions of the document, so tests render recorded ones byte for byte.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from smartio.flashdev.profiles import device_line
from smartio.report.tables import grid, mixed_measure, pm
from smartio.storebench import targets
from smartio.testbed import hostload
from smartio.testbed.boot import text_of
from smartio.units import mib

MODES = ("seq", "rand")


def _repeats(doc: dict[str, Any], experiment: str) -> Any:
    """The repeats of an experiment's runs, as its first run's settings say (the mixed workload may have its own)."""
    run = next((d[experiment] for d in doc["runs"].values() if experiment in d), None)
    return ((run or {}).get("settings") or doc["settings"] or {}).get("repeats", "?")


def _header(doc: dict[str, Any]) -> str:
    p = doc["profile"]
    disks = f", disks over {doc['disk_transport']}" if doc.get("disk_transport") else ""
    experiments = [e for e in ("slowdown", "mixed") if any(e in d for d in doc["runs"].values())]
    counts = {e: _repeats(doc, e) for e in experiments}
    repeats = (", ".join(f"{n} {e}" for e, n in counts.items()) if len(set(map(str, counts.values()))) > 1
               else next(iter(counts.values()), (doc["settings"] or {}).get("repeats", "?")))
    booted = f" ({g})" if (g := text_of(doc)) else ""
    return (f"  profile {p['name']} ({device_line(p)}{disks}); "
            f"kernel {doc['kernel']}{booted}; {doc['fio_version']}; repeats: {repeats}")


def _slowdown_detail(doc: dict[str, Any], label: str) -> dict[str, Any] | None:
    run = doc["runs"].get(label, {}).get("slowdown")
    return run["results"]["detail"] if run else None


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
        rows.append([label, *[pm(d[m]["read_slowdown"], "{:.2f}") for m in MODES],
                     *[pm(d[m]["write_slowdown"], "{:.2f}") for m in MODES],
                     *[pm(d[m]["efficiency"], "{:.2f}") for m in MODES]])
    title = (f"Figure 11: slowdown per scheduler, {n} reader(s) against {n} writer(s), "
             f"{first['results']['bs'] // 1024} KiB requests, {mib(size)} per stream (mean [95 % CI])")
    prof = doc.get("profiled")
    lines = [title, _header(doc), *(["  smartio:profile = the Concurrency Profiler's tunables, measured in this run: "
                                    + ", ".join(f"{k}={v}" for k, v in prof["tunables"].items())] if prof else []),
             "", grid(header, rows), "",
             "  slowdown = response time beside the other kind / alone; "
             "efficiency = 1/read slowdown + 1/write slowdown"]
    lines += [f"  {v}" for v in verdicts(doc)]
    return "\n".join(lines)


def verdicts(doc: dict[str, Any]) -> list[str]:
    """Per mode, the scheduler with the lowest read slowdown and the one with the highest efficiency, each named
    only where its interval over every other scheduler's decides it (storebench.targets), else "undecided" with
    the schedulers it has not beaten: one repeat never decides."""
    out = []
    for mode in MODES:
        figs = {label: f for label in doc["schedulers"] if (f := targets.slowdown_figures(doc, label, mode))}
        if len(figs) < 2:
            continue
        parts = []
        for key, what, lower in (("read_slowdown", "lowest read slowdown", True),
                                 ("efficiency", "highest efficiency", False)):
            lead = (min if lower else max)(figs, key=lambda label: figs[label][key].mean)
            decide = targets.lowest if lower else targets.highest
            tied = [label for label in figs if label != lead and decide(figs[lead][key], [figs[label][key]]) != "met"]
            named = ", ".join(f"{label} ({figs[label][key].mean:.2f})" for label in (lead, *tied))
            parts.append(f"{what} {named}" if not tied else f"{what} undecided between {named}")
        out.append(f"{mode}: " + "; ".join(parts))
    if any("undecided" in line for line in out):
        out.append("(undecided: the 95 % intervals do not separate them; more repeats or --size decide)")
    return out


def _fmt_s(v: float | None) -> str:
    return "nan" if v is None or math.isnan(v) else f"{v:.2f}"


def mixed_table(doc: dict[str, Any]) -> str:
    """Figure 12: total response time of the mixed workload against the share of reads, per scheduler."""
    first = next(d["mixed"] for d in doc["runs"].values() if "mixed" in d)
    r = first["results"]
    mixes = [str(x) for x in r["mixes"]]
    blocks = [f"Figure 12: mixed workload, total response time in seconds ({mixed_measure(r)}) per scheduler, "
              f"{mib(r['size_bytes'])}, queue depth {r['iodepth']} (means); columns: % reads", _header(doc)]
    for mode in MODES:
        rows = []
        for label in doc["schedulers"]:
            resp = doc["results"].get(label, {}).get("response_s")
            rows.append([label, *([_fmt_s(resp[mode][x]) for x in mixes] if resp else ["(missing)"] * len(mixes))])
        blocks += ["", f"{mode}:", grid(["scheduler", *[f"{x}%" for x in mixes]], rows)]
    return "\n".join(blocks)


def render(doc: dict[str, Any]) -> str:
    parts = []
    if any("slowdown" in d for d in doc["runs"].values()):
        parts.append(slowdown_table(doc))
    if any("mixed" in d for d in doc["runs"].values()):
        parts.append(mixed_table(doc))
    if doc.get("missing"):
        parts.append("not measured: " + "; ".join(doc["missing"]))
    if host := hostload.note(doc.get("host_load")):
        parts.append(host)
    return "\n\n".join(parts)


def _provenance(doc: dict[str, Any], experiment: str) -> str:
    """One line saying what a comparison figure shows: the emulated device, schedulers, sizes, repeats, date."""
    p, s = doc["profile"], doc["settings"] or {}
    run = next((d[experiment] for d in doc["runs"].values() if experiment in d), None)
    r = run["results"] if run else {}
    size = r.get("size_bytes", s.get("size_bytes"))
    parts = [f"emulated {p['name']} ({device_line(p)})",
             "schedulers " + ", ".join(doc["schedulers"])]
    if size:
        parts.append(f"{mib(size)} per stream" if experiment == "slowdown" else mib(size))
    if r.get("bs"):
        parts.append(f"{r['bs'] // 1024} KiB requests")
    if r.get("iodepth"):
        parts.append(f"queue depth {r['iodepth']}")
    parts += [f"{_repeats(doc, experiment)} repeat(s)", f"kernel {doc['kernel']}",
              *([g] if (g := text_of(doc)) else []), str(doc.get("started", "?"))]
    return "; ".join(parts)


def plot_slowdown(doc: dict[str, Any], path: Path) -> Path:
    """Figure 11: read and write slowdown per scheduler, seq and rand side by side."""
    from smartio.report import plots

    details = {x: d for x in doc["schedulers"] if (d := _slowdown_detail(doc, x))}
    labels = list(details)
    fig, axes = plots.figure(ncols=2, width=11, sharey=True)
    for ax, mode in zip(axes, MODES, strict=True):
        plots.bars(ax, labels, {kind.replace("_", " "): [details[x][mode][kind] for x in labels]
                                for kind in ("read_slowdown", "write_slowdown")},
                   "response time beside the other kind / alone" if mode == MODES[0] else "", baseline=1)
        ax.set_title(mode)
    n = next(d["slowdown"] for d in doc["runs"].values() if "slowdown" in d)["results"]["streams"]
    fig.suptitle(f"Slowdown per scheduler, {n}R{n}W on {doc['profile']['name']} (95 % CI)")
    plots.stamp(fig, _provenance(doc, "slowdown"))
    plots.save(fig, path)
    return path


def plot_mixed(doc: dict[str, Any], path: Path) -> Path:
    """Figure 12: total response time of the mixed workload against the share of reads, per scheduler."""
    from smartio.report import plots

    fig, axes = plots.figure(ncols=2, width=11, sharey=True)
    for ax, mode in zip(axes, MODES, strict=True):
        series = {}
        for label in doc["schedulers"]:
            run = doc["runs"].get(label, {}).get("mixed")
            if run:
                detail = run["results"]["detail"][mode]
                xs = sorted(detail, key=int)
                series[label] = [detail[x] for x in xs]
        plots.lines(ax, [int(x) for x in xs] if series else [], series, "reads (%)",
                    "total response time (s)" if mode == MODES[0] else "")
        ax.set_title(mode)
    fig.suptitle(f"Mixed workload per scheduler on {doc['profile']['name']} (95 % CI)")
    plots.stamp(fig, _provenance(doc, "mixed"))
    plots.save(fig, path)
    return path


def write_plots(doc: dict[str, Any], out: Path) -> list[Path]:
    """fig11-slowdown.png and/or fig12-mixed.png in `out`, for the experiments the document holds."""
    paths = []
    if any("slowdown" in d for d in doc["runs"].values()):
        paths.append(plot_slowdown(doc, out / "fig11-slowdown.png"))
    if any("mixed" in d for d in doc["runs"].values()):
        paths.append(plot_mixed(doc, out / "fig12-mixed.png"))
    return paths

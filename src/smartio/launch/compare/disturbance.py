"""Other work on the host during a cell's launches (smartio.testbed.hostload): which launches it disturbed, and the
document again without them.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from smartio.launch.compare.plan import is_headline_cell
from smartio.launch.compare.targets import target_lines
from smartio.testbed import hostload


def host_during(run: dict[str, Any], samples: list[hostload.Sample]) -> dict[str, Any] | None:
    """Other work's share of the host's CPUs during each launch of a cell's run file (hostload.during): from the
    launches' own times where the run file has them ("launch"), else the cell's start to its end for every launch
    ("cell": run files from before 2026-11-28's second session). None without launches, or without samples
    covering all of them."""
    n = len(run["results"]["wall_s"].get("values") or ())
    spans, source = run["results"].get("launch_unix_s"), "launch"
    if not spans:
        try:
            cell = [datetime.datetime.fromisoformat(run[k]).timestamp() for k in ("started", "finished")]
        except (KeyError, TypeError, ValueError):
            return None
        spans, source = [cell] * n, "cell"
    values = [hostload.during(samples, a, b) for a, b in spans]
    if not n or not samples or len(values) != n or any(v is None for v in values):
        return None
    return {"values": [round(v, 3) for v in values if v is not None], "from": source}


def disturbed(cell: dict[str, Any], limit: float = hostload.DISTURBED_CPUS) -> list[bool] | None:
    """Which launches of a cell were taken while other work took more than `limit` of the host's CPUs; None when
    the cell has no host load, or not one value per launch."""
    host = cell.get("host_other_cpus")
    if not host or len(host["values"]) != len(cell["wall_s"].get("values") or ()):
        return None
    return [v > limit for v in host["values"]]


# A cell's per-launch figures: a Stat each, one value per launch (others, such as a background's throughput where
# a launch had no reading, are dropped when filtered).
PER_LAUNCH_STATS = ("wall_s", "background_write_mib_s", "disk_read_requests", "disk_read_kib")


def _kept(values: Any, keep: list[bool]) -> list[Any] | None:
    """The values `keep` keeps, if `values` is a list of one per launch; else None."""
    if not isinstance(values, list) or len(values) != len(keep):
        return None
    return [v for v, k in zip(values, keep, strict=True) if k]


def without_disturbed(doc: dict[str, Any], limit: float = hostload.DISTURBED_CPUS) -> dict[str, Any]:
    """`doc` with the launches `disturbed` marks left out of every cell: each per-launch figure recomputed from the
    launches kept (a figure without one value per launch is dropped); a cell left with fewer than 2 launches is left
    out. Every scheduler is filtered by the same rule, which depends on the host alone: a check on whether a
    verdict stands on other work's bursts, not a replacement for the full figures."""
    from smartio.storebench.stats import Stat

    cells: dict[str, dict[str, Any]] = {}
    for label, per in doc["cells"].items():
        for key, cell in per.items():
            marks = disturbed(cell, limit)
            if not marks or not any(marks):
                cells.setdefault(label, {})[key] = cell
                continue
            keep = [not m for m in marks]
            if sum(keep) < 2:
                continue
            kept = functools.partial(_kept, keep=keep)
            new = {k: v for k, v in cell.items() if k not in (*PER_LAUNCH_STATS, "breakdown_s", "min_s", "max_s",
                                                              "launch_unix_s", "host_other_cpus")}
            for name in PER_LAUNCH_STATS:
                if (values := kept((cell.get(name) or {}).get("values"))) is not None:
                    new[name] = Stat.of(values).to_json()
            walls = new["wall_s"]["values"]
            new |= {"min_s": min(walls), "max_s": max(walls)}
            spent = {name: kept(st.get("values")) for name, st in (cell.get("breakdown_s") or {}).items()}
            if spent and all(v is not None for v in spent.values()):
                new["breakdown_s"] = {name: Stat.of(v).to_json() for name, v in spent.items() if v is not None}
            if (values := kept(cell.get("launch_unix_s"))) is not None:
                new["launch_unix_s"] = values
            if (values := kept(cell["host_other_cpus"]["values"])) is not None:
                new["host_other_cpus"] = {**cell["host_other_cpus"], "values": values}
            cells.setdefault(label, {})[key] = new
    return {**doc, "cells": cells}


def disturbance_lines(doc: dict[str, Any]) -> list[str]:
    """How many launches other work on the host disturbed (`disturbed`), which headline cells they fell in, and
    issue 14's targets again without them (`without_disturbed`) when any did. Nothing for a document without the
    host's load per cell."""
    marks = {(label, key): m for label, per in doc["cells"].items() for key, cell in per.items()
             if (m := disturbed(cell)) is not None}
    if not marks:
        return []
    hit = sum(sum(m) for m in marks.values())
    total = sum(len(m) for m in marks.values())
    per_launch = all(cell.get("host_other_cpus", {}).get("from") == "launch" for per in doc["cells"].values()
                     for cell in per.values() if "host_other_cpus" in cell)
    head = (f"  host: {hit} of {total} launches were taken while other processes used more than "
            f"{hostload.DISTURBED_CPUS:g} of the host's CPUs ({hostload.FILE}, {hostload.INTERVAL_S:g} s samples"
            + ("" if per_launch else "; runs without per-launch times: over the whole cell") + ")")
    if not hit:
        return [head]
    headline = [f"{label} {key.split('.')[0]} {key.split('.')[2]} {sum(m)}/{len(m)}"
                for (label, key), m in marks.items() if any(m) and is_headline_cell(*key.split(".")[1:])]
    lines = [head + (f"; in the headline cells: {', '.join(headline)}" if headline else "")]
    if headline and (targets := target_lines(without_disturbed(doc))):
        lines.append("  the targets again without those launches (the same rule for every scheduler; a check on "
                     "the figures above, not a replacement):")
        lines += ["  " + t for t in targets[1:]]
    return lines

"""Replay against the real launch per application, cache and background: is a replay within REPLAY_TOLERANCE of the
launch it replays.
"""

from __future__ import annotations

from typing import Any

from smartio.launch.compare.stats import gmean
from smartio.storebench.stats import log_ratio_ci

REPLAY_TOLERANCE = 0.15        # issue 14: a replay within 15 % of the real launch's time


def fidelity(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Replay against the real launch per (application, cache, background): the geometric mean over the
    schedulers of replay / real time with its 95 % interval (Welch's, over every scheduler's launches), the
    verdict "yes" (the interval inside 1 ± REPLAY_TOLERANCE), "no" (outside it) or "undecided" (straddling an
    edge; from the means alone, yes or no, where a run kept no launch times), and both launches' disk reads per
    launch (requests, KiB: means over the schedulers) and their CPU time (s, the same) with its kernel part, where
    the run recorded them."""
    plan = doc["plan"]
    out: list[dict[str, Any]] = []
    if not {"real", "replay"} <= set(plan["modes"]):
        return out
    for a in plan["apps"]:
        for c in plan["caches"]:
            for b in plan["backgrounds"]:
                ratios: list[float] = []
                pairs: list[tuple[list[float], list[float]]] = []
                io: dict[str, list[tuple[float, float]]] = {"real": [], "replay": []}
                cpu: dict[str, list[tuple[float, float | None]]] = {"real": [], "replay": []}   # (all, kernel)
                for label in plan["schedulers"]:
                    cell = doc["cells"].get(label, {})
                    real, rep = cell.get(f"{a}.{c}.{b}.real"), cell.get(f"{a}.{c}.{b}.replay")
                    if not (real and rep):
                        continue
                    ratios.append(rep["wall_s"]["mean"] / real["wall_s"]["mean"])
                    pairs.append((rep["wall_s"].get("values", []), real["wall_s"].get("values", [])))
                    for m, r in (("real", real), ("replay", rep)):
                        if "disk_read_requests" in r:
                            io[m].append((r["disk_read_requests"]["mean"], r["disk_read_kib"]["mean"]))
                        if "cpu" in (spent := r.get("breakdown_s", {})):
                            cpu[m].append((spent["cpu"]["mean"], spent.get("cpu_sys", {}).get("mean")))
                ratio = gmean(ratios)
                if ratio is None:
                    continue
                ci = log_ratio_ci(pairs)
                lo, hi = 1 - REPLAY_TOLERANCE, 1 + REPLAY_TOLERANCE
                if ci is None:
                    verdict = "yes" if lo <= ratio <= hi else "no"
                else:
                    verdict = "yes" if lo <= ci[0] and ci[1] <= hi else "no" if ci[0] > hi or ci[1] < lo \
                        else "undecided"
                row: dict[str, Any] = {"app": a, "cache": c, "background": b, "replay_over_real": ratio,
                                       "ci95": ci and [round(x, 4) for x in ci], "schedulers": len(ratios),
                                       "within": verdict}
                for m, v in io.items():
                    if v:
                        row[f"{m}_read_requests"] = sum(x for x, _ in v) / len(v)
                        row[f"{m}_read_kib"] = sum(y for _, y in v) / len(v)
                for m, secs in cpu.items():
                    if secs:
                        row[f"{m}_cpu_s"] = sum(s for s, _ in secs) / len(secs)
                        if all(k is not None for _, k in secs):     # a run from before cpu_sys has none
                            row[f"{m}_cpu_sys_s"] = sum(k for _, k in secs if k is not None) / len(secs)
                out.append(row)
    return out


def fidelity_lines(doc: dict[str, Any]) -> list[str]:
    from smartio.report.tables import grid

    rows = fidelity(doc)
    if not rows:
        return []
    has_io = any("real_read_requests" in r for r in rows)
    has_cpu = any("real_cpu_s" in r for r in rows)
    has_sys = any("real_cpu_sys_s" in r and "replay_cpu_sys_s" in r for r in rows)

    def io(r: dict[str, Any], m: str) -> str:
        n = r.get(f"{m}_read_requests")
        return "-" if n is None else f"{n:.0f} / {r[f'{m}_read_kib'] / 1024:.1f}"

    pct = f"within {REPLAY_TOLERANCE:.0%}".replace("%", " %")
    def ratio(r: dict[str, Any]) -> str:
        ci = r["ci95"]
        return f"{r['replay_over_real']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    def cpu(r: dict[str, Any]) -> str:
        a, b = r.get("real_cpu_s"), r.get("replay_cpu_s")
        if a is None or b is None:
            return "-"
        ka, kb = r.get("real_cpu_sys_s"), r.get("replay_cpu_sys_s")
        if ka is None or kb is None:
            return f"{a:.2f} / {b:.2f}"
        return f"{a:.2f} ({ka:.2f}) / {b:.2f} ({kb:.2f})"

    table = grid(["replay against real", "replay/real [95 % CI]", pct,
                  *(["real reads (requests / MiB)", "replay reads"] if has_io else []),
                  *([f"CPU s{' (kernel)' if has_sys else ''}, real / replay"] if has_cpu else [])],
                 [[f"{r['app']} {r['cache']} {r['background']}", ratio(r), r["within"],
                   *([io(r, "real"), io(r, "replay")] if has_io else []), *([cpu(r)] if has_cpu else [])]
                  for r in rows])
    n = {v: sum(r["within"] == v for r in rows) for v in ("yes", "no", "undecided")}
    return ["", table, f"  replay {pct} of the real launch (geometric mean over the schedulers, decided by its 95 % "
            f"interval) in {n['yes']} of {len(rows)} cells; not within in {n['no']}, undecided in {n['undecided']}"]

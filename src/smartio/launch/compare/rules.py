"""What smartio's rules did per launch beside each background, from the counters the guest recorded after each cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smartio.iosched.debugfs import flat_counters
from smartio.launch.compare.plan import BACKGROUND_HEAD_S, GUEST_FILE, read_json

parse_stats = flat_counters      # smartio's debugfs `stats` as {"be_write.dispatched": 2, ...}


# What bench/launch counts per launch, from smartio's counters: the writes that reached the device, and by which rule
# a write went while a launch read (its slice ran out with reads queued; an anticipation ended, mostly in a gap
# between reads, also by the reader's own write), or was held (one write at a time; a start-up kept its slice from
# running out), or was boosted (QASIO).
RULES = (("writes", lambda c: sum(v for k, v in c.items() if k.endswith("_write.dispatched"))),
         ("slices expired", lambda c: c.get("events.write_slice_expired", 0)),
         ("anticipations ran out", lambda c: c.get("anticipation.expired", 0)),
         ("single-write holds", lambda c: c.get("single_write.holds", 0)),
         ("start-up holds", lambda c: c.get("startup.holds", 0)),
         ("boosted", lambda c: sum(v for k, v in c.items() if k.startswith("qasio_") and k.endswith(".boosted"))))


def rule_counts(out_dir: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell of every session in `out_dir` (a run directory), what smartio's rules did per launch: each cell's
    counters less the previous cell's of the same scheduler and session (cells measured together share theirs),
    over the timed launches of those cells (`doc`'s; the untimed launch of each cell and the time between launches
    count too). A scheduler's first cell in a session counts from the switch to it (`since_switch`: set-up and
    calibration included), as does a cell after the counters went back (the module reloaded). Schedulers without
    counters, and runs kept without their guest records, give nothing."""
    from smartio.compare.run import session_dirs

    rows: list[dict[str, Any]] = []
    for session in session_dirs(out_dir):
        record = read_json(session / "out" / GUEST_FILE) or {}
        prev: dict[str, dict[str, int]] = {}
        seen: set[tuple[Any, ...]] = set()         # cells measured together are recorded once per mode
        for run in record.get("runs", ()):
            stats = parse_stats(((run.get("counters") or {}).get("stats")) or "")
            label = run.get("scheduler")
            modes = [run.get("mode"), *run.get("interleaved_with", ())]
            key = (label, run.get("app"), run.get("cache"), run.get("background"), frozenset(modes))
            if not stats or not label or key in seen:
                continue
            seen.add(key)
            before = prev.get(label, {})
            if any(v < before.get(k, 0) for k, v in stats.items()):
                before = {}
            prev[label] = stats
            cells = doc["cells"].get(label, {})
            keys = [f"{run['app']}.{run['cache']}.{run['background']}.{m}" for m in modes]
            launches = sum(len(cells[k]["wall_s"].get("values") or ()) for k in keys if k in cells)
            if not launches or run.get("rc"):
                continue
            delta = {k: v - before.get(k, 0) for k, v in stats.items()}
            rows.append({"scheduler": label, "cell": f"{run['app']} {run['cache']} {run['background']} "
                         + "+".join(modes), "background": run["background"], "launches": launches,
                         "session": session.name, "since_switch": not before,
                         **{name: f(delta) / launches for name, f in RULES}})
    return rows


def rule_lines(out_dir: Path, doc: dict[str, Any]) -> list[str]:
    """`rule_counts` beside each background as a table (bench/launch --analyze), its cells from a later session of
    a resumed run and those counted since the switch marked."""
    from smartio.report.tables import grid

    rows = [r for r in rule_counts(out_dir, doc) if r["background"] != "none"]
    if not rows:
        return []
    sessions = len({r["session"] for r in rows}) > 1

    def cell(r: dict[str, Any]) -> str:
        return r["cell"] + (" +" if r["since_switch"] else "")

    notes = ["  + counted from the switch to the scheduler (set-up, calibration and the idle cells included)"] \
        if any(r["since_switch"] for r in rows) else []
    return ["", "smartio's rules per launch beside each background (from its counters; the time between launches "
            f"counts too, and in a scheduler's first cell beside a background its {BACKGROUND_HEAD_S:g} s head start)",
            grid(["scheduler", "cell", *(["session"] if sessions else []), "launches", *(n for n, _ in RULES)],
                 [[r["scheduler"], cell(r), *([r["session"]] if sessions else []), str(r["launches"]),
                   *(f"{r[n]:.1f}" for n, _ in RULES)] for r in rows]), *notes]

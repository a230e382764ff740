#!/usr/bin/env python3
"""Cuts a `smartio sqlite --trace-file` recording down to its first repeat and first N transactions, for tests.

The source is a trace kept by `smartio compare --experiment sqlite` (vm/out/traces/<fs>.<config>.insert.smtrace,
recorded in the testbed on the emulated s5-emmc); the cut keeps the events from the repeat's first transaction to
the N+1-th's start and the matching part of the sidecar (FILE.sqlite.json).
Usage: tests/data/sqlite/cut_trace.py SRC.smtrace DEST.smtrace [N]   (default 12)
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from smartio.trace.events import Trace  # noqa: E402
from smartio.trace.formats import read_trace, write_ours  # noqa: E402


def main(src: Path, dest: Path, n: int) -> None:
    side = json.loads(src.with_name(src.name + ".sqlite.json").read_text())
    rep = side["repeats"][0]
    n = min(n, len(rep["starts_ns"]))
    lo = rep["starts_ns"][0]
    hi = rep["starts_ns"][n] if n < len(rep["starts_ns"]) else rep["ends_ns"][-1]
    rep["starts_ns"], rep["ends_ns"] = rep["starts_ns"][:n], rep["ends_ns"][:n]
    rep["syncs"] = [s for s in rep["syncs"] if lo <= s["start_ns"] < hi]
    side["repeats"] = [rep]
    trace = read_trace(src)
    ev = trace.events[(trace.events["time"] >= lo) & (trace.events["time"] < hi)]
    pids = set(int(p) for p in ev["pid"])
    write_ours(Trace(ev, {p: c for p, c in trace.comms.items() if p in pids},
                     {**trace.meta, "cut": f"repeat 1, transactions 1-{n} of {src.name}"}), dest)
    dest.with_name(dest.name + ".sqlite.json").write_text(json.dumps(side, indent=0) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 12)

"""summary.json, in the form runs/iosched-policy-ab-20261207/analyze.py reads, from ab-policy.sh's output
directory: per run, every repeat's Figure 11 figures and every launch's wall time. Usage: python3 collect.py OUT"""
import json
import sys
from pathlib import Path

FIELDS = ("read_slowdown", "write_slowdown", "efficiency")


def main() -> None:
    out = Path(sys.argv[1])
    doc: dict = {"fig11": {}, "launch": {}}
    for run in sorted(out.glob("fig11-*/compare.json")):
        c = json.loads(run.read_text())
        detail = c["runs"]["smartio"]["slowdown"]["results"]["detail"]
        doc["fig11"][run.parent.name] = {"started": c["started"], "host_load": c["host_load"],
                                         **{m: {k: detail[m][k]["values"] for k in FIELDS} for m in ("seq", "rand")}}
    for run in sorted(out.glob("launch-*/compare.json")):
        c = json.loads(run.read_text())
        cells = c["cells"]["smartio"]
        doc["launch"][run.parent.name] = {"started": c["started"], "host_load": c["host_load"],
                                          "headline": c["headline"],
                                          "wall_s": {k: v["wall_s"]["values"] for k, v in cells.items()}}
    json.dump(doc, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

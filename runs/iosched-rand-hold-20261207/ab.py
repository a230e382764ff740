"""guest-ab.sh's output: per scheduler, 1R1W read / write slowdown and efficiency (mean [95 % interval], log-t),
and the second's efficiency over the first's, paired by repeat (the two alternate within each repeat)."""
import glob
import json
import math
import os
import statistics as st
import sys

from scipy import stats


def lat(path, job, d):
    for j in json.load(open(path))["jobs"]:
        if j["jobname"] == job:
            return j[d]["lat_ns"]["mean"]
    raise KeyError(job)


def ci(v):
    lg = [math.log(x) for x in v]
    m, h = st.mean(lg), stats.t.ppf(.975, len(lg) - 1) * st.stdev(lg) / math.sqrt(len(lg))
    return f"{math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"


def main(d, a, b):
    reps = sorted({int(os.path.basename(p).split("-")[-3]) for p in glob.glob(f"{d}/{a}-*-rb.json")})
    eff = {}
    for s in (a, b):
        for m in ("seq", "rand"):
            r = [lat(f"{d}/{s}-{i}-{m}-rb.json", "m-read", "read") / lat(f"{d}/{s}-{i}-{m}-ra.json", "ra", "read")
                 for i in reps]
            w = [lat(f"{d}/{s}-{i}-{m}-wb.json", "m-write", "write") / lat(f"{d}/{s}-{i}-{m}-wa.json", "wa", "write")
                 for i in reps]
            e = [1 / x + 1 / y for x, y in zip(r, w, strict=True)]
            eff[s, m] = e
            print(f"{s:10s} {m:4s} read {ci(r)} write {ci(w)} eff {ci(e)}  reads {' '.join(f'{x:.2f}' for x in r)}")
    for m in ("seq", "rand"):
        ratios = [y / x for x, y in zip(eff[a, m], eff[b, m], strict=True)]
        print(f"{m}: {b} over {a}, efficiency, paired: {ci(ratios)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])

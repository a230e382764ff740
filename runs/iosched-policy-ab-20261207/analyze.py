"""Figure 11 1R1W and the launch headline of summary.json, per module, and new over old with 95 % intervals
(Welch's t on the logs). Usage: python3 analyze.py [summary.json] (needs scipy: the project's .venv has it)."""
import json
import math
import statistics as st
import sys

from scipy import stats


def ci(v):
    lg = [math.log(x) for x in v]
    m, h = st.mean(lg), stats.t.ppf(.975, len(lg) - 1) * st.stdev(lg) / math.sqrt(len(lg))
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def welch(a, b):
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = st.variance(la) / len(la), st.variance(lb) / len(lb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    d, h = st.mean(la) - st.mean(lb), stats.t.ppf(.975, df) * math.sqrt(va + vb)
    return math.exp(d), math.exp(d - h), math.exp(d + h)


doc = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "summary.json"))
sides = ("new", "old")
print("Figure 11 1R1W, smartio at its defaults (every repeat of the three runs per module):")
for mode in ("seq", "rand"):
    for k in ("read_slowdown", "write_slowdown", "efficiency"):
        v = {s: [x for tag, run in doc["fig11"].items() if tag.endswith(s) for x in run[mode][k]] for s in sides}
        cells = "  ".join(f"{s} {m:.2f} [{lo:.2f}, {hi:.2f}]" for s in sides for m, lo, hi in [ci(v[s])])
        r = welch(v["new"], v["old"])
        print(f"  {mode:4s} {k:15s} {cells}  new/old {r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]  (n={len(v['new'])})")
print("Cold launch beside seq-write over idle (geometric mean over the applications):")
res = {}
for s in sides:
    cells: dict = {}
    for tag, run in doc["launch"].items():
        if tag.endswith(s):
            for key, vals in run["wall_s"].items():
                app, _, bg, _ = key.split(".")
                cells.setdefault((app, bg), []).extend(vals)
    apps = sorted({a for a, _ in cells})
    tot = var = 0.0
    df = 0
    for a in apps:
        i = [math.log(x) for x in cells[(a, "none")]]
        b = [math.log(x) for x in cells[(a, "seq-write")]]
        tot += st.mean(b) - st.mean(i)
        var += st.variance(b) / len(b) + st.variance(i) / len(i)
        df += len(b) + len(i) - 2
    m, se = tot / len(apps), math.sqrt(var) / len(apps)
    h = stats.t.ppf(.975, df) * se
    res[s] = (m, se, df)
    print(f"  {s} {math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]  ({len(cells[(apps[0], 'none')])} "
          f"launches per application and cell)")
(a, sa, da), (b, sb, db) = res["new"], res["old"]
h = stats.t.ppf(.975, min(da, db)) * math.sqrt(sa ** 2 + sb ** 2)
print(f"  new/old {math.exp(a - b):.3f} [{math.exp(a - b - h):.3f}, {math.exp(a - b + h):.3f}]")

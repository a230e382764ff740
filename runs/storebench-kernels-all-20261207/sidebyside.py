"""Figure 11's 1R1W under every scheduler on 6.1 and 6.12 side by side, from each kernel's compare.json (or the
summary.json this run keeps): read and write slowdown and efficiency with 95 % intervals (log-t), where a figure
moves between the kernels (6.12 over 6.1, Welch's t on the logs: moved when its interval leaves 1), and smartio's
defaults over its profiled tunables (issue 49: within 5 %). Usage: python3 sidebyside.py [COMPARE_6.1 COMPARE_6.12]
or python3 sidebyside.py summary.json (scipy: the project's .venv)."""
import json
import math
import statistics as st
import sys

from scipy import stats

KINDS = ("read_slowdown", "write_slowdown", "efficiency")
KERNELS = ("6.1", "6.12")


def ci(v: list[float]) -> tuple[float, float, float]:
    lg = [math.log(x) for x in v]
    m, h = st.mean(lg), stats.t.ppf(.975, len(lg) - 1) * st.stdev(lg) / math.sqrt(len(lg))
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = st.variance(la) / len(la), st.variance(lb) / len(lb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    d, h = st.mean(la) - st.mean(lb), stats.t.ppf(.975, df) * math.sqrt(va + vb)
    return math.exp(d), math.exp(d - h), math.exp(d + h)


def summary(paths: list[str]) -> dict:
    """{kernel: {"kernel": release, scheduler: {mode: {kind: [values]}}}} from the two compare.json files."""
    out = {}
    for name, path in zip(KERNELS, paths, strict=True):
        doc = json.load(open(path))
        k = out[name] = {"kernel": doc["kernel"]}
        for sched, run in doc["runs"].items():
            detail = run["slowdown"]["results"]["detail"]
            k[sched] = {m: {kind: detail[m][kind]["values"] for kind in KINDS} for m in ("seq", "rand")}
    return out


def fmt(v: list[float]) -> str:
    m, lo, hi = ci(v)
    return f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


def main() -> None:
    args = sys.argv[1:] or ["summary.json"]
    doc = json.load(open(args[0])) if len(args) == 1 else summary(args)
    if len(args) == 2:
        json.dump(doc, open("summary.json", "w"), indent=1)
    scheds = [s for s in doc["6.1"] if s != "kernel"]
    print(" | ".join(f"{k}: {doc[k]['kernel']}" for k in KERNELS))
    for mode in ("seq", "rand"):
        print(f"\n1R1W {mode}: read slowdown, write slowdown, efficiency (mean [95 % CI], n per cell)")
        heads = " | ".join(f"{kind.split('_')[0]} {k}" for kind in KINDS for k in KERNELS)
        print(f"| scheduler | {heads} |")
        print("|---" * (1 + len(KINDS) * len(KERNELS)) + "|")
        for s in scheds:
            cells = [fmt(doc[k][s][mode][kind]) for kind in KINDS for k in KERNELS]
            print(f"| {s} | {' | '.join(cells)} |")
        n = {len(doc[k][s][mode]['efficiency']) for k in KERNELS for s in scheds}
        print(f"(n = {sorted(n)})")
        for s in scheds:
            moved = []
            for kind in KINDS:
                r, lo, hi = welch(doc["6.12"][s][mode][kind], doc["6.1"][s][mode][kind])
                if lo > 1 or hi < 1:
                    moved.append(f"{kind.split('_')[0]} x{r:.2f} [{lo:.2f}, {hi:.2f}]")
            if moved:
                print(f"  {s}: on 6.12 over 6.1, {', '.join(moved)}")
        for k in KERNELS:
            r, lo, hi = welch(doc[k]["smartio"][mode]["efficiency"], doc[k]["smartio:profile"][mode]["efficiency"])
            within = "met" if lo >= 0.95 else "not met" if hi < 0.95 else "undecided"
            print(f"  {k}: smartio's defaults over smartio:profile, efficiency {r:.3f} [{lo:.3f}, {hi:.3f}]: "
                  f"within 5 % {within}")


if __name__ == "__main__":
    main()

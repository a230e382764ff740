"""Figure 11's 1R1W under every scheduler on 6.1 and 6.12 side by side, from each kernel's compare.json (or the
summary.json this run keeps): read and write slowdown and efficiency with 95 % intervals (log-t), where a figure
moves between the kernels (6.12 over 6.1, Welch's t on the logs: moved when its interval leaves 1), and smartio's
defaults over its profiled tunables (issue 49: within 5 %). Usage: python3 sidebyside.py [COMPARE_6.1 COMPARE_6.12]
or python3 sidebyside.py summary.json (the project's .venv: smartio's stats and scipy)."""
import json
import math
import statistics as st
import sys

from smartio.storebench.stats import Stat, log_ratio_ci

KINDS = ("read_slowdown", "write_slowdown", "efficiency")
KERNELS = ("6.1", "6.12")


def gmean(v: list[float]) -> float:
    return math.exp(st.mean(math.log(x) for x in v))


def ci(v: list[float]) -> tuple[float, float, float]:
    """Geometric mean and the log-t interval (smartio.storebench.stats) of the repeats."""
    s = Stat.of(v)
    return gmean(v), s.ci95_low, s.ci95_high


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """a over b: the ratio of geometric means and its interval (Welch's t on the logs, stats.log_ratio_ci)."""
    interval = log_ratio_ci([(a, b)])
    assert interval is not None, "fewer than 2 positive repeats"
    return gmean(a) / gmean(b), *interval


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

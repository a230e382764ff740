"""1R1W under smartio at its defaults and under smartio:profile, per kernel, from each run's compare.json (or the
summary.json this run keeps): read / write slowdown and efficiency with 95 % intervals, the defaults' efficiency
over the profiler's (Welch's t on the logs), and whether seq reaches the model's point (read <= 1.72 with write
<= 1.51, each decided by its interval). Usage: python3 analyze.py [summary.json] (scipy: the project's .venv)."""
import json
import math
import statistics as st
import sys

from scipy import stats

KINDS = ("read_slowdown", "write_slowdown", "efficiency")


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


def verdict(lo: float, hi: float, bound: float) -> str:
    return "met" if hi <= bound else "not met" if lo > bound else "undecided"


def main() -> None:
    doc = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "summary.json"))
    for kernel, runs in doc.items():
        print(f"Linux {kernel} ({runs['kernel']})")
        for mode in ("seq", "rand"):
            for s in ("smartio", "smartio:profile"):
                cells = "  ".join(f"{k.split('_')[0]} {m:.2f} [{lo:.2f}, {hi:.2f}]"
                                  for k in KINDS for m, lo, hi in [ci(runs[s][mode][k])])
                print(f"  {mode:4s} {s:16s} {cells}  (n={len(runs[s][mode]['efficiency'])})")
            r = welch(runs["smartio"][mode]["efficiency"], runs["smartio:profile"][mode]["efficiency"])
            within = "met" if r[1] >= 0.95 else "not met" if r[2] < 0.95 else "undecided"
            print(f"  {mode:4s} defaults' efficiency over the profiler's {r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]: "
                  f"within 5 % {within}")
        for s in ("smartio", "smartio:profile"):
            _, rlo, rhi = ci(runs[s]["seq"]["read_slowdown"])
            _, wlo, whi = ci(runs[s]["seq"]["write_slowdown"])
            print(f"  model's point, {s}: read <= 1.72 {verdict(rlo, rhi, 1.72)}, "
                  f"write <= 1.51 {verdict(wlo, whi, 1.51)}")


if __name__ == "__main__":
    main()

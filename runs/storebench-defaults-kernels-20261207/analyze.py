"""1R1W under smartio at its defaults and under smartio:profile, per kernel, from each run's compare.json (or the
summary.json this run keeps): read / write slowdown and efficiency with 95 % intervals, the defaults' efficiency
over the profiler's (Welch's t on the logs), and whether seq reaches the model's point (read <= 1.72 with write
<= 1.51, each decided by its interval). Usage: python3 analyze.py [summary.json] (the project's .venv; the
intervals are those of ../storebench-kernels-all-20261207/sidebyside.py, from smartio.storebench.stats)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "storebench-kernels-all-20261207"))
from sidebyside import KINDS, ci, welch  # noqa: E402  (one copy of the intervals: smartio.storebench.stats)


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

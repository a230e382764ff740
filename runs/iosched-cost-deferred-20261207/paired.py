"""Scheduler A over scheduler B per repeat, from a bench/iosched-cost output directory (its art/out), with 95 %
intervals (t on the logs of the per-repeat ratios), per workload and as the geometric mean over them.
Usage, from bench/: PYTHONPATH=.:../src ../.venv/bin/python PATH/paired.py OUT A B REPEATS [MODES [WORKLOADS]],
for a run of other --modes (default 0,1) or --workloads (default randread,randwrite,mix70)."""
import importlib.machinery
import importlib.util
import math
import statistics as st
import sys
from pathlib import Path

from scipy import stats


def interval(logs: list[float]) -> str:
    m = st.mean(logs)
    h = stats.t.ppf(.975, len(logs) - 1) * st.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"


def main() -> None:
    loader = importlib.machinery.SourceFileLoader("iosched_cost", str(Path(__file__).parents[2] / "bench/iosched-cost"))
    spec = importlib.util.spec_from_loader("iosched_cost", loader)
    assert spec is not None
    bench = importlib.util.module_from_spec(spec)
    loader.exec_module(bench)
    out, a, b, repeats = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    modes = [int(m) for m in (sys.argv[5] if len(sys.argv) > 5 else "0,1").split(",")]
    workloads = (sys.argv[6] if len(sys.argv) > 6 else "randread,randwrite,mix70").split(",")
    data = bench.load(out, modes, repeats, [a, b], workloads)
    for key in ("iops", "cpu_us"):
        per_workload = []
        for mode in modes:
            for w in workloads:
                logs = [math.log(x / y) for x, y in zip(data[(mode, w, a)][key], data[(mode, w, b)][key], strict=True)]
                print(f"{key} mode{mode} {w:9s} {interval(logs)}")
                per_workload.append(logs)
        print(f"{key} geomean {interval([st.mean(r) for r in zip(*per_workload, strict=True)])}")


if __name__ == "__main__":
    main()

"""Per trace of function-graph-guest.sh: calls per I/O x mean µs per call of each traced elevator callback."""
import collections
import glob
import re
import sys

for f in sorted(glob.glob(sys.argv[1] + "/trace-*.txt")):
    tot: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    with open(f) as trace:
        for line in trace:
            m = re.search(r"([\d.]+) us\s+\|\s+(\w+)( \[\w+\])?\(\);", line)
            if m:
                tot[m.group(2)][0] += 1
                tot[m.group(2)][1] += float(m.group(1))
    with open(f.replace("trace-", "fio-")) as terse:
        fio = terse.read().split(";")
    rio, wio = int(fio[7]), int(fio[48])     # fio's terse v3: read and write IOPS
    ios = (rio + wio) * 2                     # 2 s runs
    n = sum(v[1] for v in tot.values())
    print(f.split("/")[-1], f"iops={rio + wio}", f"sum_us_per_io={n / ios:.2f}",
          " ".join(f"{k}:{v[0] / ios:.2f}x{v[1] / max(v[0], 1):.2f}" for k, v in sorted(tot.items())))

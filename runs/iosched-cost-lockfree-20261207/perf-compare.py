"""Samples per million I/Os by symbol, scheduler A against B, from perf-guest.sh's output (its reports by symbol
and fio's terse lines, three rounds each). Usage, in that output: python3 perf-compare.py WORKLOAD A B"""
import collections
import re
import sys

ROUNDS = (1, 2, 3)


def ios(sched: str, workload: str) -> int:
    """Read and write I/Os of the rounds (fio terse v3: total I/Os in fields 6 and 47)."""
    total = 0
    for r in ROUNDS:
        f = open(f"fio-{sched}-{workload}-{r}.txt").read().strip().split(";")
        total += int(f[5]) + int(f[46])
    return total


def samples(sched: str, workload: str) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for r in ROUNDS:
        for line in open(f"{sched}-{workload}-{r}.txt"):
            m = re.match(r"\s+[\d.]+%\s+(\d+)\s+\[(.)\]\s+(\S+)", line)
            if m:
                c[m.group(3)] += int(m.group(1))
    return c


def main() -> None:
    w, a, b = sys.argv[1:4]
    ia, ib = ios(a, w), ios(b, w)
    ca, cb = samples(a, w), samples(b, w)
    print("ios", a, ia, b, ib)
    rows = sorted(((ca[k] / ia * 1e6 - cb[k] / ib * 1e6, k, ca[k] / ia * 1e6, cb[k] / ib * 1e6)
                   for k in set(ca) | set(cb)), reverse=True)
    print(f"total {sum(ca.values()) / ia * 1e6:.1f} {sum(cb.values()) / ib * 1e6:.1f}")
    for d, k, pa, pb in rows[:25] + rows[-10:]:
        print(f"{d:+8.2f} {k:40s} {pa:8.2f} {pb:8.2f}")


if __name__ == "__main__":
    main()

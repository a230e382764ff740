"""Per elevator callback in a function_graph trace at depth 2: how often it ran, its mean time, and per call the
time spent in each direct callee (µs) and how many calls of it. Usage: python3 function-graph-depth2-agg.py TRACE..."""
import collections
import re
import sys

# CPU, then the task (with funcgraph-proc), then the duration.
HEAD = r"\s*\d+\)\s+(?:\S+-\d+\s+\|\s+)?"
LEAF = re.compile(HEAD + r"(?:[+!#*@$ ]\s*)?([\d.]+) us\s+\|\s+(\s*)(\S+?)(?: \[smartio_iosched\])?\(\);")
OPEN = re.compile(HEAD + r"\|\s+(\S+?)(?: \[smartio_iosched\])?\(\) \{")
CLOSE = re.compile(HEAD + r"(?:[+!#*@$ ]\s*)?([\d.]+) us\s+\|\s+\}")


def main() -> None:
    for name in sys.argv[1:]:
        top = None
        child_us: dict[tuple[str, str], float] = collections.defaultdict(float)
        child_n: collections.Counter[tuple[str, str]] = collections.Counter()
        tops: collections.Counter[str] = collections.Counter()
        top_us: dict[str, float] = collections.defaultdict(float)
        with open(name) as f:
            for line in f:
                if m := OPEN.match(line):
                    top = m.group(1)
                    tops[top] += 1
                elif (m := CLOSE.match(line)) and top:
                    top_us[top] += float(m.group(1))
                    top = None
                elif (m := LEAF.match(line)) and top:
                    child_us[(top, m.group(3))] += float(m.group(1))
                    child_n[(top, m.group(3))] += 1
        print("==", name)
        for t in tops:
            print(f"{t:28s} n={tops[t]} mean={top_us[t] / tops[t]:.2f}")
        for k in sorted(child_us, key=lambda k: -child_us[k])[:25]:
            print(f"  {k[0]:24s} {k[1]:34s} per-top-call={child_us[k] / tops[k[0]]:.2f}us "
                  f"calls/top={child_n[k] / tops[k[0]]:.2f}")


if __name__ == "__main__":
    main()

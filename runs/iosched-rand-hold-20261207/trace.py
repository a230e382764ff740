"""Where the reads of one contended rand run (trace.sh's N-rand-rb.trace) lost their time: each read by what the
device was doing when it was queued (a write in flight, a write completed less than 20 ms before, idle), its wait
in the scheduler and on the device (ms); then the reads sent while a write was in flight, by how far into the
write they were sent (5 ms bins): on s5-emmc a read that reaches the die after a random write took the write
buffer waits for the whole program, and the device pays a switch besides.

    python3 trace.py TRACE
"""

import collections
import re
import statistics as st
import sys

EVENT = re.compile(r"\s(\d+\.\d+): block_rq_(insert|issue|complete): \d+,\d+ (\w+) (?:\d+ )?\(\S*\) (\d+) \+ (\d+)")


def requests(path: str) -> list[dict]:
    pending, done = {}, []
    for m in EVENT.finditer(open(path).read()):
        t, event, rwbs, sector = float(m.group(1)) * 1e3, m.group(2), m.group(3)[0], m.group(4)
        key = (rwbs, sector)
        if event == "insert":
            pending[key] = {"dir": rwbs, "insert": t}
        elif event == "issue" and key in pending:
            pending[key]["issue"] = t
        elif event == "complete" and "issue" in pending.get(key, {}):
            r = pending.pop(key)
            r["complete"] = t
            done.append(r)
    return done


def main(path: str) -> None:
    rs = requests(path)
    reads = [r for r in rs if r["dir"] == "R"]
    writes = sorted((r for r in rs if r["dir"] == "W"), key=lambda r: r["issue"])

    def in_flight(t: float) -> dict | None:
        return next((w for w in writes if w["issue"] <= t < w["complete"]), None)

    by_state = collections.defaultdict(list)
    for r in reads:
        last_done = max((w["complete"] for w in writes if w["complete"] <= r["insert"]), default=None)
        state = ("write in flight" if in_flight(r["insert"]) else
                 "write done < 20 ms" if last_done is not None and r["insert"] - last_done < 20 else "idle")
        by_state[state].append((r["issue"] - r["insert"], r["complete"] - r["issue"]))
    lat = st.mean(r["complete"] - r["insert"] for r in reads)
    sched = st.mean(r["issue"] - r["insert"] for r in reads)
    dev = st.mean(r["complete"] - r["issue"] for r in reads)
    print(f"reads {len(reads)}, writes {len(writes)}; read latency {lat:.1f} ms"
          f" (scheduler {sched:.1f}, device {dev:.1f})")
    for state, v in by_state.items():
        print(f"  queued with {state:18s} n={len(v):3d} scheduler {st.mean(x[0] for x in v):5.1f}"
              f" device {st.mean(x[1] for x in v):5.1f}")
    if writes:
        gaps = [b["issue"] - a["issue"] for a, b in zip(writes[:-1], writes[1:], strict=True)]
        print(f"  writes: device {st.mean(w['complete'] - w['issue'] for w in writes):.1f}, scheduler"
              f" {st.mean(w['issue'] - w['insert'] for w in writes):.1f}, between dispatches {st.mean(gaps):.1f}")
    bins = collections.defaultdict(list)
    for r in reads:
        w = in_flight(r["issue"])
        if w:
            bins[int((r["issue"] - w["issue"]) // 5) * 5].append((r["complete"] - r["issue"],
                                                                    r["complete"] - w["complete"]))
    print("  reads sent while a write was in flight, by ms into the write:")
    for k in sorted(bins):
        v = bins[k]
        print(f"    {k:3d}-{k + 5:3d} n={len(v):2d} device {st.mean(x[0] for x in v):5.1f},"
              f" done {st.mean(x[1] for x in v):5.1f} after the write")


if __name__ == "__main__":
    main(sys.argv[1])

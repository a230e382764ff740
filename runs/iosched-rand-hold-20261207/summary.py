"""Per repeat of guest.sh's output (OUT: a run's out directory): the reader's and the writer's mean latency alone
and beside the other (ms), their slowdowns, the background writer's latency x its writes while the reader ran, the
learned pace and hold after the contended read run, and what the pacing counters did in it.

    python3 summary.py OUT
"""

import glob
import json
import os
import re
import sys


def latency(path: str, job: str, direction: str) -> tuple[float, int]:
    for j in json.load(open(path))["jobs"]:
        if j["jobname"] == job:
            return j[direction]["lat_ns"]["mean"] / 1e6, j[direction]["total_ios"]
    raise KeyError(job)


def stats(path: str) -> dict[str, int]:
    out = {}
    for line in open(path).read().splitlines():
        for k, v in re.findall(r"(\w+)=(-?\d+)", line):
            out[f"{line.split()[0]}.{k}"] = int(v)
    return out


def main(d: str) -> None:
    modes = sorted({os.path.basename(p).split("-")[1] for p in glob.glob(f"{d}/*-rb.json")})
    for m in modes:
        reps = sorted({int(os.path.basename(p).split("-")[0]) for p in glob.glob(f"{d}/*-{m}-rb.json")})
        for r in reps:
            rb, _ = latency(f"{d}/{r}-{m}-rb.json", "m-read", "read")
            bg = latency(f"{d}/{r}-{m}-rb.json", "bg-write", "write")
            line = f"{m} {r} read beside {rb:.2f} ms, writer {bg[0]:.1f} ms x {bg[1]}"
            if os.path.exists(f"{d}/{r}-{m}-ra.json"):
                ra, _ = latency(f"{d}/{r}-{m}-ra.json", "ra", "read")
                wa, _ = latency(f"{d}/{r}-{m}-wa.json", "wa", "write")
                wb, _ = latency(f"{d}/{r}-{m}-wb.json", "m-write", "write")
                line += f"; alone {ra:.2f} / {wa:.2f} ms; slowdown {rb / ra:.2f} / {wb / wa:.2f}"
            before = f"{d}/{r}-{m}-wa.stats" if os.path.exists(f"{d}/{r}-{m}-wa.stats") else f"{d}/{r}-{m}-pre.stats"
            s0, s1 = stats(before), stats(f"{d}/{r}-{m}-rb.stats")
            ap = {k.split(".")[1]: s1[k] for k in s1 if k.startswith("auto_pace.") and k.endswith(("_us",))}
            moved = {k.split(".")[1]: s1[k] - s0.get(k, 0) for k in s1 if k.startswith("pacing.")
                     and s1[k] != s0.get(k, 0)}
            print(line)
            print(f"    pace {ap.get('pace_us')} / {ap.get('pace_rand_us')} us,"
                  f" hold {ap.get('read_hold_us')} us; {moved}")


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""Re-records the small traces the trace tests use, and the blkparse/btt figures they are checked against.

Needs root (tracefs, a loop device), blkparse and btt. For each SQLite journal mode it makes an ext4
filesystem on a loop device over a 64 MiB file, records `smartio trace record --format blktrace` while
python's sqlite3 does INSERTs (one transaction each) and `sync`, then runs on the recording:
  blkparse -i sqlite-MODE -d DUMP   -> the text output (kept for wal) and its summary
  btt -i DUMP -q q2c                -> Q2C/D2C min/avg/max/N and per-bio Q2C
and writes the figures to sqlite-MODE.expected.json. It also records one trace in smartio's format.
Usage: sudo tests/data/traces/make_traces.py [INSERTS]   (default 30)
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("delete", "truncate", "persist", "wal")
WORKLOAD = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=' + sys.argv[2])
c.execute('create table if not exists t(x)')
for i in range(int(sys.argv[3])):
    c.execute('insert into t values(?)', ('x' * 200,)); c.commit()
c.close()
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def found(pattern: str, text: str, what: str) -> re.Match[str]:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise SystemExit(f"make_traces: {what} has no line matching {pattern!r}")
    return m


def blkparse_summary(text: str) -> dict[str, int]:
    # With events from one CPU only, blkparse prints no Total block.
    total = text[text.index("Total (") if "Total (" in text else found(r"^CPU\d+ \(", text, "blkparse").start():]
    out = {}
    for label, key in (("Reads Queued", "reads_queued"), ("Writes Queued", "writes_queued"),
                       ("Reads Completed", "reads_completed"), ("Writes Completed", "writes_completed"),
                       ("Read Dispatches", "read_dispatches"), ("Write Dispatches", "write_dispatches")):
        m = found(label + r":\s+(\d+),\s+(\d+)KiB", total, "blkparse's summary")
        out[key], out[key + "_kib"] = int(m.group(1)), int(m.group(2))
    out["events"] = int(found(r"Events \(\S+\): (\d+) entries", text, "blkparse").group(1))
    return out


def btt_figures(trace: Path, work: Path) -> dict[str, Any]:
    run(["btt", "-i", str(trace), "-o", str(work / "btt"), "-q", str(work / "q2c")], cwd=work)
    avg = (work / "btt.avg").read_text()
    out: dict[str, Any] = {}
    for name in ("Q2C", "D2C"):
        m = found(rf"^{name}\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)", avg, "btt.avg")
        out[name.lower()] = {"min_s": float(m.group(1)), "avg_s": float(m.group(2)), "max_s": float(m.group(3)),
                             "n": int(m.group(4))}
    q2c = [float(line.split()[1]) for f in work.glob("q2c_*_q2c.dat") for line in f.read_text().splitlines()]
    out["q2c_per_bio_s"] = sorted(q2c)
    return out


def record(mode: str, inserts: int, fmt: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        img, mnt = Path(tmp) / "img", Path(tmp) / "mnt"
        img.write_bytes(b"")
        os.truncate(img, 64 << 20)
        mnt.mkdir()
        loop = run(["losetup", "-f", "--show", str(img)]).stdout.strip()
        try:
            run(["mkfs.ext4", "-q", loop])
            run(["mount", loop, str(mnt)])
            try:
                run(["sync"])
                cmd = [sys.executable, "-m", "smartio", "trace", "record", "-o", str(out), "--format", fmt,
                       "--device", loop, "--", "sh", "-c",
                       f'{sys.executable} -c "$0" {mnt}/app.db {mode} {inserts} && sync', WORKLOAD]
                run(cmd)
            finally:
                run(["umount", str(mnt)])
        finally:
            run(["losetup", "-d", loop])


def main() -> None:
    inserts = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    for mode in MODES:
        trace = HERE / f"sqlite-{mode}"
        for old in HERE.glob(f"sqlite-{mode}.blktrace.*"):
            old.unlink()
        record(mode, inserts, "blktrace", trace)
        with tempfile.TemporaryDirectory() as work:
            dump = Path(work) / "dump.bin"
            text = run(["blkparse", "-i", trace.name, "-d", str(dump)], cwd=HERE).stdout
            if mode == "wal":
                (HERE / "sqlite-wal.blkparse.txt").write_text(text)
            expected: dict[str, Any] = {
                "workload": f"python sqlite3, journal_mode={mode}, {inserts} INSERT transactions, then sync; "
                            "ext4 on a loop device",
                "blkparse": blkparse_summary(text), "btt": btt_figures(dump, Path(work))}
        (HERE / f"sqlite-{mode}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        print(f"{trace.name}: {expected['blkparse']['events']} events")
    record("delete", inserts, "smartio", HERE / "sqlite-delete.smtrace")


if __name__ == "__main__":
    main()

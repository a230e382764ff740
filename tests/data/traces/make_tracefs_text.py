#!/usr/bin/env python3
"""Records the tracefs text trace the Perfetto tests convert: `cat trace` of a private ftrace instance with the block
events on, while SQLite (WAL, one transaction per INSERT) writes to ext4 on a loop device and dd reads it back with
direct I/O. Writes sqlite-wal.tracefs.txt.gz here.
Usage: sudo tests/data/traces/make_tracefs_text.py [INSERTS]   (default 40)
"""

import gzip
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVENTS = ("block_bio_queue", "block_bio_backmerge", "block_bio_frontmerge", "block_getrq", "block_rq_insert",
          "block_rq_issue", "block_rq_complete", "block_rq_requeue", "block_rq_merge")
WORKLOAD = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=wal')
c.execute('create table if not exists t(x)')
for i in range(int(sys.argv[2])):
    c.execute('insert into t values(?)', ('x' * 200,)); c.commit()
c.close()
"""


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, text=True, capture_output=True).stdout


def main() -> int:
    inserts = sys.argv[1] if len(sys.argv) > 1 else "40"
    with tempfile.TemporaryDirectory() as tmp:
        tracing = Path(tmp) / "tracefs"
        tracing.mkdir()
        run(["mount", "-t", "tracefs", "nodev", str(tracing)])   # a mount of our own, removed at the end
        inst = tracing / "instances" / f"smartio-text-{os.getpid()}"
        img, mnt = Path(tmp) / "img", Path(tmp) / "mnt"
        with open(img, "wb") as f:
            f.truncate(64 << 20)
        mnt.mkdir()
        loop = run(["losetup", "-f", "--show", str(img)]).strip()
        try:
            run(["mkfs.ext4", "-q", loop])
            run(["mount", loop, str(mnt)])
            major, minor = (int(v, 16) for v in run(["stat", "-c", "%t %T", loop]).split())
            os.mkdir(inst)
            try:
                (inst / "trace_clock").write_text("mono")
                for e in EVENTS:
                    (inst / "events" / "block" / e / "filter").write_text(f"dev == {major << 20 | minor}")
                    (inst / "events" / "block" / e / "enable").write_text("1")
                (inst / "tracing_on").write_text("1")
                subprocess.run([sys.executable, "-c", WORKLOAD, str(mnt / "t.db"), inserts], check=True)
                run(["sync"])
                run(["dd", f"if={loop}", "of=/dev/null", "bs=16k", "count=200", "iflag=direct", "status=none"])
                (inst / "tracing_on").write_text("0")
                text = (inst / "trace").read_bytes()
            finally:
                for e in EVENTS:
                    (inst / "events" / "block" / e / "enable").write_text("0")
                os.rmdir(inst)
                run(["umount", str(mnt)])
        finally:
            run(["losetup", "-d", loop])
            run(["umount", str(tracing)])
    out = HERE / "sqlite-wal.tracefs.txt.gz"
    out.write_bytes(gzip.compress(text, 9, mtime=0))
    print(f"{out}: {text.count(b'block_')} block event lines, {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

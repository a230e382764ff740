"""`smartio trace record`: block events for the run of a command, or until Ctrl-C, into a trace file."""

from __future__ import annotations

import datetime
import os
import platform
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smartio.errors import NeedsRootError, UsageError
from smartio.progress import Progress
from smartio.signals import sigterm_as_interrupt
from smartio.trace import events as ev
from smartio.trace.events import Trace
from smartio.trace.formats import write_blktrace, write_ours
from smartio.trace.tracefs import Recorder, mounted_tracefs, partition_map

POLL_S = 0.05


@dataclass
class RecordResult:
    files: list[Path]
    events: int
    lost: int
    duration_s: float
    command_rc: int | None


def resolve_devices(names: list[str]) -> tuple[list[int], list[str]]:
    """Kernel dev_t values to record for each --device (the whole disk and its partitions)."""
    parts = partition_map()
    devs: list[int] = []
    for name in names:
        path = Path(name if name.startswith("/") else f"/dev/{name}")
        try:
            st = os.stat(path)
        except OSError as e:
            raise UsageError("--device", name, f"cannot stat {path}: {e.strerror}") from None
        if not stat.S_ISBLK(st.st_mode):
            raise UsageError("--device", name, f"{path} is not a block device")
        d = ev.kdev(os.major(st.st_rdev), os.minor(st.st_rdev))
        disk = parts.get(d, d)
        # Requests are reported on the disk, bios on the partition they were sent to.
        for k in [disk] + [p for p, dsk in parts.items() if dsk == disk]:
            if k not in devs:
                devs.append(k)
    return devs, [str(n) for n in names]


def record(output: Path, devices: list[str], fmt: str, command: list[str] | None) -> RecordResult:
    if os.geteuid() != 0:
        raise NeedsRootError("recording block events (tracefs)")
    devs, names = resolve_devices(devices)
    if output.parent and not output.parent.exists():
        raise UsageError("-o", output, f"directory {output.parent} does not exist")
    meta: dict[str, Any] = {
        "tool": "smartio trace record",
        "command": command or [],
        "devices": names,
        "kernel": platform.release(),
        "host": platform.node(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "clock": "mono",
    }
    rc: int | None = None
    # SIGTERM ends a recording the way Ctrl-C does: stop, restore, write what was recorded.
    with sigterm_as_interrupt(), Progress(None) as progress:
        with mounted_tracefs() as root, Recorder(root, devs, partition_map()) as rec:
            start_ns = time.monotonic_ns()
            proc = None
            last_report = time.monotonic()
            try:
                # Said once tracing is on, so a user (or a script) knows from when on Ctrl-C keeps a trace.
                what = ", ".join(names) if names else "every disk"
                until = f"until {command[0]} exits" if command else "until Ctrl-C"
                progress.say(f"smartio: recording the block events of {what} {until}")
                proc = subprocess.Popen(command) if command else None
                while proc is None or proc.poll() is None:
                    time.sleep(POLL_S)
                    rec.poll()
                    if time.monotonic() - last_report >= 1.0:
                        last_report = time.monotonic()
                        pages = sum(len(p) for p in rec.pages.values())
                        progress.status(f"smartio: recording {(time.monotonic_ns() - start_ns) / 1e9:6.1f} s, "
                                        f"{pages} buffer pages read")
            except KeyboardInterrupt:
                if proc is not None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait()
            rc = proc.returncode if proc is not None else None
            end_ns = time.monotonic_ns()
            rec.stop()
            lost = rec.overruns()
            events, comms = rec.decode()
    meta.update(start_ns=start_ns, end_ns=end_ns, lost_events=lost)
    trace = Trace(events, comms, meta)
    if fmt == "blktrace":
        files = write_blktrace(trace, output)
    else:
        write_ours(trace, output)
        files = [output]
    return RecordResult(files, len(events), lost, (end_ns - start_ns) / 1e9, rc)


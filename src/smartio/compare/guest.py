"""What the guest sides of `smartio compare` share: switch a device to a scheduler, read its state, restore it.

A library with no main of its own, run as root inside the testbed VM by the experiments' guests: StoreBench's
(`python -m smartio.storebench.compare PLAN_JSON OUT_DIR`), qasio's (smartio.qasio.compare) and launch's
(smartio.launch.compare.guest). `switch` puts the device under `none` and then the
scheduler (so every run starts from the scheduler's defaults, even two variants of one scheduler in a row), raises
nr_requests, multiplies the scheduler's time tunables by the clock scale and writes the spec's tunables;
`device_state` reads the scheduler, nr_requests and tunables (GUEST_FILE, guest.json, is where StoreBench's guest
records them before, during and after every run) and `restore` puts them back, also on failure or Ctrl-C;
`scheduler_counters` reads the scheduler's debugfs counters after a run; `warm_up` runs untimed I/O before the
first scheduler.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from smartio.blockdev import Device, read_scheduler, read_tunables, write_tunables
from smartio.compare.spec import SchedulerSpec
from smartio.errors import SmartioError, UsageError
from smartio.iosched import debugfs, tunables

GUEST_FILE = "guest.json"
DEBUGFS_BLOCK = debugfs.DEBUGFS_BLOCK


def device_state(dev: Device) -> dict[str, Any]:
    current, available = read_scheduler(dev)
    return {"scheduler": current, "available": available,
            "nr_requests": int((dev.queue / "nr_requests").read_text()), "tunables": read_tunables(dev)}


def scheduler_counters(dev: Device) -> dict[str, str]:
    """The active scheduler's debugfs files that count what it did since it was switched on (smartio: `stats`,
    `phase`; mq-deadline: `starved`, `batching`, `queued`, `owned_by_driver`; kyber: `batching`), read after a run
    so that a figure can be traced to the rules that made it. Missing files (debugfs not mounted, another scheduler)
    are left out."""
    return debugfs.read_files(dev.disk, ("stats", "phase", "starved", "batching", "queued", "owned_by_driver"),
                              root=DEBUGFS_BLOCK)


def _write(path: Path, value: str | int) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as e:
        raise SmartioError(f"writing {value} to {path} failed: {e.strerror}") from e


# Each scheduler's tunables that are times (in whatever unit the scheduler reads them): deadlines, latency targets,
# slices, idle and anticipation windows, paces. bfq's slice_idle is the same setting as slice_idle_us.
CLOCK_TUNABLES = {
    "mq-deadline": ("read_expire", "write_expire", "prio_aging_expire"),
    "kyber": ("read_lat_nsec", "write_lat_nsec"),
    "bfq": ("slice_idle_us", "timeout_sync", "fifo_expire_sync", "fifo_expire_async"),
    "smartio": tunables.CLOCK,
}


def scale_clock_tunables(dev: Device, scheduler: str, factor: float) -> dict[str, int | str]:
    """Multiply the current scheduler's time tunables by `factor` (the testbed's time scale: the emulated device
    and the guest's programs both run that much slower than on the phone, so a scheduler keeps its phone
    behaviour only if its clock does too); returns what it wrote. Tunables the kernel lacks are skipped."""
    if factor == 1 or scheduler not in CLOCK_TUNABLES:
        return {}
    now = read_tunables(dev)
    new: dict[str, int | str] = {k: round(int(now[k]) * factor) for k in CLOCK_TUNABLES[scheduler]
                                 if now.get(k, "").isdigit()}
    if new:
        write_tunables(dev, new)
    return new


def switch(dev: Device, spec: SchedulerSpec, nr_requests: int, clock_scale: float = 1.0) -> None:
    """Put the device under `spec`, from that scheduler's defaults with their times multiplied by `clock_scale`
    (`scale_clock_tunables`), with room for `nr_requests` requests; the spec's own tunables are written last."""
    sched = dev.queue / "scheduler"
    _write(sched, "none")       # re-selecting the current elevator is a no-op that would keep old tunables
    if spec.name != "none":
        if spec.name not in read_scheduler(dev)[1]:
            load_elevator(spec.name)
        try:
            sched.write_text(spec.name)
        except OSError as e:
            hint = (" (the testbed loads kernel/smartio-iosched.ko; build it with `make module`)"
                    if spec.name == "smartio" else "")
            raise UsageError("--schedulers", spec.label, f"{dev.disk} refused it: {e.strerror}; available: "
                             f"{', '.join(read_scheduler(dev)[1])}{hint}") from e
        # Only below the target: with a deep device queue, blk-mq's own default may be higher already.
        if int((dev.queue / "nr_requests").read_text()) < nr_requests:
            _write(dev.queue / "nr_requests", nr_requests)
        scale_clock_tunables(dev, spec.name, clock_scale)
    if spec.tunables:
        write_tunables(dev, dict(spec.tunables))


def load_elevator(name: str) -> None:
    """modprobe a stock scheduler built as a module (kyber, bfq). The kernel's own on-demand loading runs
    modprobe from the initramfs root, which has no modules, so the guest loads them from its chroot instead."""
    for module in (f"{name}-iosched", name):
        if subprocess.run(["modprobe", module], capture_output=True).returncode == 0:
            return


def restore(dev: Device, before: dict[str, Any]) -> None:
    _write(dev.queue / "scheduler", "none")
    if before["scheduler"] != "none":
        _write(dev.queue / "scheduler", before["scheduler"])
    if int((dev.queue / "nr_requests").read_text()) != before["nr_requests"]:
        _write(dev.queue / "nr_requests", before["nr_requests"])
    now = read_tunables(dev)
    changed = {k: v for k, v in before["tunables"].items() if now.get(k) != v}
    if changed:
        write_tunables(dev, changed)


def warm_up(device: str) -> None:
    """A few hundred untimed direct reads and writes on the device before the first scheduler's run: the guest's
    first I/Os run through code TCG has not translated yet (on s5-emmc, 128 KiB per stream, the first repeat's reads
    alone took 26.7 ms each, the second's 8.4 ms), which would handicap whichever scheduler comes first."""
    subprocess.run(["fio", "--name=warm-up", f"--filename={device}", "--rw=randrw", "--bs=4k", "--size=1m",
                    "--direct=1", "--output=/dev/null"], capture_output=True)


def say(text: str) -> None:
    print(f"smartio compare: {text}", file=sys.stderr, flush=True)

"""Records what the model check (smartio.trace.modelcheck) reads: one reader beside one writer (QD1, 4 KiB, direct)
under the smartio module on an emulated device in the testbed, sequential and random, each run traced with
`smartio trace record` in the guest, and the module's tunables as they were. Used by tests/test_model_check_vm.py
and bench/model-agreement.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from smartio.iosched.policy import Tunables
from smartio.testbed import vm
from smartio.testbed.guest import GuestSpec
from smartio.testbed.interpreter import guest_python
from smartio.trace.formats import read_trace
from smartio.trace.modelcheck import Result, check_trace, load_tunables

MODES = ("seq", "rand")
# The profiler's rule on s5-emmc at its time scale of 100 (tests/test_profile_pacing.py: 285, 717 and 133 µs of
# the phone): what `smartio profile --apply` writes there, without spending a profiler run on it.
S5_TUNABLES = {"write_pace_us": 28500, "write_pace_rand_us": 71700, "read_hold_us": 13300}
# The device model's queue depth for s5-emmc: blk-mq asks the module only while the device has room.
QUEUE_DEPTH = 2


def _fio_job(mode: str, size: str, seconds: float) -> str:
    rw = ("read", "write") if mode == "seq" else ("randread", "randwrite")
    common = f"ioengine=psync\ndirect=1\nbs=4k\nsize={size}\ntime_based=1\nruntime={seconds:g}\nfilename=/dev/vda\n"
    return (f"[global]\n{common}\n[reader]\nrw={rw[0]}\noffset=0\n\n"
            f"[writer]\nrw={rw[1]}\noffset=64m\n")


GUEST = r"""set -eu
Q=/sys/block/vda/queue
for mode in {modes}; do
    echo none > $Q/scheduler                # every mode starts from a fresh instance of the module
    echo smartio > $Q/scheduler
    grep -q '\[smartio\]' $Q/scheduler || {{ echo "smartio not active: $(cat $Q/scheduler)" >&2; exit 1; }}
    echo 128 > $Q/nr_requests
{tunables}
    grep . $Q/iosched/* > $SMARTIO_OUT/tunables-$mode
    {python} -m smartio trace record -o $SMARTIO_OUT/$mode.smtrace --device /dev/vda -- \
        fio --output-format=json --output=$SMARTIO_OUT/$mode.json {jobs}/$mode.fio
done
echo none > $Q/scheduler
"""


@dataclasses.dataclass
class Run:
    mode: str
    trace: Path
    tunables: Tunables
    result: Result


def record_and_check(workdir: Path, tunables: dict[str, int] | None = None, profile: str = "s5-emmc",
                      size: str = "256k", seconds: float = 3.0, modes: tuple[str, ...] = MODES,
                      module: Path | None = None, tolerance_us: float | None = None,
                      timeout: float = 420.0) -> tuple[vm.VmResult, list[Run]]:
    """Boots the testbed once, records each mode (reader and writer side by side for `seconds`, each over a `size`
    region) and checks each trace against the tunables the guest read back. The VM's artifacts go to
    workdir/art, the traces to workdir/art/out."""
    workdir.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        (workdir / f"{mode}.fio").write_text(_fio_job(mode, size, seconds))
    lines = "\n".join(f"    echo {v} > $Q/iosched/{k}" for k, v in (tunables or S5_TUNABLES).items())
    script = GUEST.format(modes=" ".join(modes), tunables=lines, python=guest_python(), jobs=workdir)
    (workdir / "guest.sh").write_text(script)
    spec = GuestSpec(profile=profile, disks=1, disk_size=128 << 20, modules=[module] if module else None,
                     timeout=timeout, artifacts=workdir / "art")
    r = vm.run(["sh", str(workdir / "guest.sh")], spec, stream=None, cwd=workdir)
    runs = []
    if r.failure is None and r.rc == 0:
        kw = {} if tolerance_us is None else {"tolerance_us": tolerance_us}
        for mode in modes:
            tun = load_tunables(r.out_dir / f"tunables-{mode}")
            trace = r.out_dir / f"{mode}.smtrace"
            runs.append(Run(mode, trace, tun, check_trace(read_trace(trace), tun, queue_depth=QUEUE_DEPTH, **kw)))
    return r, runs

"""The testbed on the project's other kernels, 6.12 (Debian 13) and the newest (Debian unstable): each boots, its
compressed modules load (the initramfs's, and modprobe's in the guest), and the scheduler module built for it
(kernel/build/<kernel>-amd64/, the build matrix's cell) keeps data intact under fio verify on the raw device, with
its debugfs counters balanced, and unloads. A kernel that cannot be fetched and is not cached is skipped, saying so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_iosched_vm import KERNEL_ARGS, PRELUDE, RAW_GLOBAL, RAW_JOBS, Stats, job_file

from smartio.errors import SmartioError
from smartio.testbed import guest, kernelpkg, modbuild, vm
from smartio.testbed.boot import Boot
from smartio.testbed.guest import GuestSpec

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1500), pytest.mark.usefixtures("testbed_ready")]

VM_TIMEOUT_S = 480.0
KERNELS = ("6.12", "newest")


def _stale(ko: Path, release: str) -> bool:
    """The cell's module is missing, built for another release, or older than a source file."""
    if not ko.is_file() or guest.built_for(ko) not in (None, release):
        return True
    return any(src.stat().st_mtime > ko.stat().st_mtime
               for src in [*modbuild.KERNEL_DIR.glob("*.[ch]"), modbuild.KERNEL_DIR / "Kbuild"])


@pytest.fixture(scope="module", params=KERNELS)
def booted(request: pytest.FixtureRequest) -> tuple[kernelpkg.KernelRelease, Path]:
    """The kernel's release (fetched, or the cached one) and the module built for it (built now if it is not)."""
    kernel = request.param
    try:
        rel = kernelpkg.fetch_image(kernelpkg.resolve(kernel=kernel))
    except SmartioError as e:
        pytest.skip(f"the {kernel} kernel cannot be fetched and is not cached: {e}")
    repo = guest.repo_root()
    assert repo is not None, "not running from the repository"
    ko = guest.default_module(repo, kernelpkg.FLAVOUR, kernel)
    if _stale(ko, rel.uname):
        res = modbuild.build(modbuild.Cell(kernel, "amd64"), modbuild.KERNEL_DIR, ko.parent.parent)
        assert res.ok, f"the module's build for {kernel} failed: {res.error or res.diagnostics}; see " \
                       f"{ko.parent / 'build.log'}"
    assert guest.built_for(ko) in (None, rel.uname), f"{ko} is built for {guest.built_for(ko)}, not {rel.uname}"
    return rel, ko


def test_boots_loads_the_module_keeps_data_and_unloads(tmp_path: Path,
                                                       booted: tuple[kernelpkg.KernelRelease, Path]) -> None:
    rel, ko = booted
    (tmp_path / "raw.fio").write_text(job_file(RAW_GLOBAL, RAW_JOBS))
    (tmp_path / "raw-verify.fio").write_text(job_file(RAW_GLOBAL, RAW_JOBS, verify_only=True))
    script = PRELUDE + f"""
uname -r > $SMARTIO_OUT/uname
# The image's modules are compressed (.ko.xz): modprobe in the guest loads them as they are.
modprobe kyber-iosched || fail "modprobe kyber-iosched"
grep -q kyber $Q/scheduler || fail "kyber not offered: $(cat $Q/scheduler)"
modprobe null_blk nr_devices=1 || fail "modprobe null_blk"
[ -b /dev/nullb0 ] || fail "no /dev/nullb0"
rmmod null_blk
grep -q smartio $Q/scheduler || fail "smartio not offered: $(cat $Q/scheduler)"
use smartio
fio --output=$SMARTIO_OUT/fio.txt {tmp_path}/raw.fio || fail "fio: $(tail -20 $SMARTIO_OUT/fio.txt)"
fio --output=$SMARTIO_OUT/verify.txt {tmp_path}/raw-verify.fio || fail "verify: $(tail -20 $SMARTIO_OUT/verify.txt)"
snap raw
use none
rmmod smartio_iosched || fail "rmmod smartio_iosched"
if grep -qw smartio_iosched /proc/modules; then fail "smartio_iosched still loaded"; fi
grep -q smartio $Q/scheduler && fail "smartio still offered after rmmod: $(cat $Q/scheduler)"
echo done > $SMARTIO_OUT/done
"""
    (tmp_path / "guest.sh").write_text(script)
    spec = GuestSpec(disks=1, disk_size=256 << 20, kernel=rel.kernel, modules=[ko],
                     boot=Boot(kernel_args=tuple(KERNEL_ARGS)), timeout=VM_TIMEOUT_S, artifacts=tmp_path / "art")
    r = vm.run(["sh", str(tmp_path / "guest.sh")], spec, stream=None, cwd=tmp_path)
    assert r.failure is None, r.failure
    assert r.rc == 0, f"guest script failed (exit {r.rc}):\n{r.output_log.read_text()[-4000:]}"
    assert (r.out_dir / "uname").read_text().strip() == rel.uname == r.kernel
    assert (r.out_dir / "done").is_file()
    Stats.load(r.out_dir, "raw").assert_balanced(min_dispatched=1000)
    run = json.loads((r.artifacts_dir / "run.json").read_text())
    assert (run["kernel"], run["kernel_name"]) == (rel.uname, rel.kernel)
    print(f"{rel.uname}: PID 1 after {run['pid1_after_s']} s, the command after {run['command_after_s']} s, "
          f"{run['duration_s']} s in all ({r.accel})", file=sys.stderr)

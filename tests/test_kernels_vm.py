"""The module on the project's other kernels: 6.12 (Debian 13), the newest (Debian unstable), and 6.12's debug build
(lockdep, KASAN; its queue freeze is a lockdep map). Each boots, its compressed modules load (the
initramfs's, and modprobe's in the guest), and one guest runs the module's portable checks in turn (test_iosched_vm's
phases): fio verify on the raw device at the defaults, with every mechanism engaged and paced; every scheduler in
turn under a verifying load; the tunables' defaults and ranges as the table gives them; rmmod refused while in use
and a reload's defaults; on a debug kernel, requests null_blk requeues traced when inserted again and the switch to
smartio with no high-order page to be had; QASIO's boost of a file's queued writes (whose bios start inside large
folios from 6.16); ext4 under fsyncs with e2fsck. Each phase checks its counters balance and ends with rmmod. The
guest boots with panic_on_warn, so a lockdep or KASAN splat fails it. A kernel that cannot be fetched and is not
cached is skipped, saying so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_iosched_tunables_vm import table_phase
from test_iosched_vm import (
    KERNEL_ARGS,
    PRELUDE,
    ModuleBuild,
    Phase,
    ext4_fsync_phase,
    file_owner_phase,
    fragmented_memory_phase,
    head_insert_phase,
    held_write_phase,
    raw_integrity_phase,
    switching_phase,
    tunables_rmmod_phase,
)

from smartio.errors import SmartioError
from smartio.testbed import guest, kernelpkg, modbuild, vm
from smartio.testbed.boot import Boot
from smartio.testbed.guest import GuestSpec

# A debug kernel's first build (8 minutes here) and its guest, 2.5 times slower, fit.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600), pytest.mark.usefixtures("testbed_ready")]

VM_TIMEOUT_S = 900.0
# (kernel, flavour): Debian's cloud kernels of 6.12 and the newest, and 6.12 built here with lockdep and KASAN. 6.1's
# debug kernel runs QASIO's tests and the debug-only phases one per test (test_qasio_vm, test_iosched_vm): a
# guest of all the phases there too would take 9 more minutes of make test.
TARGETS = (("6.12", kernelpkg.FLAVOUR), ("newest", kernelpkg.FLAVOUR), ("6.12", kernelpkg.DEBUG))


def _stale(ko: Path, release: str) -> bool:
    """The cell's module is missing, built for another release, or older than a source file."""
    if not ko.is_file() or guest.built_for(ko) not in (None, release):
        return True
    return any(src.stat().st_mtime > ko.stat().st_mtime for src in modbuild.sources())


def _build(kernel: str, flavour: str, rel: kernelpkg.KernelRelease) -> Path:
    repo = guest.repo_root()
    assert repo is not None, "not running from the repository"
    ko = guest.default_module(repo, flavour, kernel)
    if flavour == kernelpkg.DEBUG:
        p = subprocess.run(["make", "-C", str(repo / "kernel"), "debug", f"DEBUG_KERNEL={kernel}"],
                           capture_output=True, text=True)
        assert p.returncode == 0, f"make -C kernel debug DEBUG_KERNEL={kernel} failed:\n{p.stdout[-3000:]}\n" \
                                  f"{p.stderr[-3000:]}"
        return ko
    if _stale(ko, rel.uname):
        res = modbuild.build(modbuild.Cell(kernel, "amd64"), modbuild.KERNEL_DIR, ko.parent.parent)
        assert res.ok, f"the module's build for {kernel} failed: {res.error or res.diagnostics}; see " \
                       f"{ko.parent / 'build.log'}"
    assert guest.built_for(ko) in (None, rel.uname), f"{ko} is built for {guest.built_for(ko)}, not {rel.uname}"
    return ko


@pytest.fixture(scope="module", params=TARGETS, ids=[f"{k}-{f}" for k, f in TARGETS])
def booted(request: pytest.FixtureRequest) -> tuple[kernelpkg.KernelRelease, ModuleBuild]:
    """The kernel's release (fetched or built, or the cached one) and the module built for it (now, if it is not)."""
    kernel, flavour = request.param
    try:
        rel = kernelpkg.fetch_image(kernelpkg.resolve(kernel=kernel, flavour=flavour))
    except SmartioError as e:
        pytest.skip(f"the {kernel} {flavour} kernel cannot be fetched or built and is not cached: {e}")
    return rel, ModuleBuild(flavour, _build(kernel, flavour, rel))


def portable_phases(tmp_path: Path, ko: Path, flavour: str) -> list[Phase]:
    """In an order where each finds what it needs: the raw device's phases before those that make ext4 on it. The
    debug kernel's null_blk can requeue; its guest, four times slower, verifies the raw device once, with every
    mechanism engaged."""
    debug = flavour == kernelpkg.DEBUG
    debug_only = [head_insert_phase(), fragmented_memory_phase()] if debug else []
    raw = raw_integrity_phase(tmp_path, ("tuned",)) if debug else raw_integrity_phase(tmp_path)
    return [raw, switching_phase(tmp_path), table_phase(), tunables_rmmod_phase(ko), held_write_phase(), *debug_only,
            file_owner_phase(), ext4_fsync_phase(tmp_path)]


def test_boots_and_the_module_passes_its_portable_checks(
        tmp_path: Path, booted: tuple[kernelpkg.KernelRelease, ModuleBuild]) -> None:
    rel, module = booted
    phases = portable_phases(tmp_path, module.ko, module.flavour)
    load = f"grep -qw smartio_iosched /proc/modules || insmod {module.ko}\n"
    script = PRELUDE + """
uname -r > $SMARTIO_OUT/uname
# The image's modules are compressed (.ko.xz) or built in (the debug kernel): modprobe loads them either way.
modprobe kyber-iosched || fail "modprobe kyber-iosched"
grep -q kyber $Q/scheduler || fail "kyber not offered: $(cat $Q/scheduler)"
modprobe null_blk nr_devices=1 || fail "modprobe null_blk"
[ -b /dev/nullb0 ] || fail "no /dev/nullb0"
rmmod null_blk 2>/dev/null || true
grep -q smartio $Q/scheduler || fail "smartio not offered: $(cat $Q/scheduler)"
""" + "".join(f"echo phase {i} > $SMARTIO_OUT/phase\necho {i} $(date +%s) >> $SMARTIO_OUT/phase-starts\n{load}"
              f"{p.script}" for i, p in enumerate(phases)) + """
if grep -qw smartio_iosched /proc/modules; then fail "smartio_iosched still loaded"; fi
echo end $(date +%s) >> $SMARTIO_OUT/phase-starts
echo done > $SMARTIO_OUT/done
"""
    (tmp_path / "guest.sh").write_text(script)
    kernel_args = (*KERNEL_ARGS, *(a for p in phases for a in p.kernel_args))
    spec = GuestSpec(disks=1, disk_size=max(p.disk_mb for p in phases) << 20, kernel=rel.kernel, modules=[module.ko],
                     boot=Boot(kernel_args=kernel_args), timeout=VM_TIMEOUT_S * module.slowdown,
                     artifacts=tmp_path / "art", flavour=module.flavour)
    r = vm.run(["sh", str(tmp_path / "guest.sh")], spec, stream=None, cwd=tmp_path)
    assert r.failure is None, r.failure
    assert r.rc == 0, f"guest script failed (exit {r.rc}) in phase " \
                      f"{(r.out_dir / 'phase').read_text().strip() if (r.out_dir / 'phase').is_file() else '?'}:\n" \
                      f"{r.output_log.read_text()[-4000:]}"
    assert (r.out_dir / "uname").read_text().strip() == rel.uname == r.kernel
    assert (r.out_dir / "done").is_file()
    for phase in phases:
        phase.check(r.out_dir)
    run = json.loads((r.artifacts_dir / "run.json").read_text())
    assert (run["kernel"], run["kernel_name"]) == (rel.uname, rel.kernel)
    starts = [int(line.split()[1]) for line in (r.out_dir / "phase-starts").read_text().splitlines()]
    took = ", ".join(f"{i}: {b - a} s" for i, (a, b) in enumerate(zip(starts, starts[1:], strict=False)))
    print(f"{rel.uname}: PID 1 after {run['pid1_after_s']} s, the command after {run['command_after_s']} s, "
          f"{run['duration_s']} s in all ({r.accel}); each phase (portable_phases' order) {took}", file=sys.stderr)

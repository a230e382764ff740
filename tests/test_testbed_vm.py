"""VM smoke tests: boot the 6.1 guest, run commands, read results back, load the project's module."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest

from smartio.flashdev import load_profile
from smartio.testbed import guest, kernelpkg, vm
from smartio.testbed.boot import Boot
from smartio.testbed.console import BOOT_DEADLINE_S
from smartio.testbed.guest import GuestSpec

pytestmark = [pytest.mark.vm, pytest.mark.timeout(300), pytest.mark.usefixtures("testbed_ready")]


def test_command_runs_and_leaves_its_results(tmp_path: Path) -> None:
    """Two emulated flash disks; the profile's queue depth reaches virtio_blk and its largest request each disk's
    max_sectors_kb; results come back via the out dir."""
    profile = load_profile("s5-emmc")
    out = io.BytesIO()
    script = ('uname -r > "$SMARTIO_OUT/uname"; cat /sys/block/vdb/size > "$SMARTIO_OUT/vdb-sectors"; '
              'cat /sys/module/virtio_blk/parameters/queue_depth > "$SMARTIO_OUT/qd"; '
              'cat /sys/block/vda/queue/max_sectors_kb /sys/block/vdb/queue/max_sectors_kb > "$SMARTIO_OUT/msk"; '
              'python3 -c "import smartio, sys; print(sys.prefix)"; echo hello from the guest; exit 3')
    r = vm.run(["sh", "-c", script], GuestSpec(profile=profile, disks=2, disk_size=64 << 20, modules=[], timeout=240,
                                               artifacts=tmp_path / "art"), stream=out)
    assert r.failure is None, r.failure
    assert r.rc == 3
    assert (r.out_dir / "uname").read_text().strip() == kernelpkg.resolve().uname
    assert int((r.out_dir / "vdb-sectors").read_text()) == (64 << 20) // 512
    assert int((r.out_dir / "qd").read_text()) == profile.queue_depth
    assert (r.out_dir / "msk").read_text().split() == [str(profile.max_request_kb)] * 2
    text = out.getvalue().decode()
    assert "hello from the guest" in text and "VMTEST_" not in text
    assert text == r.output_log.read_text()
    assert (r.artifacts_dir / "exit-code").read_text().strip() == "3"
    assert "Linux version 6.1" in (r.artifacts_dir / "dmesg").read_text()
    assert r.console_log.is_file()
    # PID 1 said it started and then that the command did (the boot deadline's signs), well before the deadline.
    run = json.loads((r.artifacts_dir / "run.json").read_text())
    assert 0 < run["pid1_after_s"] < run["command_after_s"] < BOOT_DEADLINE_S / 3, run
    assert run["boot_stall"] is None and run["emulator_stall"] is None
    # The host's load was sampled (every 5 s and once at the end), QEMU's CPU counted as ours.
    load = run["host_load"]
    assert load == r.host_load and load["samples"] >= 1 and load["other_cpus_mean"] is not None
    rows = [ln.split(",") for ln in (r.artifacts_dir / "host-load.csv").read_text().splitlines()[1:]]
    assert len(rows) == load["samples"] and sum(float(x[3]) for x in rows) / len(rows) > 0.2


def test_project_module_loads(tmp_path: Path) -> None:
    repo = guest.repo_root()
    ko = repo / guest.DEFAULT_MODULE if repo else None
    if ko is None or not ko.is_file():
        pytest.skip(f"{guest.DEFAULT_MODULE} is not built (make -C kernel); nothing to insmod")
    r = vm.run(["sh", "-c", "grep -w smartio_iosched /proc/modules && cat /sys/block/vda/queue/scheduler"],
               GuestSpec(disks=1, disk_size=16 << 20, modules=[ko], timeout=240, artifacts=tmp_path / "art",
                         boot=Boot(kernel_args=("panic_on_warn=1",))), stream=None)
    assert r.failure is None, r.failure
    assert r.rc == 0, r.output_log.read_text()
    assert "smartio_iosched" in r.output_log.read_text()


def test_kernel_panic_is_a_failure(tmp_path: Path) -> None:
    r = vm.run(["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 60"],
               GuestSpec(disks=0, modules=[], timeout=120, artifacts=tmp_path / "art"), stream=None)
    assert r.rc is None and not r.timed_out
    assert r.failure is not None and "Kernel panic" in r.failure


def test_timeout_kills_the_vm(tmp_path: Path) -> None:
    started = time.monotonic()
    r = vm.run(["sleep", "600"], GuestSpec(disks=0, modules=[], timeout=8, artifacts=tmp_path / "art"), stream=None)
    assert time.monotonic() - started < 30
    assert r.timed_out and r.rc is None
    assert r.failure is not None and "--timeout 8" in r.failure
    # QEMU, virtiofsd and nbdkit are our children; none may outlive the run.
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    assert [Path(f"/proc/{c}/comm").read_text().strip() for c in children] == []


def test_a_hung_command_leaves_its_task_list_on_the_console(tmp_path: Path) -> None:
    """Shortly before the host's timeout PID 1 lists the guest's tasks with kernel stacks; the failure says where."""
    r = vm.run(["sh", "-c", "echo started; exec sleep 600"],
               GuestSpec(disks=0, modules=[], timeout=90, artifacts=tmp_path / "art"), stream=None)
    assert r.timed_out and r.output_log.read_text() == "started\n", r.failure
    # QEMU's monitor says where the vCPUs were: the guest only sleeps (and PID 1 lists its tasks), so each is idle,
    # in user space or in kernel code named at the guest's KASLR offset.
    assert "; the vCPUs when it was stopped: vCPU 0 " in (r.failure or ""), r.failure
    where = (r.artifacts_dir / "vcpus.txt").read_text().strip().split(", ")
    assert len(where) == 2 and all(re.fullmatch(r"vCPU \d (idle|in user space|at [a-z_]\w*\+0x[0-9a-f]+)"
                                                r"( \(interrupts off\))?", w) for w in where), where
    dump = r.task_dump()
    assert dump, r.console_log.read_text()[-3000:]
    assert "the tasks still running, with kernel stacks" in (r.failure or "")
    line = next(ln for ln in dump.splitlines() if ln.endswith("sleep 600 "))
    assert line.startswith("--- pid ") and "[S (sleeping)]" in line, dump
    assert "hrtimer_nanosleep" in dump or "do_nanosleep" in dump, dump      # its kernel stack


def test_a_module_that_does_not_load_fails_the_run(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.ko"
    bogus.write_text("not a module\n")
    r = vm.run(["true"], GuestSpec(disks=0, modules=[bogus], timeout=120, artifacts=tmp_path / "art"), stream=None)
    assert r.rc is None
    assert r.failure is not None and f"insmod {bogus} failed: invalid module format" in r.failure

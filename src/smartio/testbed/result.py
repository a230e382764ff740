"""What one testbed run left (VmResult): the command's exit code, where its artifacts are, and why the run failed
if it did (a timeout, a kernel problem, a stopped boot, an interrupt), in words that point at the files to read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from smartio.errors import SmartioError
from smartio.testbed import qemu
from smartio.testbed.console import TASK_DUMP_HINT, TASK_DUMP_START
from smartio.testbed.hosttasks import HOST_TASKS
from smartio.testbed.vcpus import VCPUS


@dataclasses.dataclass
class VmResult:
    """What one testbed run left: the command's exit code and where its artifacts are."""

    rc: int | None                 # the command's exit code; None if it never finished
    artifacts_dir: Path
    console_log: Path              # the guest kernel's console (ttyS0)
    output_log: Path               # the command's stdout and stderr
    out_dir: Path                  # the host side of $SMARTIO_OUT
    kernel: str                    # uname -r of the guest
    accel: str                     # tcg or kvm
    duration_s: float
    timeout_s: float | None = None
    timed_out: bool = False
    setup_error: str | None = None
    kernel_problems: list[str] = dataclasses.field(default_factory=list)
    qemu_exit: int | None = None
    host_load: dict | None = None  # what other work took of the host's CPUs meanwhile (hostload.HostLoad.summary)
    emulator_stall: str | None = None  # this boot was stopped early: emulator_stall()'s reason
    boot_stall: str | None = None      # this boot was stopped before its command started: boot_stall()'s reason
    interrupted: bool = False          # Ctrl-C or SIGTERM stopped it (in run.json; run() then raises it again)
    retried: list[str] = dataclasses.field(default_factory=list)  # earlier boots stopped for the same, and where

    @property
    def stopped_early(self) -> str | None:
        """Why this boot was stopped before its end and may be booted again (--retries), or None."""
        return self.emulator_stall or self.boot_stall

    @property
    def failure(self) -> str | None:
        """Why the run itself failed (not the command), or None."""
        where = f"see {self.console_log}"
        if self.interrupted and self.rc is None:
            return f"interrupted (Ctrl-C or SIGTERM) before the command finished; {where}"
        if self.stopped_early and self.rc is None:
            again = f" (as in {len(self.retried)} earlier boot(s))" if self.retried else ""
            return f"the VM was stopped early: {self.stopped_early}{again}; {where}{self.vcpus_summary()}"
        if self.timed_out:
            said = f"; before that the guest kernel reported: {self.kernel_problems[0]}" if self.kernel_problems \
                else ""
            guest = TASK_DUMP_HINT if self.task_dump() else (" (no task list from the guest, due shortly before "
                                                             "the timeout: were its vCPUs stopped?)")
            return (f"the VM did not finish within {self.timeout_s:g} s (--timeout {self.timeout_s:g}) and was "
                    f"killed{said}; {where}{guest}{self.vcpus_summary()}{self.host_summary()}")
        if self.kernel_problems:
            more = f" (and {len(self.kernel_problems) - 1} more)" if len(self.kernel_problems) > 1 else ""
            return f"the guest kernel reported: {self.kernel_problems[0]}{more}; {where}"
        if self.setup_error:
            return f"the guest could not run the command: {self.setup_error}; {where}"
        if self.rc is None:
            qlog = qemu.tail(self.artifacts_dir / "qemu.log", 400)
            return f"the VM stopped before the command finished (QEMU exit {self.qemu_exit}: {qlog}); {where}"
        return None

    def vcpus_summary(self) -> str:
        """'; the vCPUs when it was stopped: vCPU 0 at f+0x10, vCPU 1 idle', or "" when QEMU's monitor did not
        say (vcpus.txt, written at a timeout or a hung boot)."""
        try:
            where = (self.artifacts_dir / VCPUS).read_text().strip()
        except OSError:
            return ""
        return f"; the vCPUs when it was stopped: {where}" if where else ""

    def host_summary(self) -> str:
        """'; host side at the timeout: <summary>, see <file>', or "" when no host report was written."""
        path = self.artifacts_dir / HOST_TASKS
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                summary = f.readline().rstrip("\n")
        except OSError:
            return ""
        return f"; host side at the timeout: {summary}, see {path}"

    def task_dump(self) -> str:
        """The guest's list of running tasks near the timeout (console log), or ""."""
        try:
            console = self.console_log.read_text(errors="replace")
        except OSError:
            return ""
        start = console.rfind(TASK_DUMP_START)
        return console[start:] if start >= 0 else ""

    def check(self) -> VmResult:
        if self.failure:
            raise SmartioError(self.failure)
        return self

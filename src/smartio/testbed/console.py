"""What the guest's console and serial output say: the marker lines PID 1 sends, the kernel's reports of a problem,
and the two ways a boot is beyond saving, told from the console while it runs (supervise()'s watch): a vCPU that
the emulator stopped (emulator_stall) and a boot whose command never started (boot_stall).
"""

from __future__ import annotations

import collections
import re
import time
from pathlib import Path

from smartio.testbed.hosttasks import write_host_report
from smartio.testbed.vcpus import VCPUS, Sampler

# Lines the kernel prints when something went wrong; any of them fails the run even if the command succeeded.
KERNEL_PROBLEM_RE = re.compile(
    r"(Kernel panic - not syncing|kernel BUG at|BUG: |Oops: |WARNING: CPU: |general protection fault"
    r"|INFO: task .* blocked for more than|rcu: INFO: .*detected stalls|UBSAN: |KASAN: "
    # lockdep's reports (the debug kernel), which are not WARN()s: "WARNING: possible circular locking ...",
    # "inconsistent lock state", "suspicious RCU usage", "bad unlock balance detected!", "held lock freed!", ...
    r"|WARNING: (?:possible |inconsistent |suspicious |bad unlock |held lock |lock held |Nested lock )"
    r"|WARNING: \S+-(?:safe|unsafe|irq-safe|irq-unsafe) -> )[^\n]*")
TASK_DUMP_START = "smartio-init: the command is still running"  # PID 1's task list near the timeout
TASK_DUMP_HINT = f" (\"{TASK_DUMP_START}\": the tasks still running, with kernel stacks)"
MARKER_RE = re.compile(rb"\r?\nVMTEST_([A-Z_]+)=([^\r\n]*) ([0-9a-f]{16})\r?\n")
# A vCPU that QEMU's TCG stopped running (emulator_stall): the NMI backtraces of RCU stall reports.
NMI_BACKTRACE_RE = re.compile(r"^\[\s*(\d+\.\d+)\] NMI backtrace for cpu (\d+)\s*$", re.M)
RIP_RE = re.compile(r"^\[\s*\d+\.\d+\] RIP: \w+:(\S+)", re.M)
TIMESTAMP_RE = re.compile(r"^\[\s*(\d+\.\d+)\]", re.M)
# What the guest kernel reports about a vCPU the emulator stopped: not counted as its problems then.
STALL_REPORT_RE = re.compile(r"rcu: INFO: .*detected stalls|soft lockup|INFO: task .* blocked for more than")
STALL_LAG_S = 10.0        # the stopped vCPU's clock is this far behind the guest's latest console line
# A boot whose command has not started (PID 1's START marker) by then hung in the kernel's start-up or in PID 1's
# setup (modules, shares): the guest loads the user's modules within 3.4 s of guest time here, also on the debug
# kernel. Seen once in ~130 CI boots (2026-11-27): the console (warnings only) silent after SMP bring-up until the
# host's timeout.
BOOT_DEADLINE_S = 150.0


class MarkerStream:
    """Passes the guest's command output through, minus the marker lines that carry this run's nonce.

    Output is forwarded as it comes (so progress bars show live); only a trailing piece that might be the start of
    a marker is held back until its line ends.
    """

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce.encode()
        self.markers: dict[str, str] = {}
        self.arrived: dict[str, float] = {}     # when each marker came (time.monotonic())
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        self._pending += data
        out = bytearray()
        while m := MARKER_RE.search(self._pending):
            if m.group(3) == self.nonce:
                out += self._pending[:m.start()]
                self.markers[m.group(1).decode()] = m.group(2).decode(errors="replace")
                self.arrived.setdefault(m.group(1).decode(), time.monotonic())
            else:
                out += self._pending[:m.end()]
            self._pending = self._pending[m.end():]
        hold = len(self._pending)
        nl = self._pending.rfind(b"\n")
        if nl >= 0 and (b"\nVMTEST_".startswith(self._pending[nl:nl + 8])):
            hold = nl - 1 if nl > 0 and self._pending[nl - 1:nl] == b"\r" else nl
        elif self._pending.endswith(b"\r"):
            hold = len(self._pending) - 1
        out += self._pending[:hold]
        self._pending = self._pending[hold:]
        return bytes(out)

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest

    @property
    def rc(self) -> int | None:
        value = self.markers.get("RC")
        return int(value) if value is not None and value.isdigit() else None


def find_kernel_problems(*logs: str) -> list[str]:
    """Panic, oops, BUG and WARN lines in kernel logs, each once, in order of appearance."""
    seen: dict[str, None] = {}
    for log in logs:
        for m in KERNEL_PROBLEM_RE.finditer(log):
            seen.setdefault(m.group(0).strip(), None)
    return list(seen)


def emulator_stall(console: str) -> str | None:
    """Why the emulator, not the guest, stopped a vCPU, from the kernel console; None if it did not.

    Seen under TCG (QEMU 7.2, -accel tcg,thread=multi): one vCPU patches kernel text (text_poke_bp, when a
    tracepoint, kprobe or static key is switched) while another runs it. The other vCPU goes on executing a
    translation of the temporary breakpoint that is no longer in memory: it traps (int3), the kernel finds no
    breakpoint there and restarts the instruction, and the same stale translation traps again, for ever, with
    interrupts off. The patching vCPU waits for it in an IPI; RCU reports the stall and has the stuck vCPU print a
    backtrace (NMI), and those backtraces show it: at least two with the same clock reading (its clock stopped,
    at least STALL_LAG_S behind the console), one of them in the int3 path (asm_exc_int3 anywhere in it: the NMI
    may land in any function the handler calls). A guest that hangs by itself (a deadlock, a spin with interrupts
    off) shows no breakpoint handler in its frozen backtraces, so it is not mistaken for this.
    """
    stamps = [float(t) for t in TIMESTAMP_RE.findall(console)]
    if not stamps:
        return None
    latest = max(stamps)
    headers = list(NMI_BACKTRACE_RE.finditer(console))
    # (cpu, clock) -> per backtrace: (in the int3 path, the instruction it was at or trapped from)
    frozen: dict[tuple[str, str], list[tuple[bool, str]]] = collections.defaultdict(list)
    for i, m in enumerate(headers):
        stamp, cpu = m.group(1), m.group(2)
        if latest - float(stamp) < STALL_LAG_S:
            continue
        block = console[m.end():headers[i + 1].start() if i + 1 < len(headers) else m.end() + 8000]
        if (cut := block.find("</TASK>")) >= 0:
            block = block[:cut]
        rips = RIP_RE.findall(block)
        trap = block.find("asm_exc_int3")
        if trap >= 0:       # the trapped instruction: the RIP of the registers the breakpoint pushed
            nested = RIP_RE.search(block, trap)
            frozen[(cpu, stamp)].append((True, nested.group(1) if nested else "?"))
        elif rips:
            frozen[(cpu, stamp)].append((False, rips[0]))
    for (cpu, stamp), seen in frozen.items():
        if len(seen) < 2 or not any(in_trap for in_trap, _ in seen):
            continue
        at = next((rip for in_trap, rip in seen if not in_trap), None) or next(rip for _, rip in seen)
        return (f"vCPU {cpu} stopped at guest time {float(stamp):.1f} s and was still there at {latest:.1f} s, "
                f"trapping at {at} on a breakpoint that is no longer in memory ({len(seen)} backtraces): QEMU's "
                f"TCG kept running a stale translation of kernel code that another vCPU patched. This is the "
                f"emulator's fault, not the guest's")
    return None


def boot_stall(console: str, parser: MarkerStream, waited_s: float) -> str | None:
    """Why a boot that has run `waited_s` is beyond saving before its command started: no START marker from PID 1
    within BOOT_DEADLINE_S, worded by how far it got (INIT: PID 1 had started); None if the command started or
    may still."""
    if "START" in parser.markers or waited_s < BOOT_DEADLINE_S:
        return None
    lines = [ln.strip() for ln in console.splitlines() if ln.strip()]
    last = f"its console's last line: {lines[-1]!r}" if lines else "nothing on its console"
    stage = ("PID 1's setup (modules, shares) had not finished" if "INIT" in parser.markers
             else "the guest kernel had not started PID 1")
    return f"{stage} after {waited_s:.0f} s, so the command never started ({last})"


class ConsoleWatch:
    """supervise()'s watch for a run: emulator_stall() on the console so far, or the vCPUs' registers (`sampler`,
    vcpus.int3_stall: the same stall when it silenced the console), then boot_stall(). `kind` says which
    stopped the boot ("emulator" or "boot"); a boot stall is described on the host (host_tasks) before QEMU stops,
    as a timeout is."""

    def __init__(self, console_log: Path, parser: MarkerStream, host_report: Path | None = None,
                 sampler: Sampler | None = None) -> None:
        self.console_log, self.parser, self.host_report, self.sampler = console_log, parser, host_report, sampler
        self.started = time.monotonic()
        self.kind: str | None = None

    def __call__(self) -> str | None:
        try:
            console = self.console_log.read_text(errors="replace") if self.console_log.exists() else ""
            if (why := emulator_stall(console)) or (self.sampler is not None and (why := self.sampler.stall())):
                self.kind = "emulator"
            elif why := boot_stall(console, self.parser, time.monotonic() - self.started):
                self.kind = "boot"
                if self.host_report is not None:
                    write_host_report(self.host_report)
                if self.sampler is not None:
                    self.sampler.report(self.console_log.parent / VCPUS)
            return why
        except Exception:       # a watch that fails must not fail the run: the timeout still stands
            return None


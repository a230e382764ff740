"""Where the guest's vCPUs are, asked of QEMU's monitor (HMP `info registers -a`) and named with the kernel's
System.map: the watch for a vCPU that QEMU's TCG keeps trapping on a breakpoint that is no longer in memory
(int3_stall), and the vCPUs' places in a timeout's failure.

That stall (console.emulator_stall describes it) freezes the guest's clock on the stuck vCPU; when that vCPU keeps
the kernel's time, no stall report or task list ever reaches the console, and only the registers say where it is.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import socket
import time
from pathlib import Path

from smartio.outputs import write_whole
from smartio.testbed.kernelrelease import KernelRelease

CPU_RE = re.compile(r"^CPU#(\d+)\s*$", re.M)
RIP_RE = re.compile(r"RIP=([0-9a-f]{16}) RFL=([0-9a-f]{8})[^\n]*?HLT=(\d)")
IF_FLAG = 0x200
PROMPT = b"(qemu) "
# The int3 handler proper (arch/x86/kernel/traps.c, alternative.c, kprobes) and the entry code every trap passes
# through on its way in and out: a vCPU in this path with interrupts off in at least STALL_IN_PATH of STALL_SAMPLES
# samples, at least one of them in the handler proper, and otherwise only at the one instruction it traps on, over
# STALL_SAMPLES x the sampling interval with the console silent, is running a stale translation; a real
# breakpoint's trap takes microseconds.
INT3_HANDLER = ("asm_exc_int3", "exc_int3", "do_int3", "poke_int3_handler", "kprobe_int3_handler",
                "ftrace_int3_handler")
INT3_PATH = (*INT3_HANDLER, "irqentry_nmi_enter", "irqentry_nmi_exit", "irqentry_enter", "irqentry_exit",
             "error_entry", "error_return", "paranoid_entry", "paranoid_exit", "restore_regs_and_return_to_kernel",
             "native_iret", "native_irq_return_iret", "notify_die", "atomic_notifier_call_chain")
STALL_IN_PATH = 2
KERNEL_SPACE = 1 << 63
STALL_SAMPLES = 3
VCPUS = "vcpus.txt"     # in the artifacts: where the vCPUs were at the timeout


@dataclasses.dataclass(frozen=True)
class Vcpu:
    cpu: int
    rip: int
    interrupts: bool     # RFLAGS.IF
    halted: bool         # HLT=1: idle


def ask(sock: Path, command: str = "info registers -a", timeout: float = 5.0) -> str:
    """One HMP command's output from the monitor at `sock` (QEMU's -monitor unix:...)."""
    def until_prompt(s: socket.socket) -> bytes:
        buf = b""
        while not buf.endswith(PROMPT):
            if not (chunk := s.recv(65536)):
                raise OSError("the monitor closed the connection")
            buf += chunk
        return buf

    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        until_prompt(s)                 # the banner
        s.sendall(command.encode() + b"\n")
        return until_prompt(s).decode(errors="replace")


def parse(text: str) -> list[Vcpu]:
    """The vCPUs of an `info registers -a` output (64-bit mode only: a vCPU still in real mode has no RIP)."""
    heads = list(CPU_RE.finditer(text))
    out = []
    for i, m in enumerate(heads):
        block = text[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        if r := RIP_RE.search(block):
            out.append(Vcpu(int(m.group(1)), int(r.group(1), 16), bool(int(r.group(2), 16) & IF_FLAG),
                            r.group(3) == "1"))
    return out


class Symbols:
    """A kernel's text symbols (System.map) at the address the guest's kernel runs at (KASLR: the guest writes
    its _text; without it addresses are named as linked)."""

    def __init__(self, system_map: Path | None, text: int | None = None) -> None:
        self.addrs: list[int] = []
        self.names: list[str] = []
        linked_text = None
        try:
            lines = system_map.read_text().splitlines() if system_map else []
        except OSError:
            lines = []
        pairs = []
        for line in lines:
            parts = line.split()
            # Addresses of 0: a kallsyms read without the right to see them (kptr_restrict).
            if len(parts) == 3 and parts[1] in "tTwW" and int(parts[0], 16):
                pairs.append((int(parts[0], 16), parts[2]))
                if parts[2] == "_text":
                    linked_text = int(parts[0], 16)
        shift = text - linked_text if text is not None and linked_text is not None else 0
        pairs.sort()
        self.addrs = [a + shift for a, _ in pairs]
        self.names = [n for _, n in pairs]

    def name(self, addr: int) -> str:
        """'function+0xoff', or the address in hex when no symbol covers it."""
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or addr - self.addrs[i] > 0x100000:
            return f"{addr:#x}"
        return f"{self.names[i]}+{addr - self.addrs[i]:#x}"

    def function(self, addr: int) -> str:
        return self.name(addr).split("+")[0]


KALLSYMS = "kallsyms"   # the guest's text symbols, in the artifacts of a kernel's first boot, then in its cache
USABLE_SYMBOLS = 1000   # Debian's System.map is a one-line stub


def symbol_map(rel: KernelRelease) -> Path | None:
    """The kernel's text symbols: its System.map if it has one (the debug kernel), else those its first boot here
    listed (keep_symbols); None until then."""
    for path in (rel.system_map, rel.dir / KALLSYMS):
        if path is not None and path.is_file() and path.stat().st_size > USABLE_SYMBOLS * 20:
            return path
    return None


def keep_symbols(art: Path, rel: KernelRelease) -> None:
    """Moves the text symbols a boot listed (<artifacts>/kallsyms) into the kernel's cache, whole or not at all."""
    listed = art / KALLSYMS
    (art / f"{KALLSYMS}.part").unlink(missing_ok=True)      # a guest stopped while it listed them
    if listed.is_file():
        if len(Symbols(listed).addrs) >= USABLE_SYMBOLS and symbol_map(rel) is None:
            write_whole(rel.dir / KALLSYMS, listed.read_text())
        listed.unlink()


def guest_text(art: Path) -> int | None:
    """The _text address the guest's PID 1 wrote to <artifacts>/kernel-text (KASLR), or None."""
    try:
        return int((art / "kernel-text").read_text().split()[0], 16) or None     # 0: hidden (kptr_restrict)
    except (OSError, ValueError, IndexError):
        return None


def describe(vcpus: list[Vcpu], syms: Symbols) -> str:
    """'vCPU 0 at exc_int3+0x1e (interrupts off), vCPU 1 idle, vCPU 2 in user space'."""
    parts = []
    for v in vcpus:
        if v.halted:
            parts.append(f"vCPU {v.cpu} idle")
            continue
        if v.rip < KERNEL_SPACE:
            where = "in user space"
        elif (name := syms.name(v.rip)).startswith("0x"):
            where = f"at {name} (a module's or unnamed kernel code)" if syms.addrs else f"at {name}"
        else:
            where = f"at {name}"
        parts.append(f"vCPU {v.cpu} {where}{'' if v.interrupts else ' (interrupts off)'}")
    return ", ".join(parts)


def int3_stall(samples: list[list[Vcpu]], syms: Symbols) -> str | None:
    """Why a vCPU is stuck on a stale breakpoint, from the last STALL_SAMPLES samples; None if none is."""
    if len(samples) < STALL_SAMPLES or not syms.addrs:
        return None
    last = samples[-STALL_SAMPLES:]
    for v in last[-1]:
        seen = [next((w for w in s if w.cpu == v.cpu), None) for s in last]
        if any(w is None or w.halted or w.interrupts or w.rip < KERNEL_SPACE for w in seen):
            continue
        funcs = [syms.function(w.rip) for w in seen if w is not None]
        in_path = [f in INT3_PATH for f in funcs]
        # In the handler's path, or back at the one instruction it traps on in between.
        at = {w.rip for w, inside in zip(seen, in_path, strict=True) if w is not None and not inside}
        if sum(in_path) >= STALL_IN_PATH and any(f in INT3_HANDLER for f in funcs) and len(at) <= 1:
            where = f" trapping at {syms.name(next(iter(at)))}" if at else ""
            return (f"vCPU {v.cpu} stayed in the breakpoint handler with interrupts off over {len(last)} samples "
                    f"({', '.join(dict.fromkeys(funcs))}){where}: QEMU's TCG kept running a stale translation of "
                    f"kernel code that another vCPU patched. This is the emulator's fault, not the guest's")
    return None


class Sampler:
    """The vCPUs' places every `interval` s (at most) while a run goes on; `stall()` asks int3_stall of them."""

    def __init__(self, monitor: Path, art: Path, system_map: Path | None, interval: float = 10.0,
                 console: Path | None = None) -> None:
        self.monitor, self.art, self.system_map, self.interval = monitor, art, system_map, interval
        self.console = console          # judged only while it does not grow (a noisy one is emulator_stall's)
        self.samples: list[list[Vcpu]] = []
        self.console_sizes: list[int] = []
        self._syms: Symbols | None = None
        self._last = 0.0

    def symbols(self) -> Symbols:
        """The kernel's symbols at the guest's offset; none (addresses in hex) until PID 1 wrote the offset."""
        if self._syms is None or len(self._syms.addrs) < USABLE_SYMBOLS:
            text = guest_text(self.art)
            if text is None:
                return Symbols(None)
            self._syms = Symbols(self.system_map, text)
        return self._syms

    def sample(self) -> list[Vcpu] | None:
        try:
            vcpus = parse(ask(self.monitor))
        except OSError:
            return None
        self.samples = [*self.samples[-(STALL_SAMPLES - 1):], vcpus]
        return vcpus

    def stall(self) -> str | None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return None
        self._last = now
        if self.sample() is None:
            return None
        size = self.console.stat().st_size if self.console is not None and self.console.exists() else 0
        self.console_sizes = [*self.console_sizes[-(STALL_SAMPLES - 1):], size]
        if guest_text(self.art) is None or len(set(self.console_sizes)) > 1:
            return None
        return int3_stall(self.samples, self.symbols())

    def now(self) -> str | None:
        """Where the vCPUs are at this moment, named; None if the monitor does not answer."""
        vcpus = self.sample()
        return describe(vcpus, self.symbols()) if vcpus else None

    def report(self, path: Path) -> None:
        """Writes now() to `path` (VCPUS, which VmResult.failure quotes) when a run is stopped; never raises: the
        run's own files must still be written."""
        try:
            if where := self.now():
                path.write_text(where + "\n")
        except Exception:       # noqa: BLE001
            pass

"""smartio.testbed.vcpus without a VM: QEMU's `info registers -a` read, addresses named at the guest's KASLR offset,
a vCPU stuck on a stale breakpoint told from a busy or idle one, and a real QEMU's monitor asked."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from smartio.testbed import qemu, vcpus
from smartio.testbed.console import ConsoleWatch, MarkerStream

LINKED = 0xFFFFFFFF81000000
KASLR = 0x2A000000
SYSTEM_MAP = "\n".join([
    f"{LINKED:016x} T _text",
    f"{LINKED + 0x100:016x} T filemap_add_folio",
    f"{LINKED + 0x400:016x} t page_cache_async_ra",
    f"{LINKED + 0x1000:016x} T exc_int3",
    f"{LINKED + 0x1200:016x} T poke_int3_handler",
    f"{LINKED + 0x1400:016x} T asm_exc_int3",
    f"{LINKED + 0x1600:016x} T smp_call_function_many_cond",
    f"{LINKED + 0x1800:016x} T default_idle",
    f"{LINKED + 0x1880:016x} T error_entry",
    f"{LINKED + 0x1900:016x} D some_data",
]) + "\n"


def registers(*cpus: tuple[int, int, bool]) -> str:
    """`info registers -a` as QEMU 7.2 prints it: (rip, rflags, halted) per vCPU (the echo of the command first)."""
    out = ["info registers -a\x1b[K", ""]
    for i, (rip, rfl, hlt) in enumerate(cpus):
        out += [f"CPU#{i}", "RAX=0000000000000000 RBX=ffff8880041e0000 RCX=0000000000000000 RDX=0000000000000000",
                f"RIP={rip:016x} RFL={rfl:08x} [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT={int(hlt)}",
                "ES =0000 0000000000000000 ffffffff 00c00000", ""]
    return "\r\n".join(out) + "(qemu) "


def at(offset: int) -> int:
    return LINKED + KASLR + offset


@pytest.fixture
def syms(tmp_path: Path) -> vcpus.Symbols:
    (tmp_path / "System.map").write_text(SYSTEM_MAP)
    return vcpus.Symbols(tmp_path / "System.map", text=LINKED + KASLR)


def test_registers_are_read_per_vcpu_with_interrupts_and_halt() -> None:
    got = vcpus.parse(registers((at(0x1010), 0x46, False), (at(0x1808), 0x246, True)))
    assert got == [vcpus.Vcpu(0, at(0x1010), interrupts=False, halted=False),
                   vcpus.Vcpu(1, at(0x1808), interrupts=True, halted=True)]
    # A vCPU still in real mode (EIP, no RIP) is left out rather than misread.
    assert vcpus.parse("CPU#0\nEIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n") == []


def test_addresses_are_named_at_the_guests_kaslr_offset(syms: vcpus.Symbols, tmp_path: Path) -> None:
    assert syms.name(at(0x1010)) == "exc_int3+0x10" and syms.function(at(0x400)) == "page_cache_async_ra"
    assert syms.name(at(0)) == "_text+0x0"
    assert syms.name(LINKED + 0x1010) == f"{LINKED + 0x1010:#x}"      # below the text: not named
    assert "some_data" not in syms.names                                 # data symbols are not code
    desc = vcpus.describe(vcpus.parse(registers((at(0x1604), 0x46, False), (at(0x1808), 0x246, True),
                                                (0x7F0012345678, 0x246, False), (at(0x300000), 0x246, False))), syms)
    assert desc == ("vCPU 0 at smp_call_function_many_cond+0x4 (interrupts off), vCPU 1 idle, vCPU 2 in user "
                    f"space, vCPU 3 at {at(0x300000):#x} (a module's or unnamed kernel code)")
    # Debian's System.map is a stub: no symbols, addresses in hex.
    (tmp_path / "stub").write_text("ffffffffffffffff B The real System.map is in the linux-image-<v>-dbg package\n")
    assert vcpus.Symbols(tmp_path / "stub", text=at(0)).name(at(0x1010)) == f"{at(0x1010):#x}"
    assert vcpus.guest_text(tmp_path) is None
    (tmp_path / "kernel-text").write_text(f"{at(0):016x}\n")
    assert vcpus.guest_text(tmp_path) == at(0)
    # Hidden addresses (kptr_restrict) are no offset and no symbols.
    (tmp_path / "kernel-text").write_text(f"{0:016x}\n")
    assert vcpus.guest_text(tmp_path) is None
    (tmp_path / "hidden").write_text("".join(f"{0:016x} T f{i}\n" for i in range(2000)))
    assert vcpus.Symbols(tmp_path / "hidden").addrs == []


def test_a_vcpu_trapping_on_a_stale_breakpoint_is_told_from_busy_and_idle_ones(syms: vcpus.Symbols) -> None:
    def sample(rip0: int, irq0: bool, rip1: int = at(0x1808)) -> list[vcpus.Vcpu]:
        return [vcpus.Vcpu(0, rip0, irq0, False), vcpus.Vcpu(1, rip1, True, rip1 == at(0x1808))]

    # vCPU 0 in the int3 path or back at the instruction it traps on, interrupts off, in every sample.
    stuck = [sample(at(0x1010), False), sample(at(0x104), False), sample(at(0x1420), False)]
    why = vcpus.int3_stall(stuck, syms)
    assert why is not None and why.startswith("vCPU 0 stayed in the breakpoint handler with interrupts off over 3")
    assert "trapping at filemap_add_folio+0x4" in why and "emulator's fault" in why
    assert vcpus.int3_stall(stuck[:2], syms) is None                     # too few samples yet
    # A kprobe hit caught once, then running on: not a stall.
    assert vcpus.int3_stall([sample(at(0x1010), False), sample(at(0x408), True), sample(at(0x1604), True)],
                            syms) is None
    # Interrupts off in a spin elsewhere (a guest's own deadlock): not the emulator's stall.
    assert vcpus.int3_stall([sample(at(0x1604), False)] * 3, syms) is None
    # In the handler, but from two different places between: two breakpoints hit, the kernel working.
    assert vcpus.int3_stall([sample(at(0x1010), False), sample(at(0x104), False), sample(at(0x408), False)],
                            syms) is None
    # Only the entry code every trap and NMI passes through (a guest's own spin, with RCU's NMIs): not the handler.
    assert vcpus.int3_stall([sample(at(0x1884), False), sample(at(0x1604), False), sample(at(0x1890), False)],
                            syms) is None
    # Once in the handler and twice at one place with interrupts off: a spin a kprobe hit once, not a stall.
    assert vcpus.int3_stall([sample(at(0x1010), False), sample(at(0x1604), False), sample(at(0x1604), False)],
                            syms) is None
    # Without symbols nothing is judged.
    assert vcpus.int3_stall(stuck, vcpus.Symbols(None)) is None


def test_the_console_watch_stops_a_run_on_the_registers_stall(tmp_path: Path, syms: vcpus.Symbols) -> None:
    (tmp_path / "System.map").write_text(SYSTEM_MAP)
    (tmp_path / "kernel-text").write_text(f"{at(0):016x}\n")
    answers = iter([registers((at(0x1010), 0x46, False), (at(0x1808), 0x246, True)),
                    registers((at(0x104), 0x46, False), (at(0x1604), 0x246, False)),
                    registers((at(0x1420), 0x46, False), (at(0x1604), 0x246, False))])

    class Fake(vcpus.Sampler):
        def sample(self) -> list[vcpus.Vcpu] | None:
            got = vcpus.parse(next(answers))
            self.samples = [*self.samples[-2:], got]
            return got

    console = tmp_path / "console.log"
    console.write_text("[    4.5] smartio-init: loaded smartio-iosched.ko\n")
    watch = ConsoleWatch(console, MarkerStream("0" * 16), None,
                         Fake(tmp_path / "mon.sock", tmp_path, tmp_path / "System.map", interval=0.0,
                              console=console))
    assert watch() is None and watch() is None and watch.kind is None
    why = watch()
    assert why is not None and "stale translation" in why and watch.kind == "emulator"
    # The same registers while the console still grows: not judged (a console that speaks is emulator_stall's).
    answers = iter([registers((at(0x1010), 0x46, False), (at(0x1808), 0x246, True))] * 2
                   + [registers((at(0x104), 0x46, False), (at(0x1808), 0x246, True))])
    watch = ConsoleWatch(console, MarkerStream("0" * 16), None,
                         Fake(tmp_path / "mon.sock", tmp_path, tmp_path / "System.map", interval=0.0,
                              console=console))
    for _ in range(3):
        assert watch() is None
        with console.open("a") as f:
            f.write("[   30.0] some line\n")
    assert watch.kind is None


def test_the_kernels_first_boot_lists_its_symbols_for_the_cache(tmp_path: Path, monkeypatch) -> None:
    class Rel:
        dir = tmp_path / "kernel"
        system_map = tmp_path / "kernel" / "System.map-stub"

    Rel.dir.mkdir()
    Rel.system_map.write_text("ffffffffffffffff B The real System.map is in the dbg package\n")
    art = tmp_path / "art"
    art.mkdir()
    assert vcpus.symbol_map(Rel) is None                      # type: ignore[arg-type]
    (art / vcpus.KALLSYMS).write_text("ffffffffaa000000 T _text\n")
    vcpus.keep_symbols(art, Rel)                               # type: ignore[arg-type]
    assert not (Rel.dir / vcpus.KALLSYMS).exists() and not (art / vcpus.KALLSYMS).exists()   # too few: not kept
    lines = [f"{0xffffffffaa000000 + 16 * i:016x} T f{i}" for i in range(vcpus.USABLE_SYMBOLS)]
    (art / vcpus.KALLSYMS).write_text("ffffffffaa000000 T _text\n" + "\n".join(lines) + "\n")
    vcpus.keep_symbols(art, Rel)                               # type: ignore[arg-type]
    assert vcpus.symbol_map(Rel) == Rel.dir / vcpus.KALLSYMS    # type: ignore[arg-type]
    assert not (art / vcpus.KALLSYMS).exists()


@pytest.mark.skipif(shutil.which(qemu.QEMU) is None, reason="no QEMU")
def test_a_real_qemu_monitor_answers(tmp_path: Path) -> None:
    sock = tmp_path / "mon.sock"
    cfg = qemu.VmConfig(kernel=Path("/k"), initrd=Path("/i"), append="", console_log=tmp_path / "c",
                        shares=(), monitor=sock)
    assert f"unix:{sock},server=on,wait=off" in qemu.command_line(cfg, "qemu")
    # Paused at reset (-S): both vCPUs in real mode, so they are listed and not misread as 64-bit.
    proc = subprocess.Popen([qemu.QEMU, "-nodefaults", "-display", "none", "-accel", "tcg", "-smp", "2", "-m", "64",
                             "-S", "-monitor", f"unix:{sock},server=on,wait=off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.1)
        text = vcpus.ask(sock)
        assert "CPU#0" in text and "CPU#1" in text and "EIP=0000fff0" in text
        assert vcpus.parse(text) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_timeouts_failure_says_where_the_vcpus_were(tmp_path: Path) -> None:
    from smartio.testbed.result import VmResult

    result = VmResult(rc=None, artifacts_dir=tmp_path, console_log=tmp_path / "console.log",
                      output_log=tmp_path / "o", out_dir=tmp_path, kernel="k", accel="tcg", duration_s=9.0,
                      timeout_s=9.0, timed_out=True)
    assert "vCPUs when" not in (result.failure or "")
    (tmp_path / vcpus.VCPUS).write_text("vCPU 0 at exc_int3+0x10 (interrupts off), vCPU 1 idle\n")
    assert ("; the vCPUs when it was stopped: vCPU 0 at exc_int3+0x10 (interrupts off), vCPU 1 idle"
            in (result.failure or ""))

"""Testbed pieces that need no VM: initramfs contents, QEMU and kernel command lines, markers, timeouts."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smartio.cli import main as cli_main
from smartio.errors import MissingToolError, SmartioError, UsageError
from smartio.testbed import (
    debugkernel,
    guest,
    hosttasks,
    initramfs,
    kernelpkg,
    kernelrelease,
    qemu,
    vm,
)
from smartio.testbed.boot import Boot
from smartio.testbed.console import (
    BOOT_DEADLINE_S,
    STALL_REPORT_RE,
    TASK_DUMP_START,
    ConsoleWatch,
    MarkerStream,
    boot_stall,
    emulator_stall,
    find_kernel_problems,
)
from smartio.testbed.guest import GuestSpec
from smartio.testbed.hosttasks import HOST_TASKS, host_tasks, write_host_report

pytestmark = pytest.mark.timeout(60)

NONCE = "0123456789abcdef"


def fake_modules(root: Path) -> Path:
    """A modules dir where b needs a, c needs a and b, and d is built into the kernel."""
    (root / "kernel").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "kernel" / f"{name}.ko").write_bytes(f"module {name}".encode())
    (root / "modules.dep").write_text(
        "kernel/c.ko: kernel/b.ko kernel/a.ko\nkernel/b.ko: kernel/a.ko\nkernel/a.ko:\n")
    (root / "modules.builtin").write_text("kernel/d.ko\n")
    return root


def test_module_order_puts_dependencies_first(tmp_path: Path) -> None:
    mods = fake_modules(tmp_path)
    assert [p.name for p in initramfs.module_order(mods, ("c", "d", "b"))] == ["a.ko", "b.ko", "c.ko"]
    with pytest.raises(SmartioError, match="nope"):
        initramfs.module_order(mods, ("nope",))


@pytest.mark.skipif(shutil.which("busybox") is None or shutil.which("cpio") is None,
                    reason="needs busybox-static and cpio (scripts/install-deps --vm)")
def test_initramfs_holds_busybox_init_console_and_modules(tmp_path: Path) -> None:
    mods = fake_modules(tmp_path / "mods")
    cpio = initramfs.build(mods, tmp_path / "initrd.cpio", wanted=("c",))
    listing = subprocess.run(["cpio", "-itv"], stdin=cpio.open("rb"), capture_output=True, text=True, check=True)
    lines = {line.split()[-1]: line for line in listing.stdout.splitlines()}
    assert {"init", "bin/busybox", "dev/console", "modules/order", "modules/a.ko", "modules/c.ko"} <= set(lines)
    assert lines["dev/console"].startswith("c") and "5,   1" in lines["dev/console"]
    assert lines["init"].startswith("-rwxr-xr-x")
    extract = tmp_path / "x"
    extract.mkdir()
    subprocess.run(["cpio", "-id", "--no-absolute-filenames", "init", "modules/*", "bin/busybox"],
                   stdin=cpio.open("rb"), cwd=extract, capture_output=True, check=True)
    assert (extract / "modules/order").read_text() == "a.ko\nb.ko\nc.ko\n"
    assert (extract / "modules/b.ko").read_bytes() == b"module b"
    init = (extract / "init").read_text()
    assert "@" not in init and "/dev/ttyS1" in init and "VMTEST_%s" in init
    busybox = shutil.which("busybox")
    assert busybox is not None
    assert (extract / "bin/busybox").read_bytes() == Path(busybox).read_bytes()
    # The kernel needs the same bytes every time for the same inputs (no timestamps).
    assert initramfs.build(mods, tmp_path / "again.cpio", wanted=("c",)).read_bytes() == cpio.read_bytes()


def test_compressed_modules_are_found_and_held_decompressed(tmp_path: Path) -> None:
    """From 6.12 on Debian's modules are .ko.xz (the newest's too); busybox's insmod loads only a plain .ko, so the
    initramfs holds each decompressed, under its plain name, in the same order."""
    import gzip
    import lzma

    root = tmp_path / "mods"
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "a.ko.xz").write_bytes(lzma.compress(b"\x7fELF a", format=lzma.FORMAT_XZ))
    (root / "kernel" / "b-c.ko.gz").write_bytes(gzip.compress(b"\x7fELF b"))
    (root / "kernel" / "d.ko").write_bytes(b"\x7fELF d")
    (root / "modules.dep").write_text("kernel/a.ko.xz:\nkernel/b-c.ko.gz: kernel/a.ko.xz\n"
                                      "kernel/d.ko: kernel/b-c.ko.gz\n")
    (root / "modules.builtin").write_text("kernel/fs/fuse/virtiofs.ko\n")
    order = initramfs.module_order(root, ("d", "virtiofs"))
    assert [p.name for p in order] == ["a.ko.xz", "b-c.ko.gz", "d.ko"]
    assert initramfs.module_name("kernel/b-c.ko.gz") == "b_c" and initramfs.module_name("x/virtiofs.ko") == "virtiofs"
    assert [initramfs.initramfs_name(p) for p in order] == ["a.ko", "b-c.ko", "d.ko"]
    assert [initramfs.module_bytes(p) for p in order] == [b"\x7fELF a", b"\x7fELF b", b"\x7fELF d"]
    if shutil.which("zstd"):
        zst = root / "kernel" / "e.ko.zst"
        subprocess.run(["zstd", "-q", "-o", str(zst)], input=b"\x7fELF e", check=True)
        assert initramfs.module_bytes(zst) == b"\x7fELF e"


def test_the_kernel_is_a_name_or_an_exact_release_and_its_module_the_matrix_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SMARTIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernelpkg, "_run", lambda cmd, cwd=None: (_ for _ in ()).throw(SmartioError("offline")))
    assert GuestSpec(kernel="6.12").kernel == "6.12" and GuestSpec(kernel="6.12.118+deb13").kernel
    for bad in ("6.13x", "7", "cloud-amd64"):
        with pytest.raises(UsageError, match="--kernel"):
            GuestSpec(kernel=bad)
    with pytest.raises(UsageError, match="debug kernel"):
        GuestSpec(kernel="newest", flavour=kernelpkg.DEBUG)
    # An exact release is that one from the cache (by ABI or uname -r), never another.
    rel = kernelpkg.KernelRelease("6.12.118+deb13", "6.12.118-1", kernelpkg.FLAVOUR, "6.12")
    rel.dir.mkdir(parents=True)
    (rel.dir / ".complete-image").touch()
    assert kernelpkg.resolve(kernel="6.12.118+deb13") == rel
    assert kernelpkg.resolve(kernel="6.12.118+deb13-cloud-amd64") == rel
    monkeypatch.setenv("SMARTIO_OFFLINE", "1")
    with pytest.raises(SmartioError, match="6.12.99.deb13 is not in the cache"):
        kernelpkg.resolve(kernel="6.12.99+deb13")
    old = kernelpkg.KernelRelease("6.1.0-57", "6.1.192-3")
    for d in (old.dir, old.dir.with_name(old.dir.name + "-debug")):
        d.mkdir(parents=True)
        (d / ".complete-image").touch()
    assert kernelpkg.resolve(kernel="6.1.0-57-cloud-amd64") == old
    assert kernelpkg.kernel_of("7.2.13+deb14") == "newest" and kernelpkg.kernel_of("6.1.0-57") == "6.1"
    # The module: 6.1's stays kernel/smartio-iosched.ko; 6.12's is the matrix cell, if built for that release.
    repo = tmp_path / "repo"
    assert guest.default_module(repo, kernelpkg.FLAVOUR, old.kernel) == repo / guest.DEFAULT_MODULE
    ko = repo / "kernel" / "build" / "6.12-amd64" / "smartio-iosched.ko"
    assert guest.default_module(repo, kernelpkg.FLAVOUR, rel.kernel) == ko
    assert guest.default_module(repo, kernelpkg.FLAVOUR, "6.12.118+deb13") == ko
    assert guest.resolve_modules(None, repo, kernelpkg.FLAVOUR, rel) == []
    ko.parent.mkdir(parents=True)
    ko.touch()
    assert guest.resolve_modules(None, repo, kernelpkg.FLAVOUR, rel) == [ko]
    (ko.parent / "result.json").write_text(json.dumps({"release": "6.12.99+deb13-cloud-amd64"}))
    assert guest.resolve_modules(None, repo, kernelpkg.FLAVOUR, rel) == []
    assert "built for 6.12.99+deb13-cloud-amd64" in capsys.readouterr().err
    (ko.parent / "result.json").write_text(json.dumps({"release": rel.uname}))
    assert guest.resolve_modules(None, repo, kernelpkg.FLAVOUR, rel) == [ko]


def test_testbed_kernel_option_takes_a_kernel_or_as_before_a_flavour() -> None:
    from smartio.cli.testbed import kernel_choice

    assert kernel_choice("6.12", None) == ("6.12", kernelpkg.FLAVOUR)
    assert kernel_choice("newest", kernelpkg.GENERIC) == ("newest", kernelpkg.GENERIC)
    assert kernel_choice(kernelpkg.DEBUG, None) == ("6.1", kernelpkg.DEBUG)
    with pytest.raises(UsageError, match="--kernel"):
        kernel_choice(kernelpkg.GENERIC, kernelpkg.DEBUG)


def test_dynamic_busybox_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MissingToolError, match="busybox-static"):
        initramfs.entries(fake_modules(tmp_path), busybox=Path(sys.executable).resolve())


def test_qemu_command_line() -> None:
    cfg = qemu.VmConfig(kernel=Path("/k/vmlinuz"), initrd=Path("/w/initrd"), append="console=ttyS0 x=1",
                        console_log=Path("/a/console.log"),
                        shares=(qemu.Share("root", Path("/"), Path("/w/fs-root.sock")),),
                        disks=(Path("/w/d0.sock"), Path("/w/d1.sock")), disk_transport="nbd", memory_mib=1024)
    argv = qemu.command_line(cfg, "qemu")
    joined = " ".join(argv)
    assert argv[0] == "qemu"
    assert argv[argv.index("-accel") + 1] == "tcg,thread=multi"
    assert argv[argv.index("-cpu") + 1] == "max" and argv[argv.index("-smp") + 1] == "2"
    assert "memory-backend-memfd,id=mem,size=1024M,share=on" in argv and "-no-reboot" in argv
    assert argv[argv.index("-append") + 1] == "console=ttyS0 x=1"
    assert "file,id=console,path=/a/console.log" in argv and "stdio,id=cmd,signal=off" in argv
    assert "vhost-user-fs-pci,chardev=fs0,tag=root" in joined and "socket,id=fs0,path=/w/fs-root.sock" in joined
    assert "driver=nbd,node-name=disk1,server.type=unix,server.path=/w/d1.sock" in argv
    assert joined.count("virtio-blk-pci") == 2 and "num-queues=1" in joined
    fuse = qemu.command_line(dataclasses.replace(cfg, disks=(Path("/w/disk0.img"),), disk_transport="fuse"), "qemu")
    assert "driver=file,node-name=disk0,filename=/w/disk0.img,aio=native,cache.direct=on" in fuse
    assert " ".join(fuse).count("virtio-blk-pci") == 1 and "driver=nbd" not in " ".join(fuse)
    kvm = qemu.command_line(qemu.VmConfig(**{**cfg.__dict__, "accel": "kvm", "interactive": True}), "qemu")
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"
    assert "-mon" in kvm


def test_kvm_needs_vmx_or_svm() -> None:
    assert qemu.kvm_flags_present("processor: 0\nflags\t: fpu vme vmx sse\n")
    assert qemu.kvm_flags_present("flags\t: fpu svm\n")
    assert not qemu.kvm_flags_present("flags\t: fpu sse hypervisor\n")


def test_kernel_cmdline_carries_queue_depth_and_extra_args() -> None:
    line = guest.kernel_cmdline(NONCE, "run", 1, ["panic_on_warn=1", "hung_task_panic=1"])
    assert line.split()[:2] == ["console=ttyS0", "loglevel=5"]
    assert f"smartio.nonce={NONCE}" in line and "virtio_blk.queue_depth=1" in line
    assert line.endswith("panic_on_warn=1 hung_task_panic=1")
    assert "queue_depth" not in guest.kernel_cmdline(NONCE, "run", None, [])


def test_boot_puts_the_testbeds_own_arguments_first_and_checks_what_it_is_given() -> None:
    # Page zeroing on allocation is off by default (a TCG cost a phone does not pay); an extra argument, which comes
    # later on the line and so wins, turns it back on.
    args = guest.kernel_cmdline(NONCE, "run", None, Boot(kernel_args=("init_on_alloc=1",)).args()).split()
    assert args.index("init_on_alloc=0") < args.index("init_on_alloc=1")
    assert Boot.from_record(Boot(cpus=3, kernel_args=("x=1",)).record()) == Boot(cpus=3, kernel_args=("x=1",))
    assert Boot.from_record(None) == Boot(default_args=())       # a run from before the boot was recorded
    for bad in ({"cpus": 0}, {"cpus": 65}, {"cpus": True}, {"kernel_args": ("",)}, {"kernel_args": ("a b",)},
                {"kernel_args": ("rdinit=/bin/sh",)}, {"kernel_args": ("smartio.mode=shell",)}):
        with pytest.raises(UsageError):
            Boot(**bad)


def test_testbed_run_refuses_a_bad_cpu_count_before_it_needs_root(capsys) -> None:
    assert cli_main(["testbed", "run", "--cpus", "0", "--", "true"]) == 2
    assert "`--cpus 0`: must be a whole number from 1 to 64" in capsys.readouterr().err


def test_command_script_quotes_arguments(tmp_path: Path) -> None:
    script = guest.command_script(["sh", "-c", "echo 'a b' $X"], Path("/dir with space"))
    assert "cd '/dir with space'" in script
    assert script.splitlines()[-1] == "exec sh -c 'echo '\"'\"'a b'\"'\"' $X'"
    done = subprocess.run(["sh", "-c", guest.command_script(["sh", "-c", "echo \"$0\"", "x y"], tmp_path)],
                          capture_output=True, text=True)
    assert done.stdout == "x y\n"


def feed_all(chunks: list[bytes], nonce: str = NONCE) -> tuple[bytes, MarkerStream]:
    ms = MarkerStream(nonce)
    out = b"".join(ms.feed(c) for c in chunks) + ms.finish()
    return out, ms


def test_marker_is_removed_and_parsed_even_when_split() -> None:
    stream = b"line 1\nprogress 10%\rprogress 20%\nlast" + f"\nVMTEST_RC=7 {NONCE}\n".encode()
    for cut in range(1, len(stream)):
        out, ms = feed_all([stream[:cut], stream[cut:]])
        assert out == b"line 1\nprogress 10%\rprogress 20%\nlast", cut
        assert ms.rc == 7


def test_marker_with_another_nonce_is_just_output() -> None:
    fake = b"\nVMTEST_RC=0 ffffffffffffffff\n"
    out, ms = feed_all([b"x", fake, f"\r\nVMTEST_SETUP_FAILED=insmod x.ko failed {NONCE}\r\n".encode()])
    assert out == b"x" + fake
    assert ms.rc is None and ms.markers["SETUP_FAILED"] == "insmod x.ko failed"


def test_output_passes_through_while_it_arrives() -> None:
    ms = MarkerStream(NONCE)
    assert ms.feed(b"50%\r") == b"50%"   # a lone \r may start \r\n, so it waits for the next byte
    assert ms.feed(b"60%") == b"\r60%"
    assert ms.feed(b"\nVMT") == b""       # may be a marker
    assert ms.feed(b"X no\n") == b"\nVMTX no"  # its newline may start a marker in turn
    assert ms.finish() == b"\n"


def test_kernel_problems_are_found_once_and_taint_notes_are_not() -> None:
    console = ("[    3.2] smartio_iosched: loading out-of-tree module taints kernel.\n"
               "[    3.3] module verification failed: signature and/or required key missing - tainting kernel\n"
               "[    4.0] ------------[ cut here ]------------\n"
               "[    4.0] WARNING: CPU: 1 PID: 7 at block/elevator.c:123 foo+0x1/0x2 [smartio_iosched]\n"
               "[    4.1] BUG: kernel NULL pointer dereference, address: 0000000000000008\n")
    dmesg = "[    4.0] WARNING: CPU: 1 PID: 7 at block/elevator.c:123 foo+0x1/0x2 [smartio_iosched]\n"
    assert find_kernel_problems(console, dmesg) == [
        "WARNING: CPU: 1 PID: 7 at block/elevator.c:123 foo+0x1/0x2 [smartio_iosched]",
        "BUG: kernel NULL pointer dereference, address: 0000000000000008"]
    assert find_kernel_problems(console.split("[    4.0] -")[0]) == []


def test_supervise_streams_output_and_reads_the_exit_marker(tmp_path: Path) -> None:
    ms, out = MarkerStream(NONCE), io.BytesIO()
    argv = ["sh", "-c", f"printf 'hello\\n'; printf '\\nVMTEST_RC=4 {NONCE}\\n'; echo qemu-says >&2"]
    code, timed_out, stopped = vm.supervise(argv, timeout=10, parser=ms, output_log=tmp_path / "o",
                                            qemu_log=tmp_path / "q", stream=out, watch=lambda: None)
    assert (code, timed_out, stopped, ms.rc) == (0, False, None, 4)
    assert out.getvalue() == b"hello\n" == (tmp_path / "o").read_bytes()
    assert (tmp_path / "q").read_text() == "qemu-says\n"


def test_supervise_kills_at_the_timeout(tmp_path: Path) -> None:
    ms = MarkerStream(NONCE)
    code, timed_out, stopped = vm.supervise(["sh", "-c", "echo booting; exec sleep 30"], timeout=0.5, parser=ms,
                                            output_log=tmp_path / "o", qemu_log=tmp_path / "q", stream=None,
                                            host_report=tmp_path / HOST_TASKS)
    assert (code, timed_out, stopped, ms.rc) == (None, True, None, None)
    assert (tmp_path / "o").read_bytes() == b"booting\n"
    # The host's side at the timeout: each process below this one, each of its threads with its state.
    report = (tmp_path / HOST_TASKS).read_text()
    assert report.startswith("no host thread in D or waiting for a FUSE/NBD server\n"), report
    assert "=== pid " in report and "--- tid " in report and "[S (sleeping)]" in report
    result = vm.VmResult(rc=None, artifacts_dir=tmp_path, console_log=tmp_path / "console.log",
                         output_log=tmp_path / "o", out_dir=tmp_path, kernel="k", accel="tcg", duration_s=0.5,
                         timeout_s=0.5, timed_out=True)
    with pytest.raises(SmartioError, match=r"did not finish within 0.5 s \(--timeout 0.5\) and was killed; see"):
        result.check()
    assert result.task_dump() == ""
    assert "no task list from the guest" in (result.failure or "")
    assert (f"host side at the timeout: no host thread in D or waiting for a FUSE/NBD server, see "
            f"{tmp_path / HOST_TASKS}") in (result.failure or "")
    # PID 1's task list near the timeout, and a hung-task report before it, reach the message.
    (tmp_path / "console.log").write_text(
        "[  130.1] INFO: task python3:201 blocked for more than 120 seconds.\n"
        f"{TASK_DUMP_START} near the host's timeout; its tasks, and all tasks blocked in the kernel (D):\n"
        "--- pid 201 [D (disk sleep)] wchan=folio_wait_bit_common python3 -m smartio\n")
    result.kernel_problems = find_kernel_problems((tmp_path / "console.log").read_text())
    msg = result.failure or ""
    assert "before that the guest kernel reported: INFO: task python3:201 blocked for more than 120" in msg
    assert "the tasks still running, with kernel stacks" in msg
    assert result.task_dump().startswith(TASK_DUMP_START) and "pid 201 [D" in result.task_dump()


def _fake_proc(root: Path, pid: int, ppid: int, comm: bytes, threads: dict[int, tuple[str, str]]) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_bytes(b"%d (%s) S %d 1 1" % (pid, comm, ppid))
    (d / "comm").write_bytes(comm + b"\n")
    for tid, (state, wchan) in threads.items():
        t = d / "task" / str(tid)
        t.mkdir(parents=True)
        (t / "status").write_text(f"Name:\tx\nState:\t{state}\n")
        (t / "comm").write_bytes(comm + b"\n")
        (t / "wchan").write_text(wchan)
        (t / "syscall").write_text("0 0x1 0x2")
        (t / "stack").write_text(f"[<0>] {wchan}+0x1/0x2\n")


def test_host_tasks_names_threads_stuck_on_the_host(tmp_path: Path) -> None:
    """The threads a frozen guest may be waiting for: in D, or asleep waiting for the FUSE or NBD server; a
    process whose name has ')', spaces or bytes that are not UTF-8 is still walked, with its children."""
    proc = tmp_path / "proc"
    proc.mkdir()
    _fake_proc(proc, 100, 1, b"python3", {100: ("S (sleeping)", "do_wait")})
    _fake_proc(proc, 200, 100, b"qemu-system-x86", {200: ("S (sleeping)", "do_sys_poll"),
                                                     201: ("D (disk sleep)", "folio_wait_bit_common"),
                                                     202: ("S (sleeping)", "request_wait_answer"),
                                                     203: ("S (sleeping)", "request_wait_answer")})
    _fake_proc(proc, 300, 200, b"we\xffird) x", {300: ("R (running)", "0")})
    _fake_proc(proc, 400, 300, b"nbdkit", {400: ("S (sleeping)", "futex_wait_queue")})
    _fake_proc(proc, 500, 1, b"other", {500: ("D (disk sleep)", "io_schedule")})    # not below the root
    report, summary = host_tasks(100, proc)
    assert summary == ("host threads in D or waiting for a FUSE/NBD server: qemu-system-x86/qemu-system-x86 [D] "
                       "(folio_wait_bit_common) x1, qemu-system-x86/qemu-system-x86 [S] (request_wait_answer) x2")
    assert [ln.split(",")[0] for ln in report.splitlines() if ln.startswith("===")] == [
        "=== pid 200 (qemu-system-x86)", "=== pid 300 (we\ufffdird) x)", "=== pid 400 (nbdkit)"]
    assert "=== pid 200 (qemu-system-x86), parent 100" in report and "=== pid 400 (nbdkit), parent 300" in report
    assert "--- tid 201 qemu-system-x86 [D (disk sleep)] wchan=folio_wait_bit_common syscall=0" in report
    assert "    [<0>] folio_wait_bit_common+0x1/0x2" in report and "other" not in report


def test_a_host_report_never_fails_or_outlasts_the_timeout(tmp_path: Path, monkeypatch) -> None:
    write_host_report(tmp_path / "gone" / HOST_TASKS)        # an unwritable place: no exception
    def refused() -> tuple[str, str]:
        raise PermissionError("no /proc")

    def stuck() -> tuple[str, str]:
        time.sleep(5)
        return "", ""

    monkeypatch.setattr(hosttasks, "host_tasks", refused)
    write_host_report(tmp_path / "a.txt")
    assert (tmp_path / "a.txt").read_text().startswith("host report failed: PermissionError('no /proc')")
    monkeypatch.setattr(hosttasks, "host_tasks", stuck)
    started = time.monotonic()
    write_host_report(tmp_path / "b.txt", timeout_s=0.2)
    assert time.monotonic() - started < 2
    assert (tmp_path / "b.txt").read_text().startswith("host report not done within 0.2 s")


def test_sizes() -> None:
    from smartio.units import parse_size

    assert parse_size("--disk-size", "1G") == 1 << 30 and parse_size("--disk-size", "512m") == 512 << 20
    assert parse_size("--disk-size", "4096") == 4096 and parse_size("--disk-size", "1.5GiB") == 3 << 29
    with pytest.raises(UsageError, match="--disk-size 1x"):
        parse_size("--disk-size", "1x")


def test_artifacts_dir_is_never_reused(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "console.log").write_text("old run")
    with pytest.raises(UsageError, match="--artifacts"):
        vm.new_artifacts_dir(tmp_path / "used")
    monkeypatch.chdir(tmp_path)
    first, second = vm.new_artifacts_dir(None), vm.new_artifacts_dir(None)
    assert first != second and first.parent == second.parent == tmp_path / "artifacts"


@pytest.mark.parametrize("argv, flag", [
    (["--disks", "-1", "--", "true"], "--disks -1"),
    (["--disk-size", "100K", "--", "true"], "--disk-size"),
    (["--module", "/nonexistent.ko", "--", "true"], "--module /nonexistent.ko"),
    (["--timeout", "0", "--", "true"], "--timeout 0"),
    (["--memory", "1M", "--", "true"], "--memory 1M"),
    (["--kernel", "5.x", "--", "true"], "--kernel 5.x"),
    (["--kernel", "amd64", "--flavour", "debug", "--", "true"], "--kernel amd64"),
    ([], "COMMAND"),
])
def test_bad_input_exits_2_naming_the_flag(argv: list[str], flag: str, capsys) -> None:
    assert cli_main(["testbed", "run", *argv]) == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("flags, probe_rc, expected", [(False, 0, "tcg"), (True, 0, "kvm"), (True, None, "tcg")])
def test_kvm_only_after_a_successful_boot_probe(flags: bool, probe_rc: int | None, expected: str,
                                                monkeypatch) -> None:
    probes = []

    def fake_run(command, spec, **kw):
        probes.append(spec.accel)
        return vm.VmResult(rc=probe_rc, artifacts_dir=Path("/x"), console_log=Path("/x/c"), output_log=Path("/x/o"),
                           out_dir=Path("/x/out"), kernel="k", accel="kvm", duration_s=1, setup_error=None)

    monkeypatch.delenv("SMARTIO_ACCEL", raising=False)
    monkeypatch.setattr(vm, "_kvm_verdict", None)
    monkeypatch.setattr(vm, "run", fake_run)
    monkeypatch.setattr(qemu, "kvm_flags_present", lambda: flags)
    monkeypatch.setattr(vm.os, "access", lambda path, mode: True)
    assert vm.choose_accel() == expected
    assert probes == (["kvm"] if flags else [])
    assert vm.choose_accel() == expected and len(probes) <= 1  # probed once per process


def test_accel_can_be_forced(monkeypatch) -> None:
    monkeypatch.setenv("SMARTIO_ACCEL", "tcg")
    assert vm.choose_accel() == "tcg"
    monkeypatch.setenv("SMARTIO_ACCEL", "hvf")
    with pytest.raises(UsageError, match="SMARTIO_ACCEL hvf"):
        vm.choose_accel()


def test_lockdep_and_atomic_sleep_reports_are_kernel_problems() -> None:
    """The debug kernel's lockdep reports are not WARN()s; they must fail a run all the same."""
    log = ("[    3.1] WARNING: possible circular locking dependency detected\n"
           "[    3.2] WARNING: inconsistent lock state\n"
           "[    3.3] WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected\n"
           "[    3.4] BUG: sleeping function called from invalid context at mm/slab.h:723\n"
           "[    3.5] BUG: KASAN: slab-use-after-free in sio_probe_folio+0x2a/0x90\n"
           "[    0.1] ACPI: PM-Timer IO Port: 0x608 WARNING: none\n")
    assert find_kernel_problems(log) == [
        "WARNING: possible circular locking dependency detected", "WARNING: inconsistent lock state",
        "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected",
        "BUG: sleeping function called from invalid context at mm/slab.h:723",
        "BUG: KASAN: slab-use-after-free in sio_probe_folio+0x2a/0x90"]


def test_debug_kernel_config_is_checked_option_by_option(tmp_path: Path) -> None:
    """An option the configuration could not take (a dependency missing) is named, with what it became."""
    frag = tmp_path / "debug.config"
    frag.write_text("# comment\nCONFIG_KASAN=y\nCONFIG_SCSI_DEBUG=m\nCONFIG_LOCALVERSION=\"-x\"\n"
                    "# CONFIG_FOO is not set\n")
    wanted = debugkernel.wanted_options(frag)
    assert wanted == {"CONFIG_KASAN": "y", "CONFIG_SCSI_DEBUG": "m", "CONFIG_LOCALVERSION": '"-x"'}
    config = 'CONFIG_KASAN=y\nCONFIG_SCSI_DEBUG=y\n# CONFIG_LOCALVERSION_AUTO is not set\nCONFIG_LOCALVERSION="-x"\n'
    assert debugkernel.missing_options(config, wanted) == ["CONFIG_SCSI_DEBUG=m (got y)"]
    assert debugkernel.missing_options("", {"CONFIG_KASAN": "y"}) == ["CONFIG_KASAN=y (got not set)"]


def test_the_repository_debug_config_asks_for_the_checks_and_the_testbed_needs() -> None:
    wanted = debugkernel.wanted_options(debugkernel.CONFIG_FRAGMENT)
    for opt in ("CONFIG_PROVE_LOCKING", "CONFIG_KASAN", "CONFIG_KPROBES", "CONFIG_DEBUG_ATOMIC_SLEEP",
                "CONFIG_VIRTIO_BLK", "CONFIG_VIRTIO_FS", "CONFIG_OVERLAY_FS", "CONFIG_EXT4_FS", "CONFIG_ACPI",
                "CONFIG_MQ_IOSCHED_KYBER", "CONFIG_IOSCHED_BFQ", "CONFIG_BLK_DEBUG_FS", "CONFIG_MODULE_UNLOAD"):
        assert wanted.get(opt) == "y", opt
    assert wanted["CONFIG_LOCALVERSION"] == f'"{kernelrelease.LOCALVERSION}"'


def test_debug_flavour_is_the_cloud_version_built_here(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SMARTIO_CACHE", str(tmp_path))
    cloud = kernelpkg.KernelRelease("6.1.0-56", "6.1.192-2")
    monkeypatch.setattr(kernelpkg, "_run", lambda cmd, cwd=None: (_ for _ in ()).throw(SmartioError("offline")))
    (cloud.dir).mkdir(parents=True)
    (cloud.dir / ".complete-image").touch()
    rel = kernelpkg.resolve(flavour=kernelpkg.DEBUG)
    assert (rel.abi, rel.version, rel.flavour) == ("6.1.0-56", "6.1.192-2", "debug")
    assert rel.uname == "6.1.192-smartio-debug"
    assert rel.dir == tmp_path / "kernel" / "6.1.0-56-6.1.192-2-debug"
    assert rel.vmlinuz == rel.dir / "image" / "boot" / "vmlinuz-6.1.192-smartio-debug"
    assert rel.build_dir == rel.dir / "src" / "linux-source-6.1"
    assert guest.resolve_modules(None, tmp_path, kernelpkg.DEBUG) == []   # not built: nothing to load
    ko = tmp_path / guest.DEFAULT_MODULE_DEBUG
    ko.parent.mkdir(parents=True)
    ko.touch()
    assert guest.resolve_modules(None, tmp_path, kernelpkg.DEBUG) == [ko]



def test_612s_debug_kernel_is_built_from_its_own_source_and_loads_its_own_module(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SMARTIO_CACHE", str(tmp_path))
    rel = kernelpkg.KernelRelease("6.12.118+deb13", "6.12.118-1", kernelpkg.DEBUG, "6.12")
    assert rel.uname == "6.12.118-smartio-debug"
    assert rel.build_dir == rel.dir / "src" / "linux-source-6.12"
    assert guest.default_module(tmp_path, kernelpkg.DEBUG, "6.12") == tmp_path / "kernel/debug-6.12/smartio-iosched.ko"
    assert guest.default_module(tmp_path, kernelpkg.DEBUG, "6.1") == tmp_path / guest.DEFAULT_MODULE_DEBUG
    with pytest.raises(SmartioError, match="built for 6.1 and 6.12 only, not newest"):
        kernelpkg.resolve(kernel="newest", flavour=kernelpkg.DEBUG, offline=True)


def test_a_series_own_debug_options_are_added_to_the_fragment() -> None:
    rel = lambda kernel, version: kernelpkg.KernelRelease("x", version, kernelpkg.DEBUG, kernel)  # noqa: E731
    assert debugkernel.fragments(rel("6.1", "6.1.192-3")) == [debugkernel.CONFIG_FRAGMENT]
    own = debugkernel.CONFIG_FRAGMENT.with_name("debug-6.12.config")
    assert debugkernel.fragments(rel("6.12", "6.12.118-1")) == [debugkernel.CONFIG_FRAGMENT, own]
    assert debugkernel.wanted_options(own)["CONFIG_FAULT_INJECTION_CONFIGFS"] == "y"

def madison(*versions: str) -> str:
    return "".join(f"linux-kbuild-6.1 |  {v} | http://deb.debian.org/debian bookworm/main amd64 Packages\n"
                   for v in versions)


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg --compare-versions")
def test_kbuild_may_be_a_debian_revision_ahead_of_the_headers(monkeypatch) -> None:
    """Debian's archive keeps only its newest linux-kbuild-6.1: on 2026-11-29 it offered 6.1.192-3 while the image
    and headers were still 6.1.192-2, and `apt-get download linux-kbuild-6.1=6.1.192-2` failed on every new machine."""
    rel = kernelpkg.KernelRelease("6.1.0-56", "6.1.192-2")
    offered: list[str] = []
    monkeypatch.setattr(kernelpkg, "_run", lambda cmd, cwd=None: madison(*offered))
    offered[:] = ["6.1.192-3", "6.1.176-1"]
    assert kernelpkg.kbuild_version(rel) == "6.1.192-3"
    offered[:] = ["6.1.192-4", "6.1.192-2", "6.1.176-1"]
    assert kernelpkg.kbuild_version(rel) == "6.1.192-2"     # its own version while apt still has it
    offered[:] = ["6.1.192-10", "6.1.192-3"]
    assert kernelpkg.kbuild_version(rel) == "6.1.192-3"     # the oldest newer one, in Debian's version order
    offered[:] = ["6.1.176-1", "6.1.195-1"]                 # an older kbuild, or another upstream release: refused
    with pytest.raises(SmartioError, match=r"no linux-kbuild-6.1 >= 6.1.192-2 .*offered: 6.1.176-1, 6.1.195-1"):
        kernelpkg.kbuild_version(rel)


STALE_INT3 = Path(__file__).parent / "data" / "testbed" / "tcg-stale-int3-console.log"


def test_emulator_stall_is_told_from_a_guest_hang() -> None:
    """CI, 2026-11-26: vCPU 1 stuck on a stale TCG translation of a text_poke breakpoint (the console of that run,
    up to RCU's second stall report). A guest that hangs by itself (same frozen backtraces, no int3 handler) and a
    console with one report only are not called the emulator's fault."""
    console = STALE_INT3.read_text()
    why = emulator_stall(console)
    assert why is not None
    assert why.startswith("vCPU 1 stopped at guest time 7.6 s and was still there at 116.5 s, trapping at "
                          "__schedule+0x1bc/0xa00"), why
    # What the guest reported is all the stall's doing (RCU stalls, soft lockups), so it is not held against it.
    problems = find_kernel_problems(console)
    assert problems and all(STALL_REPORT_RE.search(p) for p in problems), problems
    # The NMI may land anywhere in the breakpoint's path; both backtraces may be in it.
    callee = console.replace("RIP: 0010:exc_int3+0xe/0x120", "RIP: 0010:poke_int3_handler+0x10/0x120")
    assert "trapping at __schedule+0x1bc/0xa00" in (emulator_stall(callee) or "")
    second = console.index("[    7.635810] NMI backtrace for cpu 1", console.index("[   91.647586] rcu: INFO"))
    first = console.index("[    7.635810] NMI backtrace for cpu 1")
    both = console[:first] + console[second:console.index("</TASK>", second)] + console[console.index(
        "</TASK>", first):]
    assert "trapping at __schedule+0x1bd/0xa00" in (emulator_stall(both) or ""), emulator_stall(both)
    # The same frozen vCPU without a breakpoint in its path: a guest that hangs by itself.
    spin = console.replace("exc_int3", "native_queued_spin_lock_slowpath")
    assert emulator_stall(spin) is None
    first_report = console[:console.index("[   91.647586] rcu: INFO")]
    assert emulator_stall(first_report) is None
    # A backtrace whose clock kept up with the rest is a CPU that runs, whatever its RIP.
    live = console.replace("[    7.635810]", "[  116.000000]")
    assert emulator_stall(live) is None
    assert emulator_stall("") is None


def test_supervise_stops_when_the_watch_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm, "WATCH_INTERVAL_S", 0.05)
    calls = []

    def watch() -> str | None:
        calls.append(1)
        return "stalled" if len(calls) >= 3 else None

    started = time.monotonic()
    code, timed_out, stopped = vm.supervise(["sleep", "30"], timeout=20, parser=MarkerStream(NONCE),
                                            output_log=tmp_path / "o", qemu_log=tmp_path / "q", stream=None,
                                            host_report=tmp_path / HOST_TASKS, watch=watch)
    assert (code, timed_out, stopped) == (None, False, "stalled")
    assert len(calls) == 3 and time.monotonic() - started < 5
    assert not (tmp_path / HOST_TASKS).exists()       # not a timeout: no host report


BOOT_HANG = Path(__file__).parent / "data" / "testbed" / "boot-hang-console.log"


@pytest.mark.parametrize("sent", ["", "INIT", "INIT START"])
def test_a_boot_whose_command_never_starts_is_stopped_at_the_boot_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: str) -> None:
    """CI, 2026-11-27: the guest went silent after SMP bring-up (that console, in full; it shows warnings only, so
    the hang may be in the kernel or in PID 1's setup) and the run waited out its 360 s timeout. Without PID 1's
    START marker by BOOT_DEADLINE_S the watch stops it, says how far it got and where the console ended, and
    describes the host as a timeout would; a command that started is left to run, however long it takes."""
    monkeypatch.setattr(vm, "WATCH_INTERVAL_S", 0.05)
    monkeypatch.setattr("smartio.testbed.console.BOOT_DEADLINE_S", 1.0)
    console = tmp_path / "console.log"
    console.write_text(BOOT_HANG.read_text())
    markers = "".join(f"printf '\\nVMTEST_{m}=1 {NONCE}\\n'; " for m in sent.split())
    ms = MarkerStream(NONCE)
    watch = ConsoleWatch(console, ms, tmp_path / HOST_TASKS)
    started = time.monotonic()
    code, timed_out, stopped = vm.supervise(["sh", "-c", f"{markers}exec sleep 6"], timeout=20, parser=ms,
                                            output_log=tmp_path / "o", qemu_log=tmp_path / "q", stream=None,
                                            watch=watch)
    assert (tmp_path / "o").read_bytes() == b""         # the markers are not the command's output
    if "START" in sent:
        assert (code, timed_out, stopped, watch.kind) == (0, False, None, None)
        assert not (tmp_path / HOST_TASKS).exists()
        return
    assert code is None and not timed_out and time.monotonic() - started < 5.5 and watch.kind == "boot"
    stage = "PID 1's setup (modules, shares) had not finished" if sent else "the guest kernel had not started PID 1"
    assert stopped is not None and stopped.startswith(f"{stage} after "), stopped
    assert stopped.endswith("so the command never started (its console's last line: '[    0.575180] mtrr: your "
                            "CPUs had inconsistent MTRRdefType settings')"), stopped
    assert (tmp_path / HOST_TASKS).read_text().startswith("no host thread in D")


def test_boot_stall_waits_for_the_deadline_and_names_an_empty_console() -> None:
    ms = MarkerStream(NONCE)
    assert boot_stall("", ms, BOOT_DEADLINE_S - 1) is None
    assert boot_stall("", ms, BOOT_DEADLINE_S) == (
        f"the guest kernel had not started PID 1 after {BOOT_DEADLINE_S:.0f} s, so the command never started "
        "(nothing on its console)")
    ms.feed(f"\nVMTEST_START=1 {NONCE}\n".encode())
    assert boot_stall("", ms, 10 * BOOT_DEADLINE_S) is None


def test_pid_1_marks_its_start_and_the_commands_and_nothing_in_a_shell() -> None:
    """INIT comes once the tty and the nonce are there, before the first insmod or mount that die()s on failure;
    START right before the command, in run mode only."""
    script = initramfs.INIT_SCRIPT
    init = script.index("marker INIT 1")
    assert script.index("mount -t devtmpfs") < init and script.index("smartio.nonce=*)") < init
    assert script.index("marker() {") < init < min(script.index("insmod"), script.index("mount -t virtiofs"))
    assert '[ "$mode" = shell ] || marker INIT 1' in script
    start = script.index("marker START 1")
    assert script.index('if [ "$mode" = shell ]; then') < script.index("else", script.index(
        'if [ "$mode" = shell ]; then')) < start < script.index("command.sh\" </dev/null")


def test_a_boot_stall_is_not_an_emulator_stall(tmp_path: Path) -> None:
    """The guest's own reports stay counted, and the failure says what stopped it."""
    r = vm.VmResult(rc=None, artifacts_dir=tmp_path, console_log=tmp_path / "c", output_log=tmp_path / "o",
                    out_dir=tmp_path, kernel="k", accel="tcg", duration_s=150, boot_stall="PID 1 had not started")
    assert r.stopped_early == "PID 1 had not started" and r.emulator_stall is None
    assert r.failure == f"the VM was stopped early: PID 1 had not started; see {tmp_path / 'c'}"


def fake_boot_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """run() up to the boot, without QEMU, a kernel or root."""
    monkeypatch.setattr(vm.os, "geteuid", lambda: 0)
    monkeypatch.setattr(vm.qemu, "find_qemu", lambda: "qemu-system-x86_64")
    monkeypatch.setattr(vm.kernelpkg, "resolve", lambda **kw: None)
    monkeypatch.setattr(vm.kernelpkg, "fetch_image", lambda _: FakeRelease())
    monkeypatch.setattr(vm, "choose_accel", lambda: "tcg")
    monkeypatch.setattr(vm.disks_mod, "choose_transport", lambda: "fuse")
    monkeypatch.setattr(guest, "guest_env", lambda **kw: {"A": "1"})


@dataclasses.dataclass
class FakeRelease:
    uname: str = "6.1.0-test"
    version: str = "6.1.0"
    kernel: str = "6.1"


def test_run_boots_again_after_an_emulator_stall_and_keeps_the_first_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake_boot_setup(monkeypatch, tmp_path)
    boots: list[Path] = []

    def boot(command, spec, prep, *, retried, **kw) -> vm.VmResult:
        art, out_dir = prep.art, prep.out_dir
        boots.append(art)
        (art / "console.log").write_text(f"boot {len(boots)}\n")
        (out_dir / "result").write_text(f"boot {len(boots)}\n")
        stall = "vCPU 1 stopped" if len(boots) <= stalls else None
        return vm.VmResult(rc=None if stall and not finished else 0, artifacts_dir=art, console_log=art / "console.log",
                           output_log=art / "output.log", out_dir=out_dir, kernel="k", accel="tcg", duration_s=1,
                           emulator_stall=stall, retried=list(retried))

    monkeypatch.setattr(vm, "_boot", boot)
    stalls, finished = 1, False
    r = vm.run(["true"], GuestSpec(profile=None, modules=[], artifacts=tmp_path / "a"), stream=None)
    assert len(boots) == 2 and r.failure is None and r.rc == 0
    assert r.retried == [f"vCPU 1 stopped (files in {tmp_path / 'a' / 'stalled-1'})"]
    assert (tmp_path / "a" / "stalled-1" / "console.log").read_text() == "boot 1\n"
    assert (tmp_path / "a" / "stalled-1" / "out" / "result").read_text() == "boot 1\n"
    assert (tmp_path / "a" / "out" / "result").read_text() == "boot 2\n"     # the guest's output is this boot's
    assert (tmp_path / "a" / "command").exists()
    assert "booting again (attempt 2 of 2)" in capsys.readouterr().err

    # Stalled every time: after `retries` boots again it fails, and says so.
    boots.clear()
    stalls = 9
    r = vm.run(["true"], GuestSpec(profile=None, modules=[], artifacts=tmp_path / "b", retries=2), stream=None)
    assert len(boots) == 3 and len(r.retried) == 2
    assert r.failure is not None and r.failure.startswith(
        "the VM was stopped early: vCPU 1 stopped (as in 2 earlier boot(s)); see ")
    boots.clear()
    r = vm.run(["true"], GuestSpec(profile=None, modules=[], artifacts=tmp_path / "c", retries=0), stream=None)
    assert len(boots) == 1 and r.failure is not None
    # Stalled after the command had finished (its exit code came): kept, not booted again, not a failure.
    boots.clear()
    stalls, finished = 9, True
    r = vm.run(["true"], GuestSpec(profile=None, modules=[], artifacts=tmp_path / "e"), stream=None)
    assert len(boots) == 1 and r.rc == 0 and r.failure is None and r.emulator_stall
    with pytest.raises(UsageError, match="--retries"):
        GuestSpec(profile=None, modules=[], artifacts=tmp_path / "d", retries=-1)


def test_an_interrupted_boot_leaves_its_run_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C or SIGTERM while the guest runs: QEMU is stopped, run.json still says what ran (kernel, how it
    booted, for how long, `interrupted`), and the interrupt goes on to the caller."""
    fake_boot_setup(monkeypatch, tmp_path)
    monkeypatch.setattr(vm, "kernelpkg", type("K", (), {"resolve": staticmethod(lambda **kw: None),
                                                       "fetch_image": staticmethod(lambda _: BootableRelease()),
                                                       "FLAVOUR": "cloud-amd64"}))
    monkeypatch.setattr(vm.initramfs, "build", lambda modules_dir, path: path)
    monkeypatch.setattr(vm.qemu, "virtiofsd", lambda share, log: contextlib.nullcontext())
    monkeypatch.setattr(vm.disks_mod, "serve", lambda *a: contextlib.nullcontext([]))
    # QEMU itself: a process whose wait is interrupted, as by Ctrl-C; supervise() must stop it.
    stopped: list[subprocess.Popen] = []
    monkeypatch.setattr(vm.qemu, "command_line", lambda cfg, qemu_bin: ["sleep", "30"])

    def stop(proc: subprocess.Popen) -> None:
        stopped.append(proc)
        proc.kill()
        proc.wait()

    monkeypatch.setattr(vm.qemu, "stop", stop)
    real_wait = subprocess.Popen.wait

    def wait(self, timeout=None):
        if self.args == ["sleep", "30"] and timeout is not None:
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        vm.run(["true"], GuestSpec(profile=None, disks=0, modules=[], artifacts=tmp_path / "a"), stream=None,
               quiet=True)
    assert len(stopped) == 1 and stopped[0].returncode is not None       # one boot, and QEMU is gone
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.name.startswith("run.json")) == ["run.json"]
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["interrupted"] is True and run["rc"] is None and run["kernel"] == "6.1.0-test"
    assert run["cpus"] == 2 and run["pid1_after_s"] is None and run["boot_stall"] is None
    assert run["failure"].startswith("interrupted (Ctrl-C or SIGTERM) before the command finished; see "), run


@dataclasses.dataclass
class BootableRelease(FakeRelease):
    modules_dir: Path = Path("/nonexistent/modules")
    vmlinuz: Path = Path("/nonexistent/vmlinuz")
    system_map: Path | None = None
    dir: Path = Path("/nonexistent/kernel")


def test_releases_from_debian_13_on_have_the_upstream_version_in_their_abi() -> None:
    old = kernelpkg.KernelRelease("6.1.0-57", "6.1.192-3")
    assert (old.series, old.source_package, old.kbuild_package) == ("6.1", "linux-source-6.1", "linux-kbuild-6.1")
    rel = kernelpkg.KernelRelease("6.12.118+deb13", "6.12.118-1", kernelpkg.FLAVOUR, "6.12")
    assert (rel.upstream, rel.series, rel.source_package) == ("6.12.118", "6.12", "linux-source-6.12")
    assert rel.kbuild_package == "linux-kbuild-6.12.118+deb13"
    assert rel.uname == "6.12.118+deb13-cloud-amd64"
    arm = kernelpkg.KernelRelease("7.2.13+deb14", "7.2.13-1", kernelrelease.ARM64, "newest")
    assert (arm.uname, arm.arch, arm.series) == ("7.2.13+deb14-arm64", "arm64", "7.2")
    assert arm.private_headers == kernelpkg.KernelRelease("7.2.13+deb14", "7.2.13-1").private_headers


def test_resolve_reads_the_suites_meta_package_and_falls_back_to_the_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SMARTIO_CACHE", str(tmp_path))
    monkeypatch.delenv("SMARTIO_OFFLINE", raising=False)
    monkeypatch.setattr(kernelpkg, "_apt", lambda kernel, arch, tool: [tool, f"-o{kernel}"])
    answers = {"depends": "linux-image-cloud-amd64\n  Depends: linux-base-cloud-amd64\n"
                          "  Depends: linux-image-7.2.13+deb14-cloud-amd64\n",
               "policy": "linux-image-7.2.13+deb14-cloud-amd64:\n  Installed: (none)\n  Candidate: 7.2.13-1\n"}
    seen: list[list[str]] = []

    def apt(cmd: list[str], cwd=None) -> str:
        seen.append(cmd)
        return answers[cmd[2]]
    monkeypatch.setattr(kernelpkg, "_run", apt)
    rel = kernelpkg.resolve(kernel="newest")
    assert (rel.abi, rel.version, rel.kernel) == ("7.2.13+deb14", "7.2.13-1", "newest")
    assert seen[0][:2] == ["apt-cache", "-onewest"]
    assert kernelpkg.resolve(kernel="newest", flavour=kernelrelease.ARM64).uname == "7.2.13+deb14-arm64"
    with pytest.raises(SmartioError, match="is Linux 7.2, not 6.12"):     # trixie's meta package must be 6.12
        kernelpkg.resolve(kernel="6.12")
    # sid moved on, or the machine is offline: the newest release fetched before, as release.json records it
    rel.dir.mkdir(parents=True)
    (rel.dir / ".complete-headers").touch()
    kernelpkg._record(rel)
    monkeypatch.setattr(kernelpkg, "_run", lambda cmd, cwd=None: (_ for _ in ()).throw(SmartioError("offline")))
    assert kernelpkg.resolve(kernel="newest") == rel
    assert kernelpkg.resolve(kernel="newest", offline=True) == rel
    with pytest.raises(SmartioError, match="offline"):
        kernelpkg.resolve(kernel="6.12")


def test_the_matrix_cells_and_their_builds() -> None:
    from smartio.testbed import modbuild
    assert [c.name for c in modbuild.cells()] == ["6.1-amd64", "6.1-arm64", "6.12-amd64", "6.12-arm64",
                                                  "newest-amd64", "newest-arm64"]
    assert [c.chroot for c in modbuild.cells(["6.1", "6.12", "newest"], ["x86-64"])] == [None, "trixie", "sid"]
    with pytest.raises(SmartioError, match="unknown architecture"):
        modbuild.cells(arches=["riscv64"])
    rel = kernelpkg.KernelRelease("6.12.118+deb13", "6.12.118-1", kernelrelease.ARM64, "6.12")
    cmd = modbuild.make_command(rel, Path("/m"))
    assert cmd[:4] == ["make", "-C", str(rel.build_dir), "M=/m"] and "W=1" in cmd and "KCFLAGS=-Werror" in cmd
    assert "ARCH=arm64" in cmd and "CROSS_COMPILE=aarch64-linux-gnu-" in cmd and cmd[-1] == "modules"

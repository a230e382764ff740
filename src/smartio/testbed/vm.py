"""Run a command as root in a Linux guest under QEMU (Debian's 6.1 kernel, 6.12 or the newest: GuestSpec.kernel)
and collect what it leaves behind.

    result = smartio.testbed.vm.run(["uname", "-r"], GuestSpec(profile="s5-emmc", disks=1))
    result.check()                       # raises SmartioError on timeout, setup failure or a kernel problem
    result.rc, result.out_dir            # the command's exit code; what it wrote to $SMARTIO_OUT

The guest sees the host's filesystem at the same paths (read-only, with its own writes kept in guest RAM), the
repository writable, and $SMARTIO_OUT (/smartio/out) as <artifacts>/out on the host. Its disks are /dev/vda,
/dev/vdb, ... (listed in $SMARTIO_DISKS). The artifact directory also holds the command, the kernel console log,
the guest's dmesg, the command's output, the exit code and run.json (what ran where, for the record).

This module is the boot loop: run() makes the artifacts and boots (again after a stall), _boot() serves the disks
and shares and runs QEMU to its end (supervise()). What the guest is: smartio.testbed.guest (GuestSpec, its command
line and environment); what its console says: smartio.testbed.console; what a run left: smartio.testbed.result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Literal

from smartio.errors import MissingToolError, NeedsRootError, SmartioError, UsageError
from smartio.flashdev import Profile
from smartio.outputs import write_whole
from smartio.testbed import disks as disks_mod, guest, hostload, initramfs, kernelpkg, qemu, vcpus
from smartio.testbed.console import STALL_REPORT_RE, ConsoleWatch, MarkerStream, find_kernel_problems
from smartio.testbed.guest import GuestSpec
from smartio.testbed.hosttasks import HOST_TASKS, write_host_report
from smartio.testbed.result import VmResult
from smartio.testbed.vcpus import VCPUS

HOST_LOAD = hostload.FILE      # other work's share of the host's CPUs while the VM ran (smartio.testbed.hostload)
WATCH_INTERVAL_S = 5.0    # how often supervise() looks at the console for a stalled vCPU
DEFAULT_GUEST = GuestSpec()


def new_artifacts_dir(requested: Path | None) -> Path:
    """The run's artifact directory: `requested` if new or empty, else ./artifacts/<timestamp>[-n]."""
    if requested is not None:
        if requested.exists() and (not requested.is_dir() or any(requested.iterdir())):
            raise UsageError("--artifacts", requested, "exists and is not empty; pick a new directory")
        requested.mkdir(parents=True, exist_ok=True)
        return requested.resolve()
    base = Path.cwd() / "artifacts"
    base.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise SmartioError(f"cannot create a new artifact directory under {base}")


def unavailable_reason() -> str | None:
    """Why the testbed cannot run on this host (the reason tests give when they skip), or None."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"needs an x86_64 Linux host, not {sys.platform}/{platform.machine()}"
    if os.geteuid() != 0:
        return "needs root (virtiofsd, which shares host directories with the guest, runs as root)"
    try:
        qemu.find_qemu()
        qemu.find_virtiofsd()
        busybox = initramfs.find_busybox()
        if initramfs.has_interpreter(busybox.read_bytes()):
            return f"{busybox} is dynamically linked; install busybox-static"
        if shutil.which("nbdkit") is None:
            raise MissingToolError("nbdkit", "install Debian's nbdkit")
    except MissingToolError as e:
        return str(e)
    return None


_kvm_verdict: str | None = None


def choose_accel() -> str:
    """kvm only if the CPU has vmx/svm, /dev/kvm opens and a guest really boots under it; else tcg.

    SMARTIO_ACCEL=tcg|kvm forces the choice. The boot probe runs once per process.
    """
    global _kvm_verdict
    forced = os.environ.get("SMARTIO_ACCEL")
    if forced:
        if forced not in ("tcg", "kvm"):
            raise UsageError("SMARTIO_ACCEL", forced, "must be tcg or kvm")
        return forced
    if _kvm_verdict is None:
        _kvm_verdict = "tcg"
        if qemu.kvm_flags_present() and os.access("/dev/kvm", os.R_OK | os.W_OK):
            with tempfile.TemporaryDirectory(prefix="smartio-kvm-probe-") as tmp:
                probe = run(["true"], GuestSpec(disks=0, modules=[], timeout=60, artifacts=Path(tmp) / "a",
                                                accel="kvm"), stream=None, quiet=True)
                if probe.rc == 0 and probe.failure is None:
                    _kvm_verdict = "kvm"
    return _kvm_verdict


def _pump(src: IO[bytes], parser: MarkerStream, log: IO[bytes], stream: IO[bytes] | None) -> None:
    """Copy the command's output from QEMU to the log and the host's stdout as it arrives.

    It must keep reading to the end even if stdout goes away (`| head`), or the guest would block on its serial
    port until the timeout.
    """
    fd = src.fileno()
    while True:
        chunk = os.read(fd, 65536)
        data = parser.feed(chunk) if chunk else parser.finish()
        log.write(data)
        if stream is not None and data:
            try:
                stream.write(data)
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                stream = None
        if not chunk:
            return


def supervise(argv: list[str], *, timeout: float | None, parser: MarkerStream, output_log: Path, qemu_log: Path,
              stream: IO[bytes] | None, interactive: bool = False, host_report: Path | None = None,
              watch: Callable[[], str | None] | None = None,
              at_timeout: Callable[[], None] | None = None) -> tuple[int | None, bool, str | None]:
    """Run QEMU (argv) to its end or the timeout, streaming the command's output; returns (exit, timed_out,
    stopped). `watch` is asked every WATCH_INTERVAL_S whether the run is beyond saving; if it says why, QEMU is
    stopped then and the reason returned as `stopped`. On a timeout the host's processes are described in
    `host_report` (host_tasks) and `at_timeout` is called, before QEMU is stopped."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with open(qemu_log, "wb") as qlog, open(output_log, "wb") as olog:
        if interactive:
            proc = subprocess.Popen(argv, stderr=qlog, preexec_fn=qemu.die_with_parent)
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=qlog,
                                    preexec_fn=qemu.die_with_parent)
        pump = None
        try:
            if not interactive:
                pump = threading.Thread(target=_pump, args=(proc.stdout, parser, olog, stream), daemon=True)
                pump.start()
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if watch is not None:
                    wait = WATCH_INTERVAL_S if wait is None else min(wait, WATCH_INTERVAL_S)
                try:
                    return proc.wait(wait), False, None
                except subprocess.TimeoutExpired:
                    pass
                if watch is not None and (why := watch()):
                    return None, False, why
                if deadline is not None and time.monotonic() >= deadline:
                    if host_report is not None:
                        write_host_report(host_report)
                    if at_timeout is not None:
                        at_timeout()
                    return None, True, None
        finally:
            qemu.stop(proc)
            if pump is not None:
                pump.join(10)


def _set_aside(art: Path, attempt: int) -> Path:
    """Moves what a stopped boot left in `art` (all but the command's description) to art/stalled-<attempt>/."""
    keep = {"command", "command.sh", "modules"}
    dest = art / f"stalled-{attempt}"
    dest.mkdir()
    for path in list(art.iterdir()):
        if path.name not in keep and not path.name.startswith("stalled-"):
            path.rename(dest / path.name)
    (art / "out").mkdir()
    return dest


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What run() made of a GuestSpec on this host before the first boot; every boot of the run uses the same."""

    art: Path                   # the artifacts directory (made)
    out_dir: Path               # <artifacts>/out, the host side of $SMARTIO_OUT
    cwd: Path                   # where the command runs, resolved
    nonce: str                  # this run's marker lines carry it (MarkerStream)
    env: dict[str, str]         # the command's environment in the guest (guest.guest_env)
    append: str                 # the guest kernel's command line (guest.kernel_cmdline)
    prof: Profile | None        # the spec's profile, loaded
    mods: list[Path]            # the modules to insmod, resolved (guest.resolve_modules)
    accel: str                  # tcg or kvm
    transport: str              # how the disks reach QEMU (disks.choose_transport)
    repo: Path | None           # the source checkout, shared writable with the guest
    rel: kernelpkg.KernelRelease
    qemu_bin: str


def run(command: Sequence[str], spec: GuestSpec = DEFAULT_GUEST, *, interactive: bool = False,
        stream: IO[bytes] | None | Literal["stdout"] = "stdout", quiet: bool = False,
        cwd: Path | None = None) -> VmResult:
    """Boot the guest `spec` describes, run `command` as root in it, power off; see the module docstring.

    interactive=True connects the command to this terminal (for a shell) and ignores `stream` and spec.retries.
    stream: where the command's output goes live (default this process's stdout; None: only output.log).
    quiet: no line on stderr about what boots (nor the host load warning).
    cwd: where the command runs in the guest (default this process's working directory).
    The stopped boot's files of a retry (spec.retries) are kept in <artifacts>/stalled-<n>/.
    """
    if stream == "stdout":
        stream = sys.stdout.buffer
    if not command:
        raise UsageError(None, "COMMAND", "missing: give the command to run after --")
    booted = spec.boot
    if os.geteuid() != 0:   # before fetching the kernel (132 MB) or making the artifacts directory
        raise NeedsRootError("booting the testbed (virtiofsd shares host directories with the guest)")
    prof = spec.device()
    repo = guest.repo_root()
    qemu_bin = qemu.find_qemu()
    rel = kernelpkg.resolve(flavour=spec.flavour, kernel=spec.kernel)
    mods = guest.resolve_modules(spec.modules, repo, spec.flavour, rel)
    rel = kernelpkg.fetch_image(rel)
    accel = spec.accel or choose_accel()
    transport = disks_mod.choose_transport() if spec.disks else "nbd"
    art = new_artifacts_dir(spec.artifacts)
    out_dir = art / "out"
    out_dir.mkdir()
    cwd = (cwd or Path.cwd()).resolve()
    nonce = secrets.token_hex(8)
    env = guest.guest_env(repo=repo, rel=rel, disk_count=spec.disks, profile=prof, interactive=interactive)
    (art / "command").write_text(shlex.join(command) + "\n")
    (art / "command.sh").write_text(guest.command_script(command, cwd))
    (art / "modules").write_text("".join(f"{m}\n" for m in mods))
    append = guest.kernel_cmdline(nonce, "shell" if interactive else "run", prof.queue_depth if prof else None,
                                  booted.args())
    if not quiet:
        what = f"{spec.disks} x {spec.disk_size >> 20} MiB {'flash ' + prof.name if prof else 'memory'} disk(s)"
        if spec.disks:
            why = disks_mod.fuse_unavailable_reason() if transport == "nbd" else None
            what += f" over {transport}" + (f", QEMU's NBD client, because {why}" if why else "")
        print(f"smartio testbed: booting {rel.uname} ({accel}, {booted.text()}, {spec.memory_mib} MiB, {what}"
              f"{', modules ' + ' '.join(m.name for m in mods) if mods else ''}); artifacts in {art}",
              file=sys.stderr, flush=True)
    prep = Prepared(art=art, out_dir=out_dir, cwd=cwd, nonce=nonce, env=env, append=append, prof=prof, mods=mods,
                    accel=accel, transport=transport, repo=repo, rel=rel, qemu_bin=qemu_bin)

    retries = spec.retries
    retried: list[str] = []
    for attempt in range(1, (0 if interactive else retries) + 2):
        if attempt > 1:
            print(f"smartio testbed: booting again (attempt {attempt} of {retries + 1})", file=sys.stderr,
                  flush=True)
        result = _boot(command, spec, prep, interactive=interactive, stream=stream, retried=retried)
        if not result.stopped_early or result.rc is not None or interactive or attempt > retries:
            break
        moved = _set_aside(art, attempt)
        retried.append(f"{result.stopped_early} (files in {moved})")
        print(f"smartio testbed: the VM was stopped early: {result.stopped_early}; its files are in {moved}",
              file=sys.stderr, flush=True)
    if not quiet and (warn := hostload.warning(result.host_load or {})):
        print(f"smartio testbed: {warn}", file=sys.stderr, flush=True)
    return result


def _boot(command: Sequence[str], spec: GuestSpec, prep: Prepared, *, interactive: bool,
          stream: IO[bytes] | None, retried: list[str]) -> VmResult:
    """One boot of run(): serve the disks and shares, run QEMU to its end, and write run.json."""
    art, timeout, prof, booted, accel, rel = prep.art, spec.timeout, prep.prof, spec.boot, prep.accel, prep.rel
    env = prep.env
    if timeout is not None and not interactive:
        # PID 1 lists the guest's tasks on the console at this time, shortly before the host kills QEMU (guest
        # clock: the RTC).
        env = {**env, "SMARTIO_DUMP_AT": str(int(time.time() + timeout - min(60.0, timeout / 10)))}
    symbols = vcpus.symbol_map(rel)
    if symbols is None and not interactive:
        env = {**env, "SMARTIO_KSYMS": "1"}     # this kernel's first boot here lists its symbols (vcpus)
    (art / "guest.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    console_log = art / "console.log"
    output_log = art / "output.log"
    started = time.monotonic()
    parser = MarkerStream(prep.nonce)
    load = hostload.HostLoad(art / HOST_LOAD)
    with contextlib.ExitStack() as stack:
        stack.enter_context(load)
        # Unix socket paths must stay short, so they live in a fresh /tmp directory, not under the artifacts.
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="smartio-vm-")))
        initrd = initramfs.build(rel.modules_dir, work / "initramfs.cpio")
        backing = stack.enter_context(disks_mod.serve(spec.disks, spec.disk_size, work, prof, prep.transport))
        shares = [qemu.Share("root", Path("/"), work / "fs-root.sock", cache="always"),
                  qemu.Share("artifacts", art, work / "fs-artifacts.sock")]
        if prep.repo:
            shares.append(qemu.Share("repo", prep.repo, work / "fs-repo.sock"))
        for share in shares:
            log = stack.enter_context(open(art / f"virtiofsd-{share.tag}.log", "wb"))
            stack.enter_context(qemu.virtiofsd(share, log))
        monitor = None if interactive else work / "monitor.sock"
        cfg = qemu.VmConfig(kernel=rel.vmlinuz, initrd=initrd, append=prep.append, console_log=console_log,
                            shares=tuple(shares), disks=tuple(backing), disk_transport=prep.transport, accel=accel,
                            cpus=booted.cpus, memory_mib=spec.memory_mib, interactive=interactive, monitor=monitor)
        argv = qemu.command_line(cfg, prep.qemu_bin)
        (art / "qemu-cmdline").write_text(shlex.join(argv) + "\n")
        qemu_started = time.monotonic()
        sampler = None if monitor is None else vcpus.Sampler(monitor, art, symbols or art / vcpus.KALLSYMS,
                                                              console=console_log)
        watch = None if interactive else ConsoleWatch(console_log, parser, art / HOST_TASKS, sampler)
        interrupted = False
        try:
            qemu_exit, timed_out, stopped = supervise(
                argv, timeout=timeout, parser=parser, output_log=output_log, qemu_log=art / "qemu.log",
                stream=stream, interactive=interactive, host_report=art / HOST_TASKS, watch=watch,
                at_timeout=None if sampler is None else lambda: sampler.report(art / VCPUS))
        except KeyboardInterrupt:   # Ctrl-C, SIGTERM (smartio.signals): supervise() stopped QEMU; run.json says
            # what ran, then the interrupt goes on
            interrupted, qemu_exit, timed_out, stopped = True, None, False, None
    with contextlib.suppress(OSError):
        vcpus.keep_symbols(art, rel)
    kind = watch.kind if watch is not None and stopped else None
    stall, hang = (stopped if kind == "emulator" else None), (stopped if kind == "boot" else None)

    duration = time.monotonic() - started
    console = console_log.read_text(errors="replace") if console_log.exists() else ""
    dmesg_path = art / "dmesg"
    dmesg = dmesg_path.read_text(errors="replace") if dmesg_path.exists() else ""
    rc = parser.rc
    if interactive and rc is None and (art / "exit-code").exists():
        rc = int((art / "exit-code").read_text().strip() or -1)
    result = VmResult(rc=rc, artifacts_dir=art, console_log=console_log, output_log=output_log,
                      out_dir=prep.out_dir, kernel=rel.uname, accel=accel, duration_s=duration, timeout_s=timeout,
                      timed_out=timed_out, setup_error=parser.markers.get("SETUP_FAILED"),
                      kernel_problems=[p for p in find_kernel_problems(console, dmesg)
                                       if not (stall and STALL_REPORT_RE.search(p))], qemu_exit=qemu_exit,
                      host_load=load.summary(), emulator_stall=stall, boot_stall=hang, retried=list(retried),
                      interrupted=interrupted)
    if result.rc is not None:
        (art / "exit-code").write_text(f"{result.rc}\n")
    write_whole(art / "run.json", json.dumps({
        "command": list(command), "cwd": str(prep.cwd), "rc": result.rc, "failure": result.failure,
        "timed_out": timed_out, "kernel_problems": result.kernel_problems, "duration_s": round(duration, 3),
        "kernel": rel.uname, "kernel_version": rel.version, "kernel_name": rel.kernel,
        "accel": accel, **booted.record(),
        "memory_mib": spec.memory_mib, "profile": prof.name if prof else None,
        "queue_depth": prof.queue_depth if prof else None, "disks": spec.disks, "disk_size": spec.disk_size,
        "disk_transport": prep.transport if spec.disks else None,
        "modules": [str(m) for m in prep.mods], "kernel_cmdline": prep.append,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - duration)),
        "host_load": result.host_load, "emulator_stall": stall, "retried_after": result.retried,
        "boot_stall": hang, **{f"{key}_after_s": round(parser.arrived[marker] - qemu_started, 3)
                               if marker in parser.arrived else None
                               for key, marker in (("pid1", "INIT"), ("command", "START"))},
        "interrupted": interrupted,
    }, indent=2) + "\n")                                    # whole or absent, also after a second Ctrl-C
    if interrupted:
        raise KeyboardInterrupt
    return result


def shell(spec: GuestSpec = DEFAULT_GUEST, *, cwd: Path | None = None) -> VmResult:
    """An interactive root shell in the guest on this terminal; exit the shell to power off (no timeout)."""
    return run(["/bin/bash", "-i"], dataclasses.replace(spec, timeout=None), interactive=True, cwd=cwd)

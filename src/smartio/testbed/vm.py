"""Run a command as root in a Linux 6.1 guest under QEMU and collect what it leaves behind.

    result = smartio.testbed.vm.run(["uname", "-r"], profile="s5-emmc", disks=1)
    result.check()                       # raises SmartioError on timeout, setup failure or a kernel problem
    result.rc, result.out_dir            # the command's exit code; what it wrote to $SMARTIO_OUT

The guest sees the host's filesystem at the same paths (read-only, with its own writes kept in guest RAM), the
repository writable, and $SMARTIO_OUT (/smartio/out) as <artifacts>/out on the host. Its disks are /dev/vda,
/dev/vdb, ... (listed in $SMARTIO_DISKS). The artifact directory also holds the command, the kernel console log,
the guest's dmesg, the command's output, the exit code and run.json (what ran where, for the record).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import re
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
from smartio.flashdev import Profile, load_profile
from smartio.outputs import write_whole
from smartio.testbed import boot, disks as disks_mod, hostload, initramfs, kernelpkg, qemu

DEFAULT_MODULE = "kernel/smartio-iosched.ko"  # relative to the repository; loaded when built
DEFAULT_MODULE_GENERIC = "kernel/amd64/smartio-iosched.ko"  # the same for the generic flavour (make -C kernel generic)
DEFAULT_MODULE_DEBUG = "kernel/debug/smartio-iosched.ko"     # and for the debug kernel (make -C kernel debug)
MODULE_FOR_FLAVOUR = {kernelpkg.FLAVOUR: DEFAULT_MODULE, kernelpkg.GENERIC: DEFAULT_MODULE_GENERIC,
                      kernelpkg.DEBUG: DEFAULT_MODULE_DEBUG}
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SETUP_EXIT = 125  # command.sh: the working directory is not visible in the guest

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
HOST_LOAD = hostload.FILE      # other work's share of the host's CPUs while the VM ran (smartio.testbed.hostload)
HOST_TASKS = "host-tasks.txt"     # the host's side at the timeout: QEMU, nbdfuse, nbdkit, threads with kernel stacks
MARKER_RE = re.compile(rb"\r?\nVMTEST_([A-Z_]+)=([^\r\n]*) ([0-9a-f]{16})\r?\n")
# A vCPU that QEMU's TCG stopped running (emulator_stall): the NMI backtraces of RCU stall reports.
NMI_BACKTRACE_RE = re.compile(r"^\[\s*(\d+\.\d+)\] NMI backtrace for cpu (\d+)\s*$", re.M)
RIP_RE = re.compile(r"^\[\s*\d+\.\d+\] RIP: \w+:(\S+)", re.M)
TIMESTAMP_RE = re.compile(r"^\[\s*(\d+\.\d+)\]", re.M)
# What the guest kernel reports about a vCPU the emulator stopped: not counted as its problems then.
STALL_REPORT_RE = re.compile(r"rcu: INFO: .*detected stalls|soft lockup|INFO: task .* blocked for more than")
STALL_LAG_S = 10.0        # the stopped vCPU's clock is this far behind the guest's latest console line
WATCH_INTERVAL_S = 5.0    # how often supervise() looks at the console for a stalled vCPU
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
            return f"the VM was stopped early: {self.stopped_early}{again}; {where}"
        if self.timed_out:
            said = f"; before that the guest kernel reported: {self.kernel_problems[0]}" if self.kernel_problems \
                else ""
            guest = TASK_DUMP_HINT if self.task_dump() else (" (no task list from the guest, due shortly before "
                                                             "the timeout: were its vCPUs stopped?)")
            return (f"the VM did not finish within {self.timeout_s:g} s (--timeout {self.timeout_s:g}) and was "
                    f"killed{said}; {where}{guest}{self.host_summary()}")
        if self.kernel_problems:
            more = f" (and {len(self.kernel_problems) - 1} more)" if len(self.kernel_problems) > 1 else ""
            return f"the guest kernel reported: {self.kernel_problems[0]}{more}; {where}"
        if self.setup_error:
            return f"the guest could not run the command: {self.setup_error}; {where}"
        if self.rc is None:
            qlog = qemu.tail(self.artifacts_dir / "qemu.log", 400)
            return f"the VM stopped before the command finished (QEMU exit {self.qemu_exit}: {qlog}); {where}"
        return None

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


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (it holds pyproject.toml and the .venv)."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").exists() else None


def resolve_modules(modules: Sequence[str | Path] | None, repo: Path | None,
                    flavour: str = kernelpkg.FLAVOUR) -> list[Path]:
    """Absolute paths of the modules to insmod; None means the project's module (for that flavour) if it is built."""
    if modules is None:
        default = repo / MODULE_FOR_FLAVOUR[flavour] if repo else None
        return [default] if default and default.is_file() else []
    out = []
    for m in modules:
        p = Path(m).resolve()
        if not p.is_file():
            raise UsageError("--module", m, "no such file")
        if p.suffix != ".ko":
            raise UsageError("--module", m, "not a kernel module (expected a .ko file)")
        out.append(p)
    return out


def kernel_cmdline(nonce: str, mode: str, queue_depth: int | None, extra: Sequence[str]) -> str:
    """The guest kernel's command line: the testbed's plumbing, then `extra` (Boot.args(): the testbed's own
    arguments and the user's). loglevel=5 puts warnings and worse on the console log, not info."""
    args = ["console=ttyS0", "loglevel=5", "panic=-1", "rdinit=/init", f"smartio.nonce={nonce}",
            f"smartio.mode={mode}"]
    if queue_depth is not None:
        args.append(f"virtio_blk.queue_depth={queue_depth}")
    return " ".join([*args, *extra])


def guest_env(*, repo: Path | None, rel: kernelpkg.KernelRelease, disk_count: int, profile: Profile | None,
              interactive: bool) -> dict[str, str]:
    """The command's environment in the guest (also read by PID 1 for the paths it mounts)."""
    venv_bin = repo / ".venv" / "bin" if repo else None
    env = {k: v for k, v in os.environ.items() if k.startswith("SMARTIO_")}
    env.update({
        "PATH": (f"{venv_bin}:" if venv_bin and venv_bin.is_dir() else "") + GUEST_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": os.environ.get("TERM", "vt100") if interactive else "dumb",
        "SMARTIO_IN_VM": "1",
        "SMARTIO_OUT": initramfs.GUEST_OUT,
        # The guest's home is in RAM: results stored there would vanish at power-off, so they go to the out dir.
        "SMARTIO_DB": f"{initramfs.GUEST_OUT}/results.db",
        "SMARTIO_DISKS": " ".join(f"/dev/vd{chr(ord('a') + i)}" for i in range(disk_count)),
        "SMARTIO_PROFILE": profile.name if profile else "",
        # PID 1 sets each flash disk's max_sectors_kb to it (the virtio disk alone would take 1280 KiB).
        "SMARTIO_MAX_REQUEST_KB": str(profile.max_request_kb) if profile and disk_count else "",
        "SMARTIO_REPO": str(repo) if repo else "",
        "SMARTIO_KERNEL": rel.uname,
        "SMARTIO_KERNEL_MODULES": str(rel.modules_dir),
    })
    if interactive:
        size = shutil.get_terminal_size()
        env.update(SMARTIO_ROWS=str(size.lines or 24), SMARTIO_COLS=str(size.columns or 80))
    return env


def command_script(command: Sequence[str], cwd: Path) -> str:
    q = shlex.quote(str(cwd))
    return (f"cd {q} 2>/dev/null || {{ echo \"smartio testbed: {q} is not visible in the guest\" >&2; "
            f"exit {SETUP_EXIT}; }}\nexec {shlex.join(command)}\n")


# nbdkit's largest export (INT64_MAX), rounded down to whole 4 KiB blocks; the disks live in host RAM, sparse.
MAX_DISK_SIZE = (1 << 63) - 4096


def _load_profile(profile: Profile | str | None) -> Profile | None:
    return load_profile(profile) if isinstance(profile, str) else profile


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
                probe = run(["true"], disks=0, modules=[], timeout=60, artifacts=Path(tmp) / "a",
                            accel="kvm", stream=None, quiet=True)
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


def _proc_text(directory: Path, name: str) -> str:
    try:
        return (directory / name).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


# Wait channels of a thread waiting for a FUSE or NBD server: an interruptible sleep (S), not D.
WAITING_ON_SERVER_RE = re.compile(r"fuse|request_wait_answer|nbd")
HOST_REPORT_TIMEOUT_S = 30.0


def host_tasks(root: int | None = None, proc: Path = Path("/proc")) -> tuple[str, str]:
    """Every thread of the processes below `root` (this one by default): state, wait channel, syscall number and
    kernel stack (root only). Returns (report, summary).

    A guest that stops making progress may be waiting for the host: QEMU's I/O on an nbdfuse file waits for
    nbdfuse, which waits for nbdkit's model, and then the guest cannot even print its own task list, since its
    vCPUs do not run. The summary names the threads in uninterruptible sleep (D) and those waiting for a FUSE or
    NBD server (which sleep interruptibly), as process/thread (wait channel) x count. /proc/PID/cmdline is not
    read (it takes the process's mmap lock, which a stuck process may hold); the name (comm) is.
    """
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for d in proc.glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    lines: list[str] = []
    flagged: collections.Counter[str] = collections.Counter()
    todo, seen = collections.deque((pid, root) for pid in children.get(root, [])), {root}
    while todo:
        pid, parent = todo.popleft()
        if pid in seen:                 # a pid reused while /proc was read
            continue
        seen.add(pid)
        todo.extend((child, pid) for child in children.get(pid, []))
        try:
            tids = sorted(int(t.name) for t in (proc / str(pid) / "task").iterdir())
        except (OSError, ValueError):
            continue
        name = _proc_text(proc / str(pid), "comm")
        lines.append(f"=== pid {pid} ({name}), parent {parent}")
        for tid in tids:
            get = functools.partial(_proc_text, proc / str(pid) / "task" / str(tid))
            status = dict(ln.split(":\t", 1) for ln in get("status").splitlines() if ":\t" in ln)
            state, comm, wchan = status.get("State", "?"), get("comm"), get("wchan")
            lines.append(f"--- tid {tid} {comm} [{state}] wchan={wchan} syscall={get('syscall').split(' ')[0]}")
            lines.extend(f"    {ln}" for ln in get("stack").splitlines() if ln != "?")   # unreadable unless root
            if state.startswith("D") or WAITING_ON_SERVER_RE.search(wchan):
                flagged[f"{name}/{comm} [{state[:1]}] ({wchan})"] += 1
    summary = ("host threads in D or waiting for a FUSE/NBD server: "
               + ", ".join(f"{k} x{n}" for k, n in sorted(flagged.items())) if flagged
               else "no host thread in D or waiting for a FUSE/NBD server")
    return "\n".join(lines) + "\n", summary


def write_host_report(path: Path, timeout_s: float = HOST_REPORT_TIMEOUT_S) -> None:
    """host_tasks() into `path`, summary first. Never raises and never takes longer than `timeout_s`: it runs
    while QEMU is still to be stopped, and must not replace or prolong the timeout it explains."""
    got: list[tuple[str, str]] = []

    def work() -> None:
        try:
            got.append(host_tasks())
        except Exception as e:          # noqa: BLE001 (a report, never a reason to fail)
            got.append(("", f"host report failed: {e!r}"))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout_s)
    report, summary = got[0] if got else ("", f"host report not done within {timeout_s:g} s")
    try:
        path.write_text(f"{summary}\n\n{report}", encoding="utf-8")
    except OSError:
        pass


def supervise(argv: list[str], *, timeout: float | None, parser: MarkerStream, output_log: Path, qemu_log: Path,
              stream: IO[bytes] | None, interactive: bool = False, host_report: Path | None = None,
              watch: Callable[[], str | None] | None = None) -> tuple[int | None, bool, str | None]:
    """Run QEMU (argv) to its end or the timeout, streaming the command's output; returns (exit, timed_out,
    stopped). `watch` is asked every WATCH_INTERVAL_S whether the run is beyond saving; if it says why, QEMU is
    stopped then and the reason returned as `stopped`. On a timeout the host's processes are described in
    `host_report` (host_tasks) before QEMU is stopped."""
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
                    return None, True, None
        finally:
            qemu.stop(proc)
            if pump is not None:
                pump.join(10)


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
    """supervise()'s watch for a run: emulator_stall() on the console so far, then boot_stall(). `kind` says which
    stopped the boot ("emulator" or "boot"); a boot stall is described on the host (host_tasks) before QEMU stops,
    as a timeout is."""

    def __init__(self, console_log: Path, parser: MarkerStream, host_report: Path | None = None) -> None:
        self.console_log, self.parser, self.host_report = console_log, parser, host_report
        self.started = time.monotonic()
        self.kind: str | None = None

    def __call__(self) -> str | None:
        try:
            console = self.console_log.read_text(errors="replace") if self.console_log.exists() else ""
            if why := emulator_stall(console):
                self.kind = "emulator"
            elif why := boot_stall(console, self.parser, time.monotonic() - self.started):
                self.kind = "boot"
                if self.host_report is not None:
                    write_host_report(self.host_report)
            return why
        except Exception:       # a watch that fails must not fail the run: the timeout still stands
            return None


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


def run(command: Sequence[str], *, profile: Profile | str | None = None, disks: int = 1,
        disk_size: int = 1 << 30, timeout: float | None = 600.0, artifacts: Path | None = None,
        modules: Sequence[str | Path] | None = None, kernel_args: Sequence[str] = (), cpus: int = boot.DEFAULT_CPUS,
        default_args: Sequence[str] = boot.DEFAULT_ARGS,
        memory_mib: int = 2048, interactive: bool = False, accel: str | None = None,
        stream: IO[bytes] | None | Literal["stdout"] = "stdout", quiet: bool = False,
        cwd: Path | None = None, flavour: str = kernelpkg.FLAVOUR, retries: int = 1) -> VmResult:
    """Boot the testbed, run `command` as root in the guest, power off; see the module docstring.

    modules=None loads the project's kernel/smartio-iosched.ko if it is built; [] loads nothing.
    interactive=True connects the command to this terminal (for a shell) and ignores `stream`.
    flavour: the kernel to boot: Debian's cloud-amd64 (default) or amd64 (generic: f2fs, nilfs2, ...), or debug (the
        same source built here with lockdep and KASAN, see smartio.testbed.debugkernel).
    cpus, default_args, kernel_args: see smartio.testbed.boot (default_args replaces the testbed's own kernel
        arguments, kernel_args come after them); a bad value is a UsageError before anything is made.
    stream: where the command's output goes live (default this process's stdout; None: only output.log).
    retries: how many times to boot again, from the start, when the emulator stopped a vCPU (emulator_stall) or the
        boot hung before the command started (boot_stall); the stopped boot's files are kept in
        <artifacts>/stalled-<n>/. Never for an interactive shell.
    """
    if stream == "stdout":
        stream = sys.stdout.buffer
    if not command:
        raise UsageError(None, "COMMAND", "missing: give the command to run after --")
    if disks < 0 or disks > 20:
        raise UsageError("--disks", disks, "must be between 0 and 20")
    if disk_size < 1 << 20 or disk_size > MAX_DISK_SIZE or disk_size % 4096:
        raise UsageError("--disk-size", disk_size, "must be a multiple of 4 KiB from 1 MiB to 8 EiB")
    if timeout is not None and not 0 < timeout < math.inf:      # also refuses nan
        raise UsageError("--timeout", timeout, "must be a positive number of seconds")
    if retries < 0:
        raise UsageError("--retries", retries, "must be 0 or more")
    booted = boot.Boot(cpus=cpus, default_args=tuple(default_args), kernel_args=tuple(kernel_args))
    if os.geteuid() != 0:   # before fetching the kernel (132 MB) or making the artifacts directory
        raise NeedsRootError("booting the testbed (virtiofsd shares host directories with the guest)")
    prof = _load_profile(profile)
    repo = repo_root()
    mods = resolve_modules(modules, repo, flavour)
    qemu_bin = qemu.find_qemu()
    rel = kernelpkg.fetch_image(kernelpkg.resolve(flavour=flavour))
    accel = accel or choose_accel()
    transport = disks_mod.choose_transport() if disks else "nbd"
    art = new_artifacts_dir(artifacts)
    out_dir = art / "out"
    out_dir.mkdir()
    cwd = (cwd or Path.cwd()).resolve()
    nonce = secrets.token_hex(8)
    env = guest_env(repo=repo, rel=rel, disk_count=disks, profile=prof, interactive=interactive)
    (art / "command").write_text(shlex.join(command) + "\n")
    (art / "command.sh").write_text(command_script(command, cwd))
    (art / "modules").write_text("".join(f"{m}\n" for m in mods))
    append = kernel_cmdline(nonce, "shell" if interactive else "run", prof.queue_depth if prof else None,
                            booted.args())
    if not quiet:
        what = f"{disks} x {disk_size >> 20} MiB {'flash ' + prof.name if prof else 'memory'} disk(s)"
        if disks:
            why = disks_mod.fuse_unavailable_reason() if transport == "nbd" else None
            what += f" over {transport}" + (f", QEMU's NBD client, because {why}" if why else "")
        print(f"smartio testbed: booting {rel.uname} ({accel}, {booted.text()}, {memory_mib} MiB, {what}"
              f"{', modules ' + ' '.join(m.name for m in mods) if mods else ''}); artifacts in {art}",
              file=sys.stderr, flush=True)

    retried: list[str] = []
    for attempt in range(1, (0 if interactive else retries) + 2):
        if attempt > 1:
            print(f"smartio testbed: booting again (attempt {attempt} of {retries + 1})", file=sys.stderr,
                  flush=True)
        result = _boot(command, art=art, out_dir=out_dir, cwd=cwd, nonce=nonce, env=env, append=append,
                       timeout=timeout, prof=prof, disks=disks, disk_size=disk_size, transport=transport,
                       repo=repo, rel=rel, accel=accel, booted=booted, memory_mib=memory_mib, interactive=interactive,
                       stream=stream, qemu_bin=qemu_bin, mods=mods, retried=retried)
        if not result.stopped_early or result.rc is not None or interactive or attempt > retries:
            break
        moved = _set_aside(art, attempt)
        retried.append(f"{result.stopped_early} (files in {moved})")
        print(f"smartio testbed: the VM was stopped early: {result.stopped_early}; its files are in {moved}",
              file=sys.stderr, flush=True)
    if not quiet and (warn := hostload.warning(result.host_load or {})):
        print(f"smartio testbed: {warn}", file=sys.stderr, flush=True)
    return result


def _boot(command: Sequence[str], *, art: Path, out_dir: Path, cwd: Path, nonce: str, env: dict[str, str],
          append: str, timeout: float | None, prof: Profile | None, disks: int, disk_size: int, transport: str,
          repo: Path | None, rel: kernelpkg.KernelRelease, accel: str, booted: boot.Boot, memory_mib: int,
          interactive: bool, stream: IO[bytes] | None, qemu_bin: str, mods: list[Path],
          retried: list[str]) -> VmResult:
    """One boot of run(): serve the disks and shares, run QEMU to its end, and write run.json."""
    if timeout is not None and not interactive:
        # PID 1 lists the guest's tasks on the console at this time, shortly before the host kills QEMU (guest
        # clock: the RTC).
        env = {**env, "SMARTIO_DUMP_AT": str(int(time.time() + timeout - min(60.0, timeout / 10)))}
    (art / "guest.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    console_log = art / "console.log"
    output_log = art / "output.log"
    started = time.monotonic()
    parser = MarkerStream(nonce)
    load = hostload.HostLoad(art / HOST_LOAD)
    with contextlib.ExitStack() as stack:
        stack.enter_context(load)
        # Unix socket paths must stay short, so they live in a fresh /tmp directory, not under the artifacts.
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="smartio-vm-")))
        initrd = initramfs.build(rel.modules_dir, work / "initramfs.cpio")
        backing = stack.enter_context(disks_mod.serve(disks, disk_size, work, prof, transport))
        shares = [qemu.Share("root", Path("/"), work / "fs-root.sock", cache="always"),
                  qemu.Share("artifacts", art, work / "fs-artifacts.sock")]
        if repo:
            shares.append(qemu.Share("repo", repo, work / "fs-repo.sock"))
        for share in shares:
            log = stack.enter_context(open(art / f"virtiofsd-{share.tag}.log", "wb"))
            stack.enter_context(qemu.virtiofsd(share, log))
        cfg = qemu.VmConfig(kernel=rel.vmlinuz, initrd=initrd, append=append, console_log=console_log,
                            shares=tuple(shares), disks=tuple(backing), disk_transport=transport, accel=accel,
                            cpus=booted.cpus, memory_mib=memory_mib, interactive=interactive)
        argv = qemu.command_line(cfg, qemu_bin)
        (art / "qemu-cmdline").write_text(shlex.join(argv) + "\n")
        qemu_started = time.monotonic()
        watch = None if interactive else ConsoleWatch(console_log, parser, art / HOST_TASKS)
        interrupted = False
        try:
            qemu_exit, timed_out, stopped = supervise(
                argv, timeout=timeout, parser=parser, output_log=output_log, qemu_log=art / "qemu.log",
                stream=stream, interactive=interactive, host_report=art / HOST_TASKS, watch=watch)
        except KeyboardInterrupt:   # Ctrl-C, SIGTERM (smartio.signals): supervise() stopped QEMU; run.json says
            # what ran, then the interrupt goes on
            interrupted, qemu_exit, timed_out, stopped = True, None, False, None
    kind = watch.kind if watch is not None and stopped else None
    stall, hang = (stopped if kind == "emulator" else None), (stopped if kind == "boot" else None)

    duration = time.monotonic() - started
    console = console_log.read_text(errors="replace") if console_log.exists() else ""
    dmesg_path = art / "dmesg"
    dmesg = dmesg_path.read_text(errors="replace") if dmesg_path.exists() else ""
    rc = parser.rc
    if interactive and rc is None and (art / "exit-code").exists():
        rc = int((art / "exit-code").read_text().strip() or -1)
    result = VmResult(rc=rc, artifacts_dir=art, console_log=console_log, output_log=output_log, out_dir=out_dir,
                      kernel=rel.uname, accel=accel, duration_s=duration, timeout_s=timeout, timed_out=timed_out,
                      setup_error=parser.markers.get("SETUP_FAILED"),
                      kernel_problems=[p for p in find_kernel_problems(console, dmesg)
                                       if not (stall and STALL_REPORT_RE.search(p))], qemu_exit=qemu_exit,
                      host_load=load.summary(), emulator_stall=stall, boot_stall=hang, retried=list(retried),
                      interrupted=interrupted)
    if result.rc is not None:
        (art / "exit-code").write_text(f"{result.rc}\n")
    write_whole(art / "run.json", json.dumps({
        "command": list(command), "cwd": str(cwd), "rc": result.rc, "failure": result.failure,
        "timed_out": timed_out, "kernel_problems": result.kernel_problems, "duration_s": round(duration, 3),
        "kernel": rel.uname, "kernel_version": rel.version, "accel": accel, **booted.record(),
        "memory_mib": memory_mib, "profile": prof.name if prof else None,
        "queue_depth": prof.queue_depth if prof else None, "disks": disks, "disk_size": disk_size,
        "disk_transport": transport if disks else None,
        "modules": [str(m) for m in mods], "kernel_cmdline": append,
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


def shell(**kwargs) -> VmResult:
    """An interactive root shell in the guest on this terminal; exit the shell to power off."""
    return run(["/bin/bash", "-i"], interactive=True, timeout=None, **kwargs)

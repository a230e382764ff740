"""The host's side of a run that stopped making progress: every thread of QEMU, nbdfuse, nbdkit and virtiofsd, with
its state, wait channel and kernel stack, written to HOST_TASKS in the artifacts at a timeout or a boot stall.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import threading
from pathlib import Path

HOST_TASKS = "host-tasks.txt"     # the host's side at the timeout: QEMU, nbdfuse, nbdkit, threads with kernel stacks


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

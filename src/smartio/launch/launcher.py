"""One launch of a real command, timed from its exec to its exit (`CommandLauncher`), the `Launcher` protocol
that it and a replay (`replay.Replayer`) follow, and the cache drop that makes the next launch cold. Shared by
the timing loop (`measure`) and by `record` (`trace`), which times untraced launches as `smartio bench launch`
does.
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess
import tempfile
import time
from typing import Protocol

from smartio.errors import NeedsRootError, SmartioError, UsageError

DROP_CACHES = "/proc/sys/vm/drop_caches"


class Launcher(Protocol):
    def launch(self) -> float: ...


def check_command(argv: list[str], cwd: str, root: str | None = None) -> None:
    """The command exists and is executable, as it will be run in `cwd` (a relative path is taken from there),
    chrooted to `root` if given (then `cwd` is the host's path of the directory inside)."""
    if not argv:
        raise UsageError("--", "(missing)", "give the command to launch after `--`")
    exe = argv[0]
    if os.sep in exe:
        path = os.path.join(cwd, exe) if root is None or not exe.startswith("/") else root + exe
        ok = os.access(path, os.X_OK) and not os.path.isdir(path)
    elif root is not None:
        ok = shutil.which(exe, path=os.pathsep.join(root + d for d in os.get_exec_path() if d.startswith("/"))) \
            is not None
    else:
        ok = shutil.which(exe) is not None
    if not ok:
        raise UsageError("--", exe, "command not found or not executable" + (f" (in {cwd})" if os.sep in exe else ""))


class CommandLauncher:
    """A real command, run in `cwd` with no input and its output discarded; a failure (exit code other than 0)
    fails the run, with the end of what it wrote to stderr.

    Timed from exec to exit: the child takes the time just before it execs (after fork, and the chroot of an
    installed copy) and hands it to the parent through a pipe; the end is when the parent sees it exit. Forking
    smartio itself (tens of MiB of Python) costs milliseconds that belong to no application's start-up."""

    def __init__(self, argv: list[str], cwd: str, root: str | None = None) -> None:
        """`root`: run the command chrooted there (an installed copy, see replay.Installed), `cwd` inside it."""
        check_command(argv, cwd if root is None else os.path.join(root, cwd.lstrip("/")), root)
        self.argv, self.cwd, self.root = argv, cwd, root
        self._stamp_fd = -1
        # {"cpu": the last launch's CPU time, "cpu_sys": the kernel's part of it}, s. From wait4, so it includes
        # what the forked child did before exec, in the kernel mostly (its exec unmaps the parent's copied address
        # space): milliseconds, where a replay counts from its first operation.
        self.last_breakdown: dict[str, float] | None = None

    def _before_exec(self) -> None:
        """In the child, after fork, right before exec: only system calls, no locks (the parent has threads)."""
        if self.root is not None:
            os.chroot(self.root)
            os.chdir(self.cwd)
        os.write(self._stamp_fd, struct.pack("d", time.perf_counter()))

    def launch(self) -> float:
        self.last_breakdown = None
        r, w = os.pipe()
        self._stamp_fd = w
        try:
            with tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(self.argv, cwd=self.cwd if self.root is None else None,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        preexec_fn=self._before_exec)
                os.close(w)
                w = -1
                try:
                    # Reaped here, for its own resource usage (and its children's that it waited for).
                    _, status, usage = os.wait4(proc.pid, 0)
                    rc = proc.returncode = os.waitstatus_to_exitcode(status)
                finally:
                    if proc.poll() is None:      # interrupted: do not leave it behind
                        proc.kill()
                        proc.wait()
                end = time.perf_counter()
                self.last_breakdown = {"cpu": round(usage.ru_utime + usage.ru_stime, 6),
                                       "cpu_sys": round(usage.ru_stime, 6)}
                stamp = os.read(r, 8)
                if rc != 0:
                    err.seek(0)
                    tail = err.read().decode(errors="replace").strip()[-800:]
                    raise SmartioError(f"`{shlex.join(self.argv)}` exited with {rc}" + (f": {tail}" if tail else ""))
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        if len(stamp) != 8:
            raise SmartioError(f"`{shlex.join(self.argv)}`: no exec time from the child")
        return end - struct.unpack("d", stamp)[0]


def drop_caches(sync: bool = True) -> None:
    """Write back dirty data (unless not `sync`), then drop the page cache, dentries and inodes: the next launch
    starts cold. Beside a buffered writer that keeps running, `sync` would wait for its dirty pages (64 MiB at the
    emulated device's 2.4 MiB/s: half a minute): the launch's files are clean, and dropping takes them anyway."""
    if sync:
        os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
    except PermissionError as e:
        raise NeedsRootError("--cold (dropping the page cache)") from e

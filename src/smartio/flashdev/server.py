"""FlashServer: runs nbdkit (memory backing) through the flashdev filter, serving one emulated flash export."""

from __future__ import annotations

import csv
import itertools
import lzma
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from smartio.errors import MissingToolError, SmartioError, UsageError
from smartio.flashdev.build import build_filter
from smartio.flashdev.profiles import Profile

START_TIMEOUT_S = 15.0
# SMARTIO_FLASHDEV_LOG=<dir>: every server without an explicit request log writes one there (ground truth for
# runs started by other tools, e.g. the testbed).
LOG_DIR_ENV = "SMARTIO_FLASHDEV_LOG"
_log_numbers = itertools.count()
STOP_TIMEOUT_S = 10.0
# The request log's columns that hold numbers (flashdev.c, fd_log_request): times in ns since the server started.
LOG_INTS = ("seq", "offset", "bytes", "arrival_ns", "start_ns", "finish_ns", "complete_ns", "returned_ns")


def read_request_log(path: Path) -> list[dict[str, Any]]:
    """A request log as the filter writes it (flash-log=, SMARTIO_FLASHDEV_LOG), or compressed (.csv.xz) as a
    stored run keeps it: one dict per request, in the order of `seq`, its numbers as ints."""
    with (lzma.open(path, "rt") if path.suffix == ".xz" else open(path)) as f:
        rows: list[dict[str, Any]] = list(csv.DictReader(f))
    for r in rows:
        for k in LOG_INTS:
            r[k] = int(r[k])
    return sorted(rows, key=lambda r: r["seq"])


def request_logs(log_dir: Path) -> list[list[dict[str, Any]]]:
    """Every request log in `log_dir` (flashdev-*.csv and .csv.xz: one per server), each read_request_log()'s."""
    paths = sorted(log_dir.glob("flashdev-*.csv")) + sorted(log_dir.glob("flashdev-*.csv.xz"))
    return [read_request_log(p) for p in paths]


class FlashServer:
    """Context manager: on enter builds the filter if needed and starts nbdkit; on exit stops it and waits.

    Attributes once entered: .socket (Path of the unix socket, None when serving TCP), .uri (nbd URI),
    .pid. nbdkit runs with --exit-with-parent, so it cannot outlive this process even if exit is never called.
    """

    def __init__(self, profile: Profile, size_bytes: int, workdir: Path, request_log: Path | None = None,
                 *, port: int | None = None, socket: Path | None = None, time_scale: float | None = None,
                 guest_overhead_us: float | None = None) -> None:
        if size_bytes < 1 << 20 or size_bytes % 4096:
            raise UsageError("--size", size_bytes, "must be at least 1M and a multiple of 4K")
        if port is not None and not 1 <= port <= 65535:
            raise UsageError("--port", port, "must be between 1 and 65535")
        if time_scale is not None and not time_scale > 0:
            raise UsageError("--time-scale", time_scale, "must be positive")
        self.profile, self.size_bytes, self.workdir = profile, size_bytes, Path(workdir)
        if request_log is None and os.environ.get(LOG_DIR_ENV):
            request_log = Path(os.environ[LOG_DIR_ENV]) / f"flashdev-{os.getpid()}-{next(_log_numbers)}.csv"
        self.request_log = Path(request_log) if request_log else None
        if guest_overhead_us is not None and not guest_overhead_us >= 0:
            raise UsageError("--guest-overhead-us", guest_overhead_us, "must be zero or positive")
        self.port, self.time_scale, self.guest_overhead_us = port, time_scale, guest_overhead_us
        self.socket: Path | None = None if port is not None else Path(socket or self.workdir / "flashdev.sock")
        self.uri = ""
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_path = self.workdir / "nbdkit.stderr"

    def command(self, filter_so: Path) -> list[str]:
        pidfile = self.workdir / "nbdkit.pid"
        # Threads: enough that every request the guest may have outstanding is inside the model (QEMU's NBD
        # client sends at most 16), never queued invisibly in front of it.
        threads = max(16, self.profile.queue_depth + 4)
        cmd = ["nbdkit", "--foreground", "--exit-with-parent", "-t", str(threads), "-P", str(pidfile)]
        cmd += ["-p", str(self.port), "-i", "127.0.0.1"] if self.port is not None else ["-U", str(self.socket)]
        cmd += [f"--filter={filter_so}", "memory", f"size={self.size_bytes}"]
        cmd += self.profile.filter_args(self.time_scale, self.guest_overhead_us)
        if self.request_log:
            cmd.append(f"flash-log={self.request_log}")
        return cmd

    def __enter__(self) -> FlashServer:
        if shutil.which("nbdkit") is None:
            raise MissingToolError("nbdkit", "install it with: scripts/install-deps --vm")
        filter_so = build_filter()
        self.workdir.mkdir(parents=True, exist_ok=True)
        pidfile = self.workdir / "nbdkit.pid"
        pidfile.unlink(missing_ok=True)
        if self.socket is not None:
            self.socket.unlink(missing_ok=True)
        with open(self._stderr_path, "wb") as err:
            self._proc = subprocess.Popen(self.command(filter_so), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=err)
        self.pid = self._proc.pid
        # nbdkit writes the pid file once it accepts connections.
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (pidfile.is_file() and pidfile.read_text().strip()):
            if self._proc.poll() is not None:
                raise SmartioError(f"nbdkit exited with status {self._proc.returncode} while starting the "
                                   f"{self.profile.name} device: {self._stderr().strip()}")
            if time.monotonic() > deadline:
                self._stop()
                raise SmartioError(f"nbdkit did not become ready within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        self.uri = (f"nbd://127.0.0.1:{self.port}" if self.port is not None
                    else f"nbd+unix:///?socket={self.socket}")
        return self

    def _stderr(self) -> str:
        try:
            return self._stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def _stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def wait(self) -> int:
        """Blocks until nbdkit exits (used by `smartio flashdev serve`); returns its exit status."""
        assert self._proc is not None
        return self._proc.wait()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()
        if self.socket is not None:
            self.socket.unlink(missing_ok=True)

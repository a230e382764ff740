"""Runs fio for real: writes the job file, runs fio with JSON output, parses it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from smartio.engine import JobSet, RunResult, parse_fio_json
from smartio.errors import MissingToolError, SmartioError


class FioEngine:
    """The real engine. Progress is shown by the caller (smartio.progress), one step per run."""

    def __init__(self, fio: str = "fio") -> None:
        path = shutil.which(fio)
        if path is None:
            raise MissingToolError(fio, "install it with `apt-get install fio` (or run `make deps` as root)")
        self.fio = path
        self._version: str | None = None

    def version(self) -> str:
        if self._version is None:
            out = subprocess.run([self.fio, "--version"], capture_output=True, text=True, check=False)
            self._version = out.stdout.strip() or "unknown"
        return self._version

    def start(self, jobset: JobSet, label: str) -> BackgroundRun:
        """Start fio without waiting for it: a background workload (`smartio launch`), stopped with `stop()`.
        Its jobs should be time-based, so that they last until stopped."""
        return BackgroundRun(self.fio, jobset, label)

    def run(self, jobset: JobSet, label: str) -> RunResult:
        with tempfile.TemporaryDirectory(prefix="smartio-fio-") as tmp:
            jobfile = os.path.join(tmp, "job.fio")
            output = os.path.join(tmp, "out.json")
            with open(jobfile, "w") as f:
                f.write(jobset.jobfile())
            cmd = [self.fio, "--output-format=json", f"--output={output}", jobfile]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                _, err = proc.communicate()
            except BaseException:
                # Ctrl-C reaches fio too; give it a moment to stop cleanly before forcing it.
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise
            if proc.returncode != 0:
                raise SmartioError(f"fio failed ({proc.returncode}) in {label}: {err.strip()[-1500:]}")
            try:
                with open(output) as f:
                    text = f.read()
                # fio may print notes before the JSON document.
                raw = json.loads(text[text.index("{"):])
            except (OSError, ValueError) as e:
                raise SmartioError(f"fio wrote no readable JSON in {label}: {e}") from e
        return parse_fio_json(raw, jobset)


class BackgroundRun:
    """A fio process running while something else is measured. `stop()` ends it the way Ctrl-C would (fio then
    still writes its JSON, covering the time it ran) and returns the parsed result; use it as a context manager
    so that fio is stopped also when the measurement fails or is interrupted."""

    def __init__(self, fio: str, jobset: JobSet, label: str) -> None:
        self.jobset, self.label = jobset, label
        self._tmp = tempfile.TemporaryDirectory(prefix="smartio-fio-")
        jobfile = os.path.join(self._tmp.name, "job.fio")
        self._output = os.path.join(self._tmp.name, "out.json")
        with open(jobfile, "w") as f:
            f.write(jobset.jobfile())
        cmd = [fio, "--output-format=json", f"--output={self._output}", jobfile]
        self._err = open(os.path.join(self._tmp.name, "stderr"), "w+")
        self._closed = False
        # Its own process group: a Ctrl-C at the terminal reaches smartio, which stops fio itself, in order.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._err, start_new_session=True)

    def wait_started(self, timeout_s: float = 30.0) -> None:
        """Wait until fio has forked its job processes, that is until the I/O begins (fio first parses, checks
        and lays out files, and a SIGINT in that phase ends it without a JSON document)."""
        children = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SmartioError(self.failure())
            try:
                with open(children) as f:
                    if f.read().strip():
                        return
            except OSError:           # no /proc/PID/task/PID/children (CONFIG_PROC_CHILDREN): go by time
                time.sleep(1.0)
                return
            time.sleep(0.01)
        raise SmartioError(f"fio did not start its jobs within {timeout_s:g} s in {self.label}")

    def running(self) -> bool:
        return self.proc.poll() is None

    def failure(self) -> str:
        """Why fio ended early: its exit code and the end of its stderr."""
        self._err.flush()
        self._err.seek(0)
        return f"fio ended early ({self.proc.returncode}) in {self.label}: {self._err.read().strip()[-1500:]}"

    def stop(self) -> RunResult:
        if self.proc.poll() is not None:
            why = self.failure()
            self.close()
            raise SmartioError(why)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.close()
            raise SmartioError(f"fio did not stop within 30 s of SIGINT in {self.label}") from None
        try:
            with open(self._output) as f:
                text = f.read()
            raw = json.loads(text[text.index("{"):])
        except (OSError, ValueError) as e:
            self._err.seek(0)
            raise SmartioError(f"fio wrote no readable JSON in {self.label} (exit code {self.proc.returncode}): "
                               f"{e}; {self._err.read().strip()[-800:]}") from e
        finally:
            self.close()
        return parse_fio_json(raw, self.jobset)

    def close(self) -> None:
        """Stop fio if it still runs (an error path) and remove its files. fio runs each job in a child process of
        its own: the whole process group (its session, see __init__) is stopped, or the jobs would go on writing.
        Only once: after that the group's id may belong to someone else."""
        if self._closed:
            return
        self._closed = True
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _signal_group(self.proc.pid, signal.SIGKILL)      # job processes left behind, if any
        self._err.close()
        self._tmp.cleanup()

    def __enter__(self) -> BackgroundRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

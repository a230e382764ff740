"""Runs fio for real: writes the job file, runs fio with JSON output, parses it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

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


class BackgroundFio:
    """fio running beside something else until stopped: `start()`, then `stop()` returns its results.

    For a stream with no natural end (a time-based job) that must last exactly as long as the foreground work.
    `stop()` sends SIGINT, on which fio ends its jobs and still writes its JSON (exit status 128 or 0)."""

    def __init__(self, engine: FioEngine, jobset: JobSet, label: str) -> None:
        self.engine, self.jobset, self.label = engine, jobset, label
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="smartio-fio-")
        jobfile = os.path.join(self._tmp.name, "job.fio")
        with open(jobfile, "w") as f:
            f.write(self.jobset.jobfile())
        self._output = os.path.join(self._tmp.name, "out.json")
        cmd = [self.engine.fio, "--output-format=json", f"--output={self._output}", jobfile]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> RunResult:
        proc, tmp = self._proc, self._tmp
        if proc is None or tmp is None:
            raise SmartioError(f"fio was not started in {self.label}")
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            try:
                with open(self._output) as f:
                    text = f.read()
                raw = json.loads(text[text.index("{"):])
            except (OSError, ValueError) as e:
                raise SmartioError(f"fio ({proc.returncode}) wrote no readable JSON in {self.label}: "
                                   f"{(err or '').strip()[-1500:] or e}") from e
            return parse_fio_json(raw, self.jobset)
        finally:
            self._proc = None
            tmp.cleanup()
            self._tmp = None

    def kill(self) -> None:
        """Stop without results (on an error or Ctrl-C elsewhere); waits for fio."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGINT)
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

"""Runs fio for real: writes the job file, runs fio with JSON output, parses it."""

from __future__ import annotations

import json
import os
import shutil
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

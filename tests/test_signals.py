"""SIGTERM unwinds `smartio bench` as Ctrl-C does (smartio.signals, the one handler): fio is stopped, the scratch
files are removed, the exit code is 130."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (make deps installs it)")]


def test_sigterm_removes_scratch_files(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "smartio", "bench", "latency", "--target", str(scratch),
                             "--size", "256M", "--repeats", "5"],
                            env={**os.environ, "SMARTIO_DB": str(tmp_path / "r.db")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(scratch.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert any(scratch.iterdir()), "fio never created its scratch file"
    proc.send_signal(signal.SIGTERM)          # to smartio alone, as a service manager or `kill` would
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err
    assert list(scratch.iterdir()) == []

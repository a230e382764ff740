"""Progress while `smartio bench` runs: a rich bar with an ETA on a terminal (run under a pseudo-terminal here),
plain lines elsewhere. The runs replay recorded fio output (tests/data/fio/latency), so no fio is needed."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

LATENCY = Path(__file__).parent / "data" / "fio" / "latency"
ARGS = ["bench", "latency", "--size", "1M", "--repeats", "2"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "SMARTIO_REPLAY_FIO": str(LATENCY), "SMARTIO_DB": str(tmp_path / "r.db"),
            "COLUMNS": "120", "LINES": "40", **extra}


def _run_in_pty(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Runs argv with stdin, stdout and stderr on a pseudo-terminal; returns its exit code and all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def test_progress_bar_with_eta_on_a_terminal(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rc, out = _run_in_pty([sys.executable, "-m", "smartio", *ARGS, "--target", str(scratch)],
                          _env(tmp_path, TERM="xterm-256color"))
    assert rc == 0, out
    # The bar: the step running, steps done of all (8 = 4 patterns x 2 repeats), an ETA, drawn in place.
    assert "latency seq_read alone (run 1/2)" in out
    assert "━" in out and "ETA" in out and "/8" in out
    assert "\x1b[" in out                       # cursor control: redrawn in place
    assert "Latency alone" in out               # the table after it


def test_plain_progress_lines_when_not_a_terminal(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    p = subprocess.run([sys.executable, "-m", "smartio", *ARGS, "--target", str(scratch)], capture_output=True,
                       text=True, env=_env(tmp_path, TERM="xterm-256color"), timeout=100)
    assert p.returncode == 0, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("[")]
    assert lines[0] == "[1/8] latency seq_read alone (run 1/2)" and lines[-1].startswith("[8/8] ")
    assert "\x1b[" not in p.stderr and "━" not in p.stderr


def test_dumb_terminal_gets_plain_lines(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rc, out = _run_in_pty([sys.executable, "-m", "smartio", *ARGS, "--target", str(scratch)],
                          _env(tmp_path, TERM="dumb"))
    assert rc == 0, out
    assert "[1/8] latency seq_read alone (run 1/2)" in out and "━" not in out


@pytest.mark.parametrize("terminal", [False, True])
def test_said_lines_stay_where_steps_are_redrawn(terminal):
    import io

    from smartio.progress import Progress

    out = io.StringIO()
    with Progress(None, stream=out, terminal=terminal) as p:
        p.status("recording 1.0 s")
        p.say("smartio: recording the block events of sda until Ctrl-C")
        p.status("recording 2.0 s")
    text = out.getvalue()
    assert text.count("smartio: recording the block events of sda until Ctrl-C\n") == 1
    assert ("recording 2.0 s\n" in text) is not terminal   # a plain line, or the bar's redrawn description

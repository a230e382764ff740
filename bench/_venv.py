"""Imported first by the bench scripts, so that `bench/NAME` runs as the README shows, with no venv activated:
it re-runs the script under the repository's .venv (where numpy, matplotlib, rich and smartio's dependencies
live) and puts src/ first on the import path. Python puts the script's directory, bench/, on the path, which is
how the scripts find this module."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
PYTHON = VENV / "bin" / "python"

if Path(sys.prefix).resolve() != VENV.resolve():
    if not PYTHON.exists():
        print(f"{Path(sys.argv[0]).name}: {VENV} does not exist; run `make venv` first", file=sys.stderr)
        sys.exit(2)
    os.execv(str(PYTHON), [str(PYTHON), *sys.argv])
sys.path.insert(0, str(REPO / "src"))

from smartio.signals import interrupt_process  # noqa: E402

# Ctrl-C, or SIGTERM from a job runner: the script's `finally` blocks run (the VM stops, what was measured is saved)
# and it ends with "bench/NAME: interrupted", status 130, where it would have died silently or with a traceback.
interrupt_process(f"bench/{Path(sys.argv[0]).name}")

"""The Python interpreter a testbed guest runs smartio with."""

from __future__ import annotations

import sys

from smartio.testbed import guest


def guest_python() -> str:
    """The interpreter the guest runs: the checkout's venv (where smartio and fio's wrappers live) if there is one."""
    repo = guest.repo_root()
    venv = repo / ".venv" / "bin" / "python" if repo else None
    return str(venv) if venv and venv.exists() else sys.executable

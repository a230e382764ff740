"""SIGTERM (and SIGHUP) handled the way Ctrl-C is, so every `finally` runs: scratch files are removed, schedulers
and tracing restored, child processes waited for, and what was measured is kept. The one place smartio installs
such a handler: within a block (the CLI) or for a whole process (the bench scripts, through bench/_venv.py)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from types import TracebackType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt; the previous handlers come back after."""
    old = {s: signal.signal(s, _raise_interrupt) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def interrupt_process(prog: str) -> None:
    """For the rest of the process: SIGTERM and SIGHUP raise KeyboardInterrupt, and a KeyboardInterrupt nobody
    caught ends it with "PROG: interrupted", not a traceback (Python then ends the process by SIGINT, as the shell
    expects of an interrupted command: status 130). For scripts (bench/) whose own code catches KeyboardInterrupt
    only where it keeps results."""
    for s in SIGNALS:
        signal.signal(s, _raise_interrupt)
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
            return
        print(f"{prog}: interrupted", file=sys.stderr)

    sys.excepthook = hook

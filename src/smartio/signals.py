"""SIGTERM (and SIGHUP) handled the way Ctrl-C is, so every `finally` runs: scratch files are removed, schedulers
and tracing restored, child processes waited for. The one place smartio installs such a handler."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
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

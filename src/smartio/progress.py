"""Progress on stderr while something long runs: the one mechanism for `smartio bench` steps and trace recording.

On a terminal it is a rich progress bar: what runs now, steps done of all, time elapsed and the estimated time
left (from the pace of the steps so far), redrawn in place and gone when the work ends, so the tables that follow
stand alone. Anywhere else (a log, a pipe, CI, the VM's serial console, TERM=dumb) it is one plain line per step,
which reads well in a file.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "dumb") != "dumb"
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class Progress:
    """`total` steps (None: unknown, e.g. a recording until Ctrl-C). `begin(label)` starts a step, `end()`
    finishes it, `status(text)` says how the current step goes. Use it as a context manager, or `close()` it."""

    def __init__(self, total: int | None, stream: TextIO | None = None, terminal: bool | None = None) -> None:
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self._bar: Any = None
        self._task: Any = None
        if self.terminal:
            self._start_bar()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress as Bar,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        if self.total is None:
            columns: tuple[Any, ...] = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        else:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("ETA"), TimeRemainingColumn())
        self._bar = Bar(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
        self._task = self._bar.add_task("", total=self.total)
        self._bar.start()

    def begin(self, label: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=label)
            self._bar.refresh()
        else:
            self._line(f"[{self.done + 1}/{self.total}] {label}" if self.total else label)

    def status(self, text: str) -> None:
        """How the current step goes; on a terminal it replaces the description, elsewhere it is a line."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)
        else:
            self._line(text)

    def say(self, text: str) -> None:
        """A line that stays: on a terminal it is printed above the bar, elsewhere it is a line like any other."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, emoji=False, highlight=False)
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        """Off a terminal: one plain line, written out at once."""
        self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Errors that reach the user, each with its documented exit code.

Exit codes (also in the README):
  0  success
  1  the run failed (fio failed, the VM did not boot, ...)
  2  bad input: an unknown name, a missing target, too little space, a refused device, a missing tool
  3  needs root (switching a scheduler, writing tunables, tracing)
  130 interrupted (Ctrl-C); scratch files are removed and schedulers restored first
  141 the output pipe was closed (`| head`); no message, as for a program killed by SIGPIPE
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


class SmartioError(Exception):
    """A failure while running; exit code 1."""

    exit_code = 1


class UsageError(SmartioError):
    """Bad input from the user. The message names the flag and the value."""

    exit_code = 2

    def __init__(self, flag: str | None, value: object, why: str) -> None:
        self.flag, self.value, self.why = flag, value, why
        where = f"`{flag} {value}`" if flag else f"`{value}`"
        super().__init__(f"{where}: {why}")


class MissingToolError(UsageError):
    """A required program is not installed."""

    def __init__(self, tool: str, hint: str) -> None:
        super().__init__(None, tool, f"not installed; {hint}")


class NeedsRootError(SmartioError):
    """The action changes kernel state (scheduler, tunables, tracing) and needs root."""

    exit_code = 3

    def __init__(self, action: str) -> None:
        super().__init__(f"{action} needs root; run smartio as root (e.g. with sudo)")


def exit_code(main: Callable[[], int | None], prog: str) -> int:
    """Run `main` and turn what reaches the top into the documented exit code, with one line on stderr: the one
    handler of the CLI, the testbed's guest entries and the bench scripts. A closed output pipe (`| head`) says
    nothing, as a program killed by SIGPIPE would, and points stdout at /dev/null so the interpreter's last flush of
    what is still buffered cannot fail again."""
    try:
        rc = int(main() or 0)
        sys.stdout.flush()      # a closed pipe shows here, not in the interpreter's flush at exit
        return rc
    except SmartioError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):   # stdout is not a file (pytest's capture)
            pass
        return 128 + int(signal.SIGPIPE)

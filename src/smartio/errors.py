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

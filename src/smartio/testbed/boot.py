"""How the testbed boots its guest beyond the kernel and the disks: vCPUs and kernel arguments, checked in one place,
and the record a comparison keeps of them (its document's "vm"), since both change what is measured.

    b = Boot(cpus=1, kernel_args=("tsc=reliable",))     # UsageError on a bad value, before anything boots
    vm.run(command, GuestSpec(boot=b))
    b.record()        # {"cpus": 1, "default_args": ["init_on_alloc=0"], "kernel_args": ["tsc=reliable"]}
    Boot.from_record(doc.get("vm")).text()               # "1 vCPU, kernel args init_on_alloc=0 tsc=reliable"

DEFAULT_ARGS are the testbed's own kernel arguments. init_on_alloc=0: Debian's kernel zeroes every page it
allocates, page-cache pages included; under TCG that cost a cold python launch 1.6 of its 2.3 s of kernel time
(clear_page_erms under page_cache_ra_unbounded, 76 % of its kernel samples; docs/design/testbed.md),
where a phone's CPU zeroes the same 19 MiB in milliseconds. The extra arguments come after them on the line, so
`init_on_alloc=1` among them turns it back on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from smartio.errors import UsageError

DEFAULT_CPUS, MAX_CPUS = 2, 64
DEFAULT_ARGS = ("init_on_alloc=0",)
RESERVED = ("console=", "rdinit=", "smartio.")     # the testbed's own plumbing: an extra one would break the boot
# What a record made before a field was kept stands for: no "vm" at all, a boot of 2 vCPUs with the kernel's own
# defaults (before commit 3079792); a "vm" without "default_args", init_on_alloc=0 (from 3079792 until it was kept).
FIRST_DEFAULT_ARGS = ("init_on_alloc=0",)


@dataclasses.dataclass(frozen=True)
class Boot:
    cpus: int = DEFAULT_CPUS
    default_args: tuple[str, ...] = DEFAULT_ARGS
    kernel_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or not 1 <= self.cpus <= MAX_CPUS:
            raise UsageError("--cpus", self.cpus, f"must be a whole number from 1 to {MAX_CPUS}")
        for arg in self.kernel_args:
            if not arg or any(c.isspace() for c in arg):
                raise UsageError("--kernel-arg", repr(arg), "must be one kernel argument, without spaces")
            if arg.startswith(RESERVED):
                raise UsageError("--kernel-arg", arg, "the testbed sets " + ", ".join(f"{r}*" for r in RESERVED)
                                 + " itself")

    @classmethod
    def of(cls, cpus: int | None = None, kernel_args: Sequence[str] | None = None) -> Boot:
        """From command-line values, None meaning the default."""
        return cls(cpus=DEFAULT_CPUS if cpus is None else cpus, kernel_args=tuple(kernel_args or ()))

    def args(self) -> list[str]:
        """The kernel arguments beyond the testbed's plumbing (RESERVED), in the order they go on the line."""
        return [*self.default_args, *self.kernel_args]

    def record(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "default_args": list(self.default_args), "kernel_args": list(self.kernel_args)}

    @classmethod
    def from_record(cls, record: Any) -> Boot:
        """The boot a "vm" record describes (see FIRST_DEFAULT_ARGS for records older than a field)."""
        if not isinstance(record, dict):
            return cls(cpus=DEFAULT_CPUS, default_args=())
        return cls(cpus=record.get("cpus", DEFAULT_CPUS),
                   default_args=tuple(record.get("default_args", FIRST_DEFAULT_ARGS)),
                   kernel_args=tuple(record.get("kernel_args", ())))

    def text(self) -> str:
        """"2 vCPUs, kernel args init_on_alloc=0"."""
        vcpus = f"{self.cpus} vCPU{'s' if self.cpus != 1 else ''}"
        return vcpus + (f", kernel args {' '.join(args)}" if (args := self.args()) else "")


def text_of(doc: dict[str, Any]) -> str | None:
    """A comparison document's guest in words; None when it keeps no "vm" record (made before they were kept)."""
    g = doc.get("vm")
    return Boot.from_record(g).text() if isinstance(g, dict) and "cpus" in g else None


DEFAULT_BOOT = Boot()

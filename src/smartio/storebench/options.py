"""Every option of `smartio bench` and `smartio profile`, declared once: name, help, default, unit, allowed values.

The CLI builds its parser from this table; experiments read the parsed values through `Settings`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from smartio.errors import UsageError
from smartio.units import parse_size

EXPERIMENTS = ("latency", "slowdown", "concurrency", "mixed", "all")
PATTERNS = ("seq_read", "seq_write", "rand_read", "rand_write")
FIO_RW = {"seq_read": "read", "seq_write": "write", "rand_read": "randread", "rand_write": "randwrite"}


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str
    help: str
    default: Any = None
    unit: str | None = None
    choices: tuple[Any, ...] | None = None
    kind: str = "str"        # str | int | size | flag | list

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


# Default sizes follow the paper (seed 000, section 4): 128 MB per stream for latency, slowdown and the
# mixed sweep, 32 MB per stream for concurrency; `--quick` shrinks them so `all` runs in under 2 minutes.
SIZES = {"latency": (128 << 20, 8 << 20), "slowdown": (128 << 20, 8 << 20),
         "concurrency": (32 << 20, 1 << 20), "mixed": (128 << 20, 64 << 20)}
REPEATS = (10, 3)

OPTIONS = (
    Option("--target", "directory (scratch files, removed afterwards), file, or block device to measure"),
    Option("--quick", "small sizes and 3 repeats: `all` in under 2 minutes", False, kind="flag"),
    Option("--repeats", "repeats of every measurement (default 10, 3 with --quick)", None, "runs", kind="int"),
    Option("--size", "data per stream (default: the paper's, per experiment; e.g. 64M, 1G)", None, "bytes",
           kind="size"),
    Option("--bs", "request size", 4096, "bytes", kind="size"),
    Option("--streams", "readers and writers in the slowdown experiment (4 = the paper's 4R4W)", 1, "streams",
           (1, 2, 4, 8), kind="int"),
    Option("--levels", "concurrency levels N for the profiler", "1,2,4,8,16,32", "streams", kind="list"),
    Option("--mixes", "read percentages of the mixed sweep", "10,20,30,40,50,60,70,80,90,100", "%", kind="list"),
    Option("--iodepth", "queue depth of the mixed sweep (libaio)", 128, "requests", kind="int"),
    Option("--scheduler", "switch the device's I/O scheduler for the run and restore it afterwards (root)"),
    Option("--destroy-data", "allow writing to a block device that holds data (partition table, filesystem); "
           "never to one that is mounted, used as swap or held by another device", False, kind="flag"),
    Option("--read-only", "run only the read patterns, leaving the target unchanged (allowed on a device that "
           "holds data, or a file that holds the regions read)", False, kind="flag"),
    Option("--json", "write the result document to this file"),
    Option("--plots", "write PNG plots into this directory"),
    Option("--db", "results database (default: ~/.local/share/smartio/results.db or $SMARTIO_DB)"),
)


def parse_int_list(flag: str, text: str, lo: int, hi: int) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise UsageError(flag, text, "expected comma-separated integers, e.g. 1,2,4") from None
    if not values or any(not lo <= v <= hi for v in values):
        raise UsageError(flag, text, f"each value must be between {lo} and {hi}")
    return values


def parse_mixes(text: str) -> tuple[int, ...]:
    """--mixes: the read percentages of the mixed sweep (also checked by `smartio compare` on the host)."""
    return parse_int_list("--mixes", text, 0, 100)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What an experiment needs to know, validated."""

    quick: bool = False
    repeats: int = 10
    size: int | None = None
    bs: int = 4096
    streams: int = 1
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    mixes: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    iodepth: int = 128
    read_only: bool = False

    def size_for(self, experiment: str) -> int:
        if self.size is not None:
            return self.size
        full, quick = SIZES[experiment]
        return quick if self.quick else full

    def patterns(self) -> tuple[str, ...]:
        return tuple(p for p in PATTERNS if not (self.read_only and p.endswith("write")))

    @classmethod
    def from_args(cls, a: Any) -> Settings:
        repeats = a.repeats if a.repeats is not None else REPEATS[1 if a.quick else 0]
        if repeats < 1:
            raise UsageError("--repeats", repeats, "must be at least 1")
        bs = parse_size("--bs", a.bs) if isinstance(a.bs, str) else a.bs
        if bs % 512:
            raise UsageError("--bs", a.bs, "direct I/O needs a multiple of 512 bytes")
        size = parse_size("--size", a.size) if a.size is not None else None
        if size is not None and size < bs:
            raise UsageError("--size", a.size, f"smaller than one request ({bs} bytes)")
        if size is not None and size % bs:
            raise UsageError("--size", a.size, f"must be a multiple of --bs ({bs} bytes)")
        if not 1 <= a.iodepth <= 4096:
            raise UsageError("--iodepth", a.iodepth, "must be between 1 and 4096")
        return cls(quick=a.quick, repeats=repeats, size=size, bs=bs, streams=a.streams,
                   levels=parse_int_list("--levels", a.levels, 1, 256),
                   mixes=parse_mixes(a.mixes), iodepth=a.iodepth, read_only=a.read_only)

"""The block layer's counters of one device (/sys/block/<dev>/stat, Documentation/block/stat.rst): one reader for
every caller. They count what reached the driver, beside which the module's own counters (debugfs `stats`) say
what it did."""

from __future__ import annotations

import dataclasses
from pathlib import Path

# /sys/class/block has partitions too; for a whole disk its entry is /sys/block/<disk>'s.
SYS_CLASS_BLOCK = Path("/sys/class/block")


@dataclasses.dataclass(frozen=True)
class DiskStat:
    """The fields of the stat file, in its order; sectors are 512 bytes, ticks ms. Kernels before 4.18 have no
    discard fields and before 5.5 no flush fields: 0 then."""

    read_ios: int
    read_merges: int
    read_sectors: int
    read_ticks: int
    write_ios: int
    write_merges: int
    write_sectors: int
    write_ticks: int
    in_flight: int
    io_ticks: int
    time_in_queue: int
    discard_ios: int = 0
    discard_merges: int = 0
    discard_sectors: int = 0
    discard_ticks: int = 0
    flush_ios: int = 0
    flush_ticks: int = 0


FIELDS = tuple(f.name for f in dataclasses.fields(DiskStat))
_REQUIRED = 11


def parse_disk_stat(text: str) -> DiskStat:
    """ValueError when the text is not a stat file's (fewer than 11 integers)."""
    words = text.split()
    if len(words) < _REQUIRED:
        raise ValueError(f"a block device's stat has at least {_REQUIRED} fields, not {len(words)}")
    return DiskStat(*(int(w) for w in words[:len(FIELDS)]))


def read_disk_stat(name: str, root: Path = SYS_CLASS_BLOCK) -> DiskStat:
    """The counters of block device `name` (a disk or a partition); OSError or ValueError when they cannot be
    read."""
    return parse_disk_stat((root / name / "stat").read_text())

"""Named flash device profiles (flashdev/profiles.toml): loading, validation, and the filter arguments they become."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from pathlib import Path
from typing import Any

from smartio.errors import SmartioError, UsageError

CLASSES = ("seq_read", "seq_write", "rand_read", "rand_write")
# The data file lives beside the C model in flashdev/; the package's profiles.toml links to it, so that a wheel
# (pip install .) carries a copy as package data. SMARTIO_FLASHDEV_PROFILES points elsewhere.
DEFAULT_FILE = Path(__file__).with_name("profiles.toml")

_SCALARS = {"description": str, "queue_depth": int, "max_request_kb": int, "write_cache_pages": int,
            "nand_page_slots": int, "time_scale": float, "guest_overhead_us": float, "suspend_us": float,
            "flush_us": float, "trim_us": float}
_TABLES = ("cmd_us", "page_us", "switch_us")
_LIMITS = {"queue_depth": (1, 1024), "max_request_kb": (4, 1 << 20), "write_cache_pages": (0, 4096),
           "nand_page_slots": (1, 4096)}


class ProfileError(SmartioError):
    """The profile file itself is wrong; the message names the file, the profile and the key."""


@dataclasses.dataclass(frozen=True)
class Profile:
    """One emulated device. Times are microseconds of the real device; the server multiplies by time_scale."""

    name: str
    description: str
    queue_depth: int            # device queue depth the guest must see (virtio_blk.queue_depth)
    max_request_kb: int         # largest request the phone's host controller takes (the guest's max_sectors_kb)
    write_cache_pages: int      # 4 KiB slots of the write buffer; 0 = write-through
    nand_page_slots: int        # slots a random write takes (it fills a NAND page buffer on its own)
    time_scale: float           # multiplies every time, so TCG's per-I/O overhead stays small beside them
    guest_overhead_us: float    # real us the guest's own I/O path adds to each request; taken off the front end
    cmd_us: dict[str, float]    # front-end time per request, by class
    page_us: dict[str, float]   # die time per 4 KiB page, by class
    switch_us: dict[str, float]  # extra die time of a program that follows a read, by (write) class
    suspend_us: float           # added to a program each time a read suspends it
    flush_us: float
    trim_us: float
    targets: dict[str, Any] = dataclasses.field(default_factory=dict)   # published figures it is calibrated to

    def record(self) -> dict[str, Any]:
        """What a results document keeps of the profile it was measured on."""
        return {"name": self.name, "description": self.description, "queue_depth": self.queue_depth,
                "max_request_kb": self.max_request_kb, "time_scale": self.time_scale}

    def alone_latency_us(self, cls: str) -> float:
        """The model's latency of one 4 KiB request of a class on an idle device (unscaled)."""
        if cls.endswith("write") and self.write_cache_pages > 0:
            return self.cmd_us[cls]
        return self.cmd_us[cls] + self.page_us[cls]

    def filter_args(self, time_scale: float | None = None, guest_overhead_us: float | None = None) -> list[str]:
        """The flashdev filter's key=value arguments: times scaled, the guest's own overhead taken off the front end.

        The published latencies are end to end: they include the phone's own I/O stack. In the testbed the
        guest's I/O path (virtio, QEMU, NBD) plays that part and costs guest_overhead_us of real time per request,
        so the emulated front end supplies only the rest.
        """
        k = self.time_scale if time_scale is None else time_scale
        o = self.guest_overhead_us if guest_overhead_us is None else guest_overhead_us

        def four(table: dict[str, float], minus: float = 0.0) -> str:
            return ",".join(f"{max(0.0, table[c] * k - minus):.3f}" for c in CLASSES)

        return [f"flash-cmd-us={four(self.cmd_us, o)}", f"flash-page-us={four(self.page_us)}",
                f"flash-switch-us={four(self.switch_us)}", f"flash-suspend-us={self.suspend_us * k:.3f}",
                f"flash-write-cache={self.write_cache_pages}", f"flash-nand-page-slots={self.nand_page_slots}",
                f"flash-flush-us={self.flush_us * k:.3f}", f"flash-trim-us={self.trim_us * k:.3f}"]


def profiles_file() -> Path:
    return Path(os.environ.get("SMARTIO_FLASHDEV_PROFILES", DEFAULT_FILE))


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ProfileError(f"{path}: profile file not found (set SMARTIO_FLASHDEV_PROFILES to another file)") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{path}: not valid TOML: {e}") from e


def _number(where: str, value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ProfileError(f"{where} = {value!r}: expected {'an integer' if kind is int else 'a number'}")
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where} = {value!r}: must be finite and not negative")
    return kind(value)


def _parse(path: Path, name: str, raw: Any) -> Profile:
    where = f"{path} [{name}]"
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected a table")
    unknown = set(raw) - set(_SCALARS) - set(_TABLES) - {"targets"}
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {"name": name, "targets": raw.get("targets", {})}
    for key, kind in _SCALARS.items():
        if key not in raw:
            raise ProfileError(f"{where}: missing key {key}")
        if kind is str:
            if not isinstance(raw[key], str):
                raise ProfileError(f"{where} {key}: expected a string")
            fields[key] = raw[key]
            continue
        fields[key] = _number(f"{where} {key}", raw[key], kind)
        lo, hi = _LIMITS.get(key, (0, math.inf))
        if not lo <= fields[key] <= hi:
            raise ProfileError(f"{where} {key} = {raw[key]!r}: must be between {lo} and {hi}")
    if fields["time_scale"] <= 0:
        raise ProfileError(f"{where} time_scale = {raw['time_scale']!r}: must be positive")
    for table in _TABLES:
        t = raw.get(table)
        if not isinstance(t, dict) or set(t) != set(CLASSES):
            raise ProfileError(f"{where} {table}: needs exactly the classes {', '.join(CLASSES)}")
        fields[table] = {c: _number(f"{where} {table}.{c}", t[c], float) for c in CLASSES}
    return Profile(**fields)


def all_profiles(path: Path | None = None) -> dict[str, Profile]:
    """Every profile of the file, validated, by name in file order."""
    path = path or profiles_file()
    return {name: _parse(path, name, raw) for name, raw in _read(path).items()}


def load_profile(name: str, path: Path | None = None) -> Profile:
    """The named profile; UsageError naming --profile if there is no such profile."""
    profiles = all_profiles(path)
    if name not in profiles:
        raise UsageError("--profile", name, f"unknown profile; known: {', '.join(profiles)}")
    return profiles[name]


def device_line(recorded: dict[str, Any]) -> str:
    """'queue depth 2, requests up to 128 KiB, time scale 10' from a results document's profile (documents
    written before max_request_kb existed were measured with the guest's own limit, 1280 KiB)."""
    kb = recorded.get("max_request_kb")
    return (f"queue depth {recorded['queue_depth']}, requests up to {kb if kb else 1280} KiB, "
            f"time scale {recorded['time_scale']:g}")

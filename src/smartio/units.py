"""Sizes as the user types them and as smartio prints them: the one parser and the one formatter."""

from __future__ import annotations

import re

from smartio.errors import UsageError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(flag: str, text: str | int) -> int:
    """'64M', '1.5GiB', '4096' (bytes) -> bytes, in powers of 1024; a bad or non-positive size is a
    UsageError naming `flag`."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise UsageError(flag, text, "not a size; use bytes or a suffix K, M, G (powers of 1024), e.g. 64M")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise UsageError(flag, text, "must be positive")
    return value


def mib(n: int) -> str:
    """Bytes in MiB, with as many digits as it takes (0.5 MiB, 128 MiB), never rounded to 0."""
    return f"{n / (1 << 20):g} MiB"

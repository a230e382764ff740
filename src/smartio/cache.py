"""Where smartio keeps what it downloads or builds (kernel packages, the flashdev filter, the trace helper).

$SMARTIO_CACHE if set, else $XDG_CACHE_HOME/smartio, else ~/.cache/smartio.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(part: str = "") -> Path:
    base = os.environ.get("SMARTIO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "smartio")
    return Path(base) / part if part else Path(base)

"""Output paths (`--json FILE`, `--plots DIR`, ...), checked before anything runs, so that a typo costs nothing
instead of failing after a long measurement."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from smartio.errors import UsageError


def check_output_file(flag: str, path: str | Path) -> Path:
    """A file to be written later: its directory exists and is writable, and it is not itself a directory."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(flag, path, "is a directory; give a file name")
    parent = p.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() or _under_a_file(parent) else "does not exist"
        raise UsageError(flag, path, f"{parent} {why}")
    if not os.access(p if p.exists() else parent, os.W_OK):
        raise UsageError(flag, path, f"{p if p.exists() else parent} is not writable")
    return p


def check_output_dir(flag: str, path: str | Path) -> Path:
    """A directory to be made (with its parents) and written later: the nearest existing one on its path is a
    writable directory."""
    p = Path(path)
    existing = p
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(flag, path, f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(flag, path, f"{existing} is not writable")
    return p


def write_json(flag: str, path: str | Path, doc: Any) -> None:
    """Writes a result document to a path checked earlier with check_output_file; a late failure names the flag."""
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as e:
        raise UsageError(flag, path, f"cannot write: {e.strerror}") from e


def write_whole(path: Path, text: str) -> None:
    """`text` into `path`, which is whole or absent at every moment (written beside it, then renamed over it): a
    reader of a run still going, or a run killed while writing, never sees half a file."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def _under_a_file(p: Path) -> bool:
    return any(a.exists() and not a.is_dir() for a in p.parents)

"""Builds the flashdev nbdkit filter (flashdev/flashdev.c) on demand into a per-source cache directory."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from smartio.cache import cache_dir
from smartio.errors import MissingToolError, SmartioError

SOURCE_DIR = Path(__file__).resolve().parents[3] / "flashdev"
FILTER_HEADER = Path("/usr/include/nbdkit-filter.h")


def cache_root() -> Path:
    return cache_dir("flashdev")


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in ("flashdev.c", "Makefile"):
        h.update((SOURCE_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def build_filter() -> Path:
    """The path of the built filter, building it first if this source has not been built yet.

    The cache key is a hash of the source, so an edited flashdev.c is rebuilt and an unchanged one never is.
    The build goes to a temporary directory and is renamed into place, so concurrent builds cannot see half a file.
    """
    if not (SOURCE_DIR / "flashdev.c").is_file():
        raise SmartioError(f"{SOURCE_DIR}/flashdev.c not found: run smartio from a source checkout")
    out = cache_root() / _source_hash() / "flashdev.so"
    if out.is_file():
        return out
    for tool in ("make", "gcc"):
        if shutil.which(tool) is None:
            raise MissingToolError(tool, "install it with: scripts/install-deps --vm")
    if not FILTER_HEADER.is_file():
        raise MissingToolError("nbdkit-plugin-dev", "needed to build the flashdev filter; "
                               "install it with: scripts/install-deps --vm")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        r = subprocess.run(["make", "-s", "-C", str(SOURCE_DIR), f"O={tmp}", f"{tmp}/flashdev.so"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SmartioError(f"building the flashdev filter failed:\n{r.stdout}{r.stderr}")
        os.replace(Path(tmp) / "flashdev.so", out)
    return out

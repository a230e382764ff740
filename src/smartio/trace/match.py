"""Bio -> request -> completion matching (Q2C, D2C), by the small C helper in _match.c.

The helper is compiled with the system C compiler on first use into ~/.cache/smartio/trace/, keyed
by the hash of its source, and loaded with ctypes.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from smartio.errors import MissingToolError, SmartioError
from smartio.trace.events import EVENT_DTYPE

SOURCE = Path(__file__).with_name("_match.c")


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    src = SOURCE.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "smartio" / "trace"
    lib = cache / f"match-{digest}.so"
    if not lib.exists():
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if cc is None:
            raise MissingToolError("cc", "the trace analysis compiles a small C helper; "
                                   "install gcc (scripts/install-deps --vm)")
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".so")
        os.close(fd)
        res = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            os.unlink(tmp)
            raise SmartioError(f"compiling {SOURCE} failed:\n{res.stderr}")
        os.replace(tmp, lib)  # atomic, so parallel first uses do not load a half-written file
    dll = ctypes.CDLL(str(lib))
    dll.sio_match.restype = ctypes.c_int
    dll.sio_match.argtypes = [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 5
    dll.sio_merge.restype = None
    dll.sio_merge.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return dll


MAX_MERGE = 256  # parts sio_merge takes at once (CPUs of one recording)


def merge_sorted(parts: list[np.ndarray]) -> np.ndarray:
    """Merges event arrays, each sorted by time, into one (ties keep the order of the parts)."""
    if len(parts) == 1:
        return parts[0]
    if len(parts) > MAX_MERGE:
        return merge_sorted([merge_sorted(parts[i:i + MAX_MERGE]) for i in range(0, len(parts), MAX_MERGE)])
    parts = [np.ascontiguousarray(p, dtype=EVENT_DTYPE) for p in parts]
    out = np.empty(sum(len(p) for p in parts), dtype=EVENT_DTYPE)
    ptrs = (ctypes.c_void_p * len(parts))(*[p.ctypes.data for p in parts])
    lens = np.array([len(p) for p in parts], dtype=np.int64)
    _library().sio_merge(ptrs, lens.ctypes.data, len(parts), out.ctypes.data)
    return out


BIO_DTYPE = np.dtype([("time", "<u8"), ("q2c", "<i8"), ("tc", "<u4"), ("bytes", "<u4"), ("pid", "<u4"),
                      ("pad", "<u4")])
REQ_DTYPE = np.dtype([("time", "<u8"), ("issue", "<i8"), ("sector", "<u8"), ("bytes", "<u4"), ("tc", "<u4"),
                      ("pid", "<u4"), ("nbios", "<i4")])


@dataclass
class Matched:
    """Bios (one per Q, with Q2C) and completed requests (one per C, with issue time and submitter)."""

    bios: np.ndarray     # BIO_DTYPE
    reqs: np.ndarray     # REQ_DTYPE
    counts: np.ndarray   # events per action code (0..31)


def match(events: np.ndarray) -> Matched:
    """Follows bios into requests; `events` must be sorted by time (a Trace always is)."""
    ev = np.ascontiguousarray(events, dtype=EVENT_DTYPE)
    n = len(ev)
    bios = np.empty(n, dtype=BIO_DTYPE)
    reqs = np.empty(n, dtype=REQ_DTYPE)
    nbio, nreq = ctypes.c_int64(0), ctypes.c_int64(0)
    counts = np.zeros(32, dtype=np.int64)
    rc = _library().sio_match(ev.ctypes.data, n, bios.ctypes.data, ctypes.byref(nbio), reqs.ctypes.data,
                              ctypes.byref(nreq), counts.ctypes.data)
    if rc == -1:
        raise SmartioError("out of memory while matching trace events")
    if rc < -1:
        raise SmartioError(f"trace events are not sorted by time at event {-rc - 2}")
    return Matched(bios[:nbio.value], reqs[:nreq.value], counts)

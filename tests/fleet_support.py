"""What the results service's tests share: a real PostgreSQL (Debian's, in a temporary directory) and a real
`smartio serve` process on loopback, on either database, and StoreBench documents shaped like a machine's own."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smartio.fleet.identity import submission_of
from smartio.fleet.submission import PATTERNS
from smartio.fleet.tempdb import TempPostgres, pg_bindir

PRIVATE_HOST = "alice-laptop.example"
PRIVATE_PATH = "/home/alice/scratch"


def postgres_unavailable() -> str | None:
    if pg_bindir() is None:
        return "PostgreSQL is not installed (Debian package postgresql; scripts/install-deps installs it)"
    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode != 0:
        return "setpriv (util-linux) is missing: as root, initdb must run as another user"
    return None


@contextlib.contextmanager
def postgres() -> Iterator[TempPostgres]:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    pg = TempPostgres()
    try:
        yield pg.start()
    finally:
        pg.stop()


def request(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = 30) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def get_json(url: str) -> Any:
    status, body, _ = request("GET", url)
    assert status == 200, body[:300]
    return json.loads(body)


def local_doc(lat_ms: float | dict[str, float] = 1.0, *, quick: bool = False, profile: str | None = None,
              started: str = "2026-12-01T10:00:00+00:00", size_bytes: int = 64 << 20, iowait: float = 2.0,
              warnings: list[str] | None = None) -> dict[str, Any]:
    """A `smartio bench latency` document as this machine would store it, with a host name and paths in it."""
    lat = lat_ms if isinstance(lat_ms, dict) else {p: lat_ms * (1 + i / 4) for i, p in enumerate(PATTERNS)}
    stat = {"std": 0.01, "n": 3, "ci95": [0.5, 2.0], "ci_method": "log-t"}
    doc: dict[str, Any] = {
        "experiment": "latency",
        "target": {"path": PRIVATE_PATH, "kind": "dir", "description": f"directory {PRIVATE_PATH} (ext4 on /dev/sda2)"},
        "device": {"name": "sda2", "disk": "sda", "path": "/dev/sda2", "size_bytes": 1 << 40, "scheduler": "bfq"},
        "scheduler": "bfq", "tunables": {"slice_idle": "8"}, "kernel": "6.1.0-test", "host": PRIVATE_HOST,
        "fio_version": "fio-3.33", "smartio_version": "0.1.0",
        "command": f"smartio bench latency --target {PRIVATE_PATH}", "started": started, "finished": started,
        "settings": {"quick": quick, "repeats": 3, "size_bytes": size_bytes, "bs": 4096, "streams": 1,
                     "read_only": False},
        "results": {"size_bytes": size_bytes, "bs": 4096,
                    "patterns": {p: {"mean_ms": {"mean": v, **stat}, "p50_ms": {"mean": v, **stat},
                                     "p99_ms": {"mean": 3 * v, **stat}} for p, v in lat.items()},
                    "iowait_pct": {"mean": iowait, **stat}},
        "fio_raw": [{"label": "seq_read alone", "output": {"fio version": "fio-3.33", "jobs": [
            {"jobname": "r", "job options": {"filename": f"{PRIVATE_PATH}/smartio-0", "rw": "read"}}]}}],
    }
    if profile:
        doc["profile"] = profile
    if warnings:
        doc["warnings"] = warnings
    return doc


def submission(model: str, lat_ms: float | dict[str, float] = 1.0, install: str | None = None,
               **kw: Any) -> dict[str, Any]:
    return submission_of(local_doc(lat_ms, **kw), install=install or secrets.token_hex(16), model=model)


def post(url: str, doc: Any, token: str | None = None, public: bool = True,
         raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    body = raw if raw is not None else json.dumps(doc).encode()
    status, out, _ = request("POST", f"{url}/api/v1/runs", body, {
        "Content-Type": "application/json", "X-Delete-Token": token or secrets.token_urlsafe(24),
        "X-Public": "yes" if public else "no"})
    return status, json.loads(out)


ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "tests"

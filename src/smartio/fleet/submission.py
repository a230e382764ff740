"""What a submission is: its versioned schema, its validation, its content hash, and the comparability key.

A submission is one StoreBench run as it leaves a machine (identity.submission_of builds it): the benchmark and its
settings, the device's identity, the environment, the results and the raw fio output, and what was stripped. The
server stores nothing that validate() did not accept; every refusal names the field.

The comparability key of a metric is a hash of the benchmark's method version, the experiment, its canonical
parameters (request size, data per stream, streams), the metric, its unit and its direction: only values with the
same key are ranked or plotted together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import Any

SCHEMA = "smartio.fleet.submission/1"
METHOD = 1              # StoreBench's method as the metrics below read it; bump when their meaning changes
PATTERNS = ("seq_read", "seq_write", "rand_read", "rand_write")
EXPERIMENTS = ("latency", "slowdown", "concurrency", "mixed")
MAX_TEXT = 200          # characters of any name (model, vendor, kernel, ...)
INSTALL_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: str      # "higher" or "lower" is better
    label: str


METRICS = {
    "bw_mbps": Metric("bw_mbps", "MB/s", "higher", "bandwidth at queue depth 1 (request size / mean latency)"),
    "lat_ms": Metric("lat_ms", "ms", "lower", "mean response time"),
    "iowait_pct": Metric("iowait_pct", "%", "lower", "share of CPU time in iowait while it ran"),
}


class Invalid(ValueError):
    """A submission refused: `field` is the JSON path of the offending field ("" for the document)."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
        self.status = status


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_hash(doc: dict[str, Any]) -> str:
    """The upload's identity: the same document uploaded twice is one run."""
    return hashlib.sha256(canonical(doc)).hexdigest()


# --- validation -------------------------------------------------------------------------------------------------

def _get(doc: dict[str, Any], path: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    cur: Any = doc
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not isinstance(cur, dict):
            raise Invalid(".".join(parts[:i]), "must be an object")
        if part not in cur or cur[part] is None:
            if optional:
                return None
            raise Invalid(path, "missing")
        cur = cur[part]
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "a list", bool: "true "
             "or false"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(cur, bool) and bool not in kinds or not isinstance(cur, kinds):
        raise Invalid(path, f"must be {' or '.join(names.get(k, k.__name__) for k in kinds)}")
    if isinstance(cur, str) and (len(cur) > MAX_TEXT or not cur.strip()) and path != "fio_raw":
        raise Invalid(path, f"must be 1 to {MAX_TEXT} characters")
    if isinstance(cur, float) and not math.isfinite(cur):
        raise Invalid(path, "must be a finite number")
    return cur


def _number(doc: dict[str, Any], path: str, positive: bool = True) -> float:
    try:
        v = float(_get(doc, path, (int, float)))
    except OverflowError:
        raise Invalid(path, "must be a finite number") from None
    if positive and v <= 0 or v < 0:
        raise Invalid(path, "must be positive" if positive else "must not be negative")
    return v


def validate(doc: Any) -> dict[str, Any]:
    """`doc` if it is a valid submission of this schema version; Invalid naming the field otherwise."""
    if not isinstance(doc, dict):
        raise Invalid("", "the body must be a JSON object")
    schema = doc.get("schema")
    if schema is None:
        raise Invalid("schema", "missing")
    if schema != SCHEMA:
        raise Invalid("schema", f"{str(schema)[:60]!r} is not a version this server takes (it takes {SCHEMA!r})")
    _get(doc, "benchmark", dict)
    if _get(doc, "benchmark.name", str) != "storebench":
        raise Invalid("benchmark.name", "only storebench runs are taken")
    if _get(doc, "benchmark.method", int) != METHOD:
        raise Invalid("benchmark.method", f"this server reads StoreBench method {METHOD}")
    _get(doc, "benchmark.smartio_version", str)
    dev = _get(doc, "device", dict)
    _get(doc, "device.model", str)
    if _get(doc, "device.model_source", str) not in ("dmi", "user", "emulated", "unknown"):
        raise Invalid("device.model_source", "must be dmi, user, emulated or unknown")
    if not INSTALL_ID.match(_get(doc, "device.install_id", str)):
        raise Invalid("device.install_id", "must be 32 lowercase hex digits")
    storage = _get(doc, "device.storage", dict)
    if not storage:
        raise Invalid("device.storage", "must name the storage part (bus, vendor, model, ...)")
    for k, v in storage.items():
        if not isinstance(v, str) or len(v) > MAX_TEXT or len(k) > 40:
            raise Invalid(f"device.storage.{k[:40]}", f"must be a string of at most {MAX_TEXT} characters")
    if dev.get("emulated") is not None:
        _get(doc, "device.emulated", str)
    _get(doc, "environment", dict)
    _get(doc, "environment.kernel", str)
    _get(doc, "environment.fio_version", str)
    _get(doc, "environment.scheduler", str, optional=True)
    _get(doc, "run", dict)
    _get(doc, "run.started", str)
    settings = _get(doc, "run.settings", dict)
    _number(doc, "run.settings.bs")
    _number(doc, "run.settings.size_bytes")
    _get(doc, "run.settings.quick", bool)
    for i, f in enumerate(_get(doc, "run.flags", list)):
        if not isinstance(f, str) or len(f) > MAX_TEXT:
            raise Invalid(f"run.flags.{i}", "must be a string")
    results = _get(doc, "results", dict)
    if not results:
        raise Invalid("results", "holds no experiment")
    for name in results:
        if name not in EXPERIMENTS:
            raise Invalid(f"results.{name[:40]}", f"unknown experiment; known: {', '.join(EXPERIMENTS)}")
        _get(doc, f"results.{name}", dict)
    if "latency" in results:
        for p in PATTERNS:
            _number(doc, f"results.latency.patterns.{p}.mean_ms.mean")
        _number(doc, "results.latency.iowait_pct.mean", positive=False)
    del settings
    if doc.get("fio_raw") is not None and not isinstance(doc["fio_raw"], list):
        raise Invalid("fio_raw", "must be a list of fio's JSON outputs")
    privacy = _get(doc, "privacy", dict)
    if not isinstance(privacy.get("stripped"), list):
        raise Invalid("privacy.stripped", "missing: the document says what was stripped from it")
    return doc


# --- what may be compared -------------------------------------------------------------------------------------

def params(doc: dict[str, Any], experiment: str) -> dict[str, Any]:
    s = doc["run"]["settings"]
    return {"experiment": experiment, "bs": int(s["bs"]), "size_bytes": int(s["size_bytes"]),
            "streams": int(s.get("streams") or 1)}


def comparability_key(doc: dict[str, Any], experiment: str, metric: str) -> str:
    m = METRICS[metric]
    basis = {"benchmark": "storebench", "method": METHOD, **params(doc, experiment), "metric": m.name,
             "unit": m.unit, "direction": m.direction}
    return hashlib.sha256(canonical(basis)).hexdigest()[:16]


def run_key(doc: dict[str, Any]) -> str:
    """The key of the run as a whole (its first experiment's parameters): two runs side by side compare only if
    theirs are equal."""
    first = next(iter(doc["results"]))
    basis = {"benchmark": "storebench", "method": METHOD, **params(doc, first)}
    return hashlib.sha256(canonical(basis)).hexdigest()[:16]


def describe_key(doc: dict[str, Any], experiment: str, metric: str) -> str:
    p = params(doc, experiment)
    m = METRICS[metric]
    return (f"{experiment} {m.name} [{m.unit}, {m.direction} is better], {p['bs'] // 1024} KiB requests, "
            f"{p['size_bytes'] // 1048576} MiB per stream, {p['streams']} stream(s), method {METHOD}")


def metrics(doc: dict[str, Any]) -> list[tuple[str, str, str, float]]:
    """(comparability key, metric, pattern, value) rows of a validated submission: what the pages rank and plot."""
    out: list[tuple[str, str, str, float]] = []
    lat = doc["results"].get("latency")
    if lat is None:
        return out
    bs = float(doc["run"]["settings"]["bs"])
    kb = comparability_key(doc, "latency", "bw_mbps")
    kl = comparability_key(doc, "latency", "lat_ms")
    for p in PATTERNS:
        mean_ms = float(lat["patterns"][p]["mean_ms"]["mean"])
        out.append((kl, "lat_ms", p, mean_ms))
        out.append((kb, "bw_mbps", p, bs / (mean_ms / 1000) / 1e6))
    out.append((comparability_key(doc, "latency", "iowait_pct"), "iowait_pct", "all",
                float(lat["iowait_pct"]["mean"])))
    return out

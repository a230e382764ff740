"""A device's identity, and a local run turned into a submission with nothing private in it.

A device is its model (DMI's vendor and product name, or what the user names it), its storage part (sysfs: vendor,
model, revision; eMMC/SD: name, manfid, oemid, fwrev; never a serial number) and a random per-install id. A run of
the testbed's emulated flash is the device `emulated <profile>`, labelled as emulated.

What leaves the machine is built field by field from the local document (nothing is copied wholesale but the
results and fio's output, and those are scrubbed): the host name, the command line (it holds paths), the target's
path and description, the device node and its size are dropped; any string in the results or in fio's output that
holds a path, the host name or the user's name is replaced by "[stripped]". The submission's privacy.stripped says
which fields went.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import socket
from pathlib import Path
from typing import Any

from smartio.errors import UsageError
from smartio.fleet.submission import EXPERIMENTS, METHOD, SCHEMA

SYS = Path("/sys")
STRIPPED = "[stripped]"
DROPPED = ("host", "command", "target.path", "target.description", "device.path", "device.size_bytes",
           "device.name (the partition)")


def install_id(data_dir: Path) -> str:
    """This install's random id (created once, kept in DATA_DIR/install-id): tells devices of one model apart."""
    path = data_dir / "install-id"
    try:
        text = path.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{32}", text):
            return text
    except OSError:
        pass
    new = secrets.token_hex(16)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new + "\n")
    os.replace(tmp, path)
    return new


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text or None


def dmi_model(sys: Path = SYS) -> str | None:
    """The machine's model from DMI (vendor and product name), or None where there is no DMI."""
    dmi = sys / "class/dmi/id"
    parts = [p for p in (_read(dmi / "sys_vendor"), _read(dmi / "product_name")) if p]
    return " ".join(parts) or None


def storage_part(disk: str | None, sys: Path = SYS) -> dict[str, str]:
    """The storage part under block device DISK from sysfs: its bus and the fields that name the part."""
    if not disk:
        return {"bus": "unknown"}
    dev = sys / "block" / disk / "device"
    try:
        bus = os.path.basename(os.path.realpath(dev / "subsystem"))
    except OSError:
        bus = "unknown"
    part = {"bus": bus if dev.exists() else "unknown"}
    names: tuple[str, ...]
    if disk.startswith("mmcblk"):
        names = ("name", "manfid", "oemid", "fwrev", "type")
    elif disk.startswith("nvme"):
        names = ("model", "firmware_rev")
    else:
        names = ("vendor", "model", "rev")
    for n in names:
        v = _read(dev / n)
        if v is not None:
            part[n] = v[:200]
    return part


def _secrets_of_this_machine() -> list[str]:
    out = []
    for value in (socket.gethostname(), socket.getfqdn(), _user(), os.path.expanduser("~")):
        if value and len(value) >= 3 and value not in ("/", "root", "localhost"):
            out.append(value)
    return out


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return None


def scrub(value: Any, where: str, stripped: set[str], private: list[str]) -> Any:
    """`value` with every string that holds a path or one of `private` replaced; the JSON paths replaced go into
    `stripped` (list positions as *)."""
    if isinstance(value, dict):
        return {k: scrub(v, f"{where}.{k}", stripped, private) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, f"{where}.*", stripped, private) for v in value]
    if isinstance(value, str) and (re.search(r"(^|[\s=:,;])/[^\s/]", value) or any(p in value for p in private)):
        stripped.add(where)
        return STRIPPED
    return value


def _split(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The experiments' results of a StoreBench document (all: the four; otherwise the one) and fio's outputs."""
    if doc.get("experiment") == "all":
        parts = doc["results"]
        results = {k: v["results"] for k, v in parts.items()}
        raw = [r for v in parts.values() for r in v.get("fio_raw") or []]
        return results, raw
    return {doc["experiment"]: doc["results"]}, list(doc.get("fio_raw") or [])


def submission_of(doc: dict[str, Any], *, install: str, model: str | None = None,
                  sys: Path = SYS) -> dict[str, Any]:
    """The submission of a stored StoreBench run (a `smartio bench` document)."""
    experiment = doc.get("experiment")
    if doc.get("kind") == "compare" or experiment not in (*EXPERIMENTS, "all"):
        raise UsageError("ID", doc.get("id", "?"), f"is a {doc.get('kind') or ''} {experiment} run; only "
                         "`smartio bench` StoreBench runs (latency, slowdown, concurrency, mixed, all) can be "
                         "submitted".replace("  ", " "))
    stripped = set(DROPPED)
    private = _secrets_of_this_machine()
    results, raw = _split(doc)
    profile = doc.get("profile")
    dev = doc.get("device") or {}
    if profile:
        name, source = f"emulated {profile}", "emulated"
        storage = {"bus": "emulated", "profile": str(profile)}
    else:
        found = model or dmi_model(sys)
        name, source = (model, "user") if model else (found, "dmi") if found else ("unknown model", "unknown")
        storage = storage_part(dev.get("disk"), sys)
    settings = doc.get("settings") or {}
    flags = [f"warning: {w}" for w in doc.get("warnings") or [] if isinstance(w, str)]
    if settings.get("quick"):
        flags.append("quick")
    if profile:
        flags.append("emulated")
    sub: dict[str, Any] = {
        "schema": SCHEMA,
        "benchmark": {"name": "storebench", "experiment": experiment, "method": METHOD,
                      "smartio_version": str(doc.get("smartio_version") or "?")},
        "device": {"model": str(name)[:200], "model_source": source, "storage": storage, "install_id": install,
                   "emulated": profile},
        "environment": {"kernel": str(doc.get("kernel") or "?"), "fio_version": str(doc.get("fio_version") or "?"),
                        "scheduler": doc.get("scheduler"),
                        "tunables": {str(k): str(v) for k, v in (doc.get("tunables") or {}).items()}},
        "run": {"started": doc["started"], "finished": doc.get("finished"),
                "settings": {k: settings[k] for k in ("quick", "repeats", "size_bytes", "bs", "streams", "read_only")
                             if k in settings},
                "flags": flags},
        "results": scrub(results, "results", stripped, private),
        "fio_raw": scrub(raw, "fio_raw", stripped, private),
    }
    sub["environment"] = scrub(sub["environment"], "environment", stripped, private)
    sub["device"]["storage"] = scrub(storage, "device.storage", stripped, private)
    sub["privacy"] = {"stripped": sorted(stripped),
                      "rule": "no host names, user names, paths or serial numbers; strings holding them are "
                              f"replaced by {STRIPPED!r}"}
    return sub

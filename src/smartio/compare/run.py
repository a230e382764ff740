"""The host side of `smartio compare`: boot the testbed once, run the plan in the guest, gather one document.

    doc = run_compare(parse_plan(...), profile="s5-emmc", out=Path("cmp"))
    doc["results"]["smartio"]["read_slowdown"]["seq"]

The output directory gets compare.json (the document), the PNG plots, and vm/ (the testbed's artifacts: console
log, dmesg, the guest's bench documents in vm/out/runs/ and its record of the device's state, vm/out/guest.json).
Whatever the guest measured is kept even when a later step fails; the failure is raised after writing it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, Literal

from smartio.errors import NeedsRootError, SmartioError, UsageError, exit_code
from smartio.outputs import write_whole
from smartio.results import Row, Store, stored_line
from smartio.testbed import initramfs, kernelpkg, vm
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.guest import DEFAULT_MODULE, GuestSpec, default_module, repo_root
from smartio.testbed.interpreter import guest_python

DOCUMENT = "compare.json"


class GuestRefused(UsageError):
    """The guest found the plan unusable (e.g. a tunable its scheduler lacks): exit 2 with the guest's words."""

    def __init__(self, message: str) -> None:
        SmartioError.__init__(self, message)


def last_error(log: Path) -> str | None:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    errors = [ln.removeprefix("smartio: error: ") for ln in lines if ln.startswith("smartio: error: ")]
    return errors[-1] if errors else None


def stored_row(doc: dict[str, Any]) -> Row:
    """A comparison's columns in the results database: experiment `compare <kind>`, target the testbed, device the
    emulated profile, the schedulers (or runs) it compared."""
    plan = doc.get("plan") or {}
    kind = doc.get("experiment") or "+".join(doc.get("experiments") or ()) or "?"
    labels = doc.get("schedulers") or plan.get("schedulers") or plan.get("runs") or ()
    return Row(0, doc.get("started") or "", f"compare {kind}", "testbed", (doc.get("profile") or {}).get("name"),
               ",".join(labels) or None, doc.get("kernel"), doc.get("command") or "smartio compare")


def new_uid() -> str:
    """A comparison's identity in the results database (`run_uid` in its document), kept across its sessions."""
    return uuid.uuid4().hex


def write_document(doc: dict[str, Any], out_dir: Path) -> Path:
    """compare.json in `out_dir`, replaced whole (a run stopped while writing it keeps the previous one)."""
    path = out_dir / DOCUMENT
    write_whole(path, json.dumps(doc, indent=2) + "\n")
    return path


def keep(doc: dict[str, Any], out_dir: Path, db: str | Path | None = None) -> None:
    """compare.json in `out_dir`, and the document in the results database (`smartio results list`, `show ID`):
    every comparison, also one that failed or was interrupted, with what it measured. A run is one row, found by
    the document's `run_uid` (which stays the same across a run's writes and `compare resume` sessions): a later write
    (plots added, another session) replaces it, and the row's id goes into the document. The file is written
    first, and a database that fails only warns: a run of hours is not lost to it."""
    path = write_document(doc, out_dir)
    try:
        store = Store(db)
        try:
            run_id = store.put(doc, stored_row(doc), uid=doc.get("run_uid"))
        finally:
            store.close()
    except (SmartioError, sqlite3.Error, OSError, ValueError) as e:
        print(f"smartio compare: {path} is not in the results database: {e}", file=sys.stderr)
        return
    if doc.get("id") != run_id:                 # the first write of a run: the file learns its id
        doc["id"] = run_id
        write_document(doc, out_dir)


def kept_line(doc: dict[str, Any], out_dir: Path) -> str:
    """Where a comparison is kept: compare.json (and its plots) in `out_dir`, and its run in the results database."""
    plots = ", ".join(Path(p).name for p in doc.get("plots") or ())
    return f"compare.json{' and ' + plots if plots else ''} in {out_dir}" + (stored_line(doc) if doc.get("id") else "")


def check_testbed() -> None:
    """Root and a bootable testbed, checked before any output is made (every compare experiment boots one)."""
    if os.geteuid() != 0:
        raise NeedsRootError("booting the testbed (virtiofsd shares host directories with the guest)")
    reason = vm.unavailable_reason()
    if reason:
        raise SmartioError(f"the testbed cannot run here: {reason}")


def new_out_dir(requested: Path | None) -> Path:
    """--out if new or empty, else ./artifacts/compare-<timestamp>."""
    if requested is None:
        requested = Path.cwd() / "artifacts" / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    if requested.exists() and (not requested.is_dir() or any(requested.iterdir())):
        raise UsageError("--out", requested, "exists and is not empty; pick a new directory")
    requested.mkdir(parents=True, exist_ok=True)
    return requested.resolve()


def vm_profile(profile: str, timeout: float, time_scale: float | None = None) -> Any:
    """The emulated device of a comparison (with `time_scale` in place of the profile's, if given), after checking
    the flags: an unknown profile, a time scale or timeout that is not a positive number (nan, inf) is exit 2."""
    from smartio.flashdev import load_profile

    prof = load_profile(profile)             # UsageError naming --profile for an unknown one
    if time_scale is not None:
        if not 0 < time_scale < math.inf:
            raise UsageError("--time-scale", time_scale, "must be a positive number")
        prof = dataclasses.replace(prof, time_scale=time_scale)
    if not 0 < timeout < math.inf:
        raise UsageError("--timeout", timeout, "must be a positive number of seconds")
    return prof


def module_for(schedulers: Iterable[str], kernel: str = kernelpkg.DEFAULT_KERNEL,
               flavour: str = kernelpkg.FLAVOUR) -> list[Path]:
    """The scheduler module (built for `kernel` and `flavour`: guest.default_module) to insmod at boot if smartio is
    among the scheduler names; an error naming the flag if it is wanted but not built."""
    if "smartio" not in schedulers:
        return []
    repo = repo_root()
    ko = default_module(repo, flavour, kernel) if repo else None
    if ko is None or not ko.is_file():
        name = kernel if kernel in kernelpkg.KERNELS else kernelpkg.kernel_of(kernel)
        how = ("`make module`" if flavour == kernelpkg.FLAVOUR else "`make -C kernel generic`") \
            if name == kernelpkg.DEFAULT_KERNEL else f"`make -C kernel matrix KERNELS={name} ARCHS=amd64`"
        raise UsageError("--schedulers", "smartio", f"the scheduler module {ko or DEFAULT_MODULE} is not built for "
                                                    f"{kernel}; run {how} first")
    return [ko]


def restored(record: dict[str, Any] | None) -> bool | None:
    if not record or not record.get("after"):
        return None
    b, a = record["before"], record["after"]
    return all(b[k] == a[k] for k in ("scheduler", "nr_requests", "tunables"))


def vm_record(result: vm.VmResult | None) -> dict[str, Any]:
    """The testbed's run.json (how the disks reached QEMU, ...), or {}."""
    f = result.artifacts_dir / "run.json" if result else None
    return json.loads(f.read_text()) if f and f.exists() else {}


def provenance(experiment: str | None, plan: dict[str, Any], *, profile: Any, command: str, started: str,
               vm_result: vm.VmResult | None, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """The header every comparison's document opens with: what ran (its experiment and plan), on what (the emulated
    device, the kernel and how QEMU ran it, how the disks reached it, fio), how busy the host was, the command, when
    and for how long. Without a VM result (an interrupted session, or tests feeding recorded files) the kernel and
    the rest come from `known`, what the guest's own records say."""
    known = known or {}
    head: dict[str, Any] = {"kind": "compare", **({"experiment": experiment} if experiment else {}), "plan": plan,
                            "profile": profile.record()}
    for key in ("kernel", "accel", "host_load"):
        head[key] = getattr(vm_result, key) if vm_result else known.get(key)
    head["disk_transport"] = vm_record(vm_result).get("disk_transport") if vm_result else known.get("disk_transport")
    head["fio_version"] = known.get("fio_version")
    return {**head, "command": command, "started": started,
            "duration_s": round(vm_result.duration_s, 1) if vm_result else None}


def run_in_guest(module: str, plan_json: str, assemble_doc: Callable[[Path, vm.VmResult | None, str], dict],
                 *, profile: Any, out: Path | None, timeout: float,
                 stream: IO[bytes] | None | Literal["stdout"], existing_out: bool = False,
                 db: str | Path | None = None, boot: Boot = DEFAULT_BOOT,
                 plots: Callable[[dict[str, Any], Path], list[Path]] | None = None,
                 disks: int, disk_size: int, modules: Sequence[str | Path] | None,
                 flavour: str = kernelpkg.FLAVOUR, kernel: str = kernelpkg.DEFAULT_KERNEL) -> tuple[dict, Path]:
    """Boot the testbed once and run `python -m MODULE PLAN_JSON OUT` in the guest (an experiment's guest side),
    then build the document with assemble_doc(guest out dir, VM result or None, start time) into compare.json:
    also on Ctrl-C, from what the guest finished. A failed guest or a missing result raises, naming compare.json.
    kernel: the guest's kernel (GuestSpec.kernel); the document's `kernel` is the release that ran.
    existing_out: `out` is made already (and may hold an earlier session's run, which this one resumes); this
    session's VM artifacts go to the next free vm-<n> in it (session_dirs). The document is also stored in the
    results database `db` (keep()). plots(doc, out dir), if given, draws the document's plots beside it once the
    guest is done, also when it failed (from what it measured). A guest that exits 2 refused the plan (a tunable its
    scheduler lacks, say): that is GuestRefused, exit 2 with the guest's own words, as the CLI exits on bad input."""
    check_testbed()
    out_dir = out.resolve() if existing_out and out is not None else new_out_dir(out)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    argv = [guest_python(), "-m", module, plan_json, initramfs.GUEST_OUT]
    doc_path = out_dir / DOCUMENT
    uid = new_uid()                    # the run's identity in the results database, unless assemble_doc gives one
    earlier = len(session_dirs(out_dir))
    artifacts = out_dir / (f"vm-{earlier + 1}" if earlier else "vm")
    booted = boot.record()
    spec = GuestSpec(profile=profile, disks=disks, disk_size=disk_size, modules=modules, kernel=kernel,
                     flavour=flavour, boot=boot, timeout=timeout, artifacts=artifacts)
    try:
        result = vm.run(argv, spec, stream=stream)
    except KeyboardInterrupt:
        guest_out = artifacts / "out"
        if guest_out.is_dir():
            keep({"run_uid": uid, "vm": booted, **assemble_doc(guest_out, None, started)}, out_dir, db)
            print(f"smartio compare: interrupted; what was measured is in {doc_path}", file=sys.stderr)
        raise
    doc = {"run_uid": uid, "vm": booted, **assemble_doc(result.out_dir, result, started)}
    keep(doc, out_dir, db)
    if plots is not None:
        doc["plots"] = [str(p) for p in plots(doc, out_dir)]
        keep(doc, out_dir, db)
    if result.failure:
        raise SmartioError(f"{result.failure}; what was measured is in {doc_path}")
    if result.rc == 2:
        raise GuestRefused(last_error(result.output_log) or f"the guest refused the plan; see {result.output_log}")
    if result.rc != 0 or doc["missing"]:
        raise SmartioError(f"the guest exited with {result.rc}; missing: {', '.join(doc['missing']) or 'nothing'}; "
                           f"see {result.output_log}; what was measured is in {doc_path}")
    return doc, out_dir


def session_dirs(out_dir: Path) -> list[Path]:
    """The VM artifact directories of a run's sessions, in order: vm, then vm-2, vm-3, ... of each `compare resume`."""
    def number(p: Path) -> int:
        return 1 if p.name == "vm" else int(p.name[3:])

    found = [p for p in out_dir.glob("vm*") if p.is_dir() and (p.name == "vm" or
                                                                 (p.name.startswith("vm-") and p.name[3:].isdigit()))]
    return sorted(found, key=number)


def guest_entry(main: Callable[[list[str]], int]) -> None:
    """The `python -m` entry of an experiment's guest side: exit codes and messages as the CLI's."""
    sys.exit(exit_code(lambda: main(sys.argv[1:]), "smartio"))



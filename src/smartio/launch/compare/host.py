"""The host's side of the launch comparison: one VM session per run (`run_launch_compare`), the document assembled
from every session's cell files (`assemble`), a run's resumption (`smartio compare resume`), and a run's
document as it stands.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import IO, Any, Literal

from smartio.compare.spec import GUEST_TIME_SCALE, with_clock
from smartio.errors import SmartioError, UsageError
from smartio.launch.compare.disturbance import host_during
from smartio.launch.compare.figure import PLOT_FILE, plot
from smartio.launch.compare.plan import (
    DISK_SIZE,
    GUEST_FILE,
    HEADLINE_BG,
    RUNS_DIR,
    START_FILE,
    LaunchPlan,
    headline_key,
    read_json,
    run_file,
)
from smartio.launch.compare.stats import gmean, over_idle, over_none
from smartio.testbed import hostload
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.kernelrelease import DEFAULT_KERNEL


def assemble(plan: LaunchPlan, guest_out: Path | list[Path], *, profile: Any, command: str, started: str,
             vm_result: Any | None) -> dict[str, Any]:
    """One document from the guest's run files (pure: tests feed it recorded ones). `guest_out`: the guest's output
    directory, or those of every session of a resumed run, in order (a cell measured twice counts from the last)."""
    outs = guest_out if isinstance(guest_out, list) else [guest_out]
    samples = functools.cache(lambda o: hostload.read(o.parent / hostload.FILE))   # a session's host load
    cells: dict[str, dict[str, Any]] = {}
    cell_sessions: dict[str, dict[str, str]] = {}     # label -> cell -> the session's artifacts ("vm", "vm-2", ...)
    missing = []
    for spec in plan.schedulers:
        for app, cache, bg, mode in plan.cells():
            found = [(o, f) for o in outs if (f := o / run_file(spec.label, app, cache, bg, mode)).exists()]
            if not found:
                missing.append(f"{spec.label} {app} {cache} {bg} {mode}")
                continue
            d = json.loads(found[-1][1].read_text())
            if (host := host_during(d, samples(found[-1][0]))) is not None:
                d["results"]["host_other_cpus"] = host
            cells.setdefault(spec.label, {})[f"{app}.{cache}.{bg}.{mode}"] = d["results"]
            cell_sessions.setdefault(spec.label, {})[f"{app}.{cache}.{bg}.{mode}"] = found[-1][0].parent.name
    headline: dict[str, Any] = {}
    none = cells.get("none", {})
    for spec in plan.schedulers:
        c = cells.get(spec.label, {})
        busy_ms = gmean([b["wall_s"]["mean"] * 1e3 for a in plan.apps if (b := c.get(headline_key(a, HEADLINE_BG)))])
        ratio, ci = over_idle(c, plan.apps, HEADLINE_BG)
        ci_none = over_none(c, none, plan.apps)
        complete = all(c.get(headline_key(a, bg)) for a in plan.apps for bg in ("none", HEADLINE_BG))
        headline[spec.label] = {"cold_bg_over_idle": ratio, "cold_bg_ms": busy_ms, "complete": complete,
                                "cold_bg_over_idle_ci95": ci and [round(x, 4) for x in ci],
                                "cold_bg_over_none_ci95": ci_none and [round(x, 4) for x in ci_none]}
    records = [read_json(o / GUEST_FILE) for o in outs]
    record = records[-1]
    runs = [read_json(o.parent / "run.json") for o in outs]
    # No VM result (a session interrupted, or every cell measured already): the latest session's own record.
    known = [r for pair in zip(runs, records, strict=True) for r in pair if r][::-1]
    latest = {k: next((r[k] for r in known if r.get(k)), None) for k in ("kernel", "accel", "host_load",
                                                                           "disk_transport")}
    apps: dict[str, Any] = {}
    for r in records:                       # an application as its latest session recorded and installed it
        apps.update((r or {}).get("apps") or {})
    doc_plan = json.loads(dataclasses.replace(plan, done=()).to_json())
    from smartio.compare.run import provenance

    return {
        **provenance("launch", doc_plan, profile=profile, command=command, started=started, vm_result=vm_result,
                     known=latest),
        "apps": apps or None, "device": record and {"before": record.get("before"), "after": record.get("after")},
        "sessions": [_session(o, r, run) for o, r, run in zip(outs, records, runs, strict=True)]
        if len(outs) > 1 else None,
        "missing": missing, "headline": headline, "cells": cells,
        "cell_sessions": cell_sessions if len(outs) > 1 else None,
    }


def _session(guest_out: Path, record: dict[str, Any] | None, run: dict[str, Any] | None) -> dict[str, Any]:
    """One session of a resumed run: its VM's run.json (when it ended, for how long, on what; none while it runs)
    and what it measured."""
    run = run or {}
    return {"artifacts": guest_out.parent.name, "started": run.get("started"), "duration_s": run.get("duration_s"),
            "kernel": run.get("kernel") or (record or {}).get("kernel"), "host_load": run.get("host_load"),
            "failure": run.get("failure"),
            "cells": len(list((guest_out / RUNS_DIR).glob("*.json"))), "skipped": (record or {}).get("skipped"),
            "apps": sorted((record or {}).get("apps") or {})}


def run_launch_compare(plan: LaunchPlan | None, *, profile: str, out: Path | None, timeout: float, command: str,
                       time_scale: float | None = GUEST_TIME_SCALE,
                       stream: IO[bytes] | None | Literal["stdout"] = "stdout",
                       resume: Path | None = None, db: str | Path | None = None,
                       boot: Boot = DEFAULT_BOOT, kernel: str = DEFAULT_KERNEL) -> tuple[dict, Path]:
    """Run the plan in one VM session on `kernel`; or, with `resume` (an earlier run's directory, whose plan, profile,
    time scale, kernel and guest settings then replace the arguments), one more session that measures only the cells
    the earlier ones did not finish. The document is assembled from every session's cells, and stored in the results
    database `db` (a resumed run in place of what its earlier sessions stored)."""
    from smartio.compare.run import (
        DOCUMENT,
        keep,
        module_for,
        new_out_dir,
        new_uid,
        run_in_guest,
        session_dirs,
        vm_profile,
    )

    if resume is None:
        if plan is None:
            raise ValueError("a plan, or a run to resume")
        prof = vm_profile(profile, timeout, time_scale)
        run_plan = with_clock(plan, prof)
        out_dir = new_out_dir(out)
        uid = new_uid()
        (out_dir / START_FILE).write_text(json.dumps({"plan": json.loads(run_plan.to_json()), "profile": profile,
                                                      "time_scale": time_scale, "command": command,
                                                      "run_uid": uid, "vm": boot.record(), "kernel": kernel},
                                                     indent=2) + "\n")
        guest_plan = run_plan
    else:
        out_dir = resume.resolve()
        run_plan, profile, time_scale, known = resumed_plan(out_dir)
        boot = resumed_boot(out_dir)
        kernel = resumed_kernel(out_dir)
        uid = known or new_uid()           # a run started before smartio stored comparisons: one row from now
        prof = vm_profile(profile, timeout, time_scale)
        done = sorted({f.stem for d in session_dirs(out_dir) for f in (d / "out" / RUNS_DIR).glob("*.json")})
        guest_plan = dataclasses.replace(run_plan, done=tuple(done))
        print(f"smartio compare: resuming {out_dir}: {len(done)} cells measured in {len(session_dirs(out_dir))} "
              f"session(s), {len(guest_plan.steps())} to go", file=sys.stderr, flush=True)

    def whole_run(result: Any, started: str) -> dict[str, Any]:
        """The document from every session's run files."""
        return {"run_uid": uid, "vm": boot.record(),
                **assemble(run_plan, [d / "out" for d in session_dirs(out_dir)], profile=prof, command=command,
                           started=started, vm_result=result)}

    if guest_plan.steps():
        doc, _ = run_in_guest("smartio.launch.compare", guest_plan.to_json(),
                              lambda _out, result, started: whole_run(result, started), profile=prof, out=out_dir,
                              timeout=timeout, stream=stream, disks=1, disk_size=DISK_SIZE,
                              modules=module_for((s.name for s in run_plan.schedulers), kernel), existing_out=True,
                              db=db, boot=boot, kernel=kernel)
    else:                                   # every cell measured already: no VM, the document from what is there
        earlier = json.loads((out_dir / DOCUMENT).read_text()) if (out_dir / DOCUMENT).exists() else {}
        doc = whole_run(None, earlier.get("started", ""))
    doc["plots"] = [str(plot(doc, out_dir / PLOT_FILE))]
    keep(doc, out_dir, db)
    return doc, out_dir


def _document_uid(out_dir: Path) -> str | None:
    """The run_uid of the compare.json an earlier session wrote, if it is there and readable (a run whose START_FILE
    predates run_uid); None otherwise: then the run gets a new row."""
    from smartio.compare.run import DOCUMENT

    try:
        uid = json.loads((out_dir / DOCUMENT).read_text()).get("run_uid")
    except (OSError, ValueError, AttributeError):
        return None
    return uid if isinstance(uid, str) else None


def resumed_boot(out_dir: Path) -> Boot:
    """How the run in `out_dir` booted its guest (START_FILE's "vm"), for `compare resume`: every session boots the
    same guest, also after the testbed's own arguments changed. A run started before it was kept booted 2 vCPUs
    with the kernel's own defaults (Boot.from_record)."""
    try:
        record = json.loads((out_dir / START_FILE).read_text()).get("vm")
    except (OSError, ValueError, AttributeError):
        record = None
    return Boot.from_record(record)


def resumed_kernel(out_dir: Path) -> str:
    """The kernel the run in `out_dir` booted (START_FILE's "kernel"), for --resume; 6.1 for a run started before
    there was a choice."""
    try:
        kernel = json.loads((out_dir / START_FILE).read_text()).get("kernel")
    except (OSError, ValueError, AttributeError):
        kernel = None
    return kernel if isinstance(kernel, str) and kernel else DEFAULT_KERNEL


def resumed_plan(out_dir: Path) -> tuple[LaunchPlan, str, float | None, str | None]:
    """The plan, profile, time scale and run_uid of the run in `out_dir` (START_FILE; for a run made before it was
    written, its compare.json), for `compare resume`. The run_uid (its row in the results database) is
    START_FILE's, else that of the compare.json an earlier session wrote, else None (a run from before comparisons
    were stored)."""
    from smartio.compare.run import DOCUMENT

    def stored(plan: dict[str, Any]) -> LaunchPlan:
        """A plan stored before `interleave` and `background_start` existed measured its cells apart, with a
        background started for each launch, and its remaining cells do too."""
        return LaunchPlan.from_json(json.dumps({"interleave": False, "background_start": "each-launch", **plan}))

    path = out_dir / START_FILE
    try:
        if path.exists():
            d = json.loads(path.read_text())
            return stored(d["plan"]), d["profile"], d["time_scale"], d.get("run_uid") or _document_uid(out_dir)
        if (path := out_dir / DOCUMENT).exists():
            d = json.loads(path.read_text())
            if d.get("experiment") == "launch":
                return stored(d["plan"]), d["profile"]["name"], d["profile"]["time_scale"], d.get("run_uid")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError("resume", out_dir, f"cannot read {path}: {e}") from e
    raise UsageError("resume", out_dir, f"holds no launch comparison to resume (no {START_FILE} or launch "
                     f"{DOCUMENT})")


def _with_host_load(kept: dict[str, Any], cell: dict[str, Any] | None) -> dict[str, Any]:
    """A cell of a compare.json written before cells carried the host's load, with that of the same cell
    assembled again from its run file: only when both hold the same launches (a resumed run may have measured the
    cell again since)."""
    if (cell and "host_other_cpus" in cell and "host_other_cpus" not in kept
            and cell["wall_s"].get("values") == kept["wall_s"].get("values")):
        return {**kept, "host_other_cpus": cell["host_other_cpus"]}
    return kept


def current_document(out_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The document of the run in `out_dir` as it stands, and a note when it is not its compare.json: a run still
    measuring, or one killed before it wrote compare.json, is assembled from its sessions' cell files; a run kept
    without its cells (tests/data), or whose cells cannot be assembled again (a torn file, a renamed profile), reads
    from its compare.json. UsageError if it holds neither."""
    from smartio.compare.run import DOCUMENT, session_dirs, vm_profile

    path = out_dir / DOCUMENT
    kept = read_json(path)
    if path.exists() and kept is None:
        raise UsageError("--analyze", out_dir, f"cannot read {path}: not a JSON document (torn?)")
    if kept is not None and kept.get("experiment") != "launch":
        raise UsageError("--analyze", out_dir, f"{path} is a {kept.get('experiment')!r} comparison, not a launch one")
    outs = [d / "out" for d in session_dirs(out_dir)]
    cells = sum(len(list((o / RUNS_DIR).glob("*.json"))) for o in outs)
    if not (out_dir / START_FILE).exists() or not cells:
        if kept is None:
            raise UsageError("--analyze", out_dir, f"holds no launch comparison (no {DOCUMENT} or cell files)")
        return kept, None
    try:
        plan, profile, time_scale, uid = resumed_plan(out_dir)
        start = read_json(out_dir / START_FILE) or {}
        doc = {"run_uid": uid, "vm": Boot.from_record(start.get("vm")).record(),
               **assemble(plan, outs, profile=vm_profile(profile, 1.0, time_scale), command=start.get("command", ""),
                          started=(kept or {}).get("started", ""), vm_result=None)}
    except (SmartioError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if kept is None:
            raise UsageError("--analyze", out_dir, f"cannot assemble its cell files: {e}") from e
        return kept, f"its cell files could not be assembled again ({e}): reprinted from {path}"
    if kept is not None and len(kept.get("missing", ())) <= len(doc["missing"]):
        # compare.json has every cell there is; what it was written without (cell_sessions, before 2026-11-28;
        # the host's load per launch, before its second session) comes from the cells.
        merged = {label: {key: _with_host_load(cell, doc["cells"].get(label, {}).get(key)) for key, cell in
                          per.items()} for label, per in kept["cells"].items()}
        return {**doc, **kept, "cells": merged}, None
    since = (f"{len(kept.get('missing', ())) - len(doc['missing'])} cell(s) measured since {path} was written"
             if kept is not None else f"no {DOCUMENT} yet")
    return doc, f"{since} (a run still going, or stopped before it wrote it): reprinted from its cell files"

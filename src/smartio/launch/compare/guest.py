"""The guest's side of the launch comparison (`python -m smartio.launch.compare PLAN_JSON OUT_DIR`): record, install
and lay out each application once, then per scheduler and cell time its launches and write the cell's document.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from smartio.errors import SmartioError
from smartio.launch.compare.plan import BACKGROUND_HEAD_S, GUEST_FILE, RUNS_DIR, TRACES_DIR, LaunchPlan, run_file
from smartio.outputs import write_whole

DEVICE, MOUNT = "/dev/vda", "/mnt/smartio-launch"


RESIDENCY_INSTALLED = "page-cache insertions of a cold launch of the installed copy, in order (ftrace)"


# The median of these warm launches of the installed copy calibrates its replays: the table's cells are means over
# repeats, and the shortest of 5 (as `record` takes) came out 20 % below them under TCG. They are taken again at
# each switch to a scheduler (with --background-start each-launch, before every replay cell): over the full run's
# hour the guest's warm launches got faster (vim 94 ms at set-up, 74 to 85 ms in the later cells) while the
# replays' calibrated think times did not (122 ms).
INSTALLED_WARM_RUNS = 5


# The emulator has slow spells of tens of seconds (TCG: at one switch a warm python-stdlib launch took a median
# 0.79 s, against 0.49-0.59 s at the other four and 0.51-0.56 s in that scheduler's own cells later), and a spell
# during a scheduler's calibration would set the think times of all its replays (they took 0.80 s in every cell).
# So a calibration's median more than SPELL_TOLERANCE above the lowest median of the same launches so far in the
# session (at set-up and at the earlier switches: the set-up's alone can be in a spell too, 0.61 s once against
# 0.50-0.56 at four switches) is taken again, after SPELL_WAIT_S, up to SPELL_ROUNDS medians in all, and the lowest
# one calibrates.
SPELL_TOLERANCE, SPELL_WAIT_S, SPELL_ROUNDS = 0.15, 10.0, 3


# Launches of the installed copy with every file of it read into the page cache just before (after dropping it):
# no I/O, but the program's code sits in page frames it never ran from. Under TCG that costs the emulator a new
# translation of all of it, CPU time a cold launch pays and a warm one does not (python-stdlib installed on the
# emulated disk: 1.03 s against 0.73 s warm). A cold replay's think times are calibrated to the warm launch plus that.
INSTALLED_REFILLED_RUNS = 3


def guest_main(argv: list[str]) -> int:
    """The guest's side (see the module's docstring). SIGTERM is taken as Ctrl-C throughout, so that a background
    workload that runs across cells is stopped and the device's scheduler restored."""
    from smartio.signals import sigterm_as_interrupt

    with sigterm_as_interrupt():
        return _guest_main(argv)


def _guest_main(argv: list[str]) -> int:
    from smartio.blockdev import device_of_node
    from smartio.compare.guest import device_state, restore, say, scheduler_counters, switch, warm_up
    from smartio.launch.apps import APPS as APPSET
    from smartio.launch.launcher import CommandLauncher, drop_caches
    from smartio.launch.measure import Arm, LaunchSettings, RunningBackground, measure_interleaved
    from smartio.launch.replay import Installed, Layout, Replayer
    from smartio.launch.trace import PageCacheLog, Trace, pages_by_path, record, remap
    from smartio.sqlite.compare import make_fs
    from smartio.storebench.target import open_target

    plan = LaunchPlan.from_json(argv[0])
    out = Path(argv[1])
    for d in (RUNS_DIR, TRACES_DIR):
        (out / d).mkdir(parents=True, exist_ok=True)
    dev = device_of_node(DEVICE)
    rec: dict[str, Any] = {"device": DEVICE, "kernel": os.uname().release, "before": device_state(dev), "runs": [],
                           "after": None, "apps": {}}
    save = lambda: write_whole(out / GUEST_FILE, json.dumps(rec, indent=2) + "\n")  # noqa: E731
    save()
    opts = make_fs("ext4", False)
    Path(MOUNT).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "ext4", "-o", ",".join(opts), DEVICE, MOUNT], check=True)
    failed = 0
    running: RunningBackground | None = None     # background_start "once": the one running, if any

    def stop_background() -> None:
        nonlocal running
        if running is not None:
            bg_run, running = running, None
            bg_run.__exit__()

    try:
        target = open_target(MOUNT, writes=True, destroy_data=False)
        installs: dict[str, tuple[Trace, Installed, Layout, str, list[str]]] = {}
        cold_extra: dict[str, float] = {}       # per application: refilled launch - warm launch, s (>= 0)
        steps = plan.steps()
        rec["skipped"] = len(plan.schedulers) * len(plan.cells()) - len(steps)
        if rec["skipped"]:
            say(f"{rec['skipped']} cells measured in an earlier session of this run; {len(steps)} to go")
        for name in [a for a in plan.apps if any(c[0] == a for _, c in steps)]:
            app = APPSET[name]
            why = app.available()
            if why:
                raise SmartioError(f"application {name}: {why}")
            app_argv, cwd = app.prepare()
            say(f"recording {name}: {' '.join(app_argv)}")
            trace = record(app_argv, cwd, cold_residency=True, say=lambda m, app=name: say(f"{app}: {m}"))
            tfile = out / TRACES_DIR / f"{name}.launch"
            say(f"installing {name} and laying out its trace on {DEVICE}")
            # Made once and left in place: the filesystem is made afresh at the next boot.
            inst = Installed(trace, MOUNT).__enter__()
            layout = Layout(trace, MOUNT).__enter__()
            # Replays are calibrated against the installed copy's warm launch (see Replayer.calibrate).
            installed = CommandLauncher(app_argv, cwd, root=str(inst.root))
            warm = warm_median(installed)
            refilled = None
            if "replay" in plan.modes and "cold" in plan.caches:       # only cold replays use it
                say(f"launches of the installed {name} with its files read into the page cache first (no I/O, "
                    f"code in new page frames)")
                refilled = statistics.median(refilled_launch(installed, list(inst.paths.values()))
                                             for _ in range(INSTALLED_REFILLED_RUNS))
                cold_extra[name] = max(0.0, refilled - warm)
            # Replay reads the mapped pages a cold launch of the installed copy reads, in its order: the
            # recording's cold launch could not evict the pages of libc and the other libraries the guest's
            # processes hold mapped, which the copy on the target must read.
            say(f"cold launch of the installed {name}, for the order its mapped pages are read in (ftrace)")
            drop_caches()
            with PageCacheLog() as log:
                installed.launch()
            recorded = {str(inst.paths[f.id]): f.path for f in trace.files}
            seen, read_ahead = log.pages(set(recorded))
            sequence = [(recorded[p], page) for p, page in seen]
            ahead = {(recorded[p], page) for p, page in read_ahead}
            trace = remap(trace, pages_by_path(sequence, set(recorded.values())), RESIDENCY_INSTALLED, sequence,
                          ahead)
            trace.header["readahead"] = log.readahead_how
            trace.write(tfile)
            trace.header["path"] = str(tfile)
            installs[name] = (trace, inst, layout, trace.header.get("cwd") or "/", app_argv)
            rec["apps"][name] = {"argv": app_argv, "files": len(trace.files), "ops": len(trace.ops),
                                 "untraced_wall_s": trace.header["untraced_wall_s"],
                                 "installed_warm_s": round(warm, 6),
                                 "installed_refilled_s": None if refilled is None else round(refilled, 6),
                                 "residency": trace.header["residency"],
                                 "readahead": trace.header["readahead"],
                                 "ops_by_kind": dict(collections.Counter(o.op for o in trace.ops))}
        warm_up(DEVICE)
        calibrations: dict[tuple[str, str], dict[str, Any]] = {}    # (app, cache): under the current scheduler
        # Per application: the lowest median of its warm launches in the session so far (settled_warm).
        warm_floor = {name: app["installed_warm_s"] for name, app in rec["apps"].items()}

        def calibrated(name: str, cache: str) -> tuple[Any, dict[str, Any]]:
            """A replayer of `name` for `cache` and its calibration: think times calibrated to the installed copy's
            warm launch measured under this scheduler; a cold replay's to that plus what a cold launch's code
            costs the emulator (cold_extra). Measured when asked (background_start "each-launch": before each replay
            cell, idle), or taken from `calibrations` ("once": measured at the switch, before any background ran:
            a writer that keeps running would be in the think times, and again in the replay's own launches)."""
            trace, inst, layout, cwd, app_argv = installs[name]
            replayer = Replayer(trace, layout)
            if (name, cache) in calibrations:
                cal = calibrations[(name, cache)]
                replayer.scale = cal["think_scale"]
                return replayer, cal
            floor = warm_floor[name]
            medians = settled_warm(CommandLauncher(app_argv, cwd, root=str(inst.root)), warm_floor, name)
            warm_now = min(medians)
            if len(medians) > 1:
                say(f"{name}: warm launches for the calibration took {', '.join(f'{m:.3f}' for m in medians)} s "
                    f"(medians) against {floor:.3f} s earlier in the session: a slow spell of the emulator; the "
                    f"lowest calibrates")
            extra = cold_extra[name] if cache == "cold" else 0.0
            cal = replayer.calibrate(wall=warm_now + extra, typical="median")   # W is a median too
            return replayer, {**cal, "installed_warm_s": round(warm_now, 6), "cold_code_s": round(extra, 6),
                              "installed_warm_medians_s": [round(m, 6) for m in medians]}

        for first, group in plan.groups():
            spec, (name, cache, bg, _) = group[0]
            new_spec = first == 0 or steps[first - 1][0] != spec
            if running is not None and (new_spec or running.name != bg):
                stop_background()
            if new_spec:
                switch(dev, spec, plan.nr_requests, plan.clock_scale or 1.0)
                calibrations.clear()
                if plan.background_start == "once":
                    for a, c in dict.fromkeys((a, c) for s, (a, c, _, m) in steps[first:]
                                              if s == spec and m == "replay"):
                        say(f"{spec.label}: calibrating the replay of {a} ({c}), idle")
                        try:
                            calibrations[(a, c)] = calibrated(a, c)[1]
                        except SmartioError as e:       # its replay cells calibrate for themselves, and say why
                            say(f"{spec.label}: calibrating the replay of {a} ({c}) failed: {e}")
            modes = [c[3] for _, c in group]
            say(f"[{first + 1}{f'-{first + len(group)}' if len(group) > 1 else ''}/{len(steps)}] {spec.label}: "
                f"{name} {cache} {' and '.join(modes)}{', interleaved' if len(group) > 1 else ''}, background {bg}")
            trace, inst, layout, cwd, app_argv = installs[name]
            settings = LaunchSettings(cold=cache == "cold", background=bg, repeats=plan.repeats_of(cache, bg, modes[0]),
                                background_size=plan.background_size, warmup_s=plan.warmup_s)
            started = time.monotonic()
            runs: list[dict[str, Any]] = [{"scheduler": spec.label, "app": name, "cache": cache, "background": bg,
                                           "mode": m, "file": run_file(spec.label, name, cache, bg, m),
                                           "state": device_state(dev)} for m in modes]
            if len(runs) > 1:
                for run in runs:
                    run["interleaved_with"] = [m for m in modes if m != run["mode"]]
            try:
                arms = []
                for mode in modes:
                    launcher: Any
                    what: dict[str, Any]
                    if mode == "real":
                        launcher, what = CommandLauncher(app_argv, cwd, root=str(inst.root)), {"app": name}
                    else:
                        launcher, cal = calibrated(name, cache)
                        what = {"app": name, "calibration": cal}
                    arms.append(Arm(launcher, {"mode": mode, **what}, f"smartio compare launch "
                                    f"({name}, {cache}, {bg}, {mode})", plan.repeats_of(cache, bg, mode)))
                if plan.background_start == "once" and bg != "none" and running is None:
                    say(f"{spec.label}: background {bg} started, {BACKGROUND_HEAD_S:g} s before its first launch")
                    running = RunningBackground(open_target(MOUNT, writes=True, destroy_data=False), bg,
                                                plan.background_size, BACKGROUND_HEAD_S).__enter__()
                docs = measure_interleaved(target, settings, arms, progress=False, background_run=running)
                for run, doc in zip(runs, docs, strict=True):
                    write_whole(out / run["file"], json.dumps(doc, indent=1) + "\n")
                    run["rc"] = 0
            except SmartioError as e:
                if running is not None and not running.run.running():    # fio ended: the next cell starts it again
                    stop_background()
                for run in runs:
                    run.update(rc=e.exit_code, error=str(e))
                failed += len(runs)
                say(f"{spec.label} {name} {cache} {bg} {' and '.join(modes)} failed: {e}")
            # Cumulative since the switch to this scheduler: a cell's own counts are the difference to the previous
            # cell of the same scheduler (cells measured together, interleaved_with, share theirs and their
            # duration). They say which rules fired (holds, slices, QASIO boosts) for a figure.
            counters = scheduler_counters(dev)
            for run in runs:
                run["duration_s"] = round(time.monotonic() - started, 1)
                run["counters"] = counters
                rec["runs"].append(run)
            save()
    finally:
        stop_background()
        restore(dev, rec["before"])
        rec["after"] = device_state(dev)
        save()
        subprocess.run(["umount", MOUNT], capture_output=True)
    return 1 if failed else 0


def warm_median(launcher: Any) -> float:
    """The median of INSTALLED_WARM_RUNS warm launches, after one untimed launch that warms the cache."""
    launcher.launch()
    return float(statistics.median(launcher.launch() for _ in range(INSTALLED_WARM_RUNS)))


def settled_warm(launcher: Any, floor: dict[str, float], name: str, sleep: Any = time.sleep) -> list[float]:
    """warm_median of `name`, taken again while it is more than SPELL_TOLERANCE above floor[name] (the lowest median
    of the same launches earlier in the session), after SPELL_WAIT_S each time, up to SPELL_ROUNDS medians: all of
    them, in order; floor[name] becomes the lowest of all."""
    medians = [warm_median(launcher)]
    while medians[-1] > floor[name] * (1 + SPELL_TOLERANCE) and len(medians) < SPELL_ROUNDS:
        sleep(SPELL_WAIT_S)
        medians.append(warm_median(launcher))
    floor[name] = min(floor[name], *medians)
    return medians


def refilled_launch(launcher: Any, paths: list[Path]) -> float:
    """One launch after dropping the page cache and reading every one of `paths` back into it (see
    INSTALLED_REFILLED_RUNS)."""
    from smartio.launch.launcher import drop_caches

    drop_caches()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    return float(launcher.launch())

"""`smartio bench launch` (`-- COMMAND`, `--app TRACE`, `--replay TRACE|SCRIPT`): what each launches (a real command,
an installed copy of a recorded application, a replay of its trace, or of a Mobigen script), set up on the target
directory and timed by `measure`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from smartio.blockdev import is_root
from smartio.errors import NeedsRootError, UsageError
from smartio.launch.launcher import CommandLauncher
from smartio.launch.measure import LaunchSettings, measure
from smartio.launch.mobigen import MobigenReplayer, Script, ScriptLayout, is_mobigen
from smartio.launch.replay import Installed, Layout, Replayer
from smartio.launch.trace import Trace
from smartio.progress import Progress
from smartio.signals import sigterm_as_interrupt
from smartio.storebench.target import Target, open_target


def run_launch(argv: list[str], target_path: str | None, settings: LaunchSettings, *, command: str,
               app: str | None = None, progress: bool = True) -> dict[str, Any]:
    """`smartio bench launch -- COMMAND` (or `--app TRACE`): time a real command, run in the target directory; with
    `app` (a trace), the recorded application installed in the target and run there in a chroot (its command
    unless `argv`)."""
    settings.check()
    if app is None:
        launcher = CommandLauncher(argv, target_path or ".")
        target = _open_dir(target_path)
        return measure(target, settings, launcher, what={"mode": "run", "argv": argv}, command=command,
                       progress=progress)
    if not is_root():
        raise NeedsRootError("--app (running the installed copy in a chroot)")
    trace = Trace.read(Path(app), "--app")
    trace.header["path"] = app
    argv = argv or list(trace.header.get("command") or [])
    target = _open_dir(target_path)
    with sigterm_as_interrupt(), Installed(trace, target.path) as inst:
        launcher = CommandLauncher(argv, trace.header.get("cwd") or "/", root=str(inst.root))
        return measure(target, settings, launcher, what={"mode": "run", "argv": argv, "app": app},
                       command=command, progress=progress)


def replay_launch(trace_path: str, target_path: str | None, settings: LaunchSettings, *, command: str,
                  progress: bool = True, think: bool = True) -> dict[str, Any]:
    """`smartio bench launch --replay TRACE`: lay the trace's files out in the target directory, then time replays
    of it. A Mobigen script (mobigen.is_mobigen) is replayed by replay_script. `think=False` (`--no-think`):
    every operation right after the one before."""
    settings.check()
    if is_mobigen(Path(trace_path)):
        return replay_script(trace_path, target_path, settings, command=command, progress=progress, think=think)
    trace = Trace.read(Path(trace_path))
    target = _open_dir(target_path)
    h = trace.header
    info = {"path": str(trace_path), "command": h.get("command", []), "ops": len(trace.ops),
            "files": len(trace.files), "mib": sum(f.size for f in trace.files) / (1 << 20),
            "think_scale": trace.think_scale, "residency": h.get("residency"),
            "untraced_wall_s": h.get("untraced_wall_s", 0.0), "recorded": h.get("recorded")}
    bar = Progress(None, stream=None if progress else io.StringIO())
    with sigterm_as_interrupt():
        try:
            bar.begin(f"laying out {info['files']} files ({info['mib']:.1f} MiB) in {target.path}")
            with Layout(trace, target.path) as layout:
                replayer = Replayer(trace, layout)
                if think:
                    bar.begin("calibrating think times (the operations alone, warm)")
                    info["calibration"] = replayer.calibrate()
                else:
                    replayer.scale = 0.0
                info["think_scale"] = replayer.scale
                bar.close()
                return measure(target, settings, replayer, what={"mode": "replay", "trace": info},
                               command=command, progress=progress)
        finally:
            bar.close()


def replay_script(script_path: str, target_path: str | None, settings: LaunchSettings, *, command: str,
                  progress: bool = True, think: bool = True) -> dict[str, Any]:
    """`smartio bench launch --replay SCRIPT` of a Mobigen script: its files laid out in the target directory, then
    replays of it, one thread per script thread (smartio.launch.mobigen)."""
    settings.check()
    script = Script.read(Path(script_path))
    target = _open_dir(target_path)
    info = script.summary()
    info["think"] = "slept (each thread's gaps in the script)" if think else "none (--no-think)"
    bar = Progress(None, stream=None if progress else io.StringIO())
    with sigterm_as_interrupt():
        try:
            layout = ScriptLayout(script, target.path)
            info.update(files=len(layout.sizes), directories=len(layout.dirs), mib=layout.bytes / (1 << 20))
            bar.begin(f"laying out {info['files']} files ({info['mib']:.1f} MiB) in {target.path}")
            with layout:
                bar.close()
                return measure(target, settings, MobigenReplayer(script, layout, think=think),
                               what={"mode": "mobigen", "script": info}, command=command, progress=progress)
        finally:
            bar.close()


def _open_dir(path: str | None) -> Target:
    if path and os.path.exists(path) and not os.path.isdir(path):
        raise UsageError("--target", path, "is not a directory (the launch's scratch files are made in one)")
    return open_target(path, writes=True, destroy_data=False)

"""Runs experiments on a target: checks it, switches the scheduler if asked, runs, cleans up, and wraps each
result in a document that says where it came from (kernel, device, scheduler and tunables, fio, command, date)."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import sys
from typing import Any

from smartio import __version__
from smartio.blockdev import SchedulerSwitch, read_scheduler, read_tunables
from smartio.engine import Engine
from smartio.errors import UsageError
from smartio.progress import Progress
from smartio.signals import sigterm_as_interrupt
from smartio.storebench import READ_ONLY_CAPABLE, REGISTRY, selected
from smartio.storebench.context import RunContext
from smartio.storebench.options import EXPERIMENTS, Settings
from smartio.storebench.target import Target, open_target


def device_info(target: Target) -> dict[str, Any]:
    if target.device is None:
        b = target.backing
        return {"name": None, "note": f"no block device under the target ({b.fstype if b else '?'})"}
    d = target.device
    current, available = read_scheduler(d)
    return {"name": d.name, "disk": d.disk, "path": d.path, "size_bytes": d.size, "scheduler": current,
            "schedulers": available, "tunables": read_tunables(d)}


def check(experiment: str, target_path: str | None, settings: Settings, destroy_data: bool) -> Target:
    if experiment not in EXPERIMENTS:
        raise UsageError("experiment", experiment, f"unknown; choose one of {', '.join(EXPERIMENTS)}")
    names = selected(experiment)
    if settings.read_only:
        names = [n for n in names if n in READ_ONLY_CAPABLE]
        if not names:
            raise UsageError("--read-only", experiment, f"this experiment writes; only "
                             f"{', '.join(READ_ONLY_CAPABLE)} (or all) can run read-only")
    target = open_target(target_path, writes=not settings.read_only, destroy_data=destroy_data)
    target.check_space(slot_sizes(names, settings))
    return target


def slot_sizes(names: list[str], settings: Settings) -> list[int]:
    """The sizes of the target slots these experiments take, in the order they take them. Every slot of an
    experiment holds `size_for(name)` bytes, and `space_needed` is their sum."""
    return [size for n in names
            for size in [settings.size_for(n)] * (REGISTRY[n].space_needed(settings) // settings.size_for(n))]


def run_bench(experiment: str, target: Target, settings: Settings, engine: Engine, *, scheduler: str | None,
              command: str, progress: bool = True) -> dict[str, Any]:
    """Run `experiment` (or all) on an already checked target; returns the result document."""
    names = [n for n in selected(experiment) if not settings.read_only or n in READ_ONLY_CAPABLE]
    switch: contextlib.AbstractContextManager = contextlib.nullcontext()
    if scheduler:
        if target.device is None:
            raise UsageError("--scheduler", scheduler, f"the target {target.path} has no block device underneath")
        switch = SchedulerSwitch(target.device, scheduler)
    docs = {}
    # SIGTERM and SIGHUP unwind like Ctrl-C, so scratch files go and the scheduler is restored.
    with sigterm_as_interrupt():
        prog = Progress(sum(REGISTRY[n].runs(settings) for n in names)) if progress else None
        try:
            with switch:
                for name in names:
                    ctx = RunContext(engine, target, settings, prog)
                    started = _now()
                    results = REGISTRY[name].run(ctx)
                    docs[name] = _document(name, target, settings, engine, command, started, results)
                    docs[name]["fio_raw"] = ctx.fio_raw
        finally:
            if prog:
                prog.close()
            target.cleanup()
    if experiment != "all":
        return docs[experiment]
    first = next(iter(docs.values()))
    return {**{k: v for k, v in first.items() if k != "fio_raw"}, "experiment": "all", "results": docs}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _document(name: str, target: Target, settings: Settings, engine: Engine, command: str, started: str,
              results: dict[str, Any]) -> dict[str, Any]:
    dev = device_info(target)
    return {
        "experiment": name,
        "target": {"path": target.path, "kind": target.kind, "description": target.describe()},
        "device": dev,
        "scheduler": dev.get("scheduler"),
        "tunables": dev.get("tunables", {}),
        # The emulated flash profile when run in the testbed (its disks are that device), for plots and tables.
        **({"profile": os.environ["SMARTIO_PROFILE"]} if os.environ.get("SMARTIO_PROFILE") else {}),
        "kernel": platform.release(),
        "host": platform.node(),
        "fio_version": engine.version(),
        "smartio_version": __version__,
        "command": command,
        "started": started,
        "finished": _now(),
        "settings": {"quick": settings.quick, "repeats": settings.repeats, "size_bytes": settings.size_for(name),
                     "bs": settings.bs, "streams": settings.streams, "read_only": settings.read_only},
        "results": results,
    }


def command_line(argv: list[str] | None = None) -> str:
    args = sys.argv[1:] if argv is None else argv
    return " ".join(shlex.quote(a) for a in ["smartio", *args])



"""The launch comparison's plan (`LaunchPlan`: schedulers, applications, caches, backgrounds, real and replay, repeats)
and the names of its cells and files, shared by the guest and the host.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from smartio.compare.spec import DEFAULT_NR_REQUESTS, RUNS_DIR, JsonPlan, SchedulerSpec
from smartio.errors import UsageError

DEFAULT_SCHEDULERS = "none,mq-deadline,kyber,bfq,smartio,smartio:qasio_boost=0"


APPS = ("python-stdlib", "editor", "sqlite")          # python-numpy: ~12 s of imports per launch under TCG


BACKGROUNDS = ("none", "seq-write", "rand-write", "buffered-write")


CACHES = ("cold", "warm")


MODES = ("real", "replay")


DISK_SIZE = 1 << 30


GUEST_FILE, TRACES_DIR = "launch-guest.json", "traces"


START_FILE = "launch-run.json"      # the run's plan, profile and time scale, written first: what `compare resume` needs


HEADLINE_BG = "seq-write"


# The headline is computed from the cold real launches, idle and beside HEADLINE_BG (cells "app.cold.<bg>.real").
HEADLINE_CACHE, HEADLINE_MODE, HEADLINE_BGS = "cold", "real", ("none", HEADLINE_BG)




BACKGROUND_STARTS = ("once", "each-launch")


# With background_start "once": how long a background runs before the first launch beside it. bfq weight-raises a
# new sync queue, the writer's too, for bfq_wr_duration: at most 25 s (block/bfq-iosched.c).
BACKGROUND_HEAD_S = 30.0


@dataclasses.dataclass(frozen=True)
class LaunchPlan(JsonPlan):
    schedulers: tuple[SchedulerSpec, ...]
    apps: tuple[str, ...] = APPS
    backgrounds: tuple[str, ...] = ("none", HEADLINE_BG)
    caches: tuple[str, ...] = CACHES
    modes: tuple[str, ...] = MODES
    repeats: int = 3
    # Launches in the cells the headline is computed from (cold, real, idle and beside the headline writer), for
    # every scheduler alike; None: `repeats`. Its interval is Welch's over these launches alone, so these cells are
    # where more repeats decide a target, at a fraction of what more repeats everywhere cost.
    headline_repeats: int | None = None
    # Launches in the cold replay cells; None: `repeats`. Replay against real is decided there by an interval over
    # every scheduler's launches, and a cold replay scatters most (vim: 2.7 to 4.4 s at 3 launches).
    replay_repeats: int | None = None
    background_size: int = 64 << 20
    warmup_s: float = 1.0
    nr_requests: int = DEFAULT_NR_REQUESTS
    clock_scale: float | None = None     # schedulers' time tunables times this; None: the profile's time scale
    # Cells an earlier session of this run measured (`compare resume`; cell_id each), which the guest skips.
    done: tuple[str, ...] = ()
    # The real and the replay cell of an application, cache and background are measured together, their launches
    # taken in turn (measure_interleaved), so that replay / real compares launches made in the same state of the
    # scheduler and the machine. A run started before this existed (its plan has no such key) kept them apart.
    interleave: bool = True
    # "once": under each scheduler a background workload is started once, BACKGROUND_HEAD_S before the first launch
    # beside it, and runs through every cell that has it (the cells are ordered by background first); "each-launch":
    # started for every launch, `warmup_s` before it, as runs stored before "once" existed did (see
    # launch.measure.RunningBackground for why: bfq weight-raises a writer that has just started).
    background_start: str = "once"

    def __post_init__(self) -> None:
        from smartio.launch.apps import APPS as KNOWN

        for flag, values, known in (("--apps", self.apps, tuple(KNOWN)), ("--backgrounds", self.backgrounds,
                                    BACKGROUNDS), ("--caches", self.caches, CACHES), ("--modes", self.modes, MODES)):
            bad = [v for v in values if v not in known]
            if bad or not values:
                raise UsageError(flag, ",".join(values), f"choose from {', '.join(known)}")
        if not 1 <= self.repeats <= 100:
            raise UsageError("--repeats", self.repeats, "must be between 1 and 100")
        for flag, n in (("--headline-repeats", self.headline_repeats), ("--replay-repeats", self.replay_repeats)):
            if n is not None and not 1 <= n <= 100:
                raise UsageError(flag, n, "must be between 1 and 100")
        if self.background_start not in BACKGROUND_STARTS:
            raise UsageError("--background-start", self.background_start, f"choose from {', '.join(BACKGROUND_STARTS)}")
        if self.replay_repeats is not None and ("replay" not in self.modes or "cold" not in self.caches):
            raise UsageError("--replay-repeats", self.replay_repeats, "applies to the cold replay cells, and the "
                             "plan has none (--modes and --caches)")

    def cells(self) -> list[tuple[str, str, str, str]]:
        """(app, cache, background, mode), in run order under each scheduler: with background_start "once", the
        cells of one background together (it runs through them)."""
        if self.background_start == "once":
            return [(a, c, b, m) for b in self.backgrounds for a in self.apps for c in self.caches
                    for m in self.modes]
        return [(a, c, b, m) for a in self.apps for c in self.caches for b in self.backgrounds for m in self.modes]

    def steps(self) -> list[tuple[SchedulerSpec, tuple[str, str, str, str]]]:
        """(scheduler, cell) in run order: each scheduler's cells in turn, less those in `done`."""
        return [(s, c) for s in self.schedulers for c in self.cells() if cell_id(s.label, *c) not in self.done]

    def groups(self) -> list[tuple[int, list[tuple[SchedulerSpec, tuple[str, str, str, str]]]]]:
        """`steps()` as measured: (index of the first, the steps), a cell alone or, with `interleave`, the real and
        the replay cell of the same scheduler, application, cache and background together (in --modes order)."""
        steps, out, i = self.steps(), [], 0
        while i < len(steps):
            spec, (app, cache, bg, mode) = steps[i]
            n = 2 if (self.interleave and i + 1 < len(steps) and steps[i + 1][0] == spec
                      and steps[i + 1][1][:3] == (app, cache, bg)) else 1
            out.append((i, steps[i:i + n]))
            i += n
        return out

    def repeats_of(self, cache: str, bg: str, mode: str) -> int:
        """Launches timed in a cell: `headline_repeats` in the headline's cells and `replay_repeats` in the cold
        replay cells, where set, else `repeats`."""
        if self.headline_repeats and is_headline_cell(cache, bg, mode):
            return self.headline_repeats
        if self.replay_repeats and cache == "cold" and mode == "replay":
            return self.replay_repeats
        return self.repeats


def cell_id(label: str, app: str, cache: str, bg: str, mode: str) -> str:
    """A cell of a scheduler, as LaunchPlan.done names it: its run file's name without the directory."""
    return Path(run_file(label, app, cache, bg, mode)).stem


def is_headline_cell(cache: str, bg: str, mode: str) -> bool:
    return cache == HEADLINE_CACHE and mode == HEADLINE_MODE and bg in HEADLINE_BGS


def headline_key(app: str, bg: str) -> str:
    """The key in a scheduler's cells of the cold real launch of `app` beside background `bg` (none: idle)."""
    return f"{app}.{HEADLINE_CACHE}.{bg}.{HEADLINE_MODE}"


def run_file(label: str, app: str, cache: str, bg: str, mode: str) -> str:
    return f"{RUNS_DIR}/{label}.{app}.{cache}.{bg}.{mode}.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None if it is absent, torn (a session killed while writing it) or no object."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None

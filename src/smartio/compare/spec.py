"""What a scheduler comparison runs: the schedulers (each optionally with tunables), the experiments and sizes.

Validated on the host before anything boots, so bad input is exit 2 with the flag and value named. The plan
travels to the guest as JSON (`JsonPlan.to_json` / `from_json`), where the experiment's guest side carries it out
(StoreBench's: `python -m smartio.storebench.compare`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Self

from smartio.errors import UsageError

# The schedulers Linux 6.1's cloud kernel offers (kyber and bfq as modules) plus ours (kernel/smartio-iosched.c).
KNOWN_SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq", "smartio")
DEFAULT_SCHEDULERS = "none,mq-deadline,kyber,bfq,smartio"
# Where an experiment's guest leaves one document per run, under its out dir (the host assembles them).
RUNS_DIR = "runs"
# The emulated device's time scale for the experiments with a guest side of their own (launch, qasio, sqlite): at the
# profile's own scale (100 for s5-emmc) installing the launch's application set (tens of MiB) on the emulated disk
# would take most of an hour, and an insert half a second; at x10 they stay short enough to repeat, and with qasio's
# --scale 0.1 its sizes take the emulated device as long as the phone's (docs/design/testbed.md).
GUEST_TIME_SCALE = 10.0
# blk-mq sets nr_requests to twice the device's queue depth when a scheduler is attached: 4 on the S5 eMMC's
# depth of 2, too few for a scheduler to reorder anything (docs/guide/compare.md, --nr-requests). Linux's classic
# single-queue default.
DEFAULT_NR_REQUESTS = 128


_TUNABLE_RE = re.compile(r"([a-z][a-z0-9_]*)=(-?\d+)")


@dataclasses.dataclass(frozen=True)
class SchedulerSpec:
    """A scheduler and the tunables to write after switching to it: `smartio:read_anticipation_us=0`.
    `smartio:profile` first runs the Concurrency Profiler on the device (`smartio profile --apply`, once per
    comparison) and writes what it finds (dispatch limits, write pacing), as a user would; tunables given beside it
    are written after it and win."""

    name: str
    tunables: tuple[tuple[str, int], ...] = ()
    profiled: bool = False

    @property
    def label(self) -> str:
        """The key of this run in tables and JSON: the spec as written, so variants of one scheduler differ."""
        return ":".join([self.name, *(["profile"] if self.profiled else []),
                         *(f"{k}={v}" for k, v in self.tunables)])

    @classmethod
    def parse(cls, text: str, flag: str = "--schedulers") -> SchedulerSpec:
        name, *settings = text.strip().split(":")
        if name not in KNOWN_SCHEDULERS:
            raise UsageError(flag, text, f"unknown scheduler {name!r}; known: {', '.join(KNOWN_SCHEDULERS)}")
        tunables, profiled = [], False
        for s in settings:
            if s == "profile":
                if name != "smartio":
                    raise UsageError(flag, text, "only smartio takes the Concurrency Profiler's parameters")
                profiled = True
                continue
            m = _TUNABLE_RE.fullmatch(s)
            if not m:
                raise UsageError(flag, text, f"{s!r} is not a tunable setting; write NAME:TUNABLE=INTEGER, "
                                             "e.g. smartio:read_anticipation_us=0, or smartio:profile")
            tunables.append((m.group(1), int(m.group(2))))
        if tunables and name == "none":
            raise UsageError(flag, text, "the none scheduler has no tunables")
        return cls(name, tuple(tunables), profiled)


def parse_schedulers(text: str, flag: str = "--schedulers") -> tuple[SchedulerSpec, ...]:
    specs = tuple(SchedulerSpec.parse(t, flag) for t in text.split(",") if t.strip())
    if not specs:
        raise UsageError(flag, text, f"name at least one scheduler, e.g. {DEFAULT_SCHEDULERS}")
    labels = [s.label for s in specs]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup:
        raise UsageError(flag, text, f"{dup} is listed twice")
    return specs


class JsonPlan:
    """How an experiment's plan (a frozen dataclass) travels to the guest as JSON: lists come back as tuples, and a
    `schedulers` field travels as the specs' labels."""

    def to_json(self) -> str:
        d = dataclasses.asdict(self)  # type: ignore[call-overload]   # mixed into dataclasses only
        if "schedulers" in d:
            d["schedulers"] = [s.label for s in vars(self)["schedulers"]]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> Self:
        d: dict[str, Any] = json.loads(text)
        if "schedulers" in d:
            d["schedulers"] = parse_schedulers(",".join(d["schedulers"]))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def with_clock(plan: Any, profile: Any) -> Any:
    """The plan with its scheduler clock settled: clock_scale None (`--scheduler-clock device`) becomes the emulated
    device's time scale, by which the guest multiplies every scheduler's time tunables (compare.guest.switch)."""
    return plan if plan.clock_scale is not None else dataclasses.replace(plan, clock_scale=profile.time_scale)


def clock_text(plan: dict[str, Any]) -> str:
    """How a document's plan set the schedulers' clocks, for a table's heading."""
    k = plan.get("clock_scale") or 1
    return ("scheduler time tunables at their defaults" if k == 1 else
            f"scheduler time tunables x{k:g} (device clock)")



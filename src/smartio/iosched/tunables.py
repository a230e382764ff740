"""The smartio module's tunables (/sys/block/<dev>/queue/iosched/), as kernel/smartio-iosched.c declares them.

One table, read off the module: its sysfs attribute table (sio_attrs, whose order this keeps), its defaults (the
sio_default_* constants with their trailing comments, or the value sio_init_sched() sets) and the range each store
clamps to (SIO_TUNABLE's min and max). tests/test_iosched_contract.py parses the C source and fails when they
differ; docs/design/tunables.md is this table rendered (`render_markdown()`).

The lists other packages keep are derived from it: the policy twin's defaults (iosched/policy.py), the
Concurrency Profiler's tunables (storebench/bench.py), the time tunables the testbed scales (compare/guest.py) and
the QASIO dependency switches (qasio/run.py).
"""

from __future__ import annotations

import dataclasses

# Roles: what part of the module's policy a tunable sets (the numbers in brackets are the rules of the module's
# header comment).
WRITE_SLICE = "write slice"            # (3) how long a write may wait behind reads, and the window after
PRIORITY_AGING = "priority aging"      # (1) how long a lower I/O priority class may wait
ANTICIPATION = "anticipation"          # (6) idling for a synchronous reader's next read
WRITE_PACING = "write pacing"          # (7, 8) writes spaced beside a reader, reads held after a write
SINGLE_WRITE = "single write"          # (10) one write at a time beside a recent reader
STARTUP = "start-up"                   # (11) a task's first reads
QASIO_BOOST = "QASIO boost"            # (5) boost writes a task waits on
ADAPTIVE = "adaptive"                  # (12) the holds only where writes slow reads
LEARNED_PACING = "learned pacing"      # (13) pacing by the writes' service time alone, without the profiler
QASIO_DEPENDENCY = "QASIO dependency"  # (5) which of the waits to act on
DISPATCH_LIMIT = "dispatch limit"      # (4) per-kind dispatch concurrency (the Concurrency Profiler's parameters)
TAG_DEPTH = "tag depth"                # scheduler tags async requests may hold
ROLES = (WRITE_SLICE, PRIORITY_AGING, ANTICIPATION, WRITE_PACING, SINGLE_WRITE, STARTUP, QASIO_BOOST, ADAPTIVE,
         LEARNED_PACING, QASIO_DEPENDENCY, DISPATCH_LIMIT, TAG_DEPTH)


@dataclasses.dataclass(frozen=True)
class Tunable:
    """One sysfs attribute of the module. `default` None: set from the device when the scheduler starts
    (async_depth); `maximum` None: bounded by another value, not a constant (see `meaning`). `clock`: a time,
    which the testbed multiplies by its time scale so that the scheduler keeps its phone behaviour."""

    name: str
    unit: str
    default: int | None
    minimum: int
    maximum: int | None
    role: str
    clock: bool
    meaning: str

    @property
    def range(self) -> tuple[int, int | None]:
        return self.minimum, self.maximum


def _t(name: str, unit: str, default: int | None, minimum: int, maximum: int | None, role: str, meaning: str,
       *, clock: bool = False) -> Tunable:
    return Tunable(name, unit, default, minimum, maximum, role, clock, meaning)


TUNABLES: tuple[Tunable, ...] = (
    _t("write_slice_ms", "ms", 100, 1, 60000, WRITE_SLICE,
       "a write waits at most this long behind reads", clock=True),
    _t("write_slice_kb", "KiB", 0, 0, 65536, WRITE_SLICE,
       "a larger write waits the slice per this much of its size; 0 = one slice per write"),
    _t("write_slice_rand_ms", "ms", 0, 0, 60000, WRITE_SLICE,
       "the slice of a random write; 0 = write_slice_ms", clock=True),
    _t("write_window_ms", "ms", 0, 0, 60000, WRITE_SLICE,
       "after a slice expired, writes go first for this long; 0 = one write per expired slice", clock=True),
    _t("prio_aging_ms", "ms", 10000, 1, 600000, PRIORITY_AGING,
       "a request of a lower priority class waits at most this long behind a higher one (at least 1: aging cannot "
       "be turned off, or lower classes could starve)", clock=True),
    _t("read_anticipation_us", "us", 3000, 0, 100000, ANTICIPATION,
       "after a read completes, writes are held this long for the reader's next read; 0 = off", clock=True),
    _t("write_pace_us", "us", 0, 0, 1000000, WRITE_PACING,
       "beside a reader, a write goes this long after the last write; 0 = off (auto_pace's learned pace, or "
       "anticipation, applies)",
       clock=True),
    _t("write_pace_rand_us", "us", 0, 0, 1000000, WRITE_PACING,
       "the pace after a random write; 0 = write_pace_us", clock=True),
    _t("read_hold_us", "us", 0, 0, 100000, WRITE_PACING,
       "with write_pace_us set, queued reads wait this long after a write completed; 0 = off", clock=True),
    _t("write_merge_max_kb", "KiB", 0, 0, 65536, WRITE_PACING,
       "beside a reader, a write request grows by merging to at most this size; 0 = no limit"),
    _t("single_write_ms", "ms", 100, 0, 60000, SINGLE_WRITE,
       "one write at a time in the device until this long after a read; 0 = off", clock=True),
    _t("startup_ms", "ms", 1000, 0, 600000, STARTUP,
       "a task's first reads into the page cache: for this long a write waits at least this long behind them; "
       "0 = off", clock=True),
    _t("startup_anticipation_us", "us", 10000, 0, 1000000, STARTUP,
       "anticipation during a start-up, where longer than read_anticipation_us; 0 = as others", clock=True),
    _t("qasio_boost", "0/1", 1, 0, 1, QASIO_BOOST,
       "1 = boost writes a task waits on above the other async writes"),
    _t("adaptive", "0/1", 0, 0, 1, ADAPTIVE,
       "1 = anticipation, pacing, the read hold, one write at a time and the start-up hold stop when under a "
       "quarter of the reads beside a write take twice the mean alone, and apply again when most do; 0 = they "
       "always apply"),
    _t("auto_pace", "0/1", 1, 0, 1, LEARNED_PACING,
       "1 = while write_pace_us is 0, writes are paced once 16 sequential writes alone (plain, up to 16 KiB) were "
       "seen: pace 1.5 x their mean service time (1.75 x a random write's after a random one), read hold 0.7 x; "
       "0 = anticipation applies"),
    _t("qasio_meta", "0/1", 1, 0, 1, QASIO_DEPENDENCY,
       "1 = act on waits for metadata buffers under write (__lock_buffer, __wait_on_buffer)"),
    _t("qasio_data", "0/1", 1, 0, 1, QASIO_DEPENDENCY,
       "1 = act on waits for data pages under writeback (folio_wait_writeback, not from a sync)"),
    _t("qasio_sync", "0/1", 1, 0, 1, QASIO_DEPENDENCY,
       "1 = act on waits for writeback from an integrity sync (folio_wait_writeback)"),
    _t("dispatch_limit_seq_read", "requests", 0, 0, 4096, DISPATCH_LIMIT,
       "sequential reads in the device at most, while another kind waits; 0 = no limit"),
    _t("dispatch_limit_seq_write", "requests", 0, 0, 4096, DISPATCH_LIMIT,
       "sequential writes in the device at most, while another kind waits; 0 = no limit"),
    _t("dispatch_limit_rand_read", "requests", 0, 0, 4096, DISPATCH_LIMIT,
       "random reads in the device at most, while another kind waits; 0 = no limit"),
    _t("dispatch_limit_rand_write", "requests", 0, 0, 4096, DISPATCH_LIMIT,
       "random writes in the device at most, while another kind waits; 0 = no limit"),
    _t("async_depth", "tags", None, 1, None, TAG_DEPTH,
       "scheduler tags async requests may hold, at most the sync writes' share (all but 1/16 of nr_requests); "
       "default 75 % of min(nr_requests, 2 x device depth), reset when nr_requests changes"),
)

BY_NAME: dict[str, Tunable] = {t.name: t for t in TUNABLES}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def names(*roles: str) -> tuple[str, ...]:
    """The tunables of these roles, in the module's order."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown role {', '.join(sorted(unknown))}")
    return tuple(t.name for t in TUNABLES if t.role in roles)


def default(name: str) -> int:
    """A tunable's default; an error for one the device sets (async_depth)."""
    d = BY_NAME[name].default
    if d is None:
        raise ValueError(f"{name} has no fixed default (the device sets it)")
    return d


# The time tunables, which the testbed scales (compare/guest.py).
CLOCK: tuple[str, ...] = tuple(t.name for t in TUNABLES if t.clock)
# The Concurrency Profiler's four parameters, by the kind of I/O each limits ("seq_read": "dispatch_limit_seq_read").
DISPATCH_LIMITS: dict[str, str] = {n.removeprefix("dispatch_limit_"): n for n in names(DISPATCH_LIMIT)}
# The write policy `smartio profile --apply` sets beside the limits (flashdev/model.py's pacing()).
WRITE_POLICY: tuple[str, ...] = names(WRITE_SLICE, WRITE_PACING)
# QASIO's per-dependency switches (qasio_boost is the master switch).
QASIO_DEPENDENCIES: tuple[str, ...] = names(QASIO_DEPENDENCY)


def _cell(v: int | None, none: str) -> str:
    return none if v is None else str(v)


def render_markdown() -> str:
    """docs/design/tunables.md: the table, one row per tunable, in the module's order."""
    lines = [
        "# The smartio module's tunables",
        "",
        "Generated from `src/smartio/iosched/tunables.py` (`render_markdown()`); do not edit by hand.",
        "tests/test_iosched_contract.py checks the table against kernel/smartio-iosched.c (its sysfs table, defaults",
        "and clamps) and this page against the table.",
        "",
        "Each is a file under `/sys/block/<dev>/queue/iosched/` while the device uses smartio. A write outside the",
        "range is clamped to it; one that is not an integer is refused (EINVAL). A new instance of the scheduler",
        "(switching to `none` and back) starts from the defaults. Clock: a time, which the testbed multiplies by",
        "its time scale (`smartio compare --time-scale`).",
        "",
        "| tunable | unit | default | range | role | clock | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in TUNABLES:
        rng = f"{t.minimum} to {t.maximum}" if t.maximum is not None else f"at least {t.minimum} (see meaning)"
        lines.append(f"| `{t.name}` | {t.unit} | {_cell(t.default, 'from the device')} | {rng} | {t.role} | "
                     f"{'yes' if t.clock else 'no'} | {t.meaning} |")
    lines += ["", f"{len(TUNABLES)} tunables; by role: "
              + ", ".join(f"{r} {len(names(r))}" for r in ROLES) + "."]
    return "\n".join(lines) + "\n"

"""The smartio module's dispatch decision for one I/O priority class, as a pure function.

`decide(state, now, tunables)` answers what kernel/smartio-iosched.c's sio_select() -> sio_class_step() would do
at `now` with the queue in `state`: dispatch the oldest read, dispatch a write, or dispatch nothing (and when its
timer would run the queue again). It has the module's rules and the module's tunable names and units:

  1. a write window (after a slice expired) that is still open: writes first;
  2. a write (the sync or the async group's head, the older first) waited write_slice_ms (a random write:
     write_slice_rand_ms, if set; per write_slice_kb of its size, if it is larger) since the later of its arrival
     and the last write dispatch: it goes (ignoring the dispatch limits) and a window of write_window_ms opens;
  3. reads first, unless the read hold holds them: with write_pace_us set, queued reads wait read_hold_us after
     a write completed, but no longer than read_hold_us from the oldest read's arrival;
  4. with write_pace_us set (pacing): a write goes at once when no reader is active (no read queued or in flight,
     none completed less than max(read_anticipation_us, the pace) ago), else once the pace has passed since the
     last write dispatch: write_pace_rand_us after a random write (one that did not start exactly where the
     write before it ended), if set, else write_pace_us; but while two or more readers are active (tasks seen
     inserting or completing a read less than max(read_anticipation_us, the pace) ago), writes wait for their
     slice (rule 2) instead;
  5. without pacing, anticipation: writes wait while a read is in flight or one completed less than
     read_anticipation_us ago;
  6. the per-kind dispatch limits (dispatch_limit_<kind>): a kind at its limit waits while another kind is queued;
  7. a reader's own writes (a write queued by the task that read last, while no other task reads) are held for
     neither its pace nor anticipation, and the write's completion holds no read: pace, hold and anticipation
     keep the device free for *another* task's next read;
  8. one write at a time beside a recent reader (single_write_ms): while a read is queued or in flight, or one
     completed less than single_write_ms ago, a write waits while another write is in flight, unless it is the
     reader's own (rule 7), its slice expired or a write window is open (rule 2);
  9. start-up (startup_ms): a task that reads into the page cache for the first time, or after not reading for
     startup_ms, starts up unless another start-up is on; for startup_ms from then, while it reads (the last to
     read, with reads queued or in flight, or seen less than max(anticipation, pace) ago), a write's slice (rule 2)
     is at least startup_ms. A direct read begins none and is no start-up's. The module tells tasks apart by
     thread group and remembers 16; here a task is the caller's (a pid), and all are remembered; a caller says
     whether a read is cached (the model's streams and a trace's reads are direct: a block trace does not say).
     While a start-up is on, anticipation (rule 5), if on, waits startup_anticipation_us where that is longer
     than read_anticipation_us, the start-up's task counts as reading as long, and a paced write (rule 4) waits
     for that anticipation as well as its pace.

Left out (the model check and run_streams see one class, no QASIO): the priority classes and their aging, boosted
writes, the at-head dispatch list; discards (the module gives them one slice whatever their size). A request's size
is the caller's: in a model check, the size it was inserted with (merges after insertion are not seen). Writes
are in two FIFO groups, sync before async, as in the module.

Times are µs on the caller's clock (the guest's CLOCK_MONOTONIC for a model check, the device's phone µs in
model.run_streams); the tunables are read in that clock, write_slice_ms and write_window_ms in ms of it.
The tunables' names, units and defaults are the module's table (iosched/tunables.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from smartio.iosched.tunables import NAMES, default

KINDS = ("seq_read", "seq_write", "rand_read", "rand_write")
READING, ANTICIPATING, WINDOW = "read", "anticipate", "window"   # the module's sio_phase
READ, WRITE = "read", "write"


def is_read(kind: str) -> bool:
    return kind.endswith("read")


@dataclasses.dataclass(frozen=True)
class Tunables:
    """The module's tunables (sysfs names, its units; 0 = off) that matter for one class. Module defaults."""

    write_pace_us: float = float(default("write_pace_us"))
    write_pace_rand_us: float = float(default("write_pace_rand_us"))
    read_hold_us: float = float(default("read_hold_us"))
    read_anticipation_us: float = float(default("read_anticipation_us"))
    write_slice_ms: float = float(default("write_slice_ms"))
    write_slice_kb: float = float(default("write_slice_kb"))
    write_slice_rand_ms: float = float(default("write_slice_rand_ms"))
    write_window_ms: float = float(default("write_window_ms"))
    single_write_ms: float = float(default("single_write_ms"))
    startup_ms: float = float(default("startup_ms"))
    startup_anticipation_us: float = float(default("startup_anticipation_us"))
    dispatch_limit_seq_read: int = default("dispatch_limit_seq_read")
    dispatch_limit_seq_write: int = default("dispatch_limit_seq_write")
    dispatch_limit_rand_read: int = default("dispatch_limit_rand_read")
    dispatch_limit_rand_write: int = default("dispatch_limit_rand_write")

    # The module's other tunables play no part in one class without QASIO: accepted, ignored (set below, from the
    # table: every tunable that is not a field). prio_aging_ms and qasio_* act across classes and on boosts;
    # async_depth caps the scheduler tags async (buffered) writes may hold, and the model check and run_streams
    # issue sync (O_DIRECT) writes. write_merge_max_kb limits merges: run_streams' requests are single 4 KiB pages
    # that never merge, and model.mixed_time merges by its own merge_kb. adaptive (rule 12) and auto_pace (13) set
    # the holds and the pace from what the device's completions show, which is not the state passed here: a caller
    # that models them passes the pace they arrive at (a written write_pace_us takes over from a learned one).
    IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Tunables:
        """From sysfs names and values (a dict, or what `cat iosched/*` gave); unknown names are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {}
        for k, v in values.items():
            if k in cls.IGNORED:
                continue
            if k not in names:
                raise ValueError(f"unknown smartio tunable {k!r}")
            kw[k] = int(v) if k.startswith("dispatch_limit") else float(v)
        return cls(**kw)

    def limit(self, kind: str) -> int:
        return int(getattr(self, f"dispatch_limit_{kind}"))


Tunables.IGNORED = tuple(n for n in NAMES if n not in {f.name for f in dataclasses.fields(Tunables)})


@dataclasses.dataclass(frozen=True)
class Queued:
    """A request waiting in the scheduler: when it was inserted (its fifo_time), its kind and write group."""

    arrival: float
    kind: str
    sync: bool = True      # writes: the sync group (O_DIRECT writes are REQ_SYNC) or the async one
    tag: Any = None        # the caller's
    contig: bool | None = None   # starts exactly where a stream ended (the module's SIO_RQ_CONTIG); None: by kind
    task: Any = None       # writes: the task that queued it (None: not known, never a reader's own)
    size: int = 4096       # bytes


@dataclasses.dataclass
class State:
    """What the module knows when it picks (sio_data, for one class)."""

    reads: Sequence[Queued] = ()             # queued reads, oldest first
    writes: Sequence[Queued] = ()            # queued writes, oldest first
    inflight: Mapping[str, int] = dataclasses.field(default_factory=dict)   # per kind: dispatched, not completed
    last_write: float | None = None          # last write dispatch (None: none yet)
    last_write_rand: bool = False            # ... did not start where the write before it ended
    last_write_done: float | None = None     # last write completion
    last_write_done_task: Any = None         # ... and the task that queued that write (None: not known)
    last_read_done: float | None = None      # last read completion
    readers: tuple[tuple[Any, float], ...] = ()   # (reader, seen): the last reader seen, then the last other one
    phase: str = READING
    window_end: float = 0.0                  # WINDOW until then
    starters: dict[Any, float] = dataclasses.field(default_factory=dict)   # task -> last seen reading (rule 9)
    last_read_cached: bool = False           # the last read seen was into the page cache (rule 9)
    startup: tuple[Any, float, float] | None = None    # the start-up: (its task, its beginning, its task last seen)

    def reads_inflight(self) -> int:
        return sum(n for k, n in self.inflight.items() if is_read(k))


@dataclasses.dataclass(frozen=True)
class Decision:
    """A pick (READ or WRITE, with the request) or None: nothing now, and `wait_until` when a timer of the module
    would run the queue again (None: only a completion or an arrival will). `phase` and `window_end` are the
    module's state after the call (it changes them whether or not it dispatches); `reason` says which rule."""

    pick: str | None
    request: Queued | None
    reason: str
    wait_until: float | None = None
    phase: str = READING
    window_end: float = 0.0


def pace_us(s: State, t: Tunables) -> float:
    """sio_pace_ns(): the pace after the last write dispatched."""
    return t.write_pace_rand_us if s.last_write_rand and t.write_pace_rand_us else t.write_pace_us


def reader_window_us(s: State, t: Tunables) -> float:
    """sio_reader_window_ns(): how long after it was last seen a reader still counts: max(read_anticipation_us, the
    pace)."""
    return max(t.read_anticipation_us, pace_us(s, t))


def read_within(s: State, now: float, window: float) -> bool:
    """sio_read_within(): a read queued or in flight, or one completed less than `window` µs ago."""
    if s.reads or s.reads_inflight():
        return True
    return s.last_read_done is not None and now - s.last_read_done < window


def reader_active(s: State, now: float, t: Tunables) -> bool:
    """sio_reader_active(): a read queued or in flight, or one completed less than max(anticipation, pace) ago."""
    return read_within(s, now, reader_window_us(s, t))


def reader_seen(s: State, reader: Any, now: float, t: Tunables, cached: bool = False) -> None:
    """sio_reader_seen(): task `reader` inserted a read or one of its reads completed (the callers' update);
    `cached`: a read into the page cache, not a direct one."""
    on = startup_on(s, now, t)               # the module's startup_reading is the last call's
    others = s.readers[:1] if s.readers and s.readers[0][0] != reader else s.readers[1:]
    s.readers = ((reader, now), *others)
    s.last_read_cached = cached
    if not t.startup_ms or not cached:       # sio_starter_seen()
        return
    startup = t.startup_ms * 1000
    last = s.starters.get(reader)
    s.starters[reader] = now
    if s.startup is not None and s.startup[0] == reader and startup_within(s, now, t):
        s.startup = (reader, s.startup[1], now)
    elif (last is None or now - last >= startup) and not on:
        s.startup = (reader, now, now)


def startup_within(s: State, now: float, t: Tunables) -> bool:
    """sio_startup_within(): has a start-up begun less than startup_ms ago?"""
    return s.startup is not None and now - s.startup[1] < t.startup_ms * 1000


def startup_on(s: State, now: float, t: Tunables) -> bool:
    """sio_startup_on(): within a start-up's startup_ms, its task reading (the last to read, with reads queued or in
    flight, or seen less than max(anticipation, pace, startup_anticipation_us) ago)?"""
    if not t.startup_ms or s.startup is None or not startup_within(s, now, t):
        return False
    task, _, seen = s.startup
    reading = (bool(s.readers) and s.readers[0][0] == task and s.last_read_cached
               and bool(s.reads or s.reads_inflight()))
    return reading or _since(now, seen) < startup_window_us(s, t)


def startup_window_us(s: State, t: Tunables) -> float:
    """How long after it was last seen a start-up's task still counts as reading: startup_anticipation_us too, where
    anticipation is on."""
    return max(reader_window_us(s, t), t.startup_anticipation_us if t.read_anticipation_us else 0.0)


def antic_window_us(s: State, now: float, t: Tunables) -> float:
    """sio_antic_window_ns(): read_anticipation_us, or while a start-up is on startup_anticipation_us where that is
    longer; 0: no anticipation."""
    if t.read_anticipation_us and t.startup_anticipation_us > t.read_anticipation_us and startup_on(s, now, t):
        return t.startup_anticipation_us
    return t.read_anticipation_us


def several_readers_end(s: State, now: float, t: Tunables) -> float | None:
    """sio_several_readers_end(): while two or more tasks read, when the other than the latest stops counting
    (seen max(read_anticipation_us, the pace) ago); None when fewer than two read."""
    if len(s.readers) < 2:
        return None
    end = s.readers[1][1] + reader_window_us(s, t)
    return end if now < end else None


def own_task(s: State, task: Any, now: float, t: Tunables) -> bool:
    """sio_own_task(): is `task` the one that read last, with no other task reading (rule 7)?"""
    return task is not None and bool(s.readers) and s.readers[0][0] == task and several_readers_end(s, now, t) is None


def read_hold_end(s: State, now: float, t: Tunables) -> float | None:
    """sio_read_hold_end(): when the read hold ends, or None if no queued read is held now."""
    if not t.read_hold_us or not t.write_pace_us or s.last_write_done is None or not s.reads:
        return None
    if own_task(s, s.last_write_done_task, now, t):
        return None
    end = min(s.last_write_done, min(q.arrival for q in s.reads)) + t.read_hold_us
    return end if now < end else None


def slice_us(q: Queued, t: Tunables) -> float:
    """sio_slice_ns(): how long write q may wait behind reads. Random = not starting exactly where a stream of
    writes ended (q.contig), as the device tells sequential writes; without that, the request's kind. A request
    larger than write_slice_kb waits the slice per write_slice_kb of its size."""
    rand = not q.contig if q.contig is not None else q.kind == "rand_write"
    ms = t.write_slice_rand_ms if rand and t.write_slice_rand_ms else t.write_slice_ms
    per, us = int(t.write_slice_kb) * 1024, int(ms * 1000)
    return us * q.size // per if per and q.size > per else us     # whole µs, as the module divides


def _since(now: float, then: float) -> float:
    return max(0.0, now - then)


def decide(s: State, now: float, t: Tunables) -> Decision:
    """sio_select() for one class; pure (the state is not changed, the new phase is in the answer)."""
    phase, window_end = s.phase, s.window_end
    hold_end = read_hold_end(s, now, t)

    def others_waiting(kind: str) -> bool:
        if any(q.kind != kind for q in (*s.reads, *s.writes)):
            return True
        return not is_read(kind) and phase == ANTICIPATING

    def single_write_held(q: Queued) -> bool:   # sio_single_write_held()
        if is_read(q.kind) or not t.single_write_ms or phase == WINDOW:
            return False
        if not any(n for k, n in s.inflight.items() if not is_read(k)):
            return False
        return read_within(s, now, t.single_write_ms * 1000) and not own_task(s, q.task, now, t)

    def may_dispatch(q: Queued) -> bool:
        if single_write_held(q):
            return False
        limit = t.limit(q.kind)
        return not limit or s.inflight.get(q.kind, 0) < limit or not others_waiting(q.kind)

    def pick_read() -> Queued | None:
        return s.reads[0] if s.reads and may_dispatch(s.reads[0]) else None

    def group_heads() -> list[Queued]:
        sync = next((q for q in s.writes if q.sync), None)
        unsync = next((q for q in s.writes if not q.sync), None)
        return [q for q in (sync, unsync) if q is not None]

    def pick_writes() -> Queued | None:     # SIO_PICK_WRITES: the first group head the limits allow
        return next((q for q in group_heads() if may_dispatch(q)), None)

    def oldest_write() -> Queued:
        return min(group_heads(), key=lambda q: q.arrival)

    def starved_write(last: float) -> Queued | None:    # sio_starved_write(); last: the last write dispatch
        def waited(q: Queued) -> float:
            return _since(now, max(q.arrival, last))

        q = next((q for q in sorted(group_heads(), key=lambda q: q.arrival) if waited(q) >= slice_us(q, t)), None)
        if q is not None and startup_on(s, now, t) and waited(q) < t.startup_ms * 1000:
            return None                      # a start-up holds it (rule 9)
        return q

    def go(pick: str, q: Queued, reason: str) -> Decision:
        return Decision(pick, q, reason, None, phase, window_end)

    def wait(reason: str, until: float | None = None) -> Decision:
        times = [x for x in (until, hold_end) if x is not None]    # sio_select arms the timer at hold_end too
        return Decision(None, None, reason, min(times) if times else None, phase, window_end)

    def anticipated(why: str = "anticipation") -> Decision | None:   # sio_anticipate(): writes held, or None
        nonlocal phase
        if window := antic_window_us(s, now, t):
            if s.reads_inflight():
                phase = ANTICIPATING
                return wait(f"{why} (read in flight)")
            if s.last_read_done is not None and now - s.last_read_done < window:
                phase = ANTICIPATING
                return wait(why, s.last_read_done + window)
        return None

    if phase == WINDOW and now >= window_end:
        phase = READING
    if not s.writes:
        if hold_end is None:
            q = pick_read()
            return go(READ, q, "read") if q else wait("read limited")
        return wait("read hold")
    if phase == WINDOW:
        q = oldest_write()
        if may_dispatch(q):
            return go(WRITE, q, "write window")
    last = s.last_write if s.last_write is not None else -math.inf
    if (starved := starved_write(last)) is not None:
        if t.write_window_ms:
            phase, window_end = WINDOW, now + t.write_window_ms * 1000
        return go(WRITE, starved, "write slice expired")
    if hold_end is None:
        q = pick_read()
        if q:
            return go(READ, q, "read first")
    if phase != WINDOW:
        if t.write_pace_us:                  # sio_pace()
            q = pick_writes()
            if startup_on(s, now, t) and not (q is not None and own_task(s, q.task, now, t)):
                if held := anticipated("a start-up's anticipation"):    # sio_startup_anticipated()
                    return held
            if phase == ANTICIPATING:
                phase = READING
                q = pick_writes()            # anticipating counted as others waiting (the limits)
            if q is None:
                return wait("write limited")
            if not reader_active(s, now, t):
                return go(WRITE, q, "write, no reader (unpaced)")
            if own_task(s, q.task, now, t):
                return go(WRITE, q, "the reader's own write (unpaced)")
            several = several_readers_end(s, now, t)
            if several is not None:
                return wait("several readers: writes by their slice",
                            None if s.reads or s.reads_inflight() else several)
            end = last + pace_us(s, t)
            if now >= end:
                return go(WRITE, q, "write at its pace")
            return wait("write pace", end)
        q = pick_writes()
        if q is not None and own_task(s, q.task, now, t):
            phase = READING
            return go(WRITE, q, "the reader's own write (not anticipated)")
        if held := anticipated():
            return held
        if phase == ANTICIPATING:
            phase = READING
    q = pick_writes()
    return go(WRITE, q, "write") if q else wait("write limited")

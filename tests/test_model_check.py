"""The policy's pure twin (smartio.iosched.policy.decide) has the module's rules, and the model check of a block
trace against it (smartio.trace.modelcheck) agrees with a dispatch order that follows them and fails one that does
not. The traces here are made by hand, so the right answer is known; tests/test_model_check_vm.py records one."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from smartio.cli import main
from smartio.iosched.policy import ANTICIPATING, READ, WINDOW, WRITE, Queued, State, Tunables, decide, reader_seen
from smartio.trace import events as ev
from smartio.trace.formats import write_ours
from smartio.trace.modelcheck import Event, check_events, events_from_trace, load_tunables

# Pacing as `smartio profile --apply` sets it, at a scale that keeps the numbers readable (µs); no start-up (rule 9):
# the traces made by hand here start with their reader, and a tunables dump without startup_ms (or
# startup_anticipation_us) means 0.
TUN = Tunables(write_pace_us=1000, write_pace_rand_us=2000, read_hold_us=300, read_anticipation_us=0, startup_ms=0,
               startup_anticipation_us=0)


def R(t: float, kind: str = "seq_read") -> Queued:
    return Queued(t, kind)


def W(t: float, kind: str = "seq_write", sync: bool = True) -> Queued:
    return Queued(t, kind, sync)


# -- decide(): the module's rules one by one

def test_reads_go_first_and_a_write_waits_for_its_pace_beside_a_reader() -> None:
    s = State(reads=[R(50)], writes=[W(10)], last_write=0.0)
    assert decide(s, 60, TUN).pick == READ
    s = State(writes=[W(10)], inflight={"seq_read": 1}, last_write=0.0)
    d = decide(s, 60, TUN)
    assert d.pick is None and d.wait_until == 1000 and d.reason == "write pace"
    assert decide(s, 1000, TUN).pick == WRITE


def test_a_random_write_is_followed_by_the_random_pace() -> None:
    s = State(writes=[W(10)], inflight={"rand_read": 1}, last_write=0.0, last_write_rand=True)
    assert decide(s, 1500, TUN).wait_until == 2000
    # write_pace_rand_us = 0: the sequential pace applies to random writes too.
    assert decide(s, 1500, Tunables(write_pace_us=1000)).pick == WRITE


def test_a_writer_alone_is_not_paced() -> None:
    s = State(writes=[W(10)], last_write=0.0, last_read_done=-5000.0)
    assert decide(s, 60, TUN).reason == "write, no reader (unpaced)"
    # ... but a read completed less than a pace (max(anticipation, pace)) ago is a reader still active.
    s = State(writes=[W(10)], last_write=0.0, last_read_done=-100.0)
    assert decide(s, 60, TUN).pick is None


def test_the_read_hold_is_capped_by_the_reads_arrival_and_lets_a_paced_write_go() -> None:
    # A write completed at 1000: a read that arrived at 900 waits until 1200, not 1300.
    s = State(reads=[R(900)], last_write=0.0, last_write_done=1000.0)
    d = decide(s, 1100, TUN)
    assert d.pick is None and d.wait_until == 1200 and d.reason == "read hold"
    assert decide(s, 1200, TUN).pick == READ
    # A read arriving after the completion waits read_hold_us from the completion.
    assert decide(State(reads=[R(1050)], last_write_done=1000.0), 1250, TUN).wait_until == 1300
    # During the hold a write whose pace has passed goes, and the held read stays (the old model sent the read).
    s = State(reads=[R(1010)], writes=[W(1020)], last_write=0.0, last_write_done=1000.0)
    assert decide(s, 1100, TUN).pick == WRITE
    # No hold without pacing (sio_read_hold_end needs write_pace_us).
    assert decide(State(reads=[R(1010)], last_write_done=1000.0), 1100, Tunables(read_hold_us=300)).pick == READ


def test_a_starved_write_opens_a_window() -> None:
    t = Tunables(write_slice_ms=1, write_window_ms=2, read_anticipation_us=0)
    s = State(reads=[R(0)], writes=[W(0), W(0)], last_write=-5000.0)
    assert decide(s, 999, t).pick == READ
    d = decide(s, 1000, t)
    assert d.pick == WRITE and d.phase == WINDOW and d.window_end == 3000
    s = State(reads=[R(0)], writes=[W(0)], last_write=1000.0, phase=d.phase, window_end=d.window_end)
    assert decide(s, 1500, t).pick == WRITE        # writes first in the window
    s.last_write = 2500.0
    d = decide(s, 3000, t)
    assert d.pick == READ and d.phase != WINDOW


def test_a_random_write_waits_for_the_random_slice() -> None:
    """write_slice_rand_ms: a write that does not continue a stream exactly (contig False; without the flag, its
    kind) waits behind reads for its own slice; a sequential one for write_slice_ms."""
    t = Tunables(write_slice_ms=1, write_slice_rand_ms=3, write_window_ms=0, read_anticipation_us=0)
    for w, expires in ((W(0, "rand_write"), 3000), (Queued(0, "seq_write", contig=False), 3000),
                       (Queued(0, "rand_write", contig=True), 1000), (W(0), 1000)):
        s = State(reads=[R(0)], writes=[w], last_write=-5000.0)
        assert decide(s, expires - 1, t).pick == READ, w
        d = decide(s, expires, t)
        assert d.pick == WRITE and d.reason == "write slice expired" and d.phase != WINDOW, w
    # 0: the random slice is write_slice_ms.
    s = State(reads=[R(0)], writes=[W(0, "rand_write")], last_write=-5000.0)
    assert decide(s, 1000, Tunables(write_slice_ms=1, read_anticipation_us=0)).pick == WRITE


def test_a_large_write_waits_the_slice_per_write_slice_kb_of_its_size() -> None:
    """write_slice_kb: a request larger than it waits write_slice_ms per write_slice_kb it carries (the random slice
    too); one no larger waits one slice, and 0 makes every request wait one slice whatever its size."""
    t = Tunables(write_slice_ms=1, write_slice_rand_ms=3, write_slice_kb=32, read_anticipation_us=0)
    for w, expires in ((Queued(0, "seq_write", contig=True, size=128 << 10), 4000),
                       (Queued(0, "seq_write", contig=True, size=48 << 10), 1500),
                       (Queued(0, "seq_write", contig=True, size=32 << 10), 1000),
                       (Queued(0, "seq_write", contig=True), 1000),
                       (Queued(0, "rand_write", contig=False, size=64 << 10), 6000)):
        s = State(reads=[R(0)], writes=[w], last_write=-5000.0)
        assert decide(s, expires - 1, t).pick == READ, w
        assert decide(s, expires, t).reason == "write slice expired", w
    s = State(reads=[R(0)], writes=[Queued(0, "seq_write", contig=True, size=128 << 10)], last_write=-5000.0)
    assert decide(s, 1000, dataclasses.replace(t, write_slice_kb=0)).reason == "write slice expired"
    assert Tunables().write_slice_kb == 0 and Tunables.from_mapping({"write_slice_kb": "32"}).write_slice_kb == 32


def test_a_small_sync_write_behind_a_large_async_one_goes_by_its_own_slice() -> None:
    """sio_starved_write(): each write group's head by its own slice, the older first. A 4 KiB sync write queued
    after a 128 KiB async one (a 4-slice wait) goes when its own slice is over, not the older write's."""
    t = Tunables(write_slice_ms=1, write_slice_kb=32, read_anticipation_us=0)
    big = Queued(0, "seq_write", sync=False, contig=True, size=128 << 10)
    small = Queued(500, "seq_write", sync=True, contig=True)
    s = State(reads=[R(0)], writes=[big, small], last_write=-5000.0)
    assert decide(s, 1499, t).pick == READ
    d = decide(s, 1500, t)
    assert d.reason == "write slice expired" and d.request is small
    d = decide(State(reads=[R(0)], writes=[big], last_write=-5000.0), 4000, t)
    assert d.reason == "write slice expired" and d.request is big


def test_without_pacing_writes_wait_for_an_anticipated_read() -> None:
    t = Tunables(read_anticipation_us=3000)
    d = decide(State(writes=[W(0)], inflight={"seq_read": 1}), 10, t)
    assert d.pick is None and d.wait_until is None and d.phase == ANTICIPATING
    d = decide(State(writes=[W(0)], last_read_done=100.0), 200, t)
    assert d.pick is None and d.wait_until == 3100
    assert decide(State(writes=[W(0)], last_read_done=100.0), 3100, t).pick == WRITE


def test_dispatch_limits_hold_a_kind_only_while_another_waits() -> None:
    t = Tunables(dispatch_limit_seq_read=1, read_anticipation_us=0)
    s = State(reads=[R(0)], writes=[W(0)], inflight={"seq_read": 1})
    assert decide(s, 10, t).pick == WRITE
    assert decide(State(reads=[R(0)], inflight={"seq_read": 1}), 10, t).pick == READ


def test_sync_writes_before_async_ones() -> None:
    s = State(writes=[W(0, sync=False), W(5)])
    assert decide(s, 10, Tunables(read_anticipation_us=0)).request == W(5)


def test_a_readers_own_writes_are_neither_paced_nor_anticipated_and_hold_none_of_its_reads() -> None:
    """Rule 7 (the module's 9): pace, hold and anticipation keep the device for another task's next read."""
    own, other = Queued(10, "seq_write", task=1), Queued(10, "seq_write", task=2)
    reader = ((1, 50.0),)
    s = State(writes=[own], inflight={"seq_read": 1}, last_write=0.0, readers=reader)
    assert decide(s, 60, TUN).reason == "the reader's own write (unpaced)"
    assert decide(dataclasses.replace(s, writes=[other]), 60, TUN).reason == "write pace"
    # With another task reading too, its writes go by their slice like anyone's.
    both = dataclasses.replace(s, readers=(*reader, (3, 40.0)))
    assert decide(both, 60, TUN).reason == "several readers: writes by their slice"
    # Without pacing: not anticipated, and the anticipation phase ends.
    antic = Tunables(read_anticipation_us=3000)
    d = decide(dataclasses.replace(s, phase=ANTICIPATING), 60, antic)
    assert d.pick == WRITE and d.phase != ANTICIPATING and d.reason == "the reader's own write (not anticipated)"
    d = decide(dataclasses.replace(s, writes=[other]), 60, antic)
    assert d.pick is None and d.phase == ANTICIPATING
    # Its own write's completion holds none of its reads.
    s = State(reads=[R(950)], last_write_done=900.0, last_write_done_task=1, readers=((1, 950.0),))
    assert decide(s, 1000, TUN).pick == READ
    assert decide(dataclasses.replace(s, last_write_done_task=2), 1000, TUN).reason == "read hold"
    # A write of no known task (None) is nobody's own.
    assert decide(State(writes=[W(10)], inflight={"seq_read": 1}, last_write=0.0, readers=((None, 50.0),)), 60,
                  TUN).reason == "write pace"


def test_beside_a_recent_reader_writes_go_one_at_a_time() -> None:
    """Rule 8 (the module's 10): a write in flight holds the next write while a reader is recent, so that a read
    arriving in a gap of the reader's waits for one write at most; not the reader's own, not one whose slice ran out,
    not in a write window (the writes' time), not with single_write_ms = 0, and not once the reader has been gone
    single_write_ms."""
    t = Tunables(read_anticipation_us=0, write_slice_ms=50, single_write_ms=10)     # 10 ms = 10000 µs
    other, own = Queued(100, "seq_write", task=2), Queued(100, "seq_write", task=1)
    s = State(writes=[other], inflight={"seq_write": 1}, last_write=90.0, last_read_done=0.0, readers=((1, 0.0),))
    d = decide(s, 200, t)
    assert d.pick is None and d.wait_until is None and d.reason == "write limited"   # the completion reruns it
    assert decide(dataclasses.replace(s, inflight={}), 200, t).pick == WRITE          # none in flight
    assert decide(dataclasses.replace(s, writes=[own]), 200, t).pick == WRITE         # the reader's own
    assert decide(s, 200, dataclasses.replace(t, single_write_ms=0)).pick == WRITE    # rule off
    assert decide(s, 10_000, t).pick == WRITE                                         # the reader is 10 ms gone
    assert decide(dataclasses.replace(s, inflight={"seq_write": 1, "seq_read": 1}), 10_000, t).pick is None
    assert decide(s, 50_100, t).reason == "write slice expired"                       # the slice still bounds it
    assert decide(dataclasses.replace(s, phase=WINDOW, window_end=1e9), 200, t).reason == "write window"


def test_a_start_up_holds_writes_past_their_slice_while_its_task_reads() -> None:
    """Rule 9 (the module's 11): a task that reads into the page cache for the first time starts up; for
    startup_ms, while it reads, a write waits startup_ms where its slice is shorter, and goes once it has waited
    that long. A task that kept reading does not start up again; one that paused startup_ms does; another task does
    not take a start-up that is on."""
    t = Tunables(read_anticipation_us=0, write_slice_ms=1, single_write_ms=0, startup_ms=5)    # 1000 / 5000 µs
    s = State(writes=[W(0)], reads=[R(1500)], last_write=0.0)
    reader_seen(s, 1, 100, t, cached=True)
    assert s.startup == (1, 100, 100)                                           # (task, beginning, last seen)
    assert decide(s, 1500, t).pick == READ                                       # slice over, start-up on
    assert decide(s, 1500, dataclasses.replace(t, startup_ms=0)).reason == "write slice expired"
    assert decide(s, 5000, t).reason == "write slice expired"                    # waited startup_ms
    assert decide(dataclasses.replace(s, reads=[], inflight={}), 1500, t).pick == WRITE   # no read: the write goes
    later = dataclasses.replace(s, writes=[W(5000)], reads=[R(6000)], last_write=5000.0)
    assert decide(later, 6100, t).reason == "write slice expired"                # the start-up is over
    other = dataclasses.replace(s, readers=((2, 1400.0), (1, 100.0)))
    assert decide(other, 1500, t).reason == "write slice expired"                # its task is not reading

    s = State()
    reader_seen(s, 1, 0, t, cached=True)
    reader_seen(s, 1, 4000, t, cached=True)
    reader_seen(s, 1, 8000, t, cached=True)                                              # kept reading: no new start-up
    assert s.startup == (1, 0, 4000)
    reader_seen(s, 1, 13_000, t, cached=True)                                             # paused 5000 µs: starts again
    assert s.startup == (1, 13_000, 13_000)
    s.inflight = {"seq_read": 1}
    reader_seen(s, 2, 13_100, t, cached=True)                                              # a new task, the start-up on
    assert s.startup == (1, 13_000, 13_000)
    s.inflight = {}
    reader_seen(s, 3, 13_200, t, cached=True)                                            # ... and once its task is idle
    assert s.startup == (3, 13_200, 13_200)
    held = State(writes=[W(13_200)], reads=[R(15_000)], last_write=13_200.0, readers=((3, 14_000.0),),
                 startup=s.startup, last_read_cached=True)
    assert decide(held, 15_000, t).pick == READ
    assert decide(held, 15_000, dataclasses.replace(t, startup_ms=1)).pick == WRITE    # applies to the one that is on


def test_a_start_up_anticipates_its_task_reads_for_startup_anticipation_us() -> None:
    """Rule 9 (the module's 11) with anticipation on: while a start-up is on, a write waits startup_anticipation_us
    after the last read completed instead of read_anticipation_us, and the start-up's task counts as reading as
    long; once the start-up is over (or with it 0, or anticipation off) the window is read_anticipation_us."""
    t = Tunables(read_anticipation_us=1000, write_slice_ms=1000, single_write_ms=0, startup_ms=50,
                 startup_anticipation_us=20_000)
    s = State(writes=[W(0)], last_write=0.0)
    reader_seen(s, 1, 100, t, cached=True)
    s.last_read_done = 100.0
    assert decide(s, 5000, t).reason == "anticipation" and decide(s, 5000, t).wait_until == 20_100
    assert decide(s, 20_200, t).pick == WRITE                                    # the gap outlasted it
    assert decide(s, 5000, dataclasses.replace(t, startup_anticipation_us=0)).pick == WRITE
    assert decide(s, 5000, dataclasses.replace(t, startup_ms=0)).pick == WRITE  # no start-up: 1000 µs
    assert decide(s, 5000, dataclasses.replace(t, read_anticipation_us=0)).pick == WRITE
    later = dataclasses.replace(s, last_read_done=60_000.0, readers=((1, 60_000.0),), startup=(1, 100, 60_000.0))
    assert decide(later, 62_000, t).pick == WRITE                                # 50 ms on: the start-up is over


def test_direct_reads_begin_no_start_up_and_a_start_up_anticipates_paced_writes() -> None:
    """Rule 9 with pacing (rule 4): a direct reader, however new, begins no start-up; while a start-up is on, a
    write whose pace has passed still waits the start-up's anticipation window after its task's last read, unless
    it is that task's own; another task's direct read neither takes the start-up nor extends it."""
    t = Tunables(read_anticipation_us=1000, write_slice_ms=1000, single_write_ms=0, startup_ms=50,
                 startup_anticipation_us=20_000, write_pace_us=500, read_hold_us=0)
    s = State(writes=[W(0)], last_write=0.0)
    reader_seen(s, 1, 100, t)                                                    # direct
    assert s.startup is None
    s.last_read_done = 100.0
    assert decide(s, 600, t).reason == "write at its pace"
    reader_seen(s, 1, 5000, t, cached=True)
    assert s.startup == (1, 5000, 5000)
    s.last_read_done = 5000.0
    d = decide(s, 6000, t)
    assert d.reason == "a start-up's anticipation" and d.wait_until == 25_000, d
    assert decide(s, 6000, dataclasses.replace(t, startup_ms=0)).pick == WRITE  # no start-up: paced only
    assert decide(s, 25_100, t).pick == WRITE                                    # the gap outlasted it
    own = dataclasses.replace(s, writes=[Queued(0, "seq_write", task=1)])
    assert decide(own, 5500, t).reason == "the reader's own write (unpaced)"
    reader_seen(s, 2, 6000, t)                                                   # another task reads direct
    assert not s.last_read_cached and s.startup == (1, 5000, 5000)


def test_tunables_from_sysfs_names() -> None:
    assert Tunables.from_mapping({"write_pace_us": "285", "qasio_boost": "1"}).write_pace_us == 285
    with pytest.raises(ValueError, match="write_pace_ms"):
        Tunables.from_mapping({"write_pace_ms": 1})


def test_tunables_accept_every_tunable_the_module_has() -> None:
    # CI: a tunable added to the module (async_depth) made the VM model-check test fail on `cat iosched/*`
    src = (Path(__file__).parents[1] / "kernel" / "smartio-iosched.c").read_text()
    names = re.findall(r"^\s*SIO_ATTR\((\w+)\),", src, re.M)
    assert "async_depth" in names and len(names) >= 16
    Tunables.from_mapping({n: "1" for n in names})


# -- the model check

def ev_(t: float, action: str, sector: int, write: bool, pid: int | None = None) -> Event:
    """An event of the reader (pid 1) or of the writer (pid 2), unless `pid` says."""
    return Event(t, action, sector, 8, write, pid=pid if pid is not None else 2 if write else 1)


# One reader (sectors 5000, 5008, 5016) beside one sequential writer (0, 8: the module's last write end starts at 0,
# so the first write counts as sequential) under TUN, as the module would go.
GOOD = [
    ev_(0, "I", 0, True), ev_(5, "D", 0, True),        # no reader yet: unpaced
    ev_(10, "I", 5000, False), ev_(12, "D", 5000, False),
    ev_(20, "I", 8, True),                                 # paced: waits until 5 + 1000
    ev_(500, "C", 5000, False),
    ev_(510, "I", 5008, False), ev_(512, "D", 5008, False),        # read first, the write still queued
    ev_(900, "C", 0, True),                                # hold until min(900, next read) + 300
    ev_(950, "C", 5008, False),
    ev_(960, "I", 5016, False),                                 # held until 1200
    ev_(1080, "D", 8, True),                               # the pace ended at 1005: the write goes (timer late)
    ev_(1201, "D", 5016, False),                                # the hold is over
    ev_(1700, "C", 5016, False), ev_(2000, "C", 8, True),
]


def test_a_dispatch_order_by_the_rules_agrees() -> None:
    res = check_events(GOOD, TUN)
    assert [c.verdict for c in res.checks] == ["agree"] * 5, res.to_json()
    assert res.rate() == 1.0 and res.skipped == 0
    assert sum(c.contested for c in res.checks) == 2       # 512 (read over a queued write), 1080 (write, held read)
    # The write became due at 1005 (its pace) and went at 1080: a dispatch delay of 75 µs, nothing late.
    assert 75.0 in res.delays_us and not res.late


# The same streams against the rules: a write before its pace over a queued read, and a read inside the read hold.
BAD = [
    ev_(0, "I", 0, True), ev_(5, "D", 0, True),
    ev_(10, "I", 5000, False), ev_(12, "D", 5000, False),
    ev_(20, "I", 8, True),
    ev_(500, "C", 5000, False),
    ev_(510, "I", 5008, False), ev_(512, "D", 8, True),       # model: the read first (and the pace is not over)
    ev_(515, "D", 5008, False),
    ev_(900, "C", 0, True), ev_(950, "C", 5008, False),
    ev_(960, "I", 5016, False), ev_(1100, "D", 5016, False),     # model: held until 1200
    ev_(1700, "C", 5016, False), ev_(2000, "C", 8, True),
]


def test_a_dispatch_order_against_the_rules_fails() -> None:
    bad = BAD
    res = check_events(bad, TUN, tolerance_us=50)
    verdicts = [c.verdict for c in res.checks]
    assert verdicts == ["agree", "agree", "kind", "agree", "waited"], res.to_json()
    assert res.rate() == pytest.approx(3 / 5) and len(res.disagreements) == 2
    kind = res.disagreements[0]
    assert kind.decision.pick == READ and kind.context["queued_reads_age_us"] == [2.0]
    held = res.disagreements[1]
    assert held.decision.reason == "read hold" and held.context["read_hold_left_us"] == 100.0


def test_the_check_tells_a_readers_own_writes_by_the_inserting_pid() -> None:
    # A write 2 us after a read went, before its pace: the module's order for one task's reads and writes (rule 7),
    # against the rules when the write is another task's.
    evs = [ev_(0, "I", 0, True, pid=1), ev_(5, "D", 0, True), ev_(10, "I", 5000, False, pid=1),
           ev_(12, "D", 5000, False), ev_(20, "I", 8, True, pid=1), ev_(22, "D", 8, True)]
    assert [c.verdict for c in check_events(evs, TUN).checks] == ["agree"] * 3
    other = [dataclasses.replace(e, pid=2) if e.write and e.action == "I" else e for e in evs]
    assert [c.verdict for c in check_events(other, TUN).checks][-1] == "waited"


def test_the_tolerance_takes_the_clock_read_before_the_issue_event() -> None:
    # The module read its clock at 1199 (hold on: the write goes), the issue event says 1210 (hold over: the model
    # would send the read). Within 50 µs of the issue and after the previous event, the write was right.
    evs = [ev_(0, "I", 0, True), ev_(5, "D", 0, True), ev_(10, "I", 5000, False), ev_(12, "D", 5000, False),
           ev_(20, "I", 8, True), ev_(900, "C", 0, True), ev_(950, "C", 5000, False), ev_(960, "I", 5008, False),
           ev_(1210, "D", 8, True)]
    assert [c.verdict for c in check_events(evs, TUN, tolerance_us=50).checks][-1] == "agree_within"
    assert [c.verdict for c in check_events(evs, TUN, tolerance_us=5).checks][-1] == "kind"


def _trace(events: list[Event]) -> ev.Trace:
    rec = np.zeros(len(events), dtype=ev.EVENT_DTYPE)
    code = {"I": ev.INSERT, "D": ev.ISSUE, "C": ev.COMPLETE}
    for i, e in enumerate(events):
        tc = (ev.TC_WRITE | ev.TC_SYNC if e.write else ev.TC_READ) | ev.ACTION_CATEGORY[code[e.action]]
        rec[i] = (ev.MAGIC, i, int(e.time * 1000) + 10**9, e.sector, e.sectors * 512,
                  code[e.action] | tc << ev.TC_SHIFT, e.pid, ev.kdev(254, 0), 0, 0, 0)
    return ev.Trace(rec)


def test_events_from_a_trace_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert events_from_trace(_trace(GOOD)) == GOOD
    write_ours(_trace(GOOD), tmp_path / "good.smtrace")
    (tmp_path / "tunables").write_text("write_pace_us:1000\nwrite_pace_rand_us:2000\nread_hold_us:300\n"
                                       "read_anticipation_us:0\nqasio_boost:1\n")
    assert load_tunables(tmp_path / "tunables") == TUN
    assert main(["trace", "model-check", str(tmp_path / "good.smtrace"), "--tunables", str(tmp_path / "tunables"),
                 "--min-agreement", "100", "--json", str(tmp_path / "out.json")]) == 0
    assert "agreement 100.0 %" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["summary"]["issues_checked"] == 5
    write_ours(_trace(BAD), tmp_path / "bad.smtrace")
    assert main(["trace", "model-check", str(tmp_path / "bad.smtrace"), "--tunables", str(tmp_path / "tunables"),
                 "--min-agreement", "90"]) == 1
    assert "kind at 0.512 ms: module write, model read (read first)" in capsys.readouterr().out


def test_the_cli_says_when_the_module_paced_by_a_pace_it_learned(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Rule 13: with auto_pace on and write_pace_us 0 the module paces by a pace the twin does not know; the CLI
    says so (and how to pass it), and not where a written pace takes over, nor for a dump of a module before it."""
    write_ours(_trace(GOOD), tmp_path / "good.smtrace")
    runs = {"learned": "write_pace_us:0\nauto_pace:1\n", "written": "write_pace_us:1000\nauto_pace:1\n",
            "before": "write_pace_us:0\n"}
    for name, text in runs.items():
        (tmp_path / name).write_text(text)
        main(["trace", "model-check", str(tmp_path / "good.smtrace"), "--tunables", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert ("auto_pace is 1" in err) == (name == "learned"), (name, err)
    main(["trace", "model-check", str(tmp_path / "good.smtrace")])              # the defaults: auto_pace 1
    assert "--tunable write_pace_us=N" in capsys.readouterr().err
    main(["trace", "model-check", str(tmp_path / "good.smtrace"), "--tunables", str(tmp_path / "learned"),
          "--tunable", "write_pace_us=1000"])
    assert "auto_pace" not in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["seq", "rand"])
def test_the_models_own_schedule_checks_with_full_agreement(mode: str) -> None:
    """model.run_streams dispatches by decide(); its log, checked as a trace, must agree at every issue (checks the
    check's reconstruction: the stream table, the random tell, holds, paces, timers)."""
    from smartio.flashdev import load_profile
    from smartio.flashdev.model import Device, Policy, run_streams

    tun = Tunables(write_pace_us=285, write_pace_rand_us=717, read_hold_us=133, read_anticipation_us=0)
    log: list[tuple[float, str, int, bool, int]] = []
    run_streams(Device.from_profile(load_profile("s5-emmc")), [f"{mode}_read", f"{mode}_write"],
                Policy("read_first", tunables=tun), ios=300, log=log)
    res = check_events([Event(t, a, sector, 8, w, pid=i) for t, a, sector, w, i in sorted(log, key=lambda x: x[0])],
                       tun, tolerance_us=0.0)
    assert len(res.checks) >= 500 and res.skipped == 0
    assert res.rate(within=False) == 1.0, res.to_json()["disagreements"][:3]
    assert sum(c.contested for c in res.checks) > 50, "reads and writes never competed: the test tests nothing"
    assert max(res.delays_us) < 1e-6          # the model never waits where its own policy would send


DATA = Path(__file__).parent.parent / "runs" / "model-agreement-20261123"


@pytest.mark.parametrize("mode", ["seq", "rand"])
def test_a_recorded_run_of_the_module_checks_in_agreement(mode: str) -> None:
    """1R1W under smartio on s5-emmc in the testbed (bench/model-agreement, 3 s, the profiler's pacing), recorded
    2026-11-23: the model made the module's choice at all but one issue per mode (runs/model-agreement-20261123).
    A change to the policy's rules or to the check's reconstruction shows here without a VM."""
    from smartio.trace.formats import read_trace
    from smartio.trace.modelcheck import check_trace

    res = check_trace(read_trace(DATA / f"{mode}.smtrace"), load_tunables(DATA / f"tunables-{mode}"),
                       queue_depth=2)
    assert len(res.checks) >= 140 and res.skipped == 0
    assert len(res.disagreements) <= 1, res.to_json()["disagreements"]
    assert res.rate(contested_only=True) == 1.0


def test_beside_two_readers_a_write_waits_for_its_slice_not_its_pace() -> None:
    """Pacing is for one reader: with reads from two tasks (pids, as the trace has them and the module keeps them),
    a write whose pace is over still waits (for its slice) while the other reader was seen less than a pace ago.
    GOOD's reads from two tasks: the write that went at its pace at 1080 is one the model now holds."""
    two = [e if e.write else dataclasses.replace(e, pid=100 + e.sector % 16 // 8) for e in GOOD]
    res = check_events(two, TUN)
    last_write = [c for c in res.checks if c.actual == WRITE][-1]
    assert last_write.verdict == "waited" and last_write.decision.reason == "several readers: writes by their slice"
    assert [c.verdict for c in check_events(GOOD, TUN).checks] == ["agree"] * 5      # one task: paced as before

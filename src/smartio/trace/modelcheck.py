"""The model check: the smartio module's dispatch order in a block trace, checked issue by issue against the policy
twin (iosched/policy.py, decide()), so that the device model (src/smartio/flashdev/model.py, which designs the
policy with that twin) and the module (which runs it) cannot drift apart unnoticed. `smartio trace model-check`.

From the trace's block_rq_insert / block_rq_issue / block_rq_complete events of one device, `check_events()` rebuilds
what the module knew at every issue: the queued reads and writes (insert times are their fifo_time), what is in
flight per kind (seq/rand as the module's stream table tells them), the last write dispatch and whether it was
random (it did not start where the write before it ended), the last write and read completions, and the phase.
Then it asks decide() what it would dispatch, and compares with what the module issued:

  agree         decide() at the issue time picks the same kind (read or write);
  agree_within  it does at some time from `tolerance_us` before the issue (not before the previous event) to
                `tolerance_us` after it, or without a completion traced at most `tolerance_us` before it
                (the module records a completion after block_rq_complete is traced, and a dispatch on the other
                CPU can come in between): the module reads its clock when it dispatches and the issue event comes
                after (the driver's queue_rq; a vCPU of a TCG guest can be descheduled in between), so the
                trace's time of this issue is late, and so is that of the last write's, which starts its pace;
                a pace or hold that ended in between shows as a different answer at the issue;
  kind          decide() picks the other kind;
  waited        decide() dispatches nothing then (a pace, a hold, anticipation): the module went early.

It also follows the model between issues (after each insert and completion, and at decide()'s timers): when the
model would dispatch and the module issued only later, the difference is a dispatch delay (`delays_us`); those
beyond `late_us` are listed as `late` (the module held what the model would have sent, or its timer fired late).

What the trace cannot show, and so bounds the agreement (see `tolerance_us`): the module reads the clock under its
lock before the issue event; a completion's time is taken in sio_finish_request, a little after
block_rq_complete; requests dispatched before the trace began are skipped. One priority class, no QASIO boost.
Every read is taken as direct, which begins no start-up (rule 9): a block trace does not say whether a read filled
the page cache. For a trace of buffered reads, record with startup_ms at 0, or start-ups show as disagreements.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smartio.iosched.policy import (
    ANTICIPATING,
    READ,
    READING,
    WINDOW,
    WRITE,
    Decision,
    Queued,
    State,
    Tunables,
    decide,
    is_read,
    pace_us,
    read_hold_end,
    reader_seen,
    reader_window_us,
    several_readers_end,
    slice_us,
    startup_window_us,
)
from smartio.iosched.tunables import default
from smartio.trace import events as ev

NR_STREAMS, SEQ_GAP_SECTORS = 8, 64     # the module's SIO_NR_STREAMS, SIO_SEQ_GAP_SECTORS
TOLERANCE_US = 200.0
LATE_US = 2000.0


@dataclasses.dataclass(frozen=True)
class Event:
    """One request event of the trace: 'I' insert, 'D' issue, 'C' complete, 'R' requeue; time in µs."""

    time: float
    action: str
    sector: int
    sectors: int
    write: bool
    sync: bool = True
    pid: int = 0       # the task in whose context the event was traced (an insert: the submitter, as a rule)


def events_from_trace(trace: ev.Trace, device: int | None = None) -> list[Event]:
    """The insert/issue/complete/requeue events with data of one device (default: the one with most issues),
    times in µs from the first event."""
    e = trace.events
    codes, cats = trace.codes, trace.categories
    want = np.isin(codes, [ev.INSERT, ev.ISSUE, ev.COMPLETE, ev.REQUEUE]) & (e["bytes"] > 0)
    want &= (cats & (ev.TC_READ | ev.TC_WRITE)) != 0
    if device is None:
        devs = e["device"][want & (codes == ev.ISSUE)]
        if len(devs) == 0:
            return []
        vals, counts = np.unique(devs, return_counts=True)
        device = int(vals[np.argmax(counts)])
    want &= e["device"] == device
    sel = e[want]
    if len(sel) == 0:
        return []
    t0 = int(sel["time"][0])
    letter = {ev.INSERT: "I", ev.ISSUE: "D", ev.COMPLETE: "C", ev.REQUEUE: "R"}
    out = []
    for rec, code, cat in zip(sel, codes[want], cats[want], strict=True):
        out.append(Event((int(rec["time"]) - t0) / 1000.0, letter[int(code)], int(rec["sector"]),
                         int(rec["bytes"]) >> 9, bool(cat & ev.TC_WRITE),
                         bool(cat & ev.TC_SYNC) or not cat & ev.TC_WRITE, int(rec["pid"])))
    return out


@dataclasses.dataclass
class Check:
    """One issue event and the model's answer to it."""

    time: float                  # µs from the trace's first event
    actual: str                  # READ or WRITE, what the module issued
    verdict: str                 # agree, agree_within, kind, waited
    contested: bool              # a read and a write were both queued: the decision had a choice
    decision: Decision           # decide() at the issue time
    same_request: bool = True    # when the kinds agree: the request decide() picked is the one issued
    context: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Result:
    checks: list[Check]
    skipped: int                 # issues of requests not seen inserted (before the trace, at head, requeued)
    delays_us: list[float]       # model ready -> module issued
    late: list[dict[str, Any]]   # delays beyond late_us, with context
    tolerance_us: float
    late_us: float

    @property
    def counts(self) -> Counter[str]:
        return Counter(c.verdict for c in self.checks)

    def rate(self, within: bool = True, contested_only: bool = False) -> float:
        cs = [c for c in self.checks if c.contested or not contested_only]
        ok = ("agree", "agree_within") if within else ("agree",)
        return sum(c.verdict in ok for c in cs) / len(cs) if cs else float("nan")

    @property
    def disagreements(self) -> list[Check]:
        return [c for c in self.checks if c.verdict in ("kind", "waited")]

    def summary(self) -> dict[str, Any]:
        d = np.array(self.delays_us) if self.delays_us else np.zeros(1)
        return {
            "issues_checked": len(self.checks), "skipped": self.skipped, "verdicts": dict(self.counts),
            "agreement": self.rate(), "agreement_strict": self.rate(within=False),
            "contested": sum(c.contested for c in self.checks),
            "agreement_contested": self.rate(contested_only=True),
            "other_request": sum(not c.same_request for c in self.checks),
            "tolerance_us": self.tolerance_us, "late_us": self.late_us, "late": len(self.late),
            "delay_us": {"p50": float(np.percentile(d, 50)), "p95": float(np.percentile(d, 95)),
                         "max": float(d.max())},
        }

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(),
                "disagreements": [_check_json(c) for c in self.disagreements],
                "late": self.late}


def _check_json(c: Check) -> dict[str, Any]:
    d = c.decision
    return {"time_us": round(c.time, 1), "actual": c.actual, "verdict": c.verdict, "contested": c.contested,
            "model": d.pick or "wait", "reason": d.reason,
            "wait_until_us": None if d.wait_until is None else round(d.wait_until, 1), **c.context}


class _Streams:
    """The module's sequential-stream table (sio_classify_seq, sio_stream_advance) for one direction."""

    def __init__(self) -> None:
        self.end = [0] * NR_STREAMS
        self.next = 0

    def classify(self, pos: int, size: int, queued_ends: Iterable[tuple[int, int]]) -> tuple[bool, bool]:
        """(sequential, contiguous): it starts at most SEQ_GAP_SECTORS after a stream's end, or right after a queued
        request; contiguous if exactly at the end (SIO_RQ_CONTIG, the write slice's sequential)."""
        slot = next((i for i, e in enumerate(self.end) if e and 0 <= pos - e <= SEQ_GAP_SECTORS), -1)
        contig = slot >= 0 and pos == self.end[slot]
        if slot < 0 and pos > 0 and any(s <= pos - 1 < s + n for s, n in queued_ends):
            contig = True
        seq = slot >= 0 or contig
        if slot < 0:
            slot, self.next = self.next, (self.next + 1) % NR_STREAMS
        self.end[slot] = pos + size
        return seq, contig

    def advance(self, pos: int, size: int) -> None:
        for i, e in enumerate(self.end):
            if pos <= e < pos + size:
                self.end[i] = pos + size
                return


@dataclasses.dataclass
class _Req:
    q: Queued
    sector: int
    sectors: int
    write: bool
    pid: int = 0       # the task that inserted it (a read's: the module's reader; a write's: rule 7's task)


class _Checker:
    def __init__(self, tunables: Tunables, tolerance_us: float, late_us: float, queue_depth: int | None) -> None:
        self.t = tunables
        self.tol, self.late_us, self.depth = tolerance_us, late_us, queue_depth
        self.st = State(reads=[], writes=[], inflight=Counter())
        self.queued: list[_Req] = []
        self.inflight: dict[tuple[bool, int], _Req] = {}
        self.untracked: set[tuple[bool, int]] = set()     # issued without our having seen them inserted
        self.streams = {False: _Streams(), True: _Streams()}
        self.last_write_end = 0
        self.prev_time = 0.0
        self.ready_since: float | None = None
        self.timer: float | None = None
        self.pre: tuple[float, State] | None = None        # the state before the last completion, and its time
        self.checks: list[Check] = []
        self.skipped = 0
        self.delays: list[float] = []
        self.late: list[dict[str, Any]] = []

    # -- the state as the module sees it
    def _sync_state(self) -> None:
        self.st.reads = [r.q for r in self.queued if not r.write]
        self.st.writes = [r.q for r in self.queued if r.write]
        self.st.inflight = Counter(r.q.kind for k, r in self.inflight.items())

    def context(self, now: float) -> dict[str, Any]:
        s, t = self.st, self.t
        hold = read_hold_end(s, now, t)

        def ago(x: float | None) -> float | None:
            return None if x is None else round(now - x, 1)

        return {
            "queued_reads_age_us": [round(now - q.arrival, 1) for q in s.reads],
            "queued_writes_age_us": [round(now - q.arrival, 1) for q in s.writes],
            "inflight": dict(s.inflight),
            "since_write_dispatch_us": ago(s.last_write), "last_write_rand": s.last_write_rand,
            "pace_us": pace_us(s, t),
            "since_write_done_us": ago(s.last_write_done), "read_hold_left_us": None if hold is None else
            round(hold - now, 1),
            "since_read_done_us": ago(s.last_read_done), "phase": s.phase,
        }

    def _evaluate(self, now: float) -> None:
        """The module runs its queue (an arrival, a completion, its timer): follow its phase and note when the model
        would dispatch."""
        self._sync_state()
        if not self.queued:
            self.timer = None
            return
        d = decide(self.st, now, self.t)
        self.st.phase, self.st.window_end = d.phase, d.window_end
        room = self.depth is None or len(self.inflight) + len(self.untracked) < self.depth
        if d.pick is not None and room:
            if self.ready_since is None:
                self.ready_since = now
            self.timer = None
        else:
            self.timer = d.wait_until

    def _breakpoints(self, lo: float, hi: float) -> list[float]:
        """Times in (lo, hi] where decide()'s answer for a fixed queue can change."""
        s, t = self.st, self.t
        pts = []
        if s.last_write is not None:
            pts.append(s.last_write + pace_us(s, t))
        hold = read_hold_end(s, lo, t)
        if hold is not None:
            pts.append(hold)
        if s.last_read_done is not None:
            pts += [s.last_read_done + t.read_anticipation_us, s.last_read_done + t.startup_anticipation_us,
                    s.last_read_done + reader_window_us(s, t),
                    s.last_read_done + t.single_write_ms * 1000]
        several = several_readers_end(s, lo, t)
        if several is not None:
            pts.append(several)
        if s.writes:
            last = s.last_write if s.last_write is not None else -np.inf
            pts += [max(q.arrival, last) + slice_us(q, t) for q in s.writes]
            if s.startup is not None:        # a start-up's end, its task gone, its hold over (policy rule 9)
                pts += [s.startup[1] + t.startup_ms * 1000, s.startup[2] + startup_window_us(s, t)]
                pts += [max(q.arrival, last) + t.startup_ms * 1000 for q in s.writes]
        if s.phase == WINDOW:
            pts.append(s.window_end)
        return sorted(p for p in pts if lo < p <= hi)

    def issue(self, e: Event) -> None:
        now = e.time
        key = (e.write, e.sector)
        req = next((r for r in self.queued if r.write == e.write and r.sector == e.sector), None)
        if req is None:
            req = next((r for r in self.queued if r.write == e.write and r.sector <= e.sector < r.sector
                        + r.sectors), None)
        if req is None:
            self.skipped += 1
            self.untracked.add(key)
            self.ready_since = None
            return
        self._sync_state()
        actual = WRITE if e.write else READ
        d = decide(self.st, now, self.t)
        verdict, used = "agree" if d.pick == actual else "", d
        if not verdict:
            lo = max(self.prev_time, now - self.tol)
            for when in [lo, *self._breakpoints(lo, now + self.tol)]:
                alt = decide(self.st, when, self.t)
                if alt.pick == actual:
                    verdict, used = "agree_within", alt
                    break
        if not verdict and self.pre is not None and now - self.pre[0] <= self.tol:
            # The module may have dispatched before it recorded the last completion (sio_finish_request takes
            # the lock after block_rq_complete is traced, and a dispatch on another CPU can come in between).
            alt = decide(dataclasses.replace(self.pre[1], reads=self.st.reads, writes=self.st.writes), now, self.t)
            if alt.pick == actual:
                verdict, used = "agree_within", alt
        if not verdict:
            verdict = "waited" if d.pick is None else "kind"
        contested = bool(self.st.reads) and bool(self.st.writes)
        same = used.request is req.q if verdict.startswith("agree") else True
        ctx = {} if verdict.startswith("agree") and same else {**self.context(now), "sector": e.sector}
        self.checks.append(Check(now, actual, verdict, contested, d, same, ctx))
        if self.ready_since is not None:
            delay = now - self.ready_since
            self.delays.append(delay)
            if delay > self.late_us:
                self.late.append({"time_us": round(now, 1), "delay_us": round(delay, 1), "actual": actual,
                                  **self.context(self.ready_since)})
        self.ready_since = None
        # What the module does when it dispatches (sio_dispatch_request).
        self.st.phase, self.st.window_end = used.phase, used.window_end
        self.queued.remove(req)
        self.inflight[(req.write, e.sector)] = req
        self.streams[req.write].advance(e.sector, e.sectors)
        if req.write:
            self.st.last_write = now
            self.st.last_write_rand = e.sector != self.last_write_end
            self.last_write_end = e.sector + e.sectors
        self._evaluate(now)

    def insert(self, e: Event) -> None:
        ends = [(r.sector, r.sectors) for r in self.queued if r.write == e.write]
        seq, contig = self.streams[e.write].classify(e.sector, e.sectors, ends)
        kind = ("seq_" if seq else "rand_") + ("write" if e.write else "read")
        q = Queued(e.time, kind, sync=e.sync or not e.write, tag=e.sector, contig=contig,
                   task=e.pid if e.write else None, size=e.sectors << 9)
        self.queued.append(_Req(q, e.sector, e.sectors, e.write, e.pid))
        if not e.write:
            reader_seen(self.st, e.pid, e.time, self.t)
            if self.st.phase == ANTICIPATING:
                self.st.phase = READING
        self._evaluate(e.time)

    def complete(self, e: Event) -> None:
        self._sync_state()
        self.pre = (e.time, dataclasses.replace(self.st, inflight=Counter(self.st.inflight)))
        key = (e.write, e.sector)
        if key in self.untracked:
            self.untracked.discard(key)
        elif (req := self.inflight.pop(key, None)) is not None:
            if is_read(req.q.kind):
                self.st.last_read_done = e.time
                self._sync_state()           # the module counts the read done before it sees its reader
                reader_seen(self.st, req.pid, e.time, self.t)
            else:
                self.st.last_write_done, self.st.last_write_done_task = e.time, req.pid
        self._evaluate(e.time)

    def requeue(self, e: Event) -> None:
        self.inflight.pop((e.write, e.sector), None)    # it comes back at the head: its issue is skipped
        self._evaluate(e.time)

    def run(self, events: Sequence[Event]) -> None:
        for e in events:
            while self.timer is not None and self.timer <= e.time:
                when, self.timer = self.timer, None
                self._evaluate(when)
            {"I": self.insert, "D": self.issue, "C": self.complete, "R": self.requeue}[e.action](e)
            self.prev_time = e.time


def check_events(events: Sequence[Event], tunables: Tunables, tolerance_us: float = TOLERANCE_US,
           late_us: float = LATE_US, queue_depth: int | None = None) -> Result:
    """Checks every issue of `events` (in time order) against decide(); see the module docstring.
    queue_depth: the device's (the module is not asked while it is full), for the dispatch delays only."""
    r = _Checker(tunables, tolerance_us, late_us, queue_depth)
    r.run(events)
    return Result(r.checks, r.skipped, r.delays, r.late, tolerance_us, late_us)


def check_trace(trace: ev.Trace, tunables: Tunables, **kw: Any) -> Result:
    """check_events() on the events of the trace's busiest device (events_from_trace)."""
    return check_events(events_from_trace(trace), tunables, **kw)


def read_tunable_values(path: Path) -> dict[str, Any]:
    """The sysfs names and values in a JSON object, or in the `name value` / `name=value` lines of a dump such as
    `grep . iosched/*` (the directory part of a name is dropped)."""
    text = path.read_text()
    # A dump without one of these is of a module before it: rule 9 (the module's 11), its anticipation, and
    # rule 13's learned pacing.
    values: dict[str, Any] = {"startup_ms": 0, "startup_anticipation_us": 0, "auto_pace": 0}
    if text.lstrip().startswith("{"):
        return {**values, **json.loads(text)}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        name, _, value = line.replace(":", " ").replace("=", " ").rpartition(" ")
        values[name.strip().rsplit("/", 1)[-1]] = value
    return values


def load_tunables(path: Path) -> Tunables:
    """read_tunable_values() as the twin's Tunables."""
    return Tunables.from_mapping(read_tunable_values(path))


def learned_pacing_note(values: dict[str, Any], tunables: Tunables) -> str | None:
    """What the check cannot follow with these tunables (`values`: read_tunable_values(), {} for the defaults): the
    module paces by a pace it learns (rule 13) when auto_pace is on and write_pace_us 0, and the twin knows no
    learned pace."""
    if tunables.write_pace_us or not int(values.get("auto_pace", default("auto_pace"))):
        return None
    return ("note: auto_pace is 1 and write_pace_us 0: once the module has learned a pace (debugfs stats: "
            "auto_pace learned=1 pace_us=...), its paced writes show as disagreements here; pass that pace as "
            "--tunable write_pace_us=N (and write_pace_rand_us, read_hold_us), or record with auto_pace=0")


def format_text(res: Result, show: int = 10) -> str:
    s = res.summary()
    v = s["verdicts"]
    lines = [
        f"model vs module: {s['issues_checked']} issues checked ({s['skipped']} skipped), "
        f"{s['contested']} with a read and a write queued",
        f"  agreement {100 * s['agreement']:.1f} % (strict {100 * s['agreement_strict']:.1f} %, "
        f"within {s['tolerance_us']:g} us of the issue); contested "
        + (f"{100 * s['agreement_contested']:.1f} %" if s["contested"] else "-"),
        f"  verdicts: agree {v.get('agree', 0)}, agree_within {v.get('agree_within', 0)}, kind {v.get('kind', 0)}, "
        f"waited {v.get('waited', 0)}; another request of the same kind: {s['other_request']}",
        f"  dispatch delay after the model was ready: p50 {s['delay_us']['p50']:.0f} us, "
        f"p95 {s['delay_us']['p95']:.0f} us, max {s['delay_us']['max']:.0f} us; {s['late']} beyond "
        f"{s['late_us']:g} us",
    ]
    for c in res.disagreements[:show]:
        j = _check_json(c)
        lines.append(f"  {j.pop('verdict')} at {j.pop('time_us') / 1000:.3f} ms: module {j.pop('actual')}, "
                     f"model {j.pop('model')} ({j.pop('reason')}); "
                     + ", ".join(f"{k}={val}" for k, val in j.items() if val not in (None, [], {})))
    if len(res.disagreements) > show:
        lines.append(f"  ... {len(res.disagreements) - show} more disagreements (--json lists them all)")
    return "\n".join(lines)

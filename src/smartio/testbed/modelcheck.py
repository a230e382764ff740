"""Records what the model check (smartio.trace.modelcheck) reads: one reader beside one writer (QD1, 4 KiB, direct)
under the smartio module on an emulated device in the testbed, sequential and random, each run traced with
`smartio trace record` in the guest, and the module's tunables as they were. Used by tests/test_model_check_vm.py
and bench/model-agreement.

`side_by_side` sets what the testbed measured beside what the device model predicts for the same policy (the
module's tunables, in the phone's time); `device_replay` replays the emulator's own request log through the model's
device, so that where the two differ, the host side (the guest's round trips, the module's clock) is where.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any

from smartio.errors import SmartioError
from smartio.flashdev import model
from smartio.flashdev.profiles import load_profile
from smartio.flashdev.server import LOG_DIR_ENV, request_logs
from smartio.iosched import tunables as tunable_defs
from smartio.iosched.policy import Tunables
from smartio.testbed import vm
from smartio.testbed.guest import GuestSpec
from smartio.testbed.interpreter import guest_python
from smartio.trace.formats import read_trace
from smartio.trace.modelcheck import Result, check_trace, load_tunables

MODES = ("seq", "rand")
# The profiler's rule on s5-emmc at its time scale of 100 (tests/test_profile_pacing.py: 285, 717 and 133 µs of
# the phone): what `smartio profile --apply` writes there, without spending a profiler run on it.
S5_TUNABLES = {"write_pace_us": 28500, "write_pace_rand_us": 71700, "read_hold_us": 13300}
# The device model's queue depth for s5-emmc: blk-mq asks the module only while the device has room.
QUEUE_DEPTH = 2


def _fio_job(mode: str, size: str, seconds: float) -> str:
    rw = ("read", "write") if mode == "seq" else ("randread", "randwrite")
    common = f"ioengine=psync\ndirect=1\nbs=4k\nsize={size}\ntime_based=1\nruntime={seconds:g}\nfilename=/dev/vda\n"
    return (f"[global]\n{common}\n[reader]\nrw={rw[0]}\noffset=0\n\n"
            f"[writer]\nrw={rw[1]}\noffset=64m\n")


GUEST = r"""set -eu
Q=/sys/block/vda/queue
for mode in {modes}; do
    echo none > $Q/scheduler                # every mode starts from a fresh instance of the module
    echo smartio > $Q/scheduler
    grep -q '\[smartio\]' $Q/scheduler || {{ echo "smartio not active: $(cat $Q/scheduler)" >&2; exit 1; }}
    echo 128 > $Q/nr_requests
{tunables}
    grep . $Q/iosched/* > $SMARTIO_OUT/tunables-$mode
    {python} -m smartio trace record -o $SMARTIO_OUT/$mode.smtrace --device /dev/vda -- \
        fio --output-format=json --output=$SMARTIO_OUT/$mode.json {jobs}/$mode.fio
done
echo none > $Q/scheduler
"""


@dataclasses.dataclass
class Run:
    mode: str
    trace: Path
    tunables: Tunables
    result: Result


def record_and_check(workdir: Path, tunables: dict[str, int] | None = None, profile: str = "s5-emmc",
                      size: str = "256k", seconds: float = 3.0, modes: tuple[str, ...] = MODES,
                      module: Path | None = None, tolerance_us: float | None = None,
                      timeout: float = 420.0) -> tuple[vm.VmResult, list[Run]]:
    """Boots the testbed once, records each mode (reader and writer side by side for `seconds`, each over a `size`
    region) and checks each trace against the tunables the guest read back. The VM's artifacts go to
    workdir/art, the traces to workdir/art/out, the emulator's request log to workdir/flashdev."""
    workdir.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        (workdir / f"{mode}.fio").write_text(_fio_job(mode, size, seconds))
    lines = "\n".join(f"    echo {v} > $Q/iosched/{k}" for k, v in (tunables or S5_TUNABLES).items())
    script = GUEST.format(modes=" ".join(modes), tunables=lines, python=guest_python(), jobs=workdir)
    (workdir / "guest.sh").write_text(script)
    spec = GuestSpec(profile=profile, disks=1, disk_size=128 << 20, modules=[module] if module else None,
                     timeout=timeout, artifacts=workdir / "art")
    # The emulator's request log (ground truth for device_replay and completion_delays) goes beside the artifacts,
    # which the testbed wants new, wherever SMARTIO_FLASHDEV_LOG pointed before.
    log_dir = workdir / "flashdev"
    log_dir.mkdir(parents=True, exist_ok=True)
    before = os.environ.get(LOG_DIR_ENV)
    os.environ[LOG_DIR_ENV] = str(log_dir)
    try:
        r = vm.run(["sh", str(workdir / "guest.sh")], spec, stream=None, cwd=workdir)
    finally:
        if before is None:
            os.environ.pop(LOG_DIR_ENV, None)
        else:
            os.environ[LOG_DIR_ENV] = before
    runs = []
    if r.failure is None and r.rc == 0:
        kw = {} if tolerance_us is None else {"tolerance_us": tolerance_us}
        for mode in modes:
            tun = load_tunables(r.out_dir / f"tunables-{mode}")
            trace = r.out_dir / f"{mode}.smtrace"
            runs.append(Run(mode, trace, tun, check_trace(read_trace(trace), tun, queue_depth=QUEUE_DEPTH, **kw)))
    return r, runs


def phone_tunables(tun: Tunables, time_scale: float) -> Tunables:
    """The module's tunables in the phone's time: its clock tunables over the device's time scale (the testbed runs
    the device and the guest `time_scale` times slower, and the module's tunables were set in its time)."""
    names = set(tunable_defs.CLOCK) & {f.name for f in dataclasses.fields(Tunables)}
    return dataclasses.replace(tun, **{n: getattr(tun, n) / time_scale for n in names})


def fio_latencies_us(fio_json: Path) -> dict[str, float]:
    """Mean submission-to-completion latency (µs) of the reader's reads and the writer's writes in a run."""
    text = fio_json.read_text()
    try:
        jobs = {j["jobname"]: j for j in json.loads(text[text.index("{"):])["jobs"]}
        got = {"read": jobs["reader"]["read"], "write": jobs["writer"]["write"]}
    except (ValueError, KeyError, TypeError) as e:
        raise SmartioError(f"{fio_json}: not fio's JSON of a reader and a writer ({e!r})") from e
    for kind, d in got.items():
        if not d.get("total_ios"):
            raise SmartioError(f"{fio_json}: the {'reader' if kind == 'read' else 'writer'} did no I/O")
    return {kind: d["lat_ns"]["mean"] / 1000 for kind, d in got.items()}


def delayed_device(prof: Any, delays_us: dict[str, list[float]]) -> model.Device:
    """The profile's device for a model whose host sees completions `delays_us` late: its front end shorter by the
    delays' mean (over both directions), so that solo latencies stay the profile's."""
    pooled = [d for v in delays_us.values() for d in v]
    return model.Device.from_profile(prof, guest_overhead_us=statistics.mean(pooled) * prof.time_scale)


def side_by_side(mode: str, tunables: Tunables, fio_json: Path, profile: str = "s5-emmc", ios: int = 1500,
                 delays_us: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """The reader's and the writer's mean latency beside each other as the testbed measured them (µs of the phone:
    the guest's over the time scale) and as the device model predicts them for the same tunables
    (model.run_streams with the module's picker), and their ratios (testbed / model). With `delays_us` (the run's
    completion_delays()), also as the model predicts them with the host seeing each completion that late
    (`model_delayed_us`, `ratio_delayed`)."""
    prof = load_profile(profile)
    measured = {k: v / prof.time_scale for k, v in fio_latencies_us(fio_json).items()}
    tun = phone_tunables(tunables, prof.time_scale)
    streams, policy = [f"{mode}_read", f"{mode}_write"], model.Policy("read_first", tunables=tun)
    r, w = model.run_streams(model.Device.from_profile(prof), streams, policy, ios=ios)
    predicted = {"read": r, "write": w}
    doc: dict[str, Any] = {"mode": mode, "measured_us": measured, "model_us": predicted,
                           "ratio": {k: measured[k] / predicted[k] for k in predicted}}
    if delays_us and any(delays_us.values()):
        r, w = model.run_streams(delayed_device(prof, delays_us), streams, policy, ios=ios,
                                 completion_delay=delays_us)
        doc["model_delayed_us"] = {"read": r, "write": w}
        doc["ratio_delayed"] = {"read": measured["read"] / r, "write": measured["write"] / w}
    return doc


def completion_delays(trace: Path, log_dir: Path, profile: str = "s5-emmc",
                      window_ns: int = 20_000_000) -> dict[str, list[float]]:
    """Per request of a recorded run, by direction ("read", "write"), how much longer the guest saw it take (issue to
    completion, the block trace) than the emulated device did (arrival to completion, its request log): the
    transport around the device and the reply, in µs of the phone. Each issue is paired with its first completion
    after it, and with the arrival of the same direction and sector nearest to it (within `window_ns`) once the two
    clocks are aligned; the alignment is the one that pairs the most of the trace's first issues, moved so that no
    issue reaches the device before it left the guest (the 1st percentile of arrival less issue at 0). A pair that
    comes out negative is a wrong one and is left out. Empty lists without a log or a pair."""
    import bisect

    from smartio.trace import events as ev

    prof = load_profile(profile)
    found: dict[str, list[float]] = {"read": [], "write": []}
    rows = []
    for log in request_logs(log_dir):
        rows += [(r["op"] != "read", r["offset"] // 512, r["arrival_ns"], r["complete_ns"])
                 for r in log if r["op"] in ("read", "write", "write_fua")]
    if not rows:
        return found
    arrivals: dict[tuple[bool, int], list[tuple[int, int]]] = {}
    for write, sector, arrival, complete in sorted(rows, key=lambda x: x[2]):
        arrivals.setdefault((write, sector), []).append((arrival, complete))
    e = read_trace(trace).events
    code = e["action"] & 0xFFFF
    write_of = ((e["action"] >> ev.TC_SHIFT) & ev.TC_WRITE) != 0
    done: dict[tuple[bool, int], list[int]] = {}
    for x, w in zip(e[code == ev.COMPLETE], write_of[code == ev.COMPLETE], strict=True):
        done.setdefault((bool(w), int(x["sector"])), []).append(int(x["time"]))
    issues = [(bool(w), int(x["sector"]), int(x["time"]))
              for x, w in zip(e[code == ev.ISSUE], write_of[code == ev.ISSUE], strict=True)]

    def nearest(key: tuple[bool, int], t: int) -> tuple[int, int] | None:
        near = [a for a in arrivals.get(key, ()) if abs(a[0] - t) < window_ns]
        return min(near, key=lambda a: abs(a[0] - t)) if near else None

    head = issues[:50]
    candidates = {t - a for w, sec, t in head[:5] for a, _ in arrivals.get((w, sec), ())}
    if not candidates:
        return found
    offset = max(candidates, key=lambda off: sum(nearest((w, sec), t - off) is not None for w, sec, t in head))
    ahead = sorted(m[0] - (t - offset) for w, sec, t in issues if (m := nearest((w, sec), t - offset)))
    if not ahead:
        return found
    offset -= ahead[len(ahead) // 100]
    for w, sec, t in issues:
        key = (w, sec)
        completions = done.get(key, [])
        k = bisect.bisect_left(completions, t)
        match = nearest(key, t - offset)
        if k >= len(completions) or match is None:
            continue
        extra = (completions[k] - t) - (match[1] - match[0])
        if extra >= 0:
            found["write" if w else "read"].append(extra / 1000 / prof.time_scale)
    return found


def device_replay(log_dir: Path, profile: str = "s5-emmc") -> dict[str, Any] | None:
    """The emulator's request logs in `log_dir` (one per server) replayed through the model's device with the
    arrivals the emulator saw: how far the model's completions are from the emulator's (µs of the phone), and how
    late the emulator's replies went out after their completion. None without a log."""
    prof = load_profile(profile)
    dev = model.Device.from_profile(prof, guest_overhead_us=prof.guest_overhead_us)
    off: list[float] = []
    lag: list[float] = []
    for log in request_logs(log_dir):
        reqs = model.requests_from_log(log, prof.time_scale)
        if not reqs:
            continue
        to_us = 1 / (1000 * prof.time_scale)
        model.Engine(dev).replay(reqs)
        # The emulator's completion on the model's clock: its time after the request's own arrival.
        off += [abs(q.complete - q.arrival - (q.tag["complete_ns"] - q.tag["arrival_ns"]) * to_us) for q in reqs]
        lag += [(q.tag["returned_ns"] - q.tag["complete_ns"]) * to_us for q in reqs]
    if not off:
        return None

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]

    return {"requests": len(off), "completion_off_us": {"p50": statistics.median(off), "p90": pct(off, 0.9),
                                                         "max": max(off)},
            "reply_lag_us": {"p50": statistics.median(lag), "p90": pct(lag, 0.9), "max": max(lag)}}


def best_point(mode: str, delays_us: dict[str, list[float]], profile: str = "s5-emmc",
               ios: int = 1500) -> dict[str, Any]:
    """model.best_read_first for 1R1W `mode` with the host seeing completions as late as `delays_us` (a run's
    completion_delays()), against the profile's SmartIO point: whether a pace x hold schedule reaches it on the
    testbed, by the model."""
    prof = load_profile(profile)
    t = prof.targets
    return model.best_read_first(delayed_device(prof, delays_us), mode, t["smartio_read_slowdown"][mode],
                                 t["smartio_write_slowdown"][mode], ios=ios, completion_delay=delays_us)

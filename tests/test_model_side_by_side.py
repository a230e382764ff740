"""bench/model-agreement's side by side (smartio.testbed.modelcheck): the testbed's latencies beside the device
model's prediction for the module's own tunables, in the phone's time, and the emulator's request log replayed
through the model's device."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from smartio.flashdev import model
from smartio.flashdev.profiles import load_profile
from smartio.iosched.policy import Tunables
from smartio.testbed.modelcheck import completion_delays, device_replay, phone_tunables, side_by_side

S5 = load_profile("s5-emmc")


def test_the_modules_tunables_are_taken_to_the_phones_time() -> None:
    t = phone_tunables(Tunables(write_pace_us=28500, read_hold_us=13300, write_slice_ms=100), S5.time_scale)
    assert (t.write_pace_us, t.read_hold_us, t.write_slice_ms) == (285, 133, 1)


def fio_json(path: Path, read_us: float, write_us: float) -> Path:
    jobs = [{"jobname": "reader", "read": {"total_ios": 100, "lat_ns": {"mean": read_us * 1000}}},
            {"jobname": "writer", "write": {"total_ios": 50, "lat_ns": {"mean": write_us * 1000}}}]
    path.write_text(json.dumps({"jobs": jobs}))
    return path


@pytest.mark.timeout(120)
def test_the_testbed_is_set_beside_the_models_prediction_for_the_same_pace(tmp_path: Path) -> None:
    tun = Tunables(write_pace_us=28500, read_hold_us=13300, read_anticipation_us=3000, startup_ms=0)
    sbs = side_by_side("seq", tun, fio_json(tmp_path / "seq.json", 14900, 30300), ios=600)
    assert sbs["measured_us"] == pytest.approx({"read": 149, "write": 303})
    # Beside a reader the model's writer goes once per pace: 285 µs of the phone.
    assert sbs["model_us"]["write"] == pytest.approx(285, rel=0.02)
    assert sbs["ratio"]["write"] == pytest.approx(303 / sbs["model_us"]["write"])
    # A longer pace in the module's tunables is a longer pace in the model.
    slower = side_by_side("seq", Tunables(write_pace_us=40000, read_hold_us=13300, startup_ms=0), tmp_path / "seq.json",
                          ios=600)
    assert slower["model_us"]["write"] == pytest.approx(400, rel=0.02)
    # Completions that reach the host late (the testbed's transport around the device) hold the next read back.
    late = side_by_side("seq", tun, tmp_path / "seq.json", ios=600, delays_us={"read": [4.0, 40.0], "write": [4.0]})
    assert late["model_delayed_us"]["read"] > 1.05 * sbs["model_us"]["read"]
    assert late["ratio_delayed"]["read"] == pytest.approx(149 / late["model_delayed_us"]["read"])


def write_log(path: Path, reqs: list[model.Request], shift_us: float = 0.0) -> None:
    """A request log as flashdev writes it, in the testbed's time (µs of the phone x time_scale, in ns)."""
    ns = 1000 * S5.time_scale
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seq", "op", "class", "offset", "bytes", "arrival_ns", "start_ns", "finish_ns", "complete_ns",
                    "returned_ns"])
        for i, q in enumerate(reqs):
            done = round((q.complete + shift_us) * ns)
            w.writerow([i, q.kind, q.cls, i * 4096, 4096, round(q.arrival * ns), round(q.start * ns),
                        round(q.finish * ns), done, done + 2000])


def test_the_emulators_log_is_replayed_through_the_models_device(tmp_path: Path) -> None:
    dev = model.Device.from_profile(S5, guest_overhead_us=S5.guest_overhead_us)
    kinds = ["seq_read", "seq_write"] * 60 + ["rand_write"] * 20 + ["rand_read"] * 20
    reqs = [model.Request("read" if k.endswith("read") else "write", k, arrival=i * 90.0) for i, k in enumerate(kinds)]
    model.Engine(dev).replay(reqs)
    write_log(tmp_path / "flashdev-1-0.csv", reqs)
    same = device_replay(tmp_path)
    assert same is not None and same["requests"] == len(reqs)
    assert same["completion_off_us"]["max"] < 0.01
    assert same["reply_lag_us"]["p50"] == pytest.approx(2000 / (1000 * S5.time_scale))
    # An emulator whose completions came 50 µs later than the model's shows it.
    (tmp_path / "flashdev-1-0.csv").unlink()
    write_log(tmp_path / "flashdev-1-0.csv", reqs, shift_us=50)
    late = device_replay(tmp_path)
    assert late is not None and late["completion_off_us"]["p50"] == pytest.approx(50, abs=0.01)
    assert device_replay(tmp_path / "none") is None


def test_the_transport_around_the_device_is_measured_per_request(tmp_path: Path) -> None:
    """A guest trace and the emulator's log of the same requests, on clocks 5 s apart: each request's extra time in
    the guest (issue to completion, less the device's arrival to reply) comes back, in µs of the phone."""
    import numpy as np

    from smartio.trace import events as ev
    from smartio.trace.formats import write_ours

    scale, off = S5.time_scale, 5_000_000_000
    extra_us = [300.0, 400.0, 3000.0, 350.0] * 10                  # real µs; the 3 ms ones are the tail
    recs: list[tuple[int, ...]] = []
    rows: list[list[object]] = []
    t = 10**9
    for i, extra in enumerate(extra_us):
        write, sector = i % 2 == 1, (i // 2 % 4) * 8 + (1 << 17 if i % 2 else 0)
        dev_ns, before = 17_000_000, 200_000 + (i % 3) * 50_000      # on the device; issue to arrival
        issue, arrival = t, t - off + before
        done = issue + dev_ns + int(extra * 1000)
        cat = (ev.TC_WRITE if write else ev.TC_READ)
        for when, action in ((issue, ev.ISSUE), (done, ev.COMPLETE)):
            recs.append((ev.MAGIC, len(recs), when, sector, 4096,
                         action | (cat | ev.ACTION_CATEGORY[action]) << ev.TC_SHIFT, 1, ev.kdev(254, 0), 0, 0, 0))
        rows.append([i, "write" if write else "read", "seq_write" if write else "seq_read", sector * 512, 4096,
                     arrival, arrival, arrival, arrival + dev_ns, arrival + dev_ns])
        t = done + 500_000
    rec = np.array(recs, dtype=ev.EVENT_DTYPE)
    write_ours(ev.Trace(rec), tmp_path / "seq.smtrace")
    (tmp_path / "log").mkdir()
    with open(tmp_path / "log" / "flashdev-1-0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seq", "op", "class", "offset", "bytes", "arrival_ns", "start_ns", "finish_ns", "complete_ns",
                    "returned_ns"])
        w.writerows(rows)
    got = completion_delays(tmp_path / "seq.smtrace", tmp_path / "log")
    assert got["read"] == pytest.approx([x / scale for x in extra_us[0::2]])
    assert got["write"] == pytest.approx([x / scale for x in extra_us[1::2]])
    assert completion_delays(tmp_path / "seq.smtrace", tmp_path / "none") == {"read": [], "write": []}


RECORDED = Path(__file__).parent.parent / "runs" / "model-agreement-20261204" / "run1"


@pytest.mark.timeout(120)
def test_a_recorded_run_departs_from_the_model_by_its_late_completions() -> None:
    """runs/model-agreement-20261204 (bench/model-agreement, 1R1W seq at the profiler's pacing): the emulator's log
    replays exactly through the model's device; nearly every request of the trace pairs with its log row; the seq
    reader is 1.17 times the model's latency as it was, and within 5 % of the model with the run's late
    completions, each direction's its own (the writer's are longer)."""
    from smartio.trace.modelcheck import load_tunables

    out = RECORDED / "art" / "out"
    dev = device_replay(RECORDED / "flashdev")
    assert dev is not None and dev["requests"] > 900 and dev["completion_off_us"]["p90"] < 0.01
    delays = completion_delays(out / "seq.smtrace", RECORDED / "flashdev")
    assert len(delays["read"]) >= 400 and len(delays["write"]) >= 190
    sbs = side_by_side("seq", load_tunables(out / "tunables-seq"), out / "seq.json", ios=1500, delays_us=delays)
    assert sbs["ratio"]["read"] > 1.10
    assert sbs["ratio_delayed"]["read"] == pytest.approx(1.0, abs=0.05)
    assert sum(delays["write"]) / len(delays["write"]) > sum(delays["read"]) / len(delays["read"])


def test_a_run_without_its_reader_or_writer_is_refused(tmp_path: Path) -> None:
    from smartio.errors import SmartioError
    from smartio.testbed.modelcheck import fio_latencies_us

    (tmp_path / "bad.json").write_text('fio: note\n{"jobs": [{"jobname": "reader", "read": {"total_ios": 3}}]}')
    with pytest.raises(SmartioError, match="reader and a writer"):
        fio_latencies_us(tmp_path / "bad.json")
    jobs = [{"jobname": "reader", "read": {"total_ios": 0, "lat_ns": {"mean": 0}}},
            {"jobname": "writer", "write": {"total_ios": 5, "lat_ns": {"mean": 9000}}}]
    (tmp_path / "idle.json").write_text(json.dumps({"jobs": jobs}))
    with pytest.raises(SmartioError, match="the reader did no I/O"):
        fio_latencies_us(tmp_path / "idle.json")

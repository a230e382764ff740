"""`smartio profile --apply`'s write pacing (write_pace_us, write_pace_rand_us, read_hold_us): the rule, from a
recorded run and from the device model whose read-first optimum it was taken from (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smartio.cli.bench import pacing
from smartio.flashdev import load_profile
from smartio.flashdev.model import Device, Policy, slowdown, solo, speedup

DATA = Path(__file__).parent / "data" / "fio" / "concurrency"


def test_pacing_from_a_recorded_profile():
    results = json.loads((DATA / "document.json").read_text())["results"]
    lat_us = results["alone_lat_ms"]["seq_write"] * 1000
    got = pacing(results)
    assert got == {"write_pace_us": round(1.5 * lat_us),
                   "write_pace_rand_us": round(1.75 * results["alone_lat_ms"]["rand_write"] * 1000),
                   "read_hold_us": round(0.9 * lat_us / results["max_speedup"]["seq_write"])}


def test_pacing_without_writes_is_empty():
    results = json.loads((DATA / "document.json").read_text())["results"]
    results["alone_lat_ms"] = {k: v for k, v in results["alone_lat_ms"].items() if not k.endswith("write")}
    assert pacing(results) == {}


def test_no_hold_longer_than_the_latency_when_writes_do_not_overlap():
    assert pacing({"alone_lat_ms": {"seq_write": 1.0}, "max_speedup": {"seq_write": 0.8}})["read_hold_us"] == 900


def test_the_rule_gives_the_models_read_first_optimum_on_s5_emmc():
    dev = Device.from_profile(load_profile("s5-emmc"))
    lat_us = solo(dev, "seq_write")
    got = pacing({"alone_lat_ms": {"seq_write": lat_us / 1000, "rand_write": solo(dev, "rand_write") / 1000},
                  "max_speedup": {"seq_write": max(speedup(dev, "seq_write", n) for n in (1, 2, 4))}})
    assert got == {"write_pace_us": 285, "write_pace_rand_us": 717, "read_hold_us": 133}
    read, write = slowdown(dev, "seq", Policy("read_first", got["write_pace_us"], got["read_hold_us"]))
    assert read <= 1.72 and write <= 1.51          # Figure 11a's SmartIO point
    read, write = slowdown(dev, "rand", Policy("read_first", got["write_pace_rand_us"], got["read_hold_us"]))
    assert read <= 1.97 and write <= 1.83


def test_a_random_pace_no_longer_than_the_fifo_period_does_nothing():
    """Why the random pace is 1.75 x, not the sequential 1.5 x: beside a reader under FIFO the random writer's period
    is already about 1.58 x its alone latency, so a shorter pace never holds a write and reads still wait."""
    dev = Device.from_profile(load_profile("s5-emmc"))
    lat_us = solo(dev, "rand_write")
    fifo = slowdown(dev, "rand")
    assert slowdown(dev, "rand", Policy("read_first", 1.5 * lat_us, 0)) == pytest.approx(fifo)
    assert slowdown(dev, "rand", Policy("read_first", 1.75 * lat_us, 0))[0] < 0.6 * fifo[0]

"""flashdev profiles: the shipped data file is valid and calibrated as documented; bad files and bad input fail
clearly (exit 2, naming the flag and value)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smartio.cli import main
from smartio.errors import UsageError
from smartio.flashdev import FlashServer, ProfileError, all_profiles, load_profile
from smartio.flashdev.profiles import CLASSES

GOOD = """
[tiny]
description = "test device"
queue_depth = 1
max_request_kb = 512
write_cache_pages = 0
nand_page_slots = 1
time_scale = 2.0
guest_overhead_us = 100.0
suspend_us = 0.0
flush_us = 10.0
trim_us = 1.0
[tiny.cmd_us]
seq_read = 10.0
seq_write = 20.0
rand_read = 30.0
rand_write = 40.0
[tiny.page_us]
seq_read = 1.0
seq_write = 2.0
rand_read = 3.0
rand_write = 4.0
[tiny.switch_us]
seq_read = 0.0
seq_write = 5.0
rand_read = 0.0
rand_write = 6.0
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "profiles.toml"
    p.write_text(text)
    return p


@pytest.mark.timeout(10)
def test_shipped_profiles_are_valid_and_all_calibrated() -> None:
    # An uncalibrated profile (ufs-modern was one) must not be offered as if it were calibrated.
    profiles = all_profiles()
    assert "s5-emmc" in profiles
    for p in profiles.values():
        assert {"latency_ms", "speedup", "read_slowdown", "write_slowdown"} <= set(p.targets), p.name


@pytest.mark.timeout(10)
def test_s5_alone_latencies_are_the_papers() -> None:
    # The model's own arithmetic; what the guest measures is bench/flashdev-fidelity's job.
    p = load_profile("s5-emmc")
    for c in CLASSES:
        assert p.alone_latency_us(c) == pytest.approx(p.targets["latency_ms"][c] * 1000, rel=0.01), c


@pytest.mark.timeout(10)
def test_filter_args_scale_times_and_take_the_guest_overhead_off_the_front_end(tmp_path: Path) -> None:
    p = load_profile("tiny", write(tmp_path, GOOD))
    args = dict(a.split("=", 1) for a in p.filter_args())
    # cmd 10 us x 2 - 100 us overhead clamps at 0; 40 x 2 - 100 also 0; page times only scaled.
    assert args["flash-cmd-us"] == "0.000,0.000,0.000,0.000"
    assert args["flash-page-us"] == "2.000,4.000,6.000,8.000"
    assert args["flash-switch-us"] == "0.000,10.000,0.000,12.000"
    args = dict(a.split("=", 1) for a in p.filter_args(time_scale=10, guest_overhead_us=50))
    assert args["flash-cmd-us"] == "50.000,150.000,250.000,350.000"
    assert args["flash-flush-us"] == "100.000"


@pytest.mark.timeout(10)
def test_unknown_profile_names_the_flag_and_lists_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        load_profile("nokia-3310", write(tmp_path, GOOD))
    assert e.value.exit_code == 2
    assert "`--profile nokia-3310`" in str(e.value) and "known: tiny" in str(e.value)


@pytest.mark.parametrize("change, words", [
    (("queue_depth = 1", "queue_depth = 0"), "queue_depth"),
    (("flush_us = 10.0", "flush_us = -1.0"), "flush_us"),
    (("max_request_kb = 512", "max_request_kb = 2"), "max_request_kb = 2: must be between 4"),
    (("time_scale = 2.0", "time_scale = \"fast\""), "time_scale"),
    (("rand_write = 4.0\n", ""), "page_us"),
    (("rand_write = 6.0\n", ""), "switch_us"),
    (("trim_us = 1.0", "trim_us = 1.0\nturbo = true"), "unknown key(s) turbo"),
    (("nand_page_slots = 1\n", ""), "missing key nand_page_slots"),
    (("[tiny]", "[tiny"), "not valid TOML"),
])
@pytest.mark.timeout(10)
def test_broken_profile_file_names_file_profile_and_key(tmp_path: Path, change: tuple[str, str],
                                                        words: str) -> None:
    path = write(tmp_path, GOOD.replace(*change, 1))
    with pytest.raises(ProfileError) as e:
        all_profiles(path)
    assert str(path) in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("argv, flag", [
    (["flashdev", "serve", "--profile", "nokia-3310"], "--profile nokia-3310"),
    (["flashdev", "serve", "--profile", "s5-emmc", "--size", "lots"], "--size lots"),
    (["flashdev", "serve", "--profile", "s5-emmc", "--size", "100K"], "--size 100K"),
    (["flashdev", "serve", "--profile", "s5-emmc", "--port", "70000"], "--port 70000"),
    (["flashdev", "serve", "--profile", "s5-emmc", "--log", "/nonexistent/dir/log.csv"], "--log"),
])
@pytest.mark.timeout(10)
def test_serve_rejects_bad_input_with_exit_2(argv: list[str], flag: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert f"`{flag}" in capsys.readouterr().err


@pytest.mark.timeout(10)
def test_server_rejects_a_size_below_1m_before_starting_anything(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--size"):
        FlashServer(load_profile("s5-emmc"), 4096, tmp_path)


@pytest.mark.timeout(10)
def test_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flashdev", "profiles"]) == 0
    out = capsys.readouterr().out
    assert "s5-emmc" in out and "0.072 0.190 0.187 0.410" in out

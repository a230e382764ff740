"""`smartio bench launch --replay SCRIPT` of a Mobigen script (Mobibench's `-g` format): parsed with what it cannot
replay counted, laid out and replayed inside the target's scratch directory only, one thread per script thread, think
times slept (not spun) or left out with --no-think, per-call latency and Mobibench's I/O time reported, and the
scratch directory gone afterwards, also on Ctrl-C.

tests/data/launch/mobigen-small.script is ours, written in the format. The real scripts are Mobibench's
(github.com/ESOS-Lab/Mobibench, shell/mobigen.out.twitter and .facebook, 0.5 and 0.9 MB, no licence stated), so they
are not kept here: the last test replays the Twitter one from $SMARTIO_MOBIGEN_DIR or ~/.cache/smartio/mobigen/,
fetching it there when the network allows, and is skipped otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from smartio.errors import UsageError
from smartio.launch.mobigen import MobigenReplayer, Script, ScriptLayout, is_mobigen, open_flags

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).parent / "data" / "launch"
SMALL = DATA / "mobigen-small.script"
TWITTER_URL = "https://raw.githubusercontent.com/ESOS-Lab/Mobibench/master/shell/mobigen.out.twitter"


def _bench(tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smartio", "bench", "launch", *args], capture_output=True,
                          text=True, timeout=100, env={**os.environ, "SMARTIO_DB": str(tmp_path / "results.db")}, **kw)


def test_small_script_is_parsed_and_what_cannot_be_replayed_is_counted():
    s = Script.read(SMALL)
    summary = s.summary()
    assert summary["threads"] == 3 and summary["calls"] == 37
    assert summary["malformed"] == 2 and summary["unknown"] == {"mmap2": 1}
    assert summary["failed_when_recorded"] == {"read": 1}
    assert [x.split(":")[0] for x in summary["malformed_examples"]] == ["line 34", "line 40"]
    assert summary["by_call"]["open"] == 7 and summary["by_call"]["pwrite"] == 3
    opened = [c for c in s.calls if c.call == "open"]
    assert opened[0].standin and opened[0].fd == 36 and not opened[1].standin
    assert is_mobigen(SMALL) and not is_mobigen(Path(__file__).parent / "data" / "launch" / "missing")


def test_open_flags_follow_the_recording():
    assert open_flags("O_RDONLY|O_LARGEFILE") == os.O_RDONLY
    assert open_flags("O_WRONLY|O_CREAT|O_TRUNC|O_LARGEFILE") == os.O_RDWR | os.O_CREAT | os.O_TRUNC
    assert open_flags("O_RDWR|O_CREAT|O_LARGEFILE") == os.O_RDWR | os.O_CREAT


@pytest.mark.parametrize("text, why", [("", "it is empty"), ("hello world\n{}\n", "none of its 2 lines"),
                                       ("1 2 frobnicate x\n", "none of its 1 lines")])
def test_a_file_that_is_no_script_is_a_usage_error(text, why):
    with pytest.raises(UsageError, match=why):
        Script.parse(text, "x")


def test_paths_outside_the_target_are_mapped_into_the_scratch_directory(tmp_path):
    layout = ScriptLayout(Script.read(SMALL), str(tmp_path))
    root = str(layout.root) + os.sep
    assert all(p.startswith(root) for p in [*layout.paths.values(), *layout.sizes, *layout.dirs])
    assert layout.where("/../../etc/smartio-mobigen-outside") == str(layout.root / "root/etc/smartio-mobigen-outside")
    # the files the script reads are laid out as big as it reads them; a parent of another path is a directory
    sizes = {os.path.relpath(p, layout.root): n for p, n in layout.sizes.items()}
    assert sizes["root/data/data/com.example/databases/app.db"] == 24576 + 4096
    assert sizes["root/mnt/sdcard/photo.jpg"] == 2 * 16384
    assert str(layout.root / "root/data/data/com.example/databases") in layout.dirs


def test_small_script_replays_and_reports_every_call(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "doc.json"
    p = _bench(tmp_path, "--replay", str(SMALL), "--target", str(target), "--repeats", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["mode"] == "mobigen" and doc["script"]["malformed"] == 2
    calls = doc["results"]["calls"]
    assert calls["open"]["n"] == 2 * 7 and calls["open"]["failed"] == 0
    assert calls["write"] == {**calls["write"], "n": 2 * 2, "skipped": 2}      # `write 99 10`: fd 99 never opened
    assert calls["access"]["failed"] == 2                                      # the journal was unlinked before
    assert calls["unlink"]["failed"] == 0 and calls["lstat64"]["failed"] == 0  # the layout is reset per launch
    assert all(c["p50_ms"] <= c["p99_ms"] <= c["max_ms"] for c in calls.values() if c["n"])
    b = doc["results"]["breakdown_s"]
    io = sum(c["total_ms"] for c in calls.values() if c["n"]) / 1e3
    assert sum(b["io"]["values"]) == pytest.approx(io, rel=1e-3, abs=1e-5)
    assert "Mobibench's Total IO time" in p.stdout and "mmap2 1" in p.stdout
    assert list(target.iterdir()) == []
    assert not os.path.exists("/etc/smartio-mobigen-outside")


def _two_threads(tmp_path: Path, gap_us: int) -> Path:
    script = tmp_path / "two.script"
    script.write_text("".join(f"{tid} 0 open /x O_RDWR|O_CREAT {10 + tid}\n{tid} {gap_us} fsync {10 + tid} 0\n"
                              f"{tid} {2 * gap_us} close {10 + tid} 0\n" for tid in (0, 1)))
    return script


def test_think_times_are_slept_in_one_thread_per_script_thread(tmp_path):
    script = Script.read(_two_threads(tmp_path, 300_000))
    with ScriptLayout(script, str(tmp_path)) as layout:
        r = MobigenReplayer(script, layout)
        wall = r.launch()
        assert r.last_breakdown is not None
        # each thread waits 0.6 s in all; the two wait at the same time, and sleeping costs no CPU
        assert 0.6 <= wall < 1.0
        assert r.last_breakdown["think"] >= 2 * 0.6 - 0.01
        assert r.last_breakdown["cpu"] < 0.1
        fast = MobigenReplayer(script, layout, think=False)
        assert fast.launch() < 0.25
        assert fast.last_breakdown is not None and fast.last_breakdown["think"] == 0
    assert not layout.root.exists()


def test_a_call_on_an_fd_another_thread_opens_waits_for_that_open(tmp_path):
    # thread 2 opens fd 7 at 5 ms after 3000 stats; thread 1's only calls, fsync and close at 6 ms, use it. With no
    # think times thread 1 would run first and miss the fd: it waits for the open, in either mode.
    script_path = tmp_path / "cross.script"
    script_path.write_text("".join(f'2 {t} stat64 "/data/a" 0\n' for t in range(3000))
                           + "2 5000 open /data/f O_RDWR|O_CREAT 7\n1 6000 fsync 7 0\n1 6001 close 7 0\n"
                           + "1 6002 fsync 9 0\n")
    script = Script.read(script_path)
    with ScriptLayout(script, str(tmp_path)) as layout:
        for think in (False, True):
            r = MobigenReplayer(script, layout, think=think)
            r.launch()
            assert r.last_calls is not None
            fsync, close = r.last_calls["fsync"], r.last_calls["close"]
            assert (len(fsync["durations_s"]), fsync["failed"], fsync["skipped"]) == (1, 0, 1)   # fd 9: never opened
            assert (len(close["durations_s"]), close["failed"], close["skipped"]) == (1, 0, 0)


def test_ctrl_c_ends_a_replay_and_removes_its_scratch_directory(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "smartio", "bench", "launch", "--replay",
                             str(_two_threads(tmp_path, 30_000_000)), "--target", str(target), "--repeats", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SMARTIO_DB": str(tmp_path / "results.db")},
                            # a suite started in the background of a shell inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while not list(target.glob(".smartio-mobigen-*/temp/temp_*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(target.glob(".smartio-mobigen-*")), "the replay did not start"
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 5
    assert list(target.iterdir()) == []


def _twitter() -> Path:
    for d in (os.environ.get("SMARTIO_MOBIGEN_DIR"), str(Path.home() / ".cache" / "smartio" / "mobigen")):
        if d and (Path(d) / "mobigen.out.twitter").is_file():
            return Path(d) / "mobigen.out.twitter"
    dest = Path.home() / ".cache" / "smartio" / "mobigen" / "mobigen.out.twitter"
    try:
        with urllib.request.urlopen(TWITTER_URL, timeout=10) as r:
            data = r.read()
    except OSError as e:
        pytest.skip(f"Mobibench's Twitter script is not in ~/.cache/smartio/mobigen/ and cannot be fetched "
                    f"({TWITTER_URL}: {e})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return dest


def test_mobibench_twitter_script_replays(tmp_path):
    path = _twitter()
    text = path.read_text()
    recorded_failed_access = sum(1 for x in text.splitlines() if x.split()[2:3] == ["access"] and x.endswith(" -1"))
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "doc.json"
    p = _bench(tmp_path, "--replay", str(path), "--no-think", "--target", str(target), "--repeats", "1",
               "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    s, calls = doc["script"], doc["results"]["calls"]
    assert s["threads"] > 100 and s["malformed"] == 0 and s["unknown"] == {}
    assert s["calls"] + sum(s["failed_when_recorded"].values()) == s["lines"]
    assert sum(c["n"] + c["skipped"] for c in calls.values()) == s["calls"]
    # skipped: exactly the fsyncs on an fd no earlier open (in the script's time, any thread) left open
    held: set[int] = set()
    never_opened = 0
    for line in sorted((x.split() for x in text.splitlines() if len(x.split()) > 3), key=lambda f: int(f[1])):
        if line[2] not in ("open", "close", "fsync"):
            continue
        fd = int(line[-1] if line[2] == "open" else line[3])
        if line[2] == "open":
            held.add(fd)
        elif line[2] == "close":
            held.discard(fd)
        elif line[2] == "fsync":
            never_opened += fd not in held
    assert calls["fsync"]["skipped"] == never_opened and calls["fsync"]["n"] > 200
    # --no-think gives up the order between threads: now and then a thread's fsync meets an fd another closed
    assert calls["fsync"]["failed"] <= calls["fsync"]["n"] // 20
    # what failed on the phone fails here, and no more: the access() calls that returned -1
    assert calls["access"]["failed"] == recorded_failed_access
    assert list(target.iterdir()) == []

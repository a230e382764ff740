"""What `smartio bench` may measure and where it may write: memory-backed filesystems
are refused, --destroy-data overrides only "holds data", --read-only leaves its target as it was, and small
filesystems are usable targets whose sizes are printed as they are."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from smartio import blockdev
from smartio.errors import UsageError
from smartio.storebench.options import Settings
from smartio.storebench.runner import check

pytestmark = pytest.mark.timeout(300)

ROOT = os.geteuid() == 0
FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed (make deps installs it)")
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to mount filesystems and make loop devices")
SMALL = Settings(repeats=1, size=256 << 10)


def smartio(*args: str, db: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "SMARTIO_DB": str(db), **(env or {})}
    return subprocess.run([sys.executable, "-m", "smartio", *args], capture_output=True, text=True, env=e,
                          timeout=280)


def _fingerprint(p: Path) -> tuple[int, int, str]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()


def _mount(*args: str) -> None:
    p = subprocess.run(["mount", *args], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount here ({' '.join(args)}): {p.stderr.strip()}")


@contextlib.contextmanager
def _mounted(*args: str) -> Iterator[None]:
    _mount(*args)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", args[-1]], check=False)


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator:
    """make(size) -> /dev/loopN backed by a fresh sparse file; detached afterwards."""
    if not ROOT or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup to make a loop device")
    made: list[str] = []

    def make(size: int = 64 << 20, partscan: bool = False) -> str:
        img = tmp_path / f"disk{len(made)}.img"
        with open(img, "wb") as f:
            f.truncate(size)
        p = subprocess.run(["losetup", "-f", "--show", *(["-P"] if partscan else []), str(img)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"losetup failed: {p.stderr.strip()}")
        made.append(p.stdout.strip())
        return made[-1]

    yield make
    for dev in made:
        subprocess.run(["losetup", "-d", dev], check=False)


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


# --- memory-backed filesystems are refused for what they are --------------------------------------------------

def test_tmpfs_target_refused(tmp_path):
    # Linux 6.6+ tmpfs accepts O_DIRECT, so only the filesystem's type can tell.
    with open("/proc/self/mountinfo") as f:
        if not any(line.split()[4] == "/dev/shm" and line.split(" - ")[1].startswith("tmpfs ") for line in f):
            pytest.skip("no tmpfs mounted at /dev/shm on this host")
    db = tmp_path / "r.db"
    p = smartio("bench", "latency", "--target", "/dev/shm", "--size", "64K", "--repeats", "1", db=db)
    assert p.returncode == 2, p.stderr
    assert "`--target /dev/shm`" in p.stderr and "tmpfs" in p.stderr and "memory" in p.stderr
    assert "stored as run" not in p.stdout
    shm_file = Path("/dev/shm") / f"smartio-test-{os.getpid()}"
    shm_file.write_bytes(b"\0" * (256 << 10))
    try:
        with pytest.raises(UsageError, match="tmpfs") as e:
            check("latency", str(shm_file), SMALL, destroy_data=False)
        assert e.value.flag == "--target" and e.value.exit_code == 2
    finally:
        shm_file.unlink()


@needs_root
@pytest.mark.parametrize("layout", ["ramfs", "overlay-upper-on-tmpfs", "overlay-lower-on-tmpfs"])
def test_ramfs_and_overlay_on_memory_refused(tmp_path, layout):
    mem, disk, merged = tmp_path / "mem", tmp_path / "disk", tmp_path / "merged"
    for d in (mem, disk, merged):
        d.mkdir()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_mounted("-t", "ramfs" if layout == "ramfs" else "tmpfs", "none", str(mem)))
        target = mem
        if layout.startswith("overlay"):
            upper_on, lower_on = (mem, disk) if layout == "overlay-upper-on-tmpfs" else (disk, mem)
            for d in (upper_on / "upper", upper_on / "work", lower_on / "lower"):
                d.mkdir()
            (lower_on / "lower" / "data.img").write_bytes(b"\1" * (256 << 10))
            stack.enter_context(_mounted("-t", "overlay", "overlay", "-o",
                                         f"lowerdir={lower_on / 'lower'},upperdir={upper_on / 'upper'},"
                                         f"workdir={upper_on / 'work'}", str(merged)))
            target = merged
        with pytest.raises(UsageError) as e:
            check("latency", str(target), SMALL, destroy_data=False)
        assert e.value.flag == "--target" and e.value.value == str(target)
        assert ("ramfs" if layout == "ramfs" else "tmpfs") in e.value.why
        if layout.startswith("overlay"):
            assert "overlay" in e.value.why
            with pytest.raises(UsageError, match="tmpfs"):     # a file in it, too
                check("latency", str(merged / "data.img"), Settings(repeats=1, size=64 << 10, read_only=True),
                      destroy_data=False)


@needs_root
def test_overlay_on_disk_is_accepted(tmp_path):
    for d in ("lower", "upper", "work", "merged"):
        (tmp_path / d).mkdir()
    with _mounted("-t", "overlay", "overlay", "-o", f"lowerdir={tmp_path / 'lower'},upperdir={tmp_path / 'upper'},"
                  f"workdir={tmp_path / 'work'}", str(tmp_path / "merged")):
        target = check("latency", str(tmp_path / "merged"), SMALL, destroy_data=False)
    assert target.kind == "dir"


# --- --destroy-data overrides "holds data" only -----------------------------------------------------------------

@needs_fio
def test_destroy_data_does_not_override_a_mounted_device(loop_device, tmp_path):
    _need("mkfs.ext4")
    dev = loop_device()
    subprocess.run(["mkfs.ext4", "-q", dev], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with _mounted(dev, str(mnt)):
        with pytest.raises(UsageError) as e:
            check("latency", dev, SMALL, destroy_data=True)
        assert f"is mounted at {mnt}" in str(e.value) and "--destroy-data" not in str(e.value)
        # The command line too, with a replayed engine so that a missing check cannot write under the mount.
        p = smartio("bench", "latency", "--target", dev, "--destroy-data", "--size", "256K", "--repeats", "1",
                    db=tmp_path / "r.db",
                    env={"SMARTIO_REPLAY_FIO": str(Path(__file__).parent / "data" / "fio" / "latency")})
        assert p.returncode == 2 and f"`--target {dev}`" in p.stderr and "mounted" in p.stderr


@needs_fio
def test_destroy_data_does_not_override_a_mounted_partition(loop_device, tmp_path):
    for tool in ("mkfs.ext4", "partx"):
        _need(tool)
    dev = loop_device(partscan=True)
    # An MBR with one Linux partition from sector 2048 to the end (what `sfdisk` would write, without needing it).
    sectors = (64 << 20) // 512
    entry = bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little") + (sectors - 2048).to_bytes(4, "little")
    with open(dev, "r+b") as f:
        f.seek(446)
        f.write(entry + bytes(48) + b"\x55\xaa")
    subprocess.run(["partx", "-a", dev], check=False, capture_output=True)     # tell the kernel (no udev here)
    part = f"{dev}p1"
    for _ in range(50):          # devtmpfs makes the node shortly after the kernel read the table
        if os.path.exists(part):
            break
        time.sleep(0.1)
    else:
        pytest.skip(f"the kernel made no {part}")
    subprocess.run(["mkfs.ext4", "-q", part], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with _mounted(part, str(mnt)):
        with pytest.raises(UsageError, match="mounted"):
            check("latency", dev, SMALL, destroy_data=True)


def test_destroy_data_does_not_override_swap(loop_device):
    for tool in ("mkswap", "swapon", "swapoff"):
        _need(tool)
    dev = loop_device(32 << 20)
    subprocess.run(["mkswap", "-q", dev], check=True, capture_output=True)
    p = subprocess.run(["swapon", dev], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"swapon failed here: {p.stderr.strip()}")
    try:
        with pytest.raises(UsageError) as e:
            check("latency", dev, SMALL, destroy_data=True)
        assert "in use as swap" in str(e.value) and "--destroy-data" not in str(e.value)
    finally:
        subprocess.run(["swapoff", dev], check=False)


def test_destroy_data_does_not_override_holders(loop_device, tmp_path, monkeypatch):
    # No device mapper here to make a real holder: the loop device's sysfs entry is copied with a holder added.
    dev = loop_device()
    name = Path(dev).name
    real = (Path("/sys/class/block") / name).resolve()
    fake = tmp_path / "sys"
    entry = fake / "devices" / "virtual" / "block" / name
    (entry / "holders" / "dm-7").mkdir(parents=True)
    for f in ("size", "dev"):
        (entry / f).write_text((real / f).read_text())
    mm = (real / "dev").read_text().strip()
    for link in (fake / "dev" / "block" / mm, fake / "class" / "block" / name):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(entry)
    monkeypatch.setattr(blockdev, "SYS", fake)
    with pytest.raises(UsageError) as e:
        check("latency", dev, SMALL, destroy_data=True)
    assert "held by dm-7" in str(e.value) and "--destroy-data" not in str(e.value)


@needs_fio
def test_destroy_data_overrides_a_filesystem_signature(loop_device):
    _need("mkfs.ext4")
    dev = loop_device()
    subprocess.run(["mkfs.ext4", "-q", dev], check=True)
    with pytest.raises(UsageError, match="ext4.*--destroy-data"):
        check("latency", dev, SMALL, destroy_data=False)
    assert check("latency", dev, SMALL, destroy_data=True).kind == "device"


# --- --read-only does not change its target -------------------------------------------------------------------

@needs_fio
def test_read_only_does_not_extend_a_short_file(tmp_path):
    f = tmp_path / "short.img"
    f.write_bytes(os.urandom(256 << 10))
    before = _fingerprint(f)
    p = smartio("bench", "latency", "--target", str(f), "--read-only", "--size", "1M", "--repeats", "1",
                db=tmp_path / "r.db")
    assert p.returncode == 2, p.stderr
    assert f"`--target {f}`" in p.stderr and "0.25 MiB" in p.stderr and "1 MiB" in p.stderr
    assert _fingerprint(f) == before


@needs_fio
def test_read_only_reads_a_file_that_holds_the_slots_and_leaves_it_unchanged(tmp_path):
    # concurrency N=1,2 of 256 KiB: the second stream starts 1 MiB in, so the run reads up to 1.25 MiB.
    args = ["bench", "concurrency", "--read-only", "--size", "256K", "--repeats", "1", "--levels", "1,2"]
    f = tmp_path / "data.img"
    f.write_bytes(os.urandom((1 << 20) + (256 << 10)))
    before = _fingerprint(f)
    p = smartio(*args, "--target", str(f), db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    assert _fingerprint(f) == before
    with open(f, "r+b") as fh:
        fh.truncate(1 << 20)
    before = _fingerprint(f)
    p = smartio(*args, "--target", str(f), db=tmp_path / "r.db")
    assert p.returncode == 2 and "1.25 MiB" in p.stderr, p.stderr
    assert _fingerprint(f) == before


def test_read_only_refuses_a_directory(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(UsageError) as e:
        check("latency", str(scratch), Settings(repeats=1, size=256 << 10, read_only=True),
              destroy_data=False)
    assert e.value.flag == "--target" and "--read-only" in e.value.why and "directory" in e.value.why
    assert list(scratch.iterdir()) == []


# --- small filesystems, and sizes printed as they are ----------------------------------------------------------

@pytest.fixture
def small_fs(loop_device, tmp_path) -> Iterator[Path]:
    """A mounted 24 MiB ext4 filesystem."""
    _need("mkfs.ext4")
    dev = loop_device(24 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-m", "0", dev], check=True)
    mnt = tmp_path / "small"
    mnt.mkdir()
    with _mounted(dev, str(mnt)):
        yield mnt


@needs_fio
def test_small_filesystem_is_a_target(small_fs, tmp_path):
    p = smartio("bench", "latency", "--target", str(small_fs), "--size", "1M", "--repeats", "1",
                db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    assert [x.name for x in small_fs.iterdir() if x.name.startswith(".smartio")] == []


def test_too_little_space_names_sizes_below_one_mib(small_fs):
    st = os.statvfs(small_fs)
    filler = small_fs / "filler"
    # Leave about 300 KiB free.
    subprocess.run(["fallocate", "-l", str(st.f_bavail * st.f_frsize - (300 << 10)), str(filler)], check=True)
    free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
    with pytest.raises(UsageError) as e:
        check("latency", str(small_fs), Settings(repeats=1, size=1 << 20), destroy_data=False)
    msg = str(e.value)
    assert "too little space" in msg and not re.search(r"(?<![\d.])0 MiB", msg), msg
    assert f"{free / (1 << 20):g} MiB available" in msg, msg

"""The testbed's disk transport: choosing it, and nbdfuse delivering each completion when the device finishes it.

A regression test: over QEMU 7.2's NBD client a write completed only when the read queued behind it did.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from smartio.errors import UsageError
from smartio.testbed import disks


def test_transport_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(disks.TRANSPORT_ENV, "nbd")
    assert disks.choose_transport() == "nbd"
    monkeypatch.setenv(disks.TRANSPORT_ENV, "virtio-scsi")
    with pytest.raises(UsageError, match="SMARTIO_DISK_TRANSPORT"):
        disks.choose_transport()
    monkeypatch.delenv(disks.TRANSPORT_ENV)
    assert disks.choose_transport() == ("nbd" if disks.fuse_unavailable_reason() else "fuse")


def _fuse_probe() -> str | None:
    if shutil.which("nbdkit") is None or shutil.which("qemu-io") is None:
        return "needs nbdkit and qemu-io (scripts/install-deps --vm)"
    return disks.fuse_unavailable_reason()


@pytest.mark.timeout(60)
@pytest.mark.skipif(_fuse_probe() is not None, reason=str(_fuse_probe()))
def test_write_completes_before_the_read_behind_it(tmp_path: Path) -> None:
    """Device: reads 300 ms, writes 30 ms, in parallel. A write issued before a read must complete at 30 ms."""
    sock = tmp_path / "d.sock"
    pid = tmp_path / "nbdkit.pid"
    nbdkit = subprocess.Popen(["nbdkit", "--foreground", "--exit-with-parent", "-P", str(pid), "-U", str(sock),
                               "--filter=delay", "memory", "size=16M", "rdelay=300ms", "wdelay=30ms"])
    try:
        disks.wait_for_socket(sock, nbdkit, "nbdkit", tmp_path / "none.log")
        with disks.fuse_file(sock, tmp_path, 0) as path:
            out = subprocess.run(["qemu-io", "-t", "none", "--image-opts",
                                  f"driver=raw,file.driver=file,file.filename={path},file.aio=native",
                                  "-c", "aio_write 0 4k", "-c", "aio_read 1M 4k", "-c", "aio_flush"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
        assert not path.stat().st_size, "the file is still mounted after the block"
    finally:
        nbdkit.terminate()
        nbdkit.wait(10)
    times = {op: float(t) for op, t in re.findall(r"^(read|wrote) .*\n.*?; 00:?([\d.]+) sec", out, re.M)}
    assert set(times) == {"read", "wrote"}, out
    assert times["wrote"] < 0.15, f"the write waited for the read: {out}"
    assert times["read"] >= 0.29

"""Everything that can be checked is checked before the first I/O, boot or download: output
paths of `bench`, `profile --apply`'s scheduler, `compare --mixes`, and `testbed run` as an unprivileged user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from smartio.blockdev import backing_of, read_scheduler
from smartio.cli import main
from smartio.results import Store

pytestmark = pytest.mark.timeout(300)

SRC = Path(__file__).resolve().parents[1] / "src"
SMALL = ["--size", "256K", "--repeats", "1"]


def smartio(*args: str, db: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "SMARTIO_DB": str(db), **(env or {})}
    return subprocess.run([sys.executable, "-m", "smartio", *args], capture_output=True, text=True, env=e,
                          timeout=280)


def _stored(db: Path) -> int:
    return len(Store(db).list()) if db.exists() else 0


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "scratch"
    d.mkdir()
    return d


@pytest.mark.parametrize("flag, where", [
    ("--json", "missing/out.json"),          # a missing directory
    ("--json", "afile/out.json"),            # under a regular file
    ("--json", "adir"),                      # a directory, not a file
    ("--plots", "afile/plots"),              # under a regular file
    ("--plots", "afile"),                    # a regular file, not a directory
])
def test_output_paths_checked_before_measuring(scratch, tmp_path, flag, where):
    (tmp_path / "afile").write_text("not a directory\n")
    (tmp_path / "adir").mkdir()
    out, db = tmp_path / where, tmp_path / "r.db"
    p = smartio("bench", "latency", "--target", str(scratch), *SMALL, flag, str(out), db=db)
    assert p.returncode == 2, p.stderr
    assert f"`{flag} {out}`" in p.stderr
    assert _stored(db) == 0 and "latency seq_read" not in p.stderr      # nothing was measured
    assert list(scratch.iterdir()) == []


def test_plots_directory_is_made_when_its_parent_exists(scratch, tmp_path):
    # The check does not refuse what works: a new plots directory (and its parents) under a writable directory.
    p = smartio("bench", "latency", "--target", str(scratch), *SMALL, "--plots", str(tmp_path / "new" / "plots"),
                "--json", str(tmp_path / "out.json"), db=tmp_path / "r.db")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "new" / "plots" / "latency.png").is_file() and (tmp_path / "out.json").is_file()


def test_profile_apply_checks_the_scheduler_before_measuring(scratch, tmp_path):
    dev = backing_of(str(scratch)).device
    if dev is None:
        pytest.skip(f"{scratch} has no block device underneath")
    current, _ = read_scheduler(dev)
    if current == "smartio":
        pytest.skip(f"{dev.disk} already runs the smartio scheduler")
    db = tmp_path / "r.db"
    p = smartio("profile", "--target", str(scratch), *SMALL, "--levels", "1,2", "--apply", db=db)
    assert p.returncode in (2, 3), p.stderr          # not smartio (2), or not root (3)
    if p.returncode == 2:
        assert f"`--apply {dev.disk}`" in p.stderr and f"scheduler is {current}, not smartio" in p.stderr
    assert _stored(db) == 0 and "concurrency" not in p.stderr      # nothing was measured
    assert p.stdout == ""


def test_compare_mixes_checked_on_the_host_before_booting(monkeypatch, capsys):
    def boot(*args, **kwargs):
        raise AssertionError("compare booted the VM with --mixes abc")

    monkeypatch.setattr("smartio.storebench.compare.run_compare", boot)
    assert main(["compare", "--experiment", "mixed", "--mixes", "abc"]) == 2
    assert "`--mixes abc`" in capsys.readouterr().err
    assert main(["compare", "--experiment", "mixed", "--mixes", "10,101"]) == 2
    assert "`--mixes 10,101`" in capsys.readouterr().err


def _unprivileged_python() -> str | None:
    """An interpreter that uid 65534 may run and that imports smartio's CLI (the venv may live under /root)."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py, "-c", "import smartio.cli"],
                env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, capture_output=True).returncode == 0:
            return py
    return None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run smartio as an unprivileged user")
def test_testbed_run_as_non_root_exits_3_before_downloading(tmp_path):
    py = _unprivileged_python()
    if py is None:
        pytest.skip("no Python interpreter that uid 65534 can run and import smartio with")
    # apt-get and apt-cache stand-ins log every call: nothing may be fetched for a run that cannot happen.
    # pytest's tmp_path is private to root, so the unprivileged user gets a directory of its own.
    work = Path(tempfile.mkdtemp(prefix="smartio-nobody-"))
    try:
        stubs, home, log = work / "bin", work / "home", work / "apt-calls"
        for d in (stubs, home):
            d.mkdir()
        for tool in ("apt-get", "apt-cache"):
            (stubs / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {log}\nexit 1\n")
            (stubs / tool).chmod(0o755)
        for d in (work, home):
            d.chmod(0o755)
            os.chown(d, 65534, 65534)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py, "-m", "smartio",
                            "testbed", "run", "--", "true"], cwd=home, capture_output=True, text=True, timeout=120,
                           env={"PYTHONPATH": str(SRC), "PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(home),
                                "SMARTIO_CACHE": str(home / "cache")})
        assert p.returncode == 3, p.stderr
        assert "needs root" in p.stderr and "Traceback" not in p.stderr
        assert not log.exists(), log.read_text()
        assert sorted(x.name for x in home.iterdir()) == []             # no cache, no artifacts directory
    finally:
        shutil.rmtree(work)


@pytest.mark.parametrize("argv", [
    ["compare", "--timeout", "nan"],
    ["compare", "--timeout", "inf"],
    ["testbed", "run", "--timeout", "nan", "--", "true"],
    ["testbed", "run", "--timeout", "inf", "--", "true"],
    ["testbed", "run", "--disk-size", "99999999999999999999T", "--", "true"],
])
def test_testbed_limits_checked_before_booting(monkeypatch, capsys, tmp_path, argv):
    def fetch(*args, **kwargs):
        raise AssertionError(f"{' '.join(argv)} went on to fetch the kernel and boot")

    monkeypatch.setattr("smartio.testbed.kernelpkg.resolve", fetch)
    monkeypatch.setattr("smartio.testbed.kernelpkg.fetch_image", fetch)
    monkeypatch.setattr("os.geteuid", lambda: 0)       # as root, so the run would go ahead
    monkeypatch.chdir(tmp_path)                         # where an artifacts directory would appear
    flag = argv[argv.index("--timeout") if "--timeout" in argv else argv.index("--disk-size")]
    assert main(argv) == 2
    assert f"`{flag} " in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

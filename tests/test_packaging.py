"""A non-editable install (`pip install .`) works: the wheel carries the package data smartio
reads at run time, and the licence is declared the current way (an SPDX expression, not the deprecated table)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel `pip install .` would install, built from a copy of the sources (so no build/ or egg-info is
    left in the checkout), and pip's output."""
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src") / "smartio"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        f, copy = REPO / name, src / name
        if f.is_symlink():          # kept a link (package data linked from the source tree)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(f))
        elif f.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(f.read_bytes())
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=500)
    if p.returncode != 0 and "Could not find a version that satisfies" in p.stdout + p.stderr:
        pytest.skip(f"pip cannot fetch the build backend here: {(p.stdout + p.stderr)[-300:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    (whl,) = out.glob("smartio-*.whl")
    return whl, p.stdout + p.stderr


def test_wheel_declares_the_licence_as_an_spdx_expression(wheel):
    whl, log = wheel
    with zipfile.ZipFile(whl) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: GPL-2.0-only" in meta
    assert "license" not in log.lower() or "deprecat" not in log.lower(), log


def test_wheel_carries_the_data_smartio_reads(wheel):
    whl, _ = wheel
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
    assert {"smartio/flashdev/profiles.toml", "smartio/trace/_native.c"} <= names


def test_non_editable_install_reads_its_profiles(wheel, tmp_path):
    whl, _ = wheel
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(whl)], check=True, capture_output=True, timeout=300)
    # Run from elsewhere, with the installed copy first on the path; the venv supplies the dependencies.
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run([sys.executable, "-c", "import smartio; print(smartio.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), where
    p = subprocess.run([sys.executable, "-m", "smartio", "flashdev", "profiles"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "s5-emmc" in p.stdout

"""The module builds for every kernel of the matrix (6.1, 6.12, newest) on amd64 and arm64, with W=1 and warnings as
errors, and each .ko is for its kernel's release (vermagic). The cells are built here, from kernel/, into a temporary
directory by smartio.testbed.modbuild (`make -C kernel matrix` does the same into kernel/build/).

Needs root (6.12 and the newest build in a debootstrap chroot) and either the network or a cache that already holds
every cell's kernel packages and both chroots; with such a cache it asks no archive (offline). A cold cache takes
about 10 minutes here (debootstrap of trixie and sid, three linux-source packages), a warm one about a minute.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from smartio.testbed import kernelpkg, modbuild, toolchain

pytestmark = pytest.mark.root
CELLS = modbuild.cells()
REPO_KERNEL = Path(__file__).resolve().parents[1] / "kernel"


def _cached(cell: modbuild.Cell) -> bool:
    rel = kernelpkg.cached(cell.kernel, cell.flavour)
    if rel is None or not (rel.dir / ".complete-headers").exists() \
            or not (rel.private_headers.parent / ".complete-source").exists():
        return False
    return cell.chroot is None or (toolchain.suite_dir(cell.chroot) / ".complete-base").exists()


def _online(host: str = "deb.debian.org") -> bool:
    try:
        socket.create_connection((host, 80), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, modbuild.Result]:
    if os.geteuid() != 0:
        pytest.skip("needs root: the 6.12 and newest cells build in a debootstrap chroot (mount, chroot)")
    offline = all(_cached(c) for c in CELLS)
    if not offline and not _online():
        pytest.skip("neither the network (deb.debian.org) nor a cache with every cell's kernel packages and chroots")
    out = tmp_path_factory.mktemp("matrix")
    return {c.name: modbuild.build(c, REPO_KERNEL, out, offline=offline) for c in CELLS}


@pytest.mark.timeout(2400)      # a cold cache: two debootstraps and three kernels' packages
@pytest.mark.parametrize("cell", [c.name for c in CELLS])
def test_cell_builds_without_a_warning(matrix: dict[str, modbuild.Result], cell: str) -> None:
    r = matrix[cell]
    assert not r.error, r.error
    log = (r.ko or Path()).parent / "build.log"
    assert r.rc == 0 and r.ko is not None and r.ko.exists(), f"{cell}: make failed ({r.rc}):\n" + "\n".join(
        r.diagnostics[:20])
    assert r.diagnostics == [], f"{cell}: warnings in {log}:\n" + "\n".join(r.diagnostics[:20])


@pytest.mark.parametrize("cell", [c.name for c in CELLS])
def test_cell_module_is_for_its_kernel_release(matrix: dict[str, modbuild.Result], cell: str) -> None:
    r = matrix[cell]
    if r.ko is None:
        pytest.fail(f"{cell}: not built ({r.error or f'rc {r.rc}'})")
    assert r.vermagic.split(" ")[0] == r.release, f"{cell}: vermagic {r.vermagic!r}, kernel {r.release}"
    assert r.release.endswith("-arm64" if cell.endswith("arm64") else "-cloud-amd64")
    assert ("aarch64" in r.vermagic.split(" ")) == cell.endswith("arm64"), r.vermagic

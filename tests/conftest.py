"""Shared pytest fixtures: feature probes that skip, with the reason, tests the host cannot run; a results database
of its own for every test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def testbed_ready() -> None:
    """Skip unless the QEMU testbed can boot here (x86_64, root, qemu, virtiofsd, busybox-static, nbdkit)."""
    from smartio.testbed.vm import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"QEMU testbed cannot run here: {reason}")


@pytest.fixture(autouse=True)
def own_results_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a test keeps (smartio compare, bench, ...) goes to a results database of its own, never the user's
    ~/.local/share/smartio/results.db; subprocesses inherit it. A test that names its own database still does."""
    monkeypatch.setenv("SMARTIO_DB", str(tmp_path_factory.mktemp("db") / "results.db"))

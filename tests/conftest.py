"""Shared pytest fixtures: feature probes that skip, with the reason, tests the host cannot run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def testbed_ready() -> None:
    """Skip unless the QEMU testbed can boot here (x86_64, root, qemu, virtiofsd, busybox-static, nbdkit)."""
    from smartio.testbed.vm import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"QEMU testbed cannot run here: {reason}")

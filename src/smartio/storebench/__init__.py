"""StoreBench experiments (seed 000, section 4): each is `run(ctx) -> results dict`, a pure function of the
target and settings through the engine. Running, printing, storing and plotting are separate layers."""

from __future__ import annotations

from types import ModuleType

from smartio.storebench import concurrency, latency, mixed, slowdown

REGISTRY: dict[str, ModuleType] = {m.NAME: m for m in (latency, slowdown, concurrency, mixed)}
# Experiments that still mean something with only the read patterns (--read-only).
READ_ONLY_CAPABLE = ("latency", "concurrency")


def selected(name: str) -> list[str]:
    return list(REGISTRY) if name == "all" else [name]

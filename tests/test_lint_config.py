"""ruff and mypy see every bench script. The scripts have no .py suffix, so neither tool finds
them by itself: pyproject.toml names each one, and a new script left out there would go unchecked."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench_scripts() -> set[str]:
    return {f"bench/{p.name}" for p in (REPO / "bench").iterdir()
            if p.is_file() and p.suffix == "" and p.read_bytes().startswith(b"#!") and
            b"python" in p.read_bytes().split(b"\n", 1)[0]}


def test_every_bench_script_is_linted_and_type_checked():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    scripts = _bench_scripts()
    assert "bench/compare-schedulers" in scripts    # the probe finds them
    assert scripts <= set(config["tool"]["ruff"]["extend-include"])
    assert scripts <= set(config["tool"]["mypy"]["files"])

"""The loaded smartio module has the tunables of the Python table (smartio.iosched.tunables), with its defaults and
its ranges, and the debugfs files smartio.iosched.debugfs reads. tests/test_iosched_contract.py checks the same table
against the C source; this checks it against what the kernel actually lists."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_iosched_vm import ModuleBuild, Phase, module_ko, run_phase  # noqa: F401  (module_ko: a fixture)

from smartio.iosched import debugfs, tunables

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1200), pytest.mark.usefixtures("testbed_ready")]


def _clamp_script() -> str:
    """For every tunable with a fixed range, write one past each end and record what the module kept."""
    lines = []
    for t in tunables.TUNABLES:
        if t.maximum is None:
            continue
        for label, value in (("below", t.minimum - 1), ("above", t.maximum + 1)):
            lines.append(f'echo {value} > $T/{t.name}; read -r v < $T/{t.name}; echo "{t.name} $v" >> '
                         f'"$SMARTIO_OUT/{label}"')
        lines.append(f"echo {t.default} > $T/{t.name}")
    return "\n".join(lines)


def _pairs(path: Path) -> dict[str, str]:
    assert path.is_file(), f"the guest left no {path.name}: the script stopped before it"
    out = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        out[name] = value.strip()
    return out


def table_phase() -> Phase:
    """What the loaded module lists: the table's tunables at their defaults, each clamped to its range, the debugfs
    files."""
    script = f"""
T=$Q/iosched
SIO_PINS=
use smartio
# read and ${{f##*/}}, not cat and basename: no fork per file (a fork is slow in a debug kernel's guest)
for f in $T/*; do read -r v < $f; echo "${{f##*/}} $v"; done > "$SMARTIO_OUT/defaults"
grep -q "^depth " $D/stats || fail "no depth line in stats: $(cat $D/stats)"
grep "^depth " $D/stats > "$SMARTIO_OUT/depth"
ls $D > "$SMARTIO_OUT/debugfs"
: > "$SMARTIO_OUT/below"; : > "$SMARTIO_OUT/above"
{_clamp_script()}
use none
rmmod smartio_iosched
"""
    return Phase(script, check_table, disk_mb=64)


def check_table(out: Path) -> None:
    listed = _pairs(out / "defaults")
    assert sorted(listed) == sorted(tunables.NAMES), "the module's iosched/ and the table differ"
    for t in tunables.TUNABLES:
        if t.default is not None:
            assert listed[t.name] == str(t.default), f"{t.name}: the module starts at {listed[t.name]}, " \
                                                     f"the table says {t.default}"
    # async_depth comes from the device: the module's stats say what it set.
    depth = debugfs.parse_stats((out / "depth").read_text())["depth"]
    assert int(listed["async_depth"]) == depth["async"] and 1 <= depth["async"] <= depth["sync_write"], depth
    below, above = _pairs(out / "below"), _pairs(out / "above")
    for t in tunables.TUNABLES:
        if t.maximum is None:
            continue
        assert (below[t.name], above[t.name]) == (str(t.minimum), str(t.maximum)), \
            f"{t.name} clamps to [{below[t.name]}, {above[t.name]}], the table says {t.range}"
    files = (out / "debugfs").read_text().split()
    assert sorted(files) == sorted(debugfs.FILES), "the module's debugfs files and smartio.iosched.debugfs differ"


def test_the_loaded_module_lists_the_tables_tunables_with_their_defaults_and_ranges(
        tmp_path: Path, module_ko: ModuleBuild) -> None:  # noqa: F811  (the fixture)
    run_phase(tmp_path, table_phase(), module_ko)

"""The Python side keeps the smartio module's contract in one table (smartio.iosched.tunables): these tests parse
kernel/smartio-iosched.c (its sysfs attribute table, the SIO_TUNABLE clamps, the defaults sio_init_queue() sets, its
debugfs files) and fail when the table, the lists derived from it or docs/design/tunables.md differ. The same
table against a loaded module: tests/test_iosched_tunables_vm.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from smartio.blockdev import diskstat
from smartio.iosched import debugfs, tunables
from smartio.iosched.policy import Tunables

ROOT = Path(__file__).resolve().parent.parent
C_SOURCE = ROOT / "kernel" / "smartio-iosched.c"
DOC = ROOT / "docs" / "design" / "tunables.md"


def _c() -> str:
    return C_SOURCE.read_text()


def _function_body(src: str, name: str) -> str:
    """The body of C function `name` (from its opening brace to the brace that closes it)."""
    m = re.search(rf"^static [^;{{]*\b{name}\([^)]*\)\s*{{", src, re.M)
    assert m, f"{name}() not found in {C_SOURCE.name}"
    depth, i = 0, m.end() - 1
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[i:j + 1]
    raise AssertionError(f"{name}() has no end")


def sysfs_names(src: str) -> list[str]:
    """sio_attrs: SIO_ATTR(name), in order."""
    m = re.search(r"static struct elv_fs_entry sio_attrs\[\] = \{(.*?)\};", src, re.S)
    assert m, "sio_attrs not found"
    return re.findall(r"SIO_ATTR\((\w+)\)", m.group(1))


def clamps(src: str) -> dict[str, tuple[str, int, int | None]]:
    """name -> (field, min, max) from SIO_TUNABLE(name, field, min, max), and async_depth's own store (its max is
    not a constant: None)."""
    out: dict[str, tuple[str, int, int | None]] = {
        name: (field, int(lo), int(hi))
        for name, field, lo, hi in re.findall(r"^SIO_TUNABLE\((\w+), ([\w\[\]]+), (-?\d+), (-?\d+)\);", src, re.M)}
    store = _function_body(src, "sio_async_depth_store")
    m = re.search(r"WRITE_ONCE\(sd->(\w+), clamp\(val, (\d+)U?, ([^)]+\)?)\)\);", store)
    assert m, "async_depth's clamp not found"
    hi = m.group(3)
    out["async_depth"] = (m.group(1), int(m.group(2)), int(hi.rstrip("U")) if hi.rstrip("U").isdigit() else None)
    return out


def defaults(src: str) -> dict[str, int | None]:
    """field -> the value sio_init_queue() gives it: a literal, or a sio_default_* constant (a const without an
    initialiser is 0); a field it does not set is 0 (sd is kvzalloc'ed); None when it is set from the queue."""
    consts = {name: int(v) if v else 0 for name, v in
              re.findall(r"^static const int (sio_default_\w+)(?: = (-?\d+))?;", src, re.M)}
    body = _function_body(src, "sio_init_queue")
    assert "zalloc" in body, "sio_init_queue no longer zeroes its sio_data: fields it does not set are not 0"
    out: dict[str, int | None] = {}
    for field, _index, value in re.findall(r"sd->(\w+)(\[\w+\])?\s*=\s*([^;]+);", body):
        value = value.strip()
        if re.fullmatch(r"-?\d+", value):
            out[field] = int(value)
        elif value in consts:
            out[field] = consts[value]
        else:
            out[field] = None
    return out


def module_table(src: str) -> dict[str, tuple[int | None, int, int | None]]:
    """name -> (default, min, max), as the module has them."""
    init = defaults(src)
    out = {}
    for name, (field, lo, hi) in clamps(src).items():
        base = field.split("[", 1)[0]
        out[name] = (init.get(base, 0), lo, hi)
    return out


def test_the_table_has_the_modules_tunables_in_its_order() -> None:
    src = _c()
    assert list(tunables.NAMES) == sysfs_names(src)
    assert set(clamps(src)) == set(sysfs_names(src)), "a sysfs attribute without a store clamp, or the other way"


def test_the_tables_defaults_and_ranges_are_the_modules() -> None:
    want = module_table(_c())
    got = {t.name: (t.default, t.minimum, t.maximum) for t in tunables.TUNABLES}
    assert got == want


def test_the_parsers_read_the_c_source_they_are_meant_to() -> None:
    """The C parsing itself, on values known from the module's header and the VM tests' range checks."""
    table = module_table(_c())
    assert table["write_slice_ms"] == (100, 1, 60000)
    assert table["qasio_meta"] == (1, 0, 1)
    assert table["dispatch_limit_rand_write"] == (0, 0, 4096)     # not set by sio_init_queue: kvzalloc's 0
    assert table["async_depth"] == (None, 1, None)


def test_units_are_in_the_names_and_times_are_the_clock_tunables() -> None:
    for t in tunables.TUNABLES:
        suffix = t.name.rsplit("_", 1)[-1]
        assert t.clock == (suffix in ("ms", "us")), t.name
        if suffix in ("ms", "us"):
            assert t.unit == suffix, t.name
        elif suffix == "kb":
            assert t.unit == "KiB", t.name
        assert t.role in tunables.ROLES and t.meaning, t.name


def test_the_lists_other_packages_keep_are_derived_from_the_table() -> None:
    from smartio.compare.guest import CLOCK_TUNABLES
    from smartio.flashdev.model import pacing
    from smartio.qasio.run import DEP_TUNABLES, dependency_tunables
    from smartio.storebench.bench import PACING_TUNABLES, TUNABLE
    from smartio.storebench.options import PATTERNS

    assert CLOCK_TUNABLES["smartio"] == tunables.CLOCK
    assert tuple(TUNABLE) == PATTERNS and set(TUNABLE.values()) == set(tunables.names(tunables.DISPATCH_LIMIT))
    results = {"alone_lat_ms": {"seq_write": 0.19, "rand_write": 0.41}, "max_speedup": {"seq_write": 1.3}}
    assert set(pacing(results)) == set(PACING_TUNABLES)       # what `smartio profile --apply` writes
    assert DEP_TUNABLES == ("qasio_meta", "qasio_data", "qasio_sync")
    assert set(dependency_tunables("all")) == set(tunables.names(tunables.QASIO_BOOST, tunables.QASIO_DEPENDENCY))


def test_the_policy_twin_has_the_modules_defaults_and_knows_every_tunable() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(Tunables)}
    for name, value in fields.items():
        assert value == tunables.BY_NAME[name].default, name
    assert set(fields) | set(Tunables.IGNORED) == set(tunables.NAMES)
    assert not set(fields) & set(Tunables.IGNORED)
    assert Tunables.from_mapping({n: t.default or 0 for n, t in tunables.BY_NAME.items()}) == Tunables()


def test_docs_design_tunables_md_is_the_table_rendered() -> None:
    """Regenerate with: python -c 'from smartio.iosched.tunables import render_markdown as r;
    open("docs/design/tunables.md", "w").write(r())'"""
    assert DOC.read_text() == tunables.render_markdown()


def test_the_debugfs_files_are_the_modules() -> None:
    src = _c()
    m = re.search(r"sio_queue_debugfs_attrs\[\] = \{(.*?)\n\};", src, re.S)
    assert m, "sio_queue_debugfs_attrs not found"
    body = m.group(1)
    names = re.findall(r'\{"(\w+)",', body) + [f"{n}_fifo_list" for n in re.findall(r"SIO_FIFO_ATTR\((\w+)\)", body)]
    assert list(debugfs.FILES) == names
    phases = re.search(r"sio_phase_names\[\] = \{([^}]*)\}", src)
    assert phases and tuple(re.findall(r'"(\w+)"', phases.group(1))) == debugfs.PHASES
    assert f"#define SIO_NR_QLOG\t\t{debugfs.QASIO_LOG_SIZE}\n" in src


STATS = """\
rt_read inserted=0 merged=0 dispatched=0 completed=0 boosted=0
be_write inserted=12 merged=2 dispatched=10 completed=10 boosted=3
total inserted=812 merged=40 dispatched=772 completed=772
anticipation holds=5 hits=2 expired=1 lower_class_reads=0
qasio_sync detected=30 found_queued=20 found_dispatched=6 not_found=3 pending=1 boosted=21
qasio_discard async_inserted=0
depth nr_requests=64 async=48 sync_write=60
"""


def test_stats_are_parsed_once_for_every_reader(tmp_path: Path) -> None:
    rows = debugfs.parse_stats(STATS + "\nweird x=y n=-1\n")
    assert rows["be_write"] == {"inserted": 12, "merged": 2, "dispatched": 10, "completed": 10, "boosted": 3}
    assert rows["weird"] == {"n": -1}
    flat = debugfs.flat_counters(STATS)
    assert flat["anticipation.expired"] == 1 and flat["depth.async"] == 48
    assert debugfs.qasio_counters(STATS) == {
        "sync": {"detected": 30, "found_queued": 20, "found_dispatched": 6, "not_found": 3, "pending": 1,
                 "boosted": 21},
        "discard": {"async_inserted": 0}}
    sched = tmp_path / "vda" / "sched"
    sched.mkdir(parents=True)
    (sched / "stats").write_text(STATS)
    (sched / "phase").write_text("anticipate\n")
    assert debugfs.read_stats("vda", root=tmp_path) == debugfs.parse_stats(STATS)
    assert debugfs.parse_phase(debugfs.read_file("vda", "phase", root=tmp_path)) == "anticipate"
    assert debugfs.read_files("vda", ("phase", "kprobes"), root=tmp_path) == {"phase": "anticipate"}
    with pytest.raises(OSError):
        debugfs.read_qasio_log("vda", root=tmp_path)


def test_a_block_devices_stat_is_read_by_name(tmp_path: Path) -> None:
    (tmp_path / "vda").mkdir()
    fields = list(range(1, 18))
    (tmp_path / "vda" / "stat").write_text("    " + "  ".join(map(str, fields)) + "\n")
    st = diskstat.read_disk_stat("vda", root=tmp_path)
    assert (st.read_ios, st.read_sectors, st.write_sectors, st.flush_ticks) == (1, 3, 7, 17)
    old = diskstat.parse_disk_stat(" ".join(map(str, fields[:11])))      # before Linux 4.18: no discard fields
    assert old.time_in_queue == 11 and old.discard_ios == 0
    with pytest.raises(ValueError):
        diskstat.parse_disk_stat("1 2 3")


"""`smartio compare launch`: application start-up per scheduler in the testbed (issue 14, item 4).

One VM session on the emulated flash device (s5-emmc by default). The guest makes an ext4 filesystem on /dev/vda
(noatime, as Android mounts it), records each application of the plan under strace (its programs are the host's,
seen through the testbed's shared filesystem), installs each onto the emulated disk (`Installed`: a real launch
reads only the emulated disk) and lays its trace out beside it (`Layout`: the replay), once. Then for every
scheduler (switched as `compare.guest` does: from `none`, nr_requests raised, tunables written) and every cell
(application × cache × background × real/replay) it times `repeats` launches with `launch.measure`, a real cell and
its replay cell together with their launches in turn (`measure_interleaved`), and writes each cell's document to
OUT/runs/. The host gathers them into compare.json and a table; the headline is the cold launch beside
a sequential writer over the cold launch on the idle device, per scheduler.

    python -m smartio.launch.compare PLAN_JSON OUT_DIR        (in the guest)

    plan.py             the plan (LaunchPlan) and the names of cells and files
    guest.py            the guest's side: record, install, lay out, then time every cell (also __main__.py)
    stats.py            a cell's launch times; over idle, over none, one scheduler over another, with 95 % intervals
    disturbance.py      launches other work on the host disturbed, and the document without them
    targets.py          issue 14's targets in one run and pooled over runs; bench/launch's headline line
    replay_fidelity.py  replay against real per application, cache and background
    rules.py            smartio's rule counters per launch
    table.py            the text report (render)
    figure.py           launch.png (plot)
    host.py             the host's run (run_launch_compare), assemble, `compare resume`, the document as it stands
"""

from __future__ import annotations

from smartio.launch.compare.disturbance import (
    PER_LAUNCH_STATS,
    disturbance_lines,
    disturbed,
    host_during,
    without_disturbed,
)
from smartio.launch.compare.figure import HEADLINE_TARGET, PLOT_FILE, plot
from smartio.launch.compare.guest import (
    DEVICE,
    INSTALLED_REFILLED_RUNS,
    INSTALLED_WARM_RUNS,
    MOUNT,
    RESIDENCY_INSTALLED,
    SPELL_ROUNDS,
    SPELL_TOLERANCE,
    SPELL_WAIT_S,
    guest_main,
    refilled_launch,
    settled_warm,
    warm_median,
)
from smartio.launch.compare.host import (
    assemble,
    current_document,
    resumed_boot,
    resumed_kernel,
    resumed_plan,
    run_launch_compare,
)
from smartio.launch.compare.plan import (
    APPS,
    BACKGROUND_HEAD_S,
    BACKGROUND_STARTS,
    BACKGROUNDS,
    CACHES,
    DEFAULT_SCHEDULERS,
    DISK_SIZE,
    GUEST_FILE,
    HEADLINE_BG,
    HEADLINE_BGS,
    HEADLINE_CACHE,
    HEADLINE_MODE,
    MODES,
    RUNS_DIR,
    START_FILE,
    TRACES_DIR,
    LaunchPlan,
    cell_id,
    headline_key,
    is_headline_cell,
    read_json,
    run_file,
)
from smartio.launch.compare.replay_fidelity import REPLAY_TOLERANCE, fidelity, fidelity_lines
from smartio.launch.compare.rules import RULES, parse_stats, rule_counts, rule_lines
from smartio.launch.compare.stats import (
    Measure,
    gmean,
    headline_groups,
    launch_values,
    over_idle,
    over_none,
    over_none_groups,
    versus,
)
from smartio.launch.compare.table import MISSING_NAMED, background_lines, missing_lines, render
from smartio.launch.compare.targets import (
    MAX_OVER_IDLE,
    MIN_FASTER_THAN_NONE,
    STOCK,
    headline_cells,
    headline_line,
    interval_lines,
    mixes_sessions,
    off_cpu_lines,
    pool_lines,
    target_lines,
)

__all__ = [
    "APPS",
    "BACKGROUNDS",
    "BACKGROUND_HEAD_S",
    "BACKGROUND_STARTS",
    "CACHES",
    "DEFAULT_SCHEDULERS",
    "DEVICE",
    "DISK_SIZE",
    "GUEST_FILE",
    "HEADLINE_BG",
    "HEADLINE_BGS",
    "HEADLINE_CACHE",
    "HEADLINE_MODE",
    "HEADLINE_TARGET",
    "INSTALLED_REFILLED_RUNS",
    "INSTALLED_WARM_RUNS",
    "LaunchPlan",
    "MAX_OVER_IDLE",
    "MIN_FASTER_THAN_NONE",
    "MISSING_NAMED",
    "MODES",
    "MOUNT",
    "Measure",
    "PER_LAUNCH_STATS",
    "PLOT_FILE",
    "REPLAY_TOLERANCE",
    "RESIDENCY_INSTALLED",
    "RULES",
    "RUNS_DIR",
    "SPELL_ROUNDS",
    "SPELL_TOLERANCE",
    "SPELL_WAIT_S",
    "START_FILE",
    "STOCK",
    "TRACES_DIR",
    "assemble",
    "background_lines",
    "cell_id",
    "current_document",
    "disturbance_lines",
    "disturbed",
    "fidelity",
    "fidelity_lines",
    "gmean",
    "guest_main",
    "headline_cells",
    "headline_groups",
    "headline_key",
    "headline_line",
    "host_during",
    "interval_lines",
    "is_headline_cell",
    "launch_values",
    "missing_lines",
    "mixes_sessions",
    "off_cpu_lines",
    "over_idle",
    "over_none",
    "over_none_groups",
    "parse_stats",
    "plot",
    "pool_lines",
    "read_json",
    "refilled_launch",
    "render",
    "resumed_boot",
    "resumed_kernel",
    "resumed_plan",
    "rule_counts",
    "rule_lines",
    "run_file",
    "run_launch_compare",
    "settled_warm",
    "target_lines",
    "versus",
    "warm_median",
    "without_disturbed",
]

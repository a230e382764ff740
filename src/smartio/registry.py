"""What an experiment is, declared once, and the one registry of them.

An experiment runs in place on this machine (`smartio bench NAME`), under each scheduler in the testbed
(`smartio compare NAME`), or both. Its declaration names where each side's code lives: the document renderer of a
bench run, the comparison's plan type, guest entry (`python -m MODULE PLAN_JSON OUT` in the VM), host runner,
renderer and plot, and how a comparison's directory is read back (`smartio compare analyze DIR`). The CLI, `smartio
results show` and the bench scripts iterate this registry; nothing else keeps a table of experiments.

References are "module:attribute" strings resolved on use, so that `smartio --help` does not import numpy, scipy and
every experiment's code.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smartio.errors import UsageError

DOCUMENT = "compare.json"       # a comparison's document in its output directory (compare.run.DOCUMENT)


def resolve(ref: str) -> Any:
    """The object a "module:attribute" reference names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """An experiment's comparison side: one VM session, the experiment under each scheduler of a plan."""

    plan: str               # the plan's frozen dataclass (travels to the guest as JSON)
    guest: str              # the module the guest runs: `python -m GUEST PLAN_JSON OUT`
    run: str                # the host runner: run(plan, profile=..., out=..., ...) -> (document, out dir)
    render: str             # render(document) -> the tables as text
    plot: str | None        # plot(document, out dir) -> [PNG paths], drawn beside compare.json
    analyze: str | None = None   # analyze(dir) -> (document, note): a directory read back, also a run still going
    notes: str | None = None     # notes(dir, document) -> extra lines of `compare analyze` (counters and the like)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment: its name (the subcommand and the documents' "experiment"), what it measures, and its sides."""

    name: str
    summary: str
    bench: str | None = None           # render(document) of a `smartio bench NAME` run
    compare: Comparison | None = None
    # Document "experiment" values that are this experiment's (StoreBench's `all` holds the four patterns' runs).
    aliases: tuple[str, ...] = ()

    def bench_renderer(self) -> Callable[[dict[str, Any]], str]:
        if self.bench is None:
            raise UsageError("experiment", self.name, "has no `smartio bench` side")
        return resolve(self.bench)

    def compare_renderer(self) -> Callable[[dict[str, Any]], str]:
        if self.compare is None:
            raise UsageError("experiment", self.name, "has no `smartio compare` side")
        return resolve(self.compare.render)


def launch_plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """The launch comparison's one figure (launch.png), in the shape every comparison's plot takes."""
    from smartio.launch import compare as la

    return [la.plot(doc, out_dir / la.PLOT_FILE)]


_STOREBENCH_COMPARE = Comparison(
    plan="smartio.storebench.compare:Plan", guest="smartio.storebench.compare",
    run="smartio.storebench.compare:run_compare", render="smartio.storebench.compare_report:render",
    plot="smartio.storebench.compare_report:write_plots")
_TABLES = "smartio.report.tables:render"

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("latency", "StoreBench: each pattern's latency alone (seed 000, Figure 4)", bench=_TABLES),
    Experiment("slowdown", "StoreBench: readers beside writers, read and write slowdown (Figure 11)", bench=_TABLES,
               compare=_STOREBENCH_COMPARE),
    Experiment("concurrency", "StoreBench: speedup of N concurrent streams, the Concurrency Profiler's parameters",
               bench=_TABLES),
    Experiment("mixed", "StoreBench: a mixed read/write workload's response time per read share (Figure 12)",
               bench=_TABLES, compare=_STOREBENCH_COMPARE),
    Experiment("all", "StoreBench: latency, slowdown, concurrency and mixed in one run", bench=_TABLES),
    # A comparison of both names itself by its experiments, "slowdown+mixed" (compare.run.stored_row).
    Experiment("both", "slowdown and mixed under each scheduler in one VM session", compare=_STOREBENCH_COMPARE,
               aliases=("slowdown+mixed",)),
    Experiment("qasio", "seed 001's microbenchmarks M1-M5 beside a background buffered writer (QASIO's Table 2)",
               bench="smartio.qasio.report:render_bench",
               compare=Comparison(plan="smartio.qasio.compare:QasioPlan", guest="smartio.qasio.compare",
                                  run="smartio.qasio.compare:run_qasio_compare",
                                  render="smartio.qasio.report:render_compare", plot=None)),
    Experiment("sqlite", "SQLite transactions/s per journal mode and sync call (seed 002's Table 2 and Figure 4)",
               bench="smartio.sqlite.report:render",
               compare=Comparison(plan="smartio.sqlite.compare:SqlitePlan", guest="smartio.sqlite.compare",
                                  run="smartio.sqlite.compare:run_sqlite_compare",
                                  render="smartio.sqlite.compare_report:render", plot=None)),
    Experiment("mobigen", "a Mobigen script replayed per filesystem, optimisation and scheduler beside a writer "
                          "(seed 002's Figure 10)",
               compare=Comparison(plan="smartio.launch.mobigen_compare:MobigenPlan",
                                  guest="smartio.launch.mobigen_compare",
                                  run="smartio.launch.mobigen_compare:run_mobigen_compare",
                                  render="smartio.launch.mobigen_compare:render",
                                  plot="smartio.launch.mobigen_compare:plot")),
    Experiment("launch", "application start-up, real or replayed, cold or warm, idle or beside background writes",
               bench="smartio.launch.report:render",
               compare=Comparison(plan="smartio.launch.compare:LaunchPlan", guest="smartio.launch.compare",
                                  run="smartio.launch.compare:run_launch_compare",
                                  render="smartio.launch.compare:render", plot="smartio.registry:launch_plots",
                                  analyze="smartio.launch.compare:current_document",
                                  notes="smartio.launch.compare:rule_lines")),
)
BY_NAME = {e.name: e for e in EXPERIMENTS}


BENCH = tuple(e.name for e in EXPERIMENTS if e.bench)
COMPARE = tuple(e.name for e in EXPERIMENTS if e.compare)
STOREBENCH = tuple(e.name for e in EXPERIMENTS if e.bench == _TABLES)     # StoreBench's, one parser


def get(name: str, flag: str = "experiment") -> Experiment:
    try:
        return BY_NAME[name]
    except KeyError:
        raise UsageError(flag, name, f"unknown experiment; known: {', '.join(BY_NAME)}") from None


def of_document(doc: dict[str, Any]) -> Experiment | None:
    """The experiment a stored document is a run of: `smartio compare`'s (kind compare; StoreBench's name its
    experiments) or `smartio bench`'s."""
    name = doc.get("experiment")
    if doc.get("kind") == "compare" and name is None:
        exps = tuple(doc.get("experiments") or ())
        name = "both" if len(exps) > 1 else (exps[0] if exps else "slowdown")
    for e in EXPERIMENTS:
        if name == e.name or name in e.aliases:
            return e
    return None


def renderer(doc: dict[str, Any]) -> Callable[[dict[str, Any]], str]:
    """The tables of a stored document, whichever command made it."""
    e = of_document(doc)
    if e is None:
        name = doc.get("experiment")
        return lambda _doc: f"(no table for experiment {name!r}; see --json)"
    if doc.get("kind") == "compare":
        return e.compare_renderer()
    return e.bench_renderer()


def read_comparison(out_dir: Path) -> tuple[dict[str, Any], Experiment, str | None]:
    """A comparison's directory read back: its document (for a launch comparison still going, assembled from its cell
    files), its experiment, and a note on how it was read (or None)."""
    if not out_dir.is_dir():
        raise UsageError("DIR", out_dir, "is not a directory (give the --out of a comparison)")
    path = out_dir / DOCUMENT
    doc: dict[str, Any] | None = None
    if path.exists():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise UsageError("DIR", out_dir, f"{DOCUMENT} is not readable: {e}") from e
    exp = of_document(doc) if doc is not None else None
    if exp is None:
        # a launch comparison whose first session has not written compare.json yet
        exp = BY_NAME["launch"] if (out_dir / "launch-run.json").exists() else None
    if exp is None or exp.compare is None:
        raise UsageError("DIR", out_dir, f"holds no comparison ({DOCUMENT} of `smartio compare`)")
    if exp.compare.analyze:
        doc, note = resolve(exp.compare.analyze)(out_dir)
        return doc, exp, note
    assert doc is not None
    return doc, exp, None


def analysis(out_dir: Path, doc: dict[str, Any], exp: Experiment) -> list[str]:
    """What `smartio compare analyze DIR` prints (and the bench scripts' --analyze before their targets): the
    experiment's tables, then its notes on the run (the scheduler counters behind a launch comparison's figures)."""
    lines = [exp.compare_renderer()(doc)]
    if exp.compare is not None and exp.compare.notes:
        lines += resolve(exp.compare.notes)(out_dir, doc)
    return lines

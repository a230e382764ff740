"""StoreBench's side of `smartio compare`: Figure 11 (slowdown) and Figure 12 (mixed) under each scheduler.

The host side (`run_compare`) boots the testbed once and runs `python -m smartio.storebench.compare PLAN_JSON OUT`
in the guest; there `main` runs the schedulers' repeats in rounds, one repeat of each scheduler per round, in the
plan's order and then reversed (so that a drift of the host or the device over the run falls on every scheduler
alike, and none always follows the same one). For each, it switches the device (compare.guest.switch, a fresh
instance of the scheduler) and runs one repeat of the StoreBench experiment in this process, whose output streams
to the console (under TCG a fresh Python process spends about 12 s importing numpy and 40-65 s importing
scipy.stats, so one process for all runs saves that per run); it restores the device at the end, also on failure
or Ctrl-C. Each repeat's bench document lands in OUT/runs/, and after each `merge_runs` takes the scheduler's
repeats so far together into the document one run of all of them would have given; OUT/guest.json records the
device's state before, during and after every run, and is rewritten after each run so a crash loses nothing
already measured. `assemble` builds one document from what the guest left (pure: tests feed it recorded files):

    doc = run_compare(Plan(parse_schedulers("none,smartio")), profile="s5-emmc", out=Path("cmp"))
    doc["results"]["smartio"]["read_slowdown"]["seq"]
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any, Literal

from smartio.blockdev import Device, device_of_node, read_tunables, write_tunables
from smartio.compare.guest import (
    GUEST_FILE,
    device_state,
    restore,
    say,
    scheduler_counters,
    switch,
    warm_up,
)
from smartio.compare.run import (
    module_for,
    provenance,
    restored,
    run_in_guest,
    vm_profile,
)
from smartio.compare.spec import DEFAULT_NR_REQUESTS, RUNS_DIR, JsonPlan, SchedulerSpec
from smartio.errors import SmartioError, UsageError
from smartio.results import stored_line
from smartio.storebench.bench import PACING_TUNABLES, TUNABLE, Outputs, execute, profile as profile_run
from smartio.storebench.options import Settings, parse_mixes
from smartio.testbed import vm
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.kernelrelease import DEFAULT_KERNEL
from smartio.units import parse_size

EXPERIMENTS = ("slowdown", "mixed", "both")


STREAMS = (1, 2, 4, 8)


# Sizes per stream and repeats when none are given. `smartio bench`'s own defaults (the paper's 128 MiB per stream)
# would take hours in a TCG guest where every emulated I/O costs milliseconds; these keep a five-scheduler
# comparison near 10 minutes (--quick: about 3) on s5-emmc.
VM_SIZES = {"slowdown": ("512K", "128K"), "mixed": ("1M", "256K")}   # (default, --quick)


VM_REPEATS = (3, 1)


@dataclasses.dataclass(frozen=True)
class Plan(JsonPlan):
    """Everything the guest needs to run the comparison; `smartio bench` options are passed through."""

    schedulers: tuple[SchedulerSpec, ...]
    experiment: str = "slowdown"
    streams: int = 1
    quick: bool = False
    repeats: int | None = None
    size: str | None = None
    mixes: str | None = None
    mixed_size: str | None = None       # the mixed workload's size when it differs from --size (bench scripts)
    mixed_repeats: int | None = None    # the mixed workload's repeats when they differ from --repeats (bench scripts)
    nr_requests: int = DEFAULT_NR_REQUESTS
    device: str = "/dev/vda"

    def __post_init__(self) -> None:
        if self.experiment not in EXPERIMENTS:
            raise UsageError("EXPERIMENT", self.experiment, f"choose one of {', '.join(EXPERIMENTS)}")
        if self.streams not in STREAMS:
            raise UsageError("--streams", self.streams, f"choose one of {', '.join(map(str, STREAMS))}")
        for flag, n in (("--repeats", self.repeats), ("--repeats-mixed", self.mixed_repeats)):
            if n is not None and n < 1:
                raise UsageError(flag, n, "must be at least 1")
        for size in (self.size, self.mixed_size):
            if size is not None and parse_size("--size", size) % 4096:
                raise UsageError("--size", size, "must be a multiple of 4 KiB (the request size)")
        if self.mixes is not None:
            parse_mixes(self.mixes)      # the guest's `smartio bench` would refuse it only after booting
        if not 1 <= self.nr_requests <= 4096:
            raise UsageError("--nr-requests", self.nr_requests, "must be between 1 and 4096")

    @property
    def experiments(self) -> tuple[str, ...]:
        return ("slowdown", "mixed") if self.experiment == "both" else (self.experiment,)

    def bench_args(self, experiment: str, repeats: int | None = None) -> list[str]:
        """`smartio bench` arguments (after the experiment name) shared by every scheduler's run; `repeats`: other
        than the plan's."""
        args = ["--target", self.device, "--destroy-data"]
        if experiment == "slowdown":
            args += ["--streams", str(self.streams)]
        args += ["--repeats", str(repeats or self.repeats_for(experiment)), "--size", self.size_for(experiment)]
        if self.mixes is not None and experiment == "mixed":
            args += ["--mixes", self.mixes]
        return args

    def bench_settings(self, experiment: str, repeats: int | None = None) -> Settings:
        """The typed settings of `smartio bench EXPERIMENT bench_args(EXPERIMENT, repeats)`."""
        extra: dict[str, Any] = {"streams": self.streams} if experiment == "slowdown" else {}
        if self.mixes is not None and experiment == "mixed":
            extra["mixes"] = parse_mixes(self.mixes)
        return Settings(repeats=repeats or self.repeats_for(experiment),
                        size=parse_size("--size", self.size_for(experiment)), **extra)

    def repeats_for(self, experiment: str) -> int:
        """The plan's repeats of `experiment`: the mixed workload's own if given, else --repeats or its default."""
        return self.mixed_repeats if experiment == "mixed" and self.mixed_repeats is not None else self.repeats_used

    @property
    def repeats_used(self) -> int:
        return self.repeats if self.repeats is not None else VM_REPEATS[self.quick]

    def size_for(self, experiment: str) -> str:
        if experiment == "mixed" and self.mixed_size is not None:
            return self.mixed_size
        return self.size if self.size is not None else VM_SIZES[experiment][self.quick]


MIN_DISK = 256 << 20


def disk_size(plan: Plan) -> int:
    """A disk that holds every stream's region of the largest experiment, with room to spare."""
    need = 0
    for exp in plan.experiments:
        size = parse_size("--size", plan.size_for(exp))
        need = max(need, size * (2 * plan.streams if exp == "slowdown" else 1))
    if any(s.profiled for s in plan.schedulers):    # the profiler's 4 streams at the slowdown size (guest.profile)
        need = max(need, 4 * parse_size("--size", plan.size_for("slowdown")))
    size = max(MIN_DISK, 2 * need)
    return -(-size // (1 << 20)) * (1 << 20)


def summary(bench_doc: dict[str, Any]) -> dict[str, Any]:
    """The figures a comparison shows for one scheduler, from its bench document."""
    r = bench_doc["results"]
    if bench_doc["experiment"] == "slowdown":
        return {"read_slowdown": r["read_slowdown"], "write_slowdown": r["write_slowdown"],
                "efficiency": {m: d["efficiency"]["mean"] for m, d in r["detail"].items()}}
    return {"response_s": r["response_s"]}


def assemble(plan: Plan, guest_out: Path, *, profile: Any, command: str, started: str,
             vm_result: vm.VmResult | None) -> dict[str, Any]:
    """One document from what the guest left in its out dir (pure: tests feed it recorded files)."""
    gfile = guest_out / GUEST_FILE
    record = json.loads(gfile.read_text()) if gfile.exists() else None
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, dict[str, Any]] = {}
    missing = []
    for spec in plan.schedulers:
        for exp in plan.experiments:
            f = guest_out / run_file(spec.label, exp)
            if not f.exists():
                missing.append(f"{exp} under {spec.label}")
                continue
            d = json.loads(f.read_text())
            planned, ran = plan.repeats_for(exp), d["settings"]["repeats"]
            if ran < planned:       # interrupted, or a repeat failed: the tables must not hide the difference
                missing.append(f"{exp} under {spec.label}: {ran} of {planned} repeats")
            runs.setdefault(spec.label, {})[exp] = d
            results.setdefault(spec.label, {}).update(summary(d))
    first = next((d for r in runs.values() for d in r.values()), None)
    return {
        **provenance(None, json.loads(plan.to_json()), profile=profile, command=command, started=started,
                     vm_result=vm_result, known={k: (first or {}).get(k) for k in ("kernel", "fio_version")}),
        "experiments": list(plan.experiments),
        "schedulers": [s.label for s in plan.schedulers],
        "settings": first["settings"] if first else None,
        "device": {"path": plan.device, "before": record and record["before"], "after": record and record["after"],
                   "restored": restored(record), "per_run": record and record["runs"]},
        # smartio:profile's tunables, from the Concurrency Profiler run in the guest (guest.PROFILE_FILE)
        "profiled": (record or {}).get("profile"),
        "missing": missing,
        "results": results,
        "runs": runs,
    }


def run_compare(plan: Plan, *, profile: str, out: Path | None = None, timeout: float = 3600.0,
                command: str = "smartio compare",
                stream: IO[bytes] | None | Literal["stdout"] = "stdout",
                db: str | Path | None = None, boot: Boot = DEFAULT_BOOT,
                kernel: str = DEFAULT_KERNEL) -> tuple[dict, Path]:
    """Boot `kernel` once, compare the schedulers of `plan` on the emulated `profile` device; returns (document, out
    dir). The document is also stored in the results database `db` (keep())."""
    prof = vm_profile(profile, timeout)
    modules = module_for((s.name for s in plan.schedulers), kernel)

    def plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
        from smartio.storebench.compare_report import write_plots

        return write_plots(doc, out_dir) if doc["results"] else []

    doc, out_dir = run_in_guest("smartio.storebench.compare", plan.to_json(),
                                lambda guest_out, result, started: assemble(plan, guest_out, profile=prof,
                                                                            command=command, started=started,
                                                                            vm_result=result),
                                profile=prof, out=out, timeout=timeout, stream=stream, db=db, boot=boot, plots=plots,
                                disks=1, disk_size=disk_size(plan), modules=modules, kernel=kernel)
    if doc["device"]["restored"] is not True:
        raise SmartioError(f"{plan.device} was not restored: before {doc['device']['before']}, "
                           f"after {doc['device']['after']}")
    return doc, out_dir


def run_file(label: str, experiment: str) -> str:
    """Where one bench document goes, relative to the out dir; labels may hold ':' and '=', fine in a name."""
    return f"{RUNS_DIR}/{label}.{experiment}.json"


def bench(experiment: str, settings: Settings, out: Outputs, args: list[str]) -> int:
    """One StoreBench run in this process, printed as `smartio bench ARGS` prints it; its exit code, as that command
    would have exited (a bug is reported as a crashed child would be, and the comparison goes on with the rest)."""
    from smartio.report import tables

    try:
        doc, _ = execute(experiment, settings, out, command=shlex.join(["smartio", *args]))
        print(tables.render(doc))
        print(stored_line(doc))
        return 0
    except SmartioError as e:
        print(f"smartio: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()


PROFILE_FILE = f"{RUNS_DIR}/profile.json"


def repeat_file(label: str, experiment: str, repeat: int) -> str:
    return f"{RUNS_DIR}/{label}.{experiment}.{repeat}.json"


def rounds(plan: Plan) -> list[tuple[int, SchedulerSpec, str]]:
    """(repeat, scheduler, experiment) in the order they run: round n holds every scheduler's repeat n (of each
    experiment that has that many), in the plan's order in rounds 1, 3, ... and reversed in rounds 2, 4, ..."""
    steps = []
    for n in range(1, max(plan.repeats_for(exp) for exp in plan.experiments) + 1):
        order = plan.schedulers if n % 2 else tuple(reversed(plan.schedulers))
        steps += [(n, spec, exp) for spec in order for exp in plan.experiments if n <= plan.repeats_for(exp)]
    return steps


def merge_runs(docs: list[dict[str, Any]], files: list[str], command: str) -> dict[str, Any]:
    """Bench documents of one experiment and scheduler, one repeat each, as one document of all their repeats: its
    results as the experiment computes them from all the samples (REGISTRY[...].merge); `command`: the `smartio
    bench` command of one run of them all."""
    from smartio.storebench import REGISTRY

    first = docs[0]
    return {**{k: v for k, v in first.items() if k not in ("fio_raw", "id")},     # id: the first repeat's, in its store
            "command": command, "finished": docs[-1]["finished"],
            "settings": {**first["settings"], "repeats": sum(d["settings"]["repeats"] for d in docs)},
            "results": REGISTRY[first["experiment"]].merge([d["results"] for d in docs]),
            "repeat_files": files,
            "fio_raw": [x for d in docs for x in d.get("fio_raw", [])]}


def profile(dev: Device, plan: Plan, out: Path) -> dict[str, int]:
    """`smartio profile --apply` on the device (under smartio): the Concurrency Profiler's dispatch limits and the
    write pacing derived from the same run (alone latencies, write speedup), at the comparison's size; returns the
    tunables it wrote, so later smartio:profile runs get the same ones without measuring again."""
    args = ["--target", plan.device, "--destroy-data", "--apply", "--levels", "1,2,4", "--repeats", "2",
            "--size", plan.size_for("slowdown"), "--json", str(out / PROFILE_FILE)]
    say("Concurrency Profiler for smartio:profile: `smartio profile " + " ".join(args) + "`")
    settings = Settings(repeats=2, size=parse_size("--size", plan.size_for("slowdown")), levels=(1, 2, 4), mixes=(10,),
                        iodepth=1)
    try:
        found = profile_run(settings, Outputs(target=plan.device, destroy_data=True, json=str(out / PROFILE_FILE)),
                            apply=True, command=shlex.join(["smartio", "profile", *args]))
    except SmartioError as e:
        raise SmartioError(f"`smartio profile --apply` failed: {e}") from e
    print("\n".join(found.lines()), flush=True)
    names = (*TUNABLE.values(), *PACING_TUNABLES)
    return {k: int(v) for k, v in read_tunables(dev).items() if k in names}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m smartio.storebench.compare PLAN_JSON OUT_DIR", file=sys.stderr)
        return 2
    plan = Plan.from_json(argv[0])
    out = Path(argv[1])
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    dev = device_of_node(plan.device)
    record: dict[str, Any] = {"device": plan.device, "before": device_state(dev), "runs": [], "after": None}

    def save() -> None:
        (out / GUEST_FILE).write_text(json.dumps(record, indent=2) + "\n")

    save()
    warm_up(plan.device)
    steps = rounds(plan)
    failed = 0
    profiled: dict[str, int] | None = None
    done: dict[tuple[str, str], list[str]] = {}
    try:
        for i, (repeat, spec, exp) in enumerate(steps, 1):
            repeats = plan.repeats_for(exp)
            say(f"[{i}/{len(steps)}] {exp} under {spec.label}, repeat {repeat}/{repeats}")
            if spec.profiled and profiled is None:
                switch(dev, SchedulerSpec(spec.name), plan.nr_requests)   # measured at the scheduler's defaults
                profiled = profile(dev, plan, out)
                record["profile"] = {"file": PROFILE_FILE, "tunables": profiled}
                save()
            switch(dev, spec, plan.nr_requests)
            if spec.profiled and profiled is not None:
                write_tunables(dev, {**profiled, **dict(spec.tunables)})
            state = device_state(dev)
            say(f"{dev.disk}: scheduler {state['scheduler']}, nr_requests {state['nr_requests']}"
                + "".join(f", {k}={v}" for k, v in state["tunables"].items()))
            name = repeat_file(spec.label, exp, repeat)
            args = [exp, *plan.bench_args(exp, repeats=1), "--json", str(out / name)]
            cmd = ["smartio", "bench", *args]
            started = time.monotonic()
            rc = bench(exp, plan.bench_settings(exp, repeats=1),
                       Outputs(target=plan.device, destroy_data=True, json=str(out / name)), ["bench", *args])
            run = {"scheduler": spec.label, "experiment": exp, "repeat": repeat, "file": name, "rc": rc, "state": state,
                   "duration_s": round(time.monotonic() - started, 1), "command": cmd,
                   "counters": scheduler_counters(dev)}
            record["runs"].append(run)
            save()
            if rc != 0:
                failed += 1
                say(f"`smartio bench {exp}` under {spec.label} failed with exit code {rc}; going on with the rest")
            else:
                # The scheduler's repeats so far as one document, so an interrupted comparison keeps them; a failed
                # repeat is left out (and the comparison fails).
                files = done.setdefault((spec.label, exp), [])
                files.append(name)
                try:
                    doc = merge_runs([json.loads((out / f).read_text()) for f in files], files,
                                     shlex.join(["smartio", "bench", exp, *plan.bench_args(exp)]))
                    (out / run_file(spec.label, exp)).write_text(json.dumps(doc, indent=2) + "\n")
                except Exception:       # a bug: reported as a failed run, and the comparison goes on
                    traceback.print_exc()
                    failed += 1
                say(f"{exp} under {spec.label} done in {run['duration_s']:.0f} s (repeat {repeat}/{repeats})")
    finally:
        restore(dev, record["before"])
        record["after"] = device_state(dev)
        save()
    return 1 if failed else 0


if __name__ == "__main__":
    from smartio.compare.run import guest_entry

    guest_entry(main)

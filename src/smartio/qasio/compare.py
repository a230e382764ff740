"""`smartio compare qasio`: seed 001's Table 2 and Figure 8 in the testbed, per scheduler.

One VM session on the emulated flash device (s5-emmc, at time scale 10 by default: docs/design/testbed.md, Time
scale), one disk. For every run of the plan the guest switches /dev/vda to the scheduler (nr_requests raised as for
the other experiments), makes ext4 afresh (no discard at mkfs, lazy init off the disk's back: noinit_itable) and
mounts it ordered with the discard option, then runs `smartio bench qasio` (smartio.qasio.run) in this one
process: under smartio with `--dependency` set to the run's dependency type, so `smartio:none` is the paper's NONE
(boosting off), `smartio:all` its ALL, and `smartio:meta|data|sync|discard` Figure 8's single types; mq-deadline,
kyber and bfq as they come. The host gathers the documents into compare.json.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Literal

from smartio.compare.spec import RUNS_DIR, JsonPlan, SchedulerSpec, with_clock
from smartio.errors import SmartioError, UsageError
from smartio.qasio.workload import BENCHMARKS, DEFAULT_SCALE, DEPENDENCIES, Params
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.kernelrelease import DEFAULT_KERNEL

OTHERS = ("none", "mq-deadline", "kyber", "bfq")
DEFAULT_RUNS = ("smartio:none", "smartio:all", "smartio:meta", "smartio:data", "smartio:sync", "smartio:discard",
                "mq-deadline", "kyber", "bfq")
DISK = "/dev/vda"
MOUNT = "/mnt/smartio-qasio"
DEFAULT_COUNT_SCALE = 0.01     # M1 5 iterations, M2 2, M4 5: 90-130 s per run on s5-emmc
GUEST_FILE = "qasio-guest.json"


def split_run(label: str) -> tuple[SchedulerSpec, str | None]:
    """A run's scheduler (with the tunables to write after switching) and, for smartio, its dependency setting:
    `smartio:all`, `smartio:none:async_depth=96`, `kyber`, `mq-deadline:async_depth=8`."""
    name, *parts = label.strip().split(":")
    dep = None
    if name == "smartio" and parts and parts[0] in DEPENDENCIES:
        dep, parts = parts[0], parts[1:]
    elif name not in OTHERS:
        raise UsageError("--schedulers", label, "for `compare qasio` name smartio:DEPENDENCY[:TUNABLE=N...] "
                         f"(DEPENDENCY: {', '.join(DEPENDENCIES)}) or one of {', '.join(OTHERS)}[:TUNABLE=N...], e.g. "
                         f"{','.join(DEFAULT_RUNS)}")
    spec = SchedulerSpec.parse(":".join([name, *parts]), "--schedulers")
    if spec.profiled:
        raise UsageError("--schedulers", label, "the Concurrency Profiler's parameters are not for `compare qasio`")
    return spec, dep


def parse_runs(text: str) -> tuple[str, ...]:
    runs = tuple(x.strip() for x in text.split(",") if x.strip())
    for r in runs:
        split_run(r)
    if not runs or len(set(runs)) != len(runs):
        raise UsageError("--schedulers", text, "name each run once, e.g. smartio:none,smartio:all")
    return runs


@dataclasses.dataclass(frozen=True)
class QasioPlan(JsonPlan):
    runs: tuple[str, ...] = DEFAULT_RUNS
    benchmarks: tuple[str, ...] = BENCHMARKS
    scale: float = DEFAULT_SCALE
    count_scale: float = DEFAULT_COUNT_SCALE
    repeats: int = 1
    nr_requests: int = 128
    clock_scale: float | None = None     # schedulers' time tunables times this; None: the profile's time scale

    def __post_init__(self) -> None:
        Params(self.scale, self.count_scale)
        if not 1 <= self.repeats <= 100:
            raise UsageError("--repeats", self.repeats, "must be between 1 and 100")

    def settings(self, dependency: str | None) -> Any:
        from smartio.qasio.run import QasioSettings

        return QasioSettings(benchmarks=self.benchmarks, dependency=dependency, scale=self.scale,
                        count_scale=self.count_scale, repeats=self.repeats)



def run_file(label: str) -> str:
    return f"{RUNS_DIR}/{label}.json"


# --- guest -----------------------------------------------------------------------------------------------------

def _sh(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SmartioError(f"{' '.join(cmd)} failed ({res.returncode}): {(res.stderr or res.stdout).strip()[:300]}")


def guest_main(argv: list[str]) -> int:
    import os

    from smartio.blockdev import device_of_node
    from smartio.compare.guest import device_state, restore, switch, warm_up
    from smartio.qasio.run import run_qasio

    plan = QasioPlan.from_json(argv[0])
    out = Path(argv[1])
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    dev = device_of_node(DISK)
    record: dict[str, Any] = {"runs": [], "kernel": os.uname().release, "before": device_state(dev), "after": None}
    save = lambda: (out / GUEST_FILE).write_text(json.dumps(record, indent=2) + "\n")  # noqa: E731
    save()
    warm_up(DISK)
    os.makedirs(MOUNT, exist_ok=True)
    failed = 0
    try:
        for i, label in enumerate(plan.runs, 1):
            spec, dep = split_run(label)
            print(f"smartio compare: [{i}/{len(plan.runs)}] qasio under {label}", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            rc, err = 0, None
            try:
                switch(dev, spec, plan.nr_requests, plan.clock_scale or 1.0)
                _sh(["mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                     DISK])
                _sh(["mount", "-t", "ext4", "-o", "discard,data=ordered,noatime,noinit_itable", DISK, MOUNT])
                try:
                    command = (f"smartio bench qasio --target {MOUNT} --scale {plan.scale:g} --count-scale "
                               f"{plan.count_scale:g} --repeats {plan.repeats} --benchmarks "
                               f"{','.join(plan.benchmarks)}" + (f" --dependency {dep}" if dep else ""))
                    doc = run_qasio(plan.settings(dep), MOUNT, command=command)
                    (out / run_file(label)).write_text(json.dumps(doc, indent=1) + "\n")
                finally:
                    subprocess.run(["umount", MOUNT], capture_output=True)
            except SmartioError as e:
                rc, err = e.exit_code, str(e)
                print(f"smartio compare: {label}: {e}", file=sys.stderr, flush=True)
            failed += rc != 0
            record["runs"].append({"run": label, "rc": rc, "error": err, "duration_s": round(time.monotonic() - t0, 1)})
            save()
            print(f"smartio compare: {label} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        restore(dev, record["before"])
        record["after"] = device_state(dev)
        save()
    return 1 if failed else 0


# --- host ------------------------------------------------------------------------------------------------------

def assemble(plan: QasioPlan, guest_out: Path, *, profile: Any, command: str, started: str,
             vm_result: Any | None) -> dict[str, Any]:
    """One document from the guest's run files (pure: tests feed it recorded ones)."""
    runs: dict[str, Any] = {}
    missing = []
    for label in plan.runs:
        f = guest_out / run_file(label)
        if f.exists():
            runs[label] = json.loads(f.read_text())
        else:
            missing.append(label)
    gfile = guest_out / GUEST_FILE
    record = json.loads(gfile.read_text()) if gfile.exists() else {}
    first: dict[str, Any] = next(iter(runs.values()), {})
    from smartio.compare.run import provenance

    return {
        **provenance("qasio", json.loads(plan.to_json()), profile=profile, command=command, started=started,
                     vm_result=vm_result, known={k: first.get(k) for k in ("kernel", "fio_version")}),
        "guest": record, "missing": missing, "runs": runs,
    }


def disk_size(plan: QasioPlan) -> int:
    need = plan.settings(None).space_needed()
    size = max(512 << 20, need * 3 // 2)
    return -(-size // (1 << 20)) * (1 << 20)


def run_qasio_compare(plan: QasioPlan, *, profile: str, time_scale: float | None, out: Path | None,
                      timeout: float, command: str,
                      stream: IO[bytes] | None | Literal["stdout"] = "stdout",
                      db: str | Path | None = None, boot: Boot = DEFAULT_BOOT,
                      kernel: str = DEFAULT_KERNEL) -> tuple[dict, Path]:
    from smartio.compare.run import module_for, run_in_guest, vm_profile

    prof = vm_profile(profile, timeout, time_scale)
    plan = with_clock(plan, prof)
    modules = module_for((r.split(":")[0] for r in plan.runs), kernel)
    return run_in_guest("smartio.qasio.compare", plan.to_json(),
                        lambda guest_out, result, started: assemble(plan, guest_out, profile=prof, command=command,
                                                                    started=started, vm_result=result),
                        profile=prof, out=out, timeout=timeout, stream=stream, db=db, disks=1,
                        disk_size=disk_size(plan), modules=modules, boot=boot, kernel=kernel)


if __name__ == "__main__":
    from smartio.compare.run import guest_entry

    guest_entry(guest_main)

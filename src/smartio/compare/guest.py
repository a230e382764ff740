"""The guest side of `smartio compare`: on one device, for each scheduler, switch, run `smartio bench`, restore.

Runs as root inside the testbed VM (`python -m smartio.compare.guest PLAN_JSON OUT_DIR`). For each scheduler of
the plan it switches the device to `none` and then to the scheduler (so every run starts from the scheduler's
defaults, even two variants of one scheduler in a row), raises nr_requests, writes the spec's tunables, and runs
`smartio bench` in this process, whose output streams to the console (the host shows it live): under TCG a fresh
Python process spends about 12 s importing numpy and 40-65 s importing scipy.stats, which every bench with more
than one repeat needs, so one process for all runs saves that per scheduler. Each bench
document lands in OUT_DIR/runs/; OUT_DIR/guest.json records the device's state before, during and after every run,
and is rewritten after each run so a crash loses nothing already measured. The device's scheduler, nr_requests and
the scheduler's tunables are restored at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from smartio.blockdev import Device, device_of_node, read_scheduler, read_tunables, write_tunables
from smartio.compare.spec import Plan, SchedulerSpec
from smartio.errors import SmartioError, UsageError

GUEST_FILE = "guest.json"
DEBUGFS_BLOCK = Path("/sys/kernel/debug/block")
RUNS_DIR = "runs"


def run_file(label: str, experiment: str) -> str:
    """Where one bench document goes, relative to the out dir; labels may hold ':' and '=', fine in a name."""
    return f"{RUNS_DIR}/{label}.{experiment}.json"


def device_state(dev: Device) -> dict[str, Any]:
    current, available = read_scheduler(dev)
    return {"scheduler": current, "available": available,
            "nr_requests": int((dev.queue / "nr_requests").read_text()), "tunables": read_tunables(dev)}


def scheduler_counters(dev: Device) -> dict[str, str]:
    """The active scheduler's debugfs files that count what it did since it was switched on (smartio: `stats`,
    `phase`; mq-deadline: `starved`, `batching`, `queued`, `owned_by_driver`; kyber: `batching`), read after a run
    so that a figure can be traced to the rules that made it. Missing files (debugfs not mounted, another scheduler)
    are left out."""
    sched = DEBUGFS_BLOCK / dev.disk / "sched"
    out: dict[str, str] = {}
    for name in ("stats", "phase", "starved", "batching", "queued", "owned_by_driver"):
        try:
            out[name] = (sched / name).read_text().strip()
        except OSError:
            continue
    return out


def _write(path: Path, value: str | int) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as e:
        raise SmartioError(f"writing {value} to {path} failed: {e.strerror}") from e


# Each scheduler's tunables that are times (in whatever unit the scheduler reads them): deadlines, latency targets,
# slices, idle and anticipation windows, paces. bfq's slice_idle is the same setting as slice_idle_us.
CLOCK_TUNABLES = {
    "mq-deadline": ("read_expire", "write_expire", "prio_aging_expire"),
    "kyber": ("read_lat_nsec", "write_lat_nsec"),
    "bfq": ("slice_idle_us", "timeout_sync", "fifo_expire_sync", "fifo_expire_async"),
    "smartio": ("read_anticipation_us", "write_slice_ms", "write_slice_rand_ms", "write_window_ms", "prio_aging_ms",
                "write_pace_us", "write_pace_rand_us", "read_hold_us", "single_write_ms", "startup_ms",
                "startup_anticipation_us"),
}


def scale_clock_tunables(dev: Device, scheduler: str, factor: float) -> dict[str, int | str]:
    """Multiply the current scheduler's time tunables by `factor` (the testbed's time scale: the emulated device
    and the guest's programs both run that much slower than on the phone, so a scheduler keeps its phone
    behaviour only if its clock does too); returns what it wrote. Tunables the kernel lacks are skipped."""
    if factor == 1 or scheduler not in CLOCK_TUNABLES:
        return {}
    now = read_tunables(dev)
    new: dict[str, int | str] = {k: round(int(now[k]) * factor) for k in CLOCK_TUNABLES[scheduler]
                                 if now.get(k, "").isdigit()}
    if new:
        write_tunables(dev, new)
    return new


def switch(dev: Device, spec: SchedulerSpec, nr_requests: int, clock_scale: float = 1.0) -> None:
    """Put the device under `spec`, from that scheduler's defaults with their times multiplied by `clock_scale`
    (`scale_clock_tunables`), with room for `nr_requests` requests; the spec's own tunables are written last."""
    sched = dev.queue / "scheduler"
    _write(sched, "none")       # re-selecting the current elevator is a no-op that would keep old tunables
    if spec.name != "none":
        if spec.name not in read_scheduler(dev)[1]:
            load_elevator(spec.name)
        try:
            sched.write_text(spec.name)
        except OSError as e:
            hint = (" (the testbed loads kernel/smartio-iosched.ko; build it with `make module`)"
                    if spec.name == "smartio" else "")
            raise UsageError("--schedulers", spec.label, f"{dev.disk} refused it: {e.strerror}; available: "
                             f"{', '.join(read_scheduler(dev)[1])}{hint}") from e
        # Only below the target: with a deep device queue, blk-mq's own default may be higher already.
        if int((dev.queue / "nr_requests").read_text()) < nr_requests:
            _write(dev.queue / "nr_requests", nr_requests)
        scale_clock_tunables(dev, spec.name, clock_scale)
    if spec.tunables:
        write_tunables(dev, dict(spec.tunables))


def load_elevator(name: str) -> None:
    """modprobe a stock scheduler built as a module (kyber, bfq). The kernel's own on-demand loading runs
    modprobe from the initramfs root, which has no modules, so the guest loads them from its chroot instead."""
    for module in (f"{name}-iosched", name):
        if subprocess.run(["modprobe", module], capture_output=True).returncode == 0:
            return


def restore(dev: Device, before: dict[str, Any]) -> None:
    _write(dev.queue / "scheduler", "none")
    if before["scheduler"] != "none":
        _write(dev.queue / "scheduler", before["scheduler"])
    if int((dev.queue / "nr_requests").read_text()) != before["nr_requests"]:
        _write(dev.queue / "nr_requests", before["nr_requests"])
    now = read_tunables(dev)
    changed = {k: v for k, v in before["tunables"].items() if now.get(k) != v}
    if changed:
        write_tunables(dev, changed)


def smartio(command: str, argv: list[str]) -> int:
    """`smartio COMMAND ARGV` (bench, profile) in this process; its exit code, as the command would have exited."""
    from smartio.cli import main as cli_main

    own_argv, sys.argv = sys.argv, ["smartio", command, *argv]   # the document records sys.argv as its command
    try:
        return cli_main(sys.argv[1:])
    except SystemExit as e:         # argparse refused an argument
        return e.code if isinstance(e.code, int) else 2
    except Exception:               # a bug: report it as a crashed child would, and go on with the rest
        traceback.print_exc()
        return 1
    finally:
        sys.argv = own_argv
        sys.stdout.flush()


PROFILE_FILE = f"{RUNS_DIR}/profile.json"


def profile(dev: Device, plan: Plan, out: Path) -> dict[str, int]:
    """`smartio profile --apply` on the device (under smartio): the Concurrency Profiler's dispatch limits and the
    write pacing derived from the same run (alone latencies, write speedup), at the comparison's size; returns the
    tunables it wrote, so later smartio:profile runs get the same ones without measuring again."""
    from smartio.cli.bench import PACING_TUNABLES, TUNABLE

    args = ["--target", plan.device, "--destroy-data", "--apply", "--levels", "1,2,4", "--repeats", "2",
            "--size", plan.size_for("slowdown"), "--json", str(out / PROFILE_FILE)]
    say("Concurrency Profiler for smartio:profile: `smartio profile " + " ".join(args) + "`")
    rc = smartio("profile", args)
    if rc != 0:
        raise SmartioError(f"`smartio profile --apply` failed with exit code {rc}")
    names = (*TUNABLE.values(), *PACING_TUNABLES)
    return {k: int(v) for k, v in read_tunables(dev).items() if k in names}


def warm_up(device: str) -> None:
    """A few hundred untimed direct reads and writes on the device before the first scheduler's run: the guest's
    first I/Os run through code TCG has not translated yet (on s5-emmc, 128 KiB per stream, the first repeat's reads
    alone took 26.7 ms each, the second's 8.4 ms), which would handicap whichever scheduler comes first."""
    subprocess.run(["fio", "--name=warm-up", f"--filename={device}", "--rw=randrw", "--bs=4k", "--size=1m",
                    "--direct=1", "--output=/dev/null"], capture_output=True)


def say(text: str) -> None:
    print(f"smartio compare: {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m smartio.compare.guest PLAN_JSON OUT_DIR", file=sys.stderr)
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
    steps = [(spec, exp) for spec in plan.schedulers for exp in plan.experiments]
    failed = 0
    profiled: dict[str, int] | None = None
    try:
        for i, (spec, exp) in enumerate(steps, 1):
            say(f"[{i}/{len(steps)}] {exp} under {spec.label}")
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
            name = run_file(spec.label, exp)
            args = [exp, *plan.bench_args(exp), "--json", str(out / name)]
            cmd = ["smartio", "bench", *args]
            started = time.monotonic()
            rc = smartio("bench", args)
            run = {"scheduler": spec.label, "experiment": exp, "file": name, "rc": rc, "state": state,
                   "duration_s": round(time.monotonic() - started, 1), "command": cmd,
                   "counters": scheduler_counters(dev)}
            record["runs"].append(run)
            save()
            if rc != 0:
                failed += 1
                say(f"`smartio bench {exp}` under {spec.label} failed with exit code {rc}; going on with the rest")
            else:
                say(f"{exp} under {spec.label} done in {run['duration_s']:.0f} s")
    finally:
        restore(dev, record["before"])
        record["after"] = device_state(dev)
        save()
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SmartioError as e:
        print(f"smartio: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)

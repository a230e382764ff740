"""`smartio compare sqlite`: seed 002's Table 2 in the testbed, per filesystem and optimisation.

One VM session on the emulated flash device (s5-emmc by default), two disks: /dev/vda holds the filesystem,
/dev/vdb the external journal of E. For every filesystem and every distinct configuration the guest makes the
filesystem afresh, mounts it as Android would (noatime; ext4 data=ordered, noauto_da_alloc), and runs
`smartio bench sqlite --trace` for inserts and updates; the journal modes of Figure 4 (DELETE, TRUNCATE, PERSIST,
WAL) run as inserts on the baseline of every filesystem. The host gathers the documents into compare.json.

The optimisations (seed 002, section 6; Table 2):
  B        fsync(), TRUNCATE journal (the paper's baseline: SQLite's journal mode on Android then), internal journal
  F        fdatasync() instead of fsync()
  E        the filesystem journal on the second disk (ext4 and xfs only; the others have no separate journal)
  P        polled I/O: not applicable, see POLL_NA
  W        WAL journal mode
  F+E+P, F+E+P+W  the combinations, with whatever of E and P applies to the filesystem
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Literal

from smartio.compare.spec import RUNS_DIR, JsonPlan
from smartio.errors import SmartioError, UsageError
from smartio.testbed.boot import DEFAULT_BOOT, Boot
from smartio.testbed.kernelrelease import DEFAULT_KERNEL

FILESYSTEMS = ("ext4", "xfs", "btrfs", "f2fs", "nilfs2")
OPTIMISATIONS = ("B", "F", "E", "P", "W", "F+E+P", "F+E+P+W")
OPS = ("insert", "update")
FIG4_MODES = ("delete", "truncate", "persist", "wal")
EXTERNAL_JOURNAL_FS = ("ext4", "xfs")
POLL_NA = ("Linux 6.1 polls only requests marked REQ_POLLED: O_DIRECT reads and writes submitted with RWF_HIPRI or "
           "io_uring IOPOLL, on a poll queue (virtio_blk.poll_queues). SQLite's writes are buffered, and the "
           "writeback, the filesystem's journal commits and the cache flushes of fsync()/fdatasync() are always "
           "completed by interrupt, so there is nothing of SQLite's to poll")
E_NA = "{fs} has no separate journal to move (log-structured or copy-on-write)"
DATA_DISK, JOURNAL_DISK = "/dev/vda", "/dev/vdb"
MOUNT = "/mnt/smartio-sqlite"
DISK_SIZE = 512 << 20          # mkfs.xfs wants at least 300 MiB
VM_TX = (30, 10)               # transactions per repeat (default, --quick)
VM_REPEATS = (3, 2)
GUEST_FILE = "sqlite-guest.json"


@dataclasses.dataclass(frozen=True)
class Config:
    """One distinct way to run: the sync call, the journal mode, and whether the fs journal is external."""

    sync_call: str
    journal: str
    external: bool

    @property
    def key(self) -> str:
        return f"{self.sync_call}-{self.journal}{'-extjournal' if self.external else ''}"


def resolve(fs: str, opt: str) -> tuple[Config | None, list[str]]:
    """The configuration that optimisation `opt` means on `fs`, and the notes on what does not apply;
    None when nothing of it applies (P alone)."""
    parts = opt.split("+")
    notes = []
    if "P" in parts:
        notes.append("P n/a")
    external = "E" in parts and fs in EXTERNAL_JOURNAL_FS
    if "E" in parts and not external:
        notes.append("E n/a")
    if parts == ["P"] or (parts == ["E"] and not external):
        return None, notes
    return Config("fdatasync" if "F" in parts else "fsync", "wal" if "W" in parts else "truncate", external), notes


@dataclasses.dataclass(frozen=True)
class SqlitePlan(JsonPlan):
    filesystems: tuple[str, ...] = FILESYSTEMS
    optimisations: tuple[str, ...] = OPTIMISATIONS
    ops: tuple[str, ...] = OPS
    transactions: int = VM_TX[0]
    repeats: int = VM_REPEATS[0]
    record_bytes: int = 100
    fig4_modes: tuple[str, ...] = FIG4_MODES
    sync: str = "full"

    def __post_init__(self) -> None:
        for flag, values, known in (("--filesystems", self.filesystems, FILESYSTEMS),
                                    ("--optimisations", self.optimisations, OPTIMISATIONS),
                                    ("--ops", self.ops, OPS), ("--journal-modes", self.fig4_modes, FIG4_MODES)):
            bad = [v for v in values if v not in known]
            if bad or not values and flag != "--journal-modes":
                raise UsageError(flag, ",".join(values), f"choose from {', '.join(known)}")
        if self.sync not in ("off", "normal", "full"):
            raise UsageError("--sync", self.sync, "choose from off, normal, full")
        if not 1 <= self.transactions <= 100000:
            raise UsageError("--transactions", self.transactions, "must be between 1 and 100000")
        if not 1 <= self.repeats <= 100:
            raise UsageError("--repeats", self.repeats, "must be between 1 and 100")

    @property
    def flavour(self) -> str:
        from smartio.testbed.kernelpkg import flavour_for

        return flavour_for(self.filesystems)

    def steps(self) -> list[tuple[str, Config, tuple[str, ...]]]:
        """(fs, config, ops) in run order: each distinct configuration of a filesystem once, with the ops it needs."""
        out: dict[tuple[str, str], tuple[str, Config, list[str]]] = {}
        for fs in self.filesystems:
            for opt in self.optimisations:
                cfg, _ = resolve(fs, opt)
                if cfg is not None:
                    step = out.setdefault((fs, cfg.key), (fs, cfg, []))
                    step[2].extend(o for o in self.ops if o not in step[2])
            for mode in self.fig4_modes:
                cfg = Config("fsync", mode, False)
                step = out.setdefault((fs, cfg.key), (fs, cfg, []))
                if "insert" not in step[2]:
                    step[2].append("insert")
        return [(fs, cfg, tuple(ops)) for fs, cfg, ops in out.values()]



def run_file(fs: str, cfg: Config, op: str) -> str:
    return f"{RUNS_DIR}/{fs}.{cfg.key}.{op}.json"


# --- guest -----------------------------------------------------------------------------------------------------

def _sh(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SmartioError(f"{' '.join(cmd)} failed ({res.returncode}): {(res.stderr or res.stdout).strip()[:300]}")


def make_fs(fs: str, external: bool) -> list[str]:
    """mkfs the data disk (and the journal disk for E); returns the mount options. No discard, no lazy init, so
    that nothing but SQLite's work reaches the disks while it runs."""
    subprocess.run(["modprobe", fs], capture_output=True)     # the kernel's own request_module cannot see them
    d, j = DATA_DISK, JOURNAL_DISK
    if fs == "ext4":
        e = ["-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"]
        if external:
            _sh(["mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "journal_dev", "-E", "lazy_journal_init=1,nodiscard", j])
            _sh(["mkfs.ext4", "-q", "-F", "-b", "4096", "-J", f"device={j}", *e, d])
        else:
            _sh(["mkfs.ext4", "-q", "-F", "-b", "4096", *e, d])
        return ["noatime", "data=ordered", "noauto_da_alloc", "noinit_itable"]
    if fs == "xfs":
        # An external log of 64 MiB: mkfs.xfs refuses less.
        _sh(["mkfs.xfs", "-q", "-f", "-K", *(["-l", f"logdev={j},size=64m"] if external else []), d])
        return ["noatime", *([f"logdev={j}"] if external else [])]
    if fs == "btrfs":
        _sh(["mkfs.btrfs", "-q", "-f", "-K", d])
        return ["noatime"]
    if fs == "f2fs":
        _sh(["mkfs.f2fs", "-q", "-f", "-t", "0", d])
        return ["noatime"]
    if fs == "nilfs2":
        _sh(["mkfs.nilfs2", "-q", "-f", "-K", d])
        return ["noatime", "nogc"]          # no cleaner daemon writing segments behind SQLite's back
    raise SmartioError(f"unknown filesystem {fs}")


def guest_main(argv: list[str]) -> int:
    from smartio.sqlite.run import run_sqlite
    from smartio.sqlite.settings import SqliteSettings

    plan = SqlitePlan.from_json(argv[0])
    out = Path(argv[1])
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"runs": [], "kernel": os.uname().release}
    save = lambda: (out / GUEST_FILE).write_text(json.dumps(record, indent=2) + "\n")  # noqa: E731
    steps = plan.steps()
    failed = 0
    os.makedirs(MOUNT, exist_ok=True)
    for i, (fs, cfg, ops) in enumerate(steps, 1):
        print(f"smartio compare: [{i}/{len(steps)}] {fs}, {cfg.key}: {', '.join(ops)}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            opts = make_fs(fs, cfg.external)
            _sh(["mount", "-t", fs, "-o", ",".join(opts), DATA_DISK, MOUNT])
        except SmartioError as e:
            record["runs"].append({"fs": fs, "config": cfg.key, "error": str(e)})
            print(f"smartio compare: {e}", file=sys.stderr, flush=True)
            failed += 1
            save()
            continue
        try:
            for op in ops:
                # In this process rather than as `smartio bench sqlite` children: importing numpy and scipy takes
                # about 40 s of a TCG guest's time, once per process.
                name = run_file(fs, cfg, op)
                settings = SqliteSettings(op=op, journal=cfg.journal, sync=plan.sync, sync_call=cfg.sync_call,
                                    transactions=plan.transactions, record_bytes=plan.record_bytes,
                                    repeats=plan.repeats)
                command = (f"smartio bench sqlite --target {MOUNT} --op {op} --journal {cfg.journal} "
                           f"--sync {plan.sync} --sync-call {cfg.sync_call} --transactions {plan.transactions} "
                           f"--repeats {plan.repeats} --record-bytes {plan.record_bytes} --trace")
                # The traces of the Figure 4 runs are kept (vm/out/traces/), for a second look or for tests.
                keep = out / "traces" / f"{fs}.{cfg.key}.{op}.smtrace" if (
                    op == "insert" and cfg.sync_call == "fsync" and not cfg.external) else None
                if keep is not None:
                    keep.parent.mkdir(exist_ok=True)
                try:
                    doc = run_sqlite(settings, MOUNT, trace=True, trace_file=keep, command=command)
                    (out / name).write_text(json.dumps(doc, indent=1) + "\n")
                    rc, err = 0, None
                except SmartioError as e:
                    rc, err = e.exit_code, str(e)
                    print(f"smartio compare: {fs} {cfg.key} {op}: {e}", file=sys.stderr, flush=True)
                record["runs"].append({"fs": fs, "config": cfg.key, "op": op, "file": name, "rc": rc,
                                       "error": err, "mount_options": opts, "command": command})
                failed += rc != 0
                save()
        finally:
            subprocess.run(["umount", MOUNT], capture_output=True)
        print(f"smartio compare: {fs}, {cfg.key} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return 1 if failed else 0


# --- host ------------------------------------------------------------------------------------------------------

def assemble(plan: SqlitePlan, guest_out: Path, *, profile: Any, command: str, started: str,
             vm_result: Any | None) -> dict[str, Any]:
    """One document from the guest's run files (pure: tests feed it recorded ones)."""
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    missing = []
    for fs, cfg, ops in plan.steps():
        for op in ops:
            f = guest_out / run_file(fs, cfg, op)
            if f.exists():
                runs.setdefault(fs, {}).setdefault(cfg.key, {})[op] = json.loads(f.read_text())
            else:
                missing.append(f"{fs} {cfg.key} {op}")
    table: dict[str, dict[str, Any]] = {}
    for fs in plan.filesystems:
        for opt in plan.optimisations:
            applied, notes = resolve(fs, opt)
            cell: dict[str, Any] = {"config": applied.key if applied else None, "notes": notes}
            if applied is None:
                cell["na"] = POLL_NA if opt == "P" else E_NA.format(fs=fs)
            else:
                for op in plan.ops:
                    d = runs.get(fs, {}).get(applied.key, {}).get(op)
                    if d:
                        r = d["results"]
                        cell[op] = {"tx_per_s": r["tx_per_s"], "latency_ms": r["latency_ms"]["mean"],
                                    "ios_per_tx": r["trace"]["writes"] if "trace" in r else None,
                                    "flushes_per_tx": r["trace"]["flushes"] if "trace" in r else None}
            table.setdefault(fs, {})[opt] = cell
    fig4 = {fs: {m: runs.get(fs, {}).get(Config("fsync", m, False).key, {}).get("insert", {})
                 .get("results", {}).get("trace") for m in plan.fig4_modes} for fs in plan.filesystems}
    first: dict[str, Any] = next((d for c in runs.values() for o in c.values() for d in o.values()), {})
    from smartio.compare.run import provenance

    return {
        **provenance("sqlite", json.loads(plan.to_json()), profile=profile, command=command, started=started,
                     vm_result=vm_result, known={"kernel": first.get("kernel")}),
        "sqlite_version": first.get("sqlite_version"), "library_sync_call":
            first.get("results", {}).get("sync_calls", {}).get("library"),
        "missing": missing, "table": table, "figure4": fig4, "runs": runs,
    }


def run_sqlite_compare(plan: SqlitePlan, *, profile: str, time_scale: float | None, out: Path | None,
                       timeout: float, command: str,
                       stream: IO[bytes] | None | Literal["stdout"] = "stdout",
                       db: str | Path | None = None, boot: Boot = DEFAULT_BOOT,
                       kernel: str = DEFAULT_KERNEL) -> tuple[dict, Path]:
    from smartio.compare.run import run_in_guest, vm_profile

    prof = vm_profile(profile, timeout, time_scale)
    return run_in_guest("smartio.sqlite.compare", plan.to_json(),
                        lambda guest_out, result, started: assemble(plan, guest_out, profile=prof, command=command,
                                                                    started=started, vm_result=result),
                        profile=prof, out=out, timeout=timeout, stream=stream, db=db, disks=2, disk_size=DISK_SIZE,
                        modules=[], flavour=plan.flavour, boot=boot, kernel=kernel)


if __name__ == "__main__":
    from smartio.compare.run import guest_entry

    guest_entry(guest_main)

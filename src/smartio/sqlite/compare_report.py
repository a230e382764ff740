"""Tables of a `smartio compare sqlite` document: seed 002's Table 2 and Figure 4, ours beside theirs.
Pure functions of the document."""

from __future__ import annotations

from typing import Any

from smartio.flashdev.profiles import device_line
from smartio.report.tables import grid, pm
from smartio.sqlite.attribute import CLASSES, LABELS
from smartio.sqlite.report import PAPER_FIG4
from smartio.testbed import hostload
from smartio.testbed.boot import text_of

# Seed 002, Table 2: (inserts/s, updates/s) on a 16 GB Transcend SD card, Galaxy S3, SQLite 3.7.5, TRUNCATE mode.
# The paper gives no Table 2 figures for btrfs and nilfs2 (only Figure 6's bars, for B, F and E).
PAPER_T2: dict[str, dict[str, tuple[int, int] | None]] = {
    "ext4": {"B": (39, 102), "F": (46, 156), "E": (51, 143), "P": (39, 109), "W": (76, 100), "F+E+P": (60, 245),
             "F+E+P+W": (92, 113)},
    "xfs": {"B": (60, 149), "F": (60, 251), "E": (82, 179), "P": (61, 153), "W": (75, 153), "F+E+P": (84, 265),
            "F+E+P+W": (86, 188)},
    "f2fs": {"B": (83, 171), "F": (88, 354), "E": None, "P": (85, 226), "W": (149, 155), "F+E+P": (89, 358),
             "F+E+P+W": (157, 175)},
}
SHORT = {"insert": "ins", "update": "upd"}


def _ratio(x: float | None, b: float | None) -> str:
    return f"{x / b:.2f}" if x and b else "-"


def table2(doc: dict[str, Any]) -> str:
    plan, p = doc["plan"], doc["profile"]
    ops = plan["ops"]
    header = ["fs", "opt", "applied"]
    for op in ops:
        s = SHORT[op]
        header += [f"{s}/s (95 % CI)", "xB", f"paper {s}/s", "paper xB", f"I/Os per {s}"]
    rows: list[list[str]] = []
    notes: dict[str, list[str]] = {}
    for fs in plan["filesystems"]:
        base = doc["table"][fs].get("B", {})
        for opt in plan["optimisations"]:
            cell = doc["table"][fs][opt]
            paper = (PAPER_T2.get(fs) or {}).get(opt)
            pbase = (PAPER_T2.get(fs) or {}).get("B")
            if "na" in cell:
                notes.setdefault(cell["na"], []).append(f"{fs} {opt}")
                row = [fs, opt, "n/a"]
                for i in range(len(ops)):
                    row += ["n/a", "", str(paper[i]) if paper else "-", _ratio(paper[i], pbase[i])
                            if paper and pbase else "-", ""]
                rows.append(row)
                continue
            applied = cell["config"].replace("-extjournal", ", ext. journal").replace("-", ", ")
            if cell["notes"]:
                applied += " (" + ", ".join(cell["notes"]) + ")"
            row = [fs, opt, applied]
            for i, op in enumerate(ops):
                m = cell.get(op)
                b = base.get(op) if "na" not in base else None
                if m is None:
                    row += ["(missing)", "", "", "", ""]
                    continue
                row += [pm(m["tx_per_s"], "{:.1f}"), _ratio(m["tx_per_s"]["mean"], b and b["tx_per_s"]["mean"]),
                        str(paper[i]) if paper else "-", _ratio(paper[i], pbase[i]) if paper and pbase else "-",
                        pm(m["ios_per_tx"], "{:.1f}") if m.get("ios_per_tx") else "-"]
            rows.append(row)
    lines = [f"Table 2: SQLite {' and '.join(o + 's' for o in ops)} per second, per filesystem and optimisation "
             f"(mean [95 % CI] over {plan['repeats']} repeats of {plan['transactions']} transactions of "
             f"{plan['record_bytes']} bytes); xB = ratio against B of the same filesystem",
             f"  profile {p['name']} ({device_line(p)}"
             f"{', disks over ' + doc['disk_transport'] if doc.get('disk_transport') else ''}); "
             f"kernel {doc['kernel']}{f' ({g})' if (g := text_of(doc)) else ''}; "
             f"SQLite {doc.get('sqlite_version')} (the library's own sync call: {doc.get('library_sync_call')}); "
             f"synchronous {plan.get('sync', 'full').upper()}; I/Os = block write requests per transaction (traced)",
             "  paper: Galaxy S3, 16 GB Transcend SD card, SQLite 3.7.5, Android's kernel 3.0 (Table 2; no figures "
             "for btrfs and nilfs2 there)", "", grid(header, rows)]
    for why, cells in notes.items():
        lines.append(f"  n/a ({', '.join(cells)}): {why}")
    if any("P n/a" in c.get("notes", []) for t in doc["table"].values() for c in t.values()):
        lines.append("  F+E+P and F+E+P+W: P is n/a as above, so they measure F+E and F+E+W")
    if doc.get("missing"):
        lines.append("  not measured: " + "; ".join(doc["missing"]))
    return "\n".join(lines)


def figure4(doc: dict[str, Any]) -> str:
    modes = doc["plan"]["fig4_modes"]
    header = ["fs", "journal", *[LABELS[c] for c in CLASSES], "writes", "flushes", "syncs", "1st fs-jnl KiB",
              "paper writes", "paper 1st KiB"]
    rows = []
    for fs, per in doc["figure4"].items():
        for mode in modes:
            t = per.get(mode)
            paper = PAPER_FIG4.get(mode, {}) if fs == "ext4" else {}
            pw = str(paper["writes"]) if paper.get("writes") else "-"
            pk = str(paper["first_fs_journal_kib"]) if paper.get("first_fs_journal_kib") else "-"
            if not t:
                rows.append([fs, mode.upper(), *["(missing)"] * (len(header) - 4), pw, pk])
                continue
            first = t.get("first_fs_journal_kib")
            rows.append([fs, mode.upper(), *[f"{t['classes'][c]['writes']['mean']:.2f}" for c in CLASSES],
                         pm(t["writes"], "{:.2f}"), f"{t['flushes']['mean']:.2f}", f"{t['syncs']['mean']:.2f}",
                         f"{first['mean']:.1f}" if first else "-", pw, pk])
    return "\n".join([
        "Figure 4 as a table: block writes per insert by what they hit (fsync(), synchronous "
        f"{doc['plan'].get('sync', 'full').upper()}; mean over the "
        "traced transactions, the first of each repeat left out; writes with 95 % CI)",
        "  paper: ext4 ordered on a Galaxy S3, SQLite 3.7.5 (the text gives 9 writes for DELETE, 12 for PERSIST, "
        "and first fs-journal writes of 24/16/8 KiB for DELETE/TRUNCATE/PERSIST)", "", grid(header, rows)])


def headline(doc: dict[str, Any]) -> dict[str, float | None]:
    """The figures bench/sqlite-table2 prints on its last line."""
    def ins(fs: str, opt: str) -> float | None:
        c = doc["table"].get(fs, {}).get(opt, {}).get("insert")
        return c["tx_per_s"]["mean"] if c else None

    def ios(fs: str, mode: str) -> float | None:
        t = doc["figure4"].get(fs, {}).get(mode)
        return t["writes"]["mean"] if t else None

    return {"ext4_B_ins": ins("ext4", "B"), "ext4_FEPW_ins": ins("ext4", "F+E+P+W"),
            "f2fs_FEPW_ins": ins("f2fs", "F+E+P+W"), "delete_ios_per_insert": ios("ext4", "delete"),
            "wal_ios_per_insert": ios("ext4", "wal")}


def render(doc: dict[str, Any]) -> str:
    host = hostload.note(doc.get("host_load"))
    return table2(doc) + "\n\n" + figure4(doc) + (f"\n\n{host}" if host else "")

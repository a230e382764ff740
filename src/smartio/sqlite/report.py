"""Terminal tables of a `smartio bench sqlite` document; pure functions of it, so tests render recorded ones."""

from __future__ import annotations

from typing import Any

from smartio.report.tables import grid, pm
from smartio.sqlite.attribute import CLASSES, LABELS

# Seed 002, Figure 4 and section 4.3: one 100-byte insert on ext4 (ordered) on a Galaxy S3, SQLite 3.7.5.
# The text gives the block I/O count for DELETE and PERSIST only, and the size of the first fs-journal write
# (the commit of the journal file's metadata) for DELETE, TRUNCATE and PERSIST.
PAPER_FIG4: dict[str, dict[str, int | None]] = {
    "delete": {"writes": 9, "first_fs_journal_kib": 24, "syncs": 2},
    "truncate": {"writes": None, "first_fs_journal_kib": 16, "syncs": 2},
    "persist": {"writes": 12, "first_fs_journal_kib": 8, "syncs": 3},
    "wal": {"writes": None, "first_fs_journal_kib": None, "syncs": 1},
}


def _title(doc: dict[str, Any]) -> str:
    s, dev, sc = doc["settings"], doc["device"], doc["results"]["sync_calls"]
    call = sc.get("issued_as") or "?"
    lib = "the library's own call" if s["sync_call"] == "library" else f"library calls {sc.get('library')}"
    return (f"SQLite {s['op']}, journal {s['journal'].upper()}, synchronous {s['sync'].upper()}, syncs issued as "
            f"{call} ({lib}); {s['transactions']} transactions of {s['record_bytes']} bytes, one statement each; "
            f"{s['repeats']} repeats (mean ± 95 % CI)\n"
            f"  SQLite {doc['sqlite_version']} ({doc.get('sqlite_library') or 'system library'}), page "
            f"{doc.get('page_size')} B; {dev.get('fstype')} on {dev.get('source')}"
            f" ({dev.get('mount_options', '')}); scheduler {doc.get('scheduler')}; kernel {doc['kernel']}")


def summary(doc: dict[str, Any]) -> str:
    r = doc["results"]
    wal = doc.get("journal_mode") == "wal" and "tx_only_per_s" in r
    rows = [["transactions/s (Mobibench's clock" + (": checkpoint included)" if wal else ")"),
             pm(r["tx_per_s"], "{:.1f}")]]
    if wal:
        rows += [["transactions/s, commits only", pm(r["tx_only_per_s"], "{:.1f}")],
                 ["final WAL checkpoint (ms)", pm(r["checkpoint_ms"], "{:.2f}")]]
    rows += [["latency mean (ms)", pm(r["latency_ms"]["mean"], "{:.3f}")],
             ["latency p99 (ms)", pm(r["latency_ms"]["p99"], "{:.3f}")],
             ["latency max (ms)", pm(r["latency_ms"]["max"], "{:.3f}")]]
    per = r["sync_calls"].get("per_transaction")
    if per:
        for k in ("fsync", "fdatasync"):
            if per[k]["mean"]:
                rows.append([f"{k}() asked per tx", pm(per[k], "{:.2f}")])
        for k in ("issued_fsync", "issued_fdatasync"):
            if per[k]["mean"]:
                rows.append([f"{k.split('_')[1]}() issued per tx", pm(per[k], "{:.2f}")])
    return "\n".join([_title(doc), "", grid(["metric", "value"], rows)])


def figure4(doc: dict[str, Any]) -> str:
    t = doc["results"]["trace"]
    journal = doc["settings"]["journal"]
    paper = PAPER_FIG4.get(journal, {})
    rows = [[LABELS[c], pm(t["classes"][c]["writes"], "{:.2f}"), pm(t["classes"][c]["kib"], "{:.1f}")]
            for c in CLASSES]
    rows.append(["all block writes", pm(t["writes"], "{:.2f}"), pm(t["kib"], "{:.1f}")])
    rows.append(["flushes", pm(t["flushes"], "{:.2f}"), ""])
    rows.append(["FUA writes", pm(t["fua_writes"], "{:.2f}"), ""])
    rows.append(["reads", pm(t["reads"], "{:.2f}"), ""])
    rows.append(["sync calls", pm(t["syncs"], "{:.2f}"), ""])
    first = t.get("first_fs_journal_kib")
    lines = [f"Block I/O per transaction by what it hits (Figure 4 as a table): {t['transactions']} transactions "
             f"(the first of each repeat left out), mean ± 95 % CI over them; fs journal: {t['fs_journal']}",
             "", grid(["what", "writes/tx", "KiB/tx"], rows), "",
             "  first fs-journal write of a transaction: "
             + (pm(first, "{:.1f}") + " KiB" if first else "none"),
             f"  paper (ext4 ordered, Galaxy S3, SQLite 3.7.5, {journal.upper()}): "
             + ", ".join(x for x in (
                 f"{paper['writes']} block I/Os" if paper.get("writes") else "block I/Os not given in the text",
                 f"first fs-journal write {paper['first_fs_journal_kib']} KiB"
                 if paper.get("first_fs_journal_kib") else None,
                 f"{paper['syncs']} fsync() calls" if paper.get("syncs") else None) if x)]
    ex = t["example"]
    lines += ["", f"  a typical transaction (repeat {ex['repeat'] + 1}, #{ex['index'] + 1}, "
                  f"{ex['latency_ms']:.2f} ms): syncs " + ", ".join(f"{c} {f}" for c, f in ex["syncs"])]
    for ms, kind, sector, kib, rwbs in ex["sequence"]:
        lines.append(f"    {ms:9.3f} ms  {LABELS[kind]:<16} sector {sector:>10}  {kib:5.1f} KiB  {rwbs}")
    return "\n".join(lines)


def render(doc: dict[str, Any]) -> str:
    parts = [summary(doc)]
    if "trace" in doc["results"]:
        parts.append(figure4(doc))
    return "\n\n".join(parts)

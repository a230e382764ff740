"""The terminal table of a `smartio bench launch` document (a real launch or `--replay`); a pure function of it."""

from __future__ import annotations

import shlex
from typing import Any

from smartio.report.tables import grid, pm


def render(doc: dict[str, Any]) -> str:
    s, r, dev = doc["settings"], doc["results"], doc["device"]
    what = (f"replay of {doc['trace']['path']} ({shlex.join(doc['trace']['command'])})" if doc["mode"] == "replay"
            else f"replay of the Mobigen script {doc['script']['path']}" if doc["mode"] == "mobigen"
            else shlex.join(doc["argv"]) + (f" (installed from {doc['app']}, in a chroot)" if doc.get("app") else ""))
    bg = "idle device" if s["background"] == "none" else f"beside {s['background']}"
    lines = [f"Launch time: {what}; {s['cache']}, {bg}; {s['repeats']} repeats (mean [95 % CI])",
             f"  target {doc['target']['description']}; scheduler {doc.get('scheduler')}; kernel {doc['kernel']}"
             + (f"; {doc['fio_version']}" if doc.get("fio_version") else ""),
             ""]
    rows = [["wall time (ms)", pm(_ms(r["wall_s"]), "{:.1f}"), f"{r['min_s'] * 1e3:.1f}", f"{r['max_s'] * 1e3:.1f}"]]
    if "background_write_mib_s" in r:
        b = r["background_write_mib_s"]
        rows.append([f"{s['background']} (MiB/s)", pm(b, "{:.1f}"), f"{min(b['values']):.1f}",
                     f"{max(b['values']):.1f}"])
    for key, label in (("disk_read_requests", "disk reads per launch (requests)"),
                       ("disk_read_kib", "disk reads per launch (KiB)")):
        if key in r:
            st = r[key]
            rows.append([label, pm(st, "{:.0f}"), f"{min(st['values']):.0f}", f"{max(st['values']):.0f}"])
    for kind, st in r.get("breakdown_s", {}).items():
        if max(st["values"]) > 0:
            label = {"cpu": "CPU time of the launch (ms)", "cpu_sys": "  of which in the kernel (ms)",
                     "io": "time in calls, all threads (Mobibench's Total IO time) (ms)"}.get(
                kind, f"  in {kind} (ms)" if doc["mode"] != "mobigen" or kind == "think" else f"    in {kind} (ms)")
            if doc["mode"] == "mobigen" and kind == "think":
                label = "  think time slept, all threads (ms)"
            st = _ms(st)
            rows.append([label, pm(st, "{:.1f}"), f"{min(st['values']):.1f}", f"{max(st['values']):.1f}"])
    lines.append(grid(["what", "mean", "min", "max"], rows))
    if doc["mode"] == "replay":
        t = doc["trace"]
        lines += ["", f"  trace: {t['ops']} operations on {t['files']} files ({t['mib']:.1f} MiB laid out); think "
                      f"times × {t['think_scale']:.3f}; mapped pages: {t['residency']}; recorded launch "
                      f"{t['untraced_wall_s'] * 1e3:.1f} ms warm without strace"]
    if doc["mode"] == "mobigen":
        lines += _script_lines(doc["script"], r.get("calls", {}))
    if dev.get("name") is None:
        lines.append(f"  note: no block device found under {dev.get('source')}; the scheduler is unknown")
    return "\n".join(lines)


def _ms(stat: dict[str, Any]) -> dict[str, Any]:
    """A seconds Stat document in milliseconds."""
    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    return {**stat, "mean": ms(stat["mean"]), "std": ms(stat["std"]),
            "ci95": [ms(x) for x in stat["ci95"]], "values": [x * 1e3 for x in stat["values"]]}


def _script_lines(t: dict[str, Any], calls: dict[str, Any]) -> list[str]:
    """A Mobigen replay's per-call latency (all launches pooled) and what of the script was not replayed."""
    rows = [[name, str(c["n"]), str(c["failed"]), str(c["skipped"]),
             *(f"{c[k]:.3f}" if k in c else "-" for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"))]
            for name, c in calls.items()]
    out = ["", "Per call, all launches pooled (latency in ms):", "",
           grid(["call", "n", "failed", "skipped", "mean", "p50", "p90", "p99", "max"], rows), "",
           f"  script: {t['calls']} calls in {t['threads']} threads over {t['span_s']:.3f} s; {t['files']} files "
           f"({t['mib']:.1f} MiB) laid out; think times {t['think']}"]
    unknown = ", ".join(f"{k} {v}" for k, v in t["unknown"].items())
    out.append(f"  not replayed: {t['malformed']} malformed line(s), {sum(t['unknown'].values())} unknown call(s)"
               + (f" ({unknown})" if unknown else "")
               + "".join(f", {v} {k} that failed when recorded (size -1)"
                         for k, v in t.get("failed_when_recorded", {}).items())
               + "; skipped = calls on an fd the script never opened")
    out += [f"    {x}" for x in t.get("malformed_examples", [])]
    return out

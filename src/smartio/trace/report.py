"""The HTML report of a trace analysis: the metrics as tables, and the plots seed 004 shows.

One self-contained file (plots embedded as PNG), so it can be mailed or attached to an issue.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from smartio.report import plots

COLORS = {"read": "tab:blue", "write": "tab:red"}


def _png(fig, prov: str) -> str:
    plots.stamp(fig, prov)
    return f'<img src="data:image/png;base64,{base64.b64encode(plots.png_bytes(fig)).decode()}">'


def provenance(mx: dict, source: str) -> str:
    """What a trace figure shows, in one line: the trace, its devices, the command traced, kernel and date."""
    src = mx.get("source", {})
    command = " ".join(src.get("command", [])) or "-"
    return (f"trace {source} ({mx['format']}, {mx['events']} events, {mx['wall_s']:.3f} s); devices "
            f"{', '.join(mx['devices'])}; command {command}; kernel {src.get('kernel', '?')}; "
            f"recorded {src.get('started', '?')}")


def _cdf_plot(mx: dict, key: str, title: str, xlabel: str, log: bool, prov: str) -> str | None:
    fig, ax = plots.figure(width=5.5, height=3.2)
    drawn = False
    for kind in ("read", "write"):
        q = mx[kind][key].get("quantiles")
        if q:
            ax.plot(q, [i / 100 for i in range(101)], label=f"{kind} (n={mx[kind][key]['n']})", color=COLORS[kind])
            drawn = True
    if not drawn:
        plots.discard(fig)
        return None
    if log:
        ax.set_xscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel="share of requests")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig, prov)


def _size_plot(mx: dict, prov: str) -> str | None:
    fig, ax = plots.figure(width=5.5, height=3.2)
    drawn = False
    for kind in ("read", "write"):
        cdf = mx[kind]["size"].get("cdf")
        if cdf:
            ax.step([c[0] for c in cdf], [c[1] for c in cdf], where="post", label=kind, color=COLORS[kind])
            drawn = True
    if not drawn:
        plots.discard(fig)
        return None
    for k in (4, 16, 64):
        ax.axvline(k, color="grey", lw=0.6, ls=":")
    ax.set_xscale("log", base=2)
    ax.set(title="Request size CDF", xlabel="KiB", ylabel="share of requests")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig, prov)


def _flush_plot(mx: dict, prov: str) -> str | None:
    series = mx["flush"].get("between_series")
    if not series or not series["requests"]:
        return None
    fig, axes = plots.figure(ncols=3, width=11, height=3.3)
    for ax, (key, label) in zip(axes, (("requests", "requests"), ("kib", "KiB"), ("seconds", "seconds")), strict=True):
        v = sorted(series[key])
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))])
        ax.set(xlabel=f"{label} between successive flushes", ylabel="share of flushes")
        ax.axhline(0.9, color="grey", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    return _png(fig, prov)


def _locality_plot(mx: dict, prov: str) -> str | None:
    fig, ax = plots.figure(width=5.5, height=3.2)
    drawn = False
    for kind in ("read", "write"):
        counts = mx[kind]["locality"].get("sorted_counts")
        if counts:
            ax.plot(range(1, len(counts) + 1), counts, label=kind, color=COLORS[kind])
            drawn = True
    if not drawn:
        plots.discard(fig)
        return None
    ax.set(title="Accesses of the most accessed 4 KiB blocks", xlabel="block rank", ylabel="accesses")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig, prov)


def _share_plot(mx: dict, prov: str) -> str:
    ts = mx["time_share"]
    labels = ["any (Q..C)", "device busy (D..C)"] + list(ts["outstanding_by_class"])
    values = [ts["outstanding"], ts["busy"]] + list(ts["outstanding_by_class"].values())
    fig, ax = plots.figure(width=6, height=3.4)
    ax.barh(labels[::-1], [v * 100 for v in values[::-1]], color="tab:purple")
    ax.set(title="Share of wall time with I/O outstanding", xlabel="% of wall time")
    ax.grid(alpha=0.3, axis="x")
    return _png(fig, prov)


def _table(rows: list[tuple[str, object, object]]) -> str:
    def cell(v: object) -> str:
        if v is None:
            return "-"
        return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{cell(r)}</td><td>{cell(w)}</td></tr>" for k, r, w in rows)
    return f"<table><tr><th></th><th>read</th><th>write</th></tr>{body}</table>"


def write_html(mx: dict, trace, out: Path, source: str) -> None:
    rd, wr = mx["read"], mx["write"]
    rows = [("requests", rd["requests"], wr["requests"]), ("KiB", rd["bytes"] // 1024, wr["bytes"] // 1024)]
    for k in (4, 16, 64):
        rows.append((f"share ≤ {k} KiB", rd["size"].get(f"share_le_{k}k"), wr["size"].get(f"share_le_{k}k")))
    for lat in ("q2c_ms", "d2c_ms"):
        for q in (50, 90, 99):
            rows.append((f"{lat[:3].upper()} p{q} (ms)", rd[lat].get(f"p{q}"), wr[lat].get(f"p{q}")))
    rows += [("sync", rd["sync"], wr["sync"]), ("async", rd["async"], wr["async"]), ("meta", rd["meta"], wr["meta"]),
             ("blocks touched", rd["locality"].get("blocks"), wr["locality"].get("blocks")),
             ("share of blocks accessed once", rd["locality"].get("share_accessed_once"),
              wr["locality"].get("share_accessed_once")),
             ("max accesses of a block", rd["locality"].get("max_accesses"), wr["locality"].get("max_accesses"))]
    fl = mx["flush"]
    flush_html = f"<p>{fl['requests']} flushes ({fl['per_s']:.2f}/s).</p>"
    if "between" in fl:
        b = fl["between"]
        flush_html += ("<table><tr><th>between successive flushes</th><th>p50</th><th>p90</th></tr>"
                       + "".join(f"<tr><th>{k}</th><td>{b[k]['p50']:.4g}</td><td>{b[k]['p90']:.4g}</td></tr>"
                                 for k in ("requests", "kib", "seconds")) + "</table>")
    files_html = ""
    if "files" in mx:
        f = mx["files"]
        files_html = f"<h2>Files under {html.escape(f['dir'])} (device {f['device']}, {f['files']} files)</h2>"
        for title, key in (("file type", "types"), ("block type", "block_types")):
            files_html += (f"<table><tr><th>{title}</th><th>reads</th><th>writes</th><th>read KiB</th>"
                           "<th>write KiB</th></tr>" + "".join(
                               f"<tr><th>{t}</th><td>{d['reads']}</td><td>{d['writes']}</td>"
                               f"<td>{d['read_kib']:.0f}</td><td>{d['write_kib']:.0f}</td></tr>"
                               for t, d in f[key].items()) + "</table>")
    if "ufs" in mx:
        u = mx["ufs"]
        files_html += (f"<h2>UFS commands ({u['commands']} on {u['tags']} tags)</h2><table><tr><th></th><th>n</th>"
                       "<th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>" + "".join(
                           f"<tr><th>{html.escape(k)}</th><td>{d['n']}</td><td>{d['p50']:.4g}</td><td>{d['p90']:.4g}"
                           f"</td><td>{d['p99']:.4g}</td><td>{d['max']:.4g}</td></tr>"
                           for k, d in [("all", u["latency_ms"]), *u["by_opcode"].items(),
                                        *((f"tag {t}", d) for t, d in u["by_tag"].items())] if d.get("n"))
                       + "</table>")
    for fs, d in mx.get("sync_calls", {}).items():
        lat = d["latency_ms"]
        files_html += (f"<h2>{fs} sync calls</h2><p>{d['calls']} calls ({d['fdatasync']} fdatasync, {d['errors']} "
                       "failed)" + (f"; p50 {lat['p50']:.4g} ms, p99 {lat['p99']:.4g} ms" if lat.get("n") else "")
                       + ".</p>")
    procs = "".join(f"<tr><td>{p['pid']}</td><td>{html.escape(p['comm'])}</td><td>{p['reads']}</td>"
                    f"<td>{p['writes']}</td><td>{p['kib']:.0f}</td></tr>" for p in mx["processes"])
    prov = provenance(mx, source)
    figures = [_size_plot(mx, prov), _cdf_plot(mx, "q2c_ms", "Q2C latency CDF", "ms", True, prov),
               _cdf_plot(mx, "d2c_ms", "D2C latency CDF", "ms", True, prov), _flush_plot(mx, prov),
               _locality_plot(mx, prov), _share_plot(mx, prov)]
    src = mx.get("source", {})
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>smartio trace: {html.escape(source)}</title>
<style>body{{font-family:sans-serif;max-width:1150px;margin:1em auto}} table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} img{{margin:4px}}</style></head><body>
<h1>Block trace {html.escape(source)}</h1>
<p>{mx['events']} events ({mx['format']} format), {mx['wall_s']:.3f} s, devices {', '.join(mx['devices'])};
clock {html.escape(str(mx.get('clock') or 'not recorded'))}; lost events
{'not recorded in this format' if mx.get('lost_events') is None else mx['lost_events']}.
Command: <code>{html.escape(' '.join(src.get('command', [])) or '-')}</code>;
kernel {html.escape(str(src.get('kernel', '?')))}.
R/W ratio {mx['rw_ratio']['text']}.</p>
{_table(rows)}
<h2>Flushes</h2>{flush_html}
<h2>Time with I/O outstanding</h2><p>{mx['time_share']['outstanding']:.1%} of wall time
(device busy {mx['time_share']['busy']:.1%}).</p>
{files_html}
<h2>Processes</h2><table><tr><th>pid</th><th>command</th><th>reads</th><th>writes</th><th>KiB</th></tr>{procs}</table>
<h2>Plots</h2>{''.join(p for p in figures if p)}
</body></html>
"""
    out.write_text(doc)

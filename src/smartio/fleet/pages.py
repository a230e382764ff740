"""The service's pages as HTML (no JavaScript: plots are server-drawn SVG images) and as CSV.

Everything a submitter wrote (model names, storage fields, flags) is escaped here, once, by esc().
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from smartio.fleet.service import quantile
from smartio.fleet.submission import PATTERNS

PRETTY = {"seq_read": "seq read", "seq_write": "seq write", "rand_read": "rand read", "rand_write": "rand write",
          "all": "all"}
STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:62em;color:#222;padding:0 1em}
nav a{margin-right:1em}table{border-collapse:collapse;margin:.8em 0}td,th{border-bottom:1px solid #ddd;
padding:.25em .6em;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}.tag{font-size:.8em;
background:#eee;border-radius:3px;padding:0 .3em;margin-left:.3em}.note{color:#555;font-size:.9em}
img.plot{max-width:100%;border:1px solid #eee}code{background:#f4f4f4;padding:0 .2em}"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{esc(title)} - smartio fleet</title>"
            f"<meta name=viewport content='width=device-width'><style>{STYLE}</style></head><body>"
            "<nav><a href='/'>smartio fleet</a><a href='/ranking'>ranking</a><a href='/ecdf'>response time ECDF</a>"
            f"<a href='/ecdf?metric=iowait_pct'>iowait ECDF</a></nav><h1>{esc(title)}</h1>{body}</body></html>")


def formats(path: str, query: Mapping[str, str]) -> str:
    q = ("?" + urlencode(dict(query))) if query else ""
    return (f"<p class=note>Also as <a href='{esc(path)}.json{esc(q)}'>JSON</a> and "
            f"<a href='{esc(path)}.csv{esc(q)}'>CSV</a>.</p>")


def table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[bool] | None = None) -> str:
    """An HTML table; cells are HTML already (escape with esc())."""
    num = list(numeric or [False] * len(head))
    out = ["<table><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td class=n>{c}</td>" if num[i] else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def tags(quick: bool, emulated: bool, flags: Sequence[str]) -> str:
    out = []
    if quick:
        out.append("<span class=tag>quick</span>")
    if emulated:
        out.append("<span class=tag>emulated</span>")
    out += [f"<span class=tag>{esc(f)}</span>" for f in flags]
    return "".join(out)


def to_csv(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for r in rows:
        # A cell a spreadsheet would run as a formula is quoted as text (CSV injection).
        w.writerow([f"'{c}" if isinstance(c, str) and c[:1] in ("=", "+", "-", "@") else c for c in r])
    return buf.getvalue()


def fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def link_device(device_id: int, model: str) -> str:
    return f"<a href='/devices/{int(device_id)}'>{esc(model)}</a>"


def index(counts: Mapping[str, int], recent: Sequence[Mapping[str, Any]], where: str) -> str:
    rows = [(f"<a href='/runs/{esc(r['slug'])}'>{esc(r['started'])}</a>", esc(r["experiment"]),
             link_device(r["device_id"], r["model"]) + tags(r["quick"], r["emulated"], r["flags"])) for r in recent]
    body = (f"<p>{counts['runs']} public runs from {counts['devices']} devices, in {esc(where)}.</p>"
            "<p>The <a href='/ranking'>ranking</a> (total bandwidth per model, seed 000's Figure 6), the ECDFs of "
            "<a href='/ecdf'>response time</a> (Figure 5) and <a href='/ecdf?metric=iowait_pct'>iowait</a> "
            "(Figure 3(b)) across devices; a run's page links to its device's history and to a comparison.</p>"
            "<h2>Latest runs</h2>" + (table(["started", "experiment", "device"], rows) if rows else
                                      "<p>No public run yet.</p>"))
    return page("Runs", body)


def ranking(r: Mapping[str, Any], query: Mapping[str, str]) -> str:
    q = urlencode(dict(query))
    rows = [(str(x["rank"]), link_device(x["device_id"], x["model"]) + (tags(False, True, []) if x["emulated"] else ""),
             str(x["devices_of_model"]), str(x["n"]), *(fmt(x["median"].get(p)) for p in PATTERNS),
             fmt(x["total_mbps"])) for x in r["rows"]]
    body = (f"<p>Total bandwidth per model: the sum of the medians of each pattern's bandwidth at queue depth 1 over "
            f"a device's runs; a model with several devices is shown by its top device. Devices with fewer than "
            f"{r['min_runs']} runs are left out, and so are runs measured with --quick, in emulation or flagged by "
            f"their own checks unless <code>include=quick,emulated,flagged</code> asks for them "
            f"(now: {esc(','.join(r['include']) or 'none')}).</p>"
            f"<p class=note>Comparable runs only: {esc(r['describe'] or 'no runs yet')} (key {esc(r['key'])}).</p>"
            f"<img class=plot alt='ranking plot' src='/ranking.svg?{esc(q)}'>"
            + table(["#", "model (top device)", "devices", "n runs", *(PRETTY[p] + " MB/s" for p in PATTERNS),
                     "total MB/s"], rows, [True, False, True, True, True, True, True, True, True])
            + formats("/ranking", query))
    return page("Device ranking", body)


def ranking_csv(r: Mapping[str, Any]) -> str:
    return to_csv(["rank", "model", "device_id", "emulated", "devices_of_model", "n", *(f"{p}_mbps" for p in PATTERNS),
                   "total_mbps", "key"],
                  [(x["rank"], x["model"], x["device_id"], x["emulated"] or "", x["devices_of_model"], x["n"],
                    *(x["median"].get(p) for p in PATTERNS), x["total_mbps"], r["key"]) for x in r["rows"]])


def ecdf(e: Mapping[str, Any], query: Mapping[str, str]) -> str:
    q = urlencode(dict(query))
    rows = []
    for p, vs in e["series"].items():
        rows.append((esc(PRETTY.get(p, p)), str(len(vs)), *(fmt(quantile(vs, x), 3) for x in (0.1, 0.5, 0.9))))
    body = (f"<p>The ECDF across devices of each device's median {esc(e['label'])} ({esc(e['unit'])}): "
            f"{e['devices']} devices with at least {e['min_runs']} runs (include: "
            f"{esc(','.join(e['include']) or 'none')}).</p>"
            f"<p class=note>Comparable runs only: {esc(e['describe'] or 'no runs yet')} (key {esc(e['key'])}).</p>"
            f"<img class=plot alt='ECDF plot' src='/ecdf.svg?{esc(q)}'>"
            + table(["pattern", "devices", "p10", "median", "p90"], rows, [False, True, True, True, True])
            + formats("/ecdf", query))
    return page(f"ECDF of {e['label']} across devices", body)


def ecdf_csv(e: Mapping[str, Any]) -> str:
    rows = []
    for p, vs in e["series"].items():
        rows += [(p, v, (i + 1) / len(vs), e["unit"], e["key"]) for i, v in enumerate(vs)]
    return to_csv(["pattern", "value", "fraction_of_devices", "unit", "key"], rows)


def _kv(d: Mapping[str, Any]) -> str:
    return table(["field", "value"], [(esc(k), esc(v)) for k, v in d.items()])


def run(r: Mapping[str, Any]) -> str:
    doc = r["document"]
    m = r["metrics"]
    rows = [(esc(PRETTY[p]), fmt(m.get("lat_ms", {}).get(p), 3), fmt(m.get("bw_mbps", {}).get(p))) for p in PATTERNS
            if p in m.get("lat_ms", {})]
    s = doc["run"]["settings"]
    body = (f"<p>{esc(doc['benchmark']['experiment'])} run of {link_device(r['device_id'], r['model'])}"
            f"{tags(r['quick'], r['emulated'], r['flags'])}, started {esc(doc['run']['started'])}, submitted "
            f"{esc(r['submitted'])}{'' if r['public'] else ' (private: shown only to whoever has this address)'}.</p>"
            f"<img class=plot alt='run plot' src='/runs/{esc(r['slug'])}.svg'>"
            + (table(["pattern", "mean response time (ms)", "bandwidth (MB/s)"], rows, [False, True, True])
               if rows else "<p>No latency experiment in this run.</p>")
            + (f"<p>iowait: {fmt(m['iowait_pct']['all'])} % of CPU time.</p>" if "iowait_pct" in m else "")
            + f"<p><a href='/compare?a={esc(r['slug'])}'>compare with another run</a></p>"
            "<h2>Settings</h2>" + _kv(s) + "<h2>Device</h2>" + _kv({"model": doc["device"]["model"],
                                                                   "model from": doc["device"]["model_source"],
                                                                   **doc["device"]["storage"]})
            + "<h2>Environment</h2>" + _kv({k: v for k, v in doc["environment"].items() if k != "tunables"})
            + f"<p class=note>Stripped before upload: {esc(', '.join(doc['privacy']['stripped']))}.</p>"
            + formats(f"/runs/{r['slug']}", {}))
    return page("Run", body)


def run_csv(r: Mapping[str, Any]) -> str:
    return to_csv(["metric", "pattern", "value"],
                  [(metric, p, v) for metric, d in r["metrics"].items() for p, v in d.items()])


def device(d: Mapping[str, Any]) -> str:
    rows = [(f"<a href='/runs/{esc(r['slug'])}'>{esc(r['started'])}</a>" + tags(r["quick"], r["emulated"], r["flags"]),
             esc(r["experiment"]), *(fmt(r["bw_mbps"].get(p)) for p in PATTERNS), fmt(r["total_mbps"]))
            for r in d["runs"]]
    body = (f"<p>{esc(d['model'])} (model from {esc(d['model_source'])}){tags(False, bool(d['emulated']), [])}; "
            f"storage: {esc(', '.join(f'{k} {v}' for k, v in d['storage'].items()))}; first seen "
            f"{esc(d['first_seen'])}.</p><img class=plot alt='history plot' src='/devices/{int(d['id'])}.svg'>"
            + table(["run", "experiment", *(PRETTY[p] + " MB/s" for p in PATTERNS), "total MB/s"], rows,
                    [False, False, True, True, True, True, True])
            + formats(f"/devices/{int(d['id'])}", {}))
    return page(f"Device {d['model']}", body)


def device_csv(d: Mapping[str, Any]) -> str:
    return to_csv(["run", "started", "experiment", "quick", "emulated", *(f"{p}_mbps" for p in PATTERNS),
                   "total_mbps"],
                  [(r["slug"], r["started"], r["experiment"], int(r["quick"]), int(r["emulated"]),
                    *(r["bw_mbps"].get(p) for p in PATTERNS), r["total_mbps"]) for r in d["runs"]])


def compare(c: Mapping[str, Any], query: Mapping[str, str]) -> str:
    a, b = c["a"], c["b"]
    rows = []
    for metric, label in (("lat_ms", "mean response time (ms)"), ("bw_mbps", "bandwidth (MB/s)")):
        for p in PATTERNS:
            va, vb = a["metrics"].get(metric, {}).get(p), b["metrics"].get(metric, {}).get(p)
            ratio = fmt(vb / va) if va and vb is not None and c["comparable"] else "-"
            rows.append((esc(f"{PRETTY[p]} {label}"), fmt(va, 3), fmt(vb, 3), ratio))
    warn = "" if c["comparable"] else ("<p><strong>Not comparable:</strong> the two runs differ in benchmark "
                                       "method or parameters (comparability keys differ); no ratios are shown.</p>")
    q = urlencode(dict(query))
    body = (warn + f"<p>A: <a href='/runs/{esc(a['slug'])}'>{esc(a['model'])}, {esc(a['document']['run']['started'])}"
            f"</a>{tags(a['quick'], a['emulated'], a['flags'])}<br>B: <a href='/runs/{esc(b['slug'])}'>"
            f"{esc(b['model'])}, {esc(b['document']['run']['started'])}</a>"
            f"{tags(b['quick'], b['emulated'], b['flags'])}</p>"
            f"<img class=plot alt='comparison plot' src='/compare.svg?{esc(q)}'>"
            + table(["", "A", "B", "B / A"], rows, [False, True, True, True]) + formats("/compare", query))
    return page("Two runs side by side", body)


def compare_csv(c: Mapping[str, Any]) -> str:
    rows = []
    for metric in ("lat_ms", "bw_mbps"):
        for p in PATTERNS:
            rows.append((metric, p, c["a"]["metrics"].get(metric, {}).get(p), c["b"]["metrics"].get(metric, {}).get(p)))
    return to_csv(["metric", "pattern", "a", "b"], rows)


def pick_runs(slug: str, runs: Sequence[Mapping[str, Any]]) -> str:
    rows = [(f"<a href='/compare?{esc(urlencode({'a': slug, 'b': r['slug']}))}'>{esc(r['started'])}</a>",
             esc(r["model"]) + tags(r["quick"], r["emulated"], r["flags"])) for r in runs if r["slug"] != slug]
    return page("Compare with which run?", table(["run", "device"], rows) if rows else "<p>No other public run.</p>")


def error(status: int, message: str, field: str | None) -> str:
    return page(f"Error {status}", f"<p>{esc(message)}</p>" + (f"<p>Field: <code>{esc(field)}</code></p>"
                                                                 if field else ""))

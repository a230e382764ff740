"""The fleet's operations on its database: take a submission, delete one, and the queries behind every page.

Ranking and ECDFs are computed from the metrics table in Python (medians are not portable SQL) and cached per server
process until the database's generation changes: every submission and deletion bumps it in its own transaction, so
a process serves a cached page only while no process has changed the data, and one query tells.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import statistics
import threading
from collections.abc import Callable, Iterable
from typing import Any

from smartio.fleet import submission as sm
from smartio.fleet.db import Conn, Database, now

MIN_RUNS = 5            # runs of a device before it is ranked (PassMark's rule)
MAX_BODY = 8 << 20      # bytes of one upload


@dataclasses.dataclass(frozen=True)
class Stored:
    id: int
    slug: str
    created: bool           # False: the same document was stored before (a replayed upload)
    token_matches: bool     # the upload's delete token is the one stored with the run
    device: int = 0         # the device's id, when created


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class NotFound(LookupError):
    pass


class Forbidden(PermissionError):
    pass


class Fleet:
    def __init__(self, db: Database, min_runs: int = MIN_RUNS) -> None:
        self.db = db
        self.min_runs = min_runs
        self._cache: dict[Any, tuple[int, Any]] = {}
        self._lock = threading.Lock()
        self._rebuild()

    def _rebuild(self) -> None:
        """The device statistics of every device, when a migration asked for them (pending_rebuilds)."""
        with self.db.transaction() as c:
            if c.one("DELETE FROM pending_rebuilds WHERE what = 'device_stats' RETURNING what") is None:
                return
            c.execute("DELETE FROM device_stats")
            for (device,) in c.all("SELECT id FROM devices"):
                self._refresh_device(c, int(device))
            for (first,) in c.all("SELECT MIN(id) FROM runs GROUP BY ckey"):
                self._key_info(c, json.loads(c.one("SELECT document FROM runs WHERE id = ?", (first,))[0]))
            c.execute("UPDATE generation SET value = value + 1 WHERE id = 1")

    # --- writes ---------------------------------------------------------------------------------------------------

    def submit(self, doc: dict[str, Any], token: str, public: bool) -> Stored:
        """Store a validated submission (submission.validate) with the hash of its delete token; a document stored
        before is not stored again."""
        with self.db.transaction() as c:
            stored = self._insert(c, doc, token, public)
            if stored.created:
                c.execute("UPDATE generation SET value = value + 1 WHERE id = 1")
        return stored

    def submit_many(self, items: list[tuple[dict[str, Any], str, bool]]) -> list[Stored]:
        """Many validated submissions in one transaction (the benchmark's bulk load); each device's statistics are
        brought up to date once, at the end."""
        with self.db.transaction() as c:
            out = [self._insert(c, doc, token, public, refresh=False) for doc, token, public in items]
            for device in sorted({s.device for s in out if s.created}):
                self._refresh_device(c, device)
            c.execute("UPDATE generation SET value = value + 1 WHERE id = 1")
        return out

    def _insert(self, c: Conn, doc: dict[str, Any], token: str, public: bool, refresh: bool = True) -> Stored:
        digest = sm.content_hash(doc)
        text = sm.canonical(doc).decode()
        old = c.one("SELECT id, slug, token_hash FROM runs WHERE content_hash = ?", (digest,))
        if old:
            return Stored(int(old[0]), old[1], False, secrets.compare_digest(old[2], token_hash(token)), 0)
        device = self._device(c, doc["device"])
        slug = secrets.token_urlsafe(9)
        # quick and emulated have their own columns; what is left are the run's own checks' flags.
        flags = [f for f in doc["run"]["flags"] if f not in ("quick", "emulated")]
        row = c.one(
            "INSERT INTO runs (slug, content_hash, device_id, experiment, ckey, started, submitted, public, "
            "quick, emulated, flags, token_hash, size_bytes, document) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?) RETURNING id",
            (slug, digest, device, doc["benchmark"]["experiment"], sm.run_key(doc), doc["run"]["started"], now(),
             int(public), int(bool(doc["run"]["settings"]["quick"])),
             int(doc["device"].get("emulated") is not None),
             json.dumps(flags), token_hash(token), len(text), text))
        run_id = int(row[0])
        c.executemany("INSERT INTO metrics (run_id, device_id, ckey, metric, pattern, value) VALUES "
                      "(?, ?, ?, ?, ?, ?)", [(run_id, device, *m) for m in sm.metrics(doc)])
        self._key_info(c, doc)
        if refresh and public:
            self._refresh_device(c, device)
        return Stored(run_id, slug, True, True, device)

    def _key_info(self, c: Conn, doc: dict[str, Any]) -> None:
        for key, metric in sorted({(key, metric) for key, metric, _pattern, _value in sm.metrics(doc)}):
            c.execute("INSERT INTO key_info (ckey, metric, description) VALUES (?, ?, ?) ON CONFLICT (ckey) "
                      "DO NOTHING", (key, metric, sm.describe_key(doc, "latency", metric)))

    def _refresh_device(self, c: Conn, device: int) -> None:
        """Recompute one device's medians (device_stats) from its public runs, in the caller's transaction."""
        if c.dialect == "postgresql":       # two submissions of one device: the second waits, then sees the first
            c.execute("SELECT id FROM devices WHERE id = ? FOR UPDATE", (device,))
        rows = c.all("SELECT m.run_id, m.ckey, m.metric, m.pattern, m.value, r.quick, r.flags FROM metrics m "
                     "JOIN runs r ON r.id = m.run_id WHERE m.device_id = ? AND r.public = 1", (device,))
        c.execute("DELETE FROM device_stats WHERE device_id = ?", (device,))
        groups: dict[tuple[str, str, str, int], list[float]] = {}
        for _run, key, metric, pattern, value, quick, flags in rows:
            flagged = flags != "[]"
            for variant in range(4):
                if (quick and not variant & 1) or (flagged and not variant & 2):
                    continue
                groups.setdefault((key, metric, pattern, variant), []).append(value)
        c.executemany("INSERT INTO device_stats (device_id, ckey, metric, pattern, variant, n, median) VALUES "
                      "(?, ?, ?, ?, ?, ?, ?)", [(device, k, m, p, v, len(vs), statistics.median(vs))
                                                for (k, m, p, v), vs in groups.items()])

    def _device(self, c: Conn, dev: dict[str, Any]) -> int:
        storage = json.dumps(dev["storage"], sort_keys=True)
        part = hashlib.sha256(storage.encode()).hexdigest()[:16]
        emulated = dev.get("emulated") or ""
        key = (dev["install_id"], dev["model"], part, emulated)
        found = c.one("SELECT id FROM devices WHERE install_id = ? AND model = ? AND part_key = ? AND emulated = ?",
                      key)
        if found:
            return int(found[0])
        row = c.one("INSERT INTO devices (install_id, model, model_source, part_key, storage, emulated, first_seen) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                    (*key[:2], dev["model_source"], part, storage, emulated, now()))
        if row is None:     # another transaction inserted it meanwhile
            row = c.one("SELECT id FROM devices WHERE install_id = ? AND model = ? AND part_key = ? AND emulated = ?",
                        key)
        return int(row[0])

    def delete(self, slug: str, token: str) -> None:
        with self.db.transaction() as c:
            row = c.one("SELECT id, token_hash FROM runs WHERE slug = ?", (slug,))
            if row is None:
                raise NotFound(slug)
            if not secrets.compare_digest(row[1], token_hash(token)):
                raise Forbidden(slug)
            device = int(c.one("SELECT device_id FROM runs WHERE id = ?", (row[0],))[0])
            c.execute("DELETE FROM metrics WHERE run_id = ?", (row[0],))
            c.execute("DELETE FROM runs WHERE id = ?", (row[0],))
            self._refresh_device(c, device)
            c.execute("UPDATE generation SET value = value + 1 WHERE id = 1")

    # --- reads ----------------------------------------------------------------------------------------------------

    def generation(self) -> int:
        with self.db.connection() as c:
            return int(c.one("SELECT value FROM generation WHERE id = 1")[0])

    def cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        gen = self.generation()
        with self._lock:
            hit = self._cache.get(key)
        if hit and hit[0] == gen:
            return hit[1]
        value = compute()
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = (gen, value)
        return value

    def run(self, slug: str) -> dict[str, Any]:
        with self.db.connection() as c:
            row = c.one("SELECT r.id, r.slug, r.device_id, r.public, r.quick, r.emulated, r.flags, r.submitted, "
                        "r.ckey, r.document, d.model FROM runs r JOIN devices d ON d.id = r.device_id "
                        "WHERE r.slug = ?", (slug,))
        if row is None:
            raise NotFound(slug)
        doc = json.loads(row[9])
        return {"id": row[0], "slug": row[1], "device_id": row[2], "public": bool(row[3]), "quick": bool(row[4]),
                "emulated": bool(row[5]), "flags": json.loads(row[6]), "submitted": row[7], "key": row[8],
                "model": row[10], "document": doc, "metrics": _metric_table(sm.metrics(doc))}

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        with self.db.connection() as c:
            rows = c.all("SELECT r.slug, r.experiment, r.started, r.quick, r.emulated, r.flags, d.model, d.id "
                         "FROM runs r JOIN devices d ON d.id = r.device_id WHERE r.public = 1 "
                         "ORDER BY r.id DESC LIMIT ?", (limit,))
        return [{"slug": r[0], "experiment": r[1], "started": r[2], "quick": bool(r[3]), "emulated": bool(r[4]),
                 "flags": json.loads(r[5]), "model": r[6], "device_id": r[7]} for r in rows]

    def counts(self) -> dict[str, int]:
        with self.db.connection() as c:
            runs = c.one("SELECT COUNT(*) FROM runs WHERE public = 1")[0]
            devices = c.one("SELECT COUNT(DISTINCT device_id) FROM runs WHERE public = 1")[0]
        return {"runs": int(runs), "devices": int(devices)}

    def device(self, device_id: int) -> dict[str, Any]:
        with self.db.connection() as c:
            d = c.one("SELECT id, model, model_source, storage, emulated, first_seen FROM devices WHERE id = ?",
                      (device_id,))
            if d is None:
                raise NotFound(str(device_id))
            rows = c.all("SELECT r.slug, r.started, r.experiment, r.quick, r.emulated, r.flags, m.pattern, m.value "
                         "FROM runs r LEFT JOIN metrics m ON m.run_id = r.id AND m.metric = 'bw_mbps' "
                         "WHERE r.device_id = ? AND r.public = 1 ORDER BY r.started, r.id", (device_id,))
        if not rows:
            raise NotFound(str(device_id))      # a device whose runs are all private or deleted is not shown
        runs: dict[str, dict[str, Any]] = {}
        for slug, started, exp, quick, emu, flags, pattern, value in rows:
            r = runs.setdefault(slug, {"slug": slug, "started": started, "experiment": exp, "quick": bool(quick),
                                       "emulated": bool(emu), "flags": json.loads(flags), "bw_mbps": {}})
            if pattern:
                r["bw_mbps"][pattern] = value
        for r in runs.values():
            r["total_mbps"] = sum(r["bw_mbps"].values()) if r["bw_mbps"] else None
        return {"id": d[0], "model": d[1], "model_source": d[2], "storage": json.loads(d[3]),
                "emulated": d[4] or None, "first_seen": d[5], "runs": list(runs.values())}

    def keys(self, metric: str) -> list[dict[str, Any]]:
        """The comparability keys of a metric among public runs, most devices first, each described."""
        def compute() -> list[dict[str, Any]]:
            with self.db.connection() as c:
                rows = c.all("SELECT s.ckey, COUNT(DISTINCT s.device_id), k.description FROM device_stats s "
                             "JOIN key_info k ON k.ckey = s.ckey WHERE s.metric = ? AND s.variant = 3 "
                             "GROUP BY s.ckey, k.description", (metric,))
            out = [{"key": key, "devices": int(n), "describe": describe} for key, n, describe in rows]
            return sorted(out, key=lambda k: (-k["devices"], k["key"]))
        return self.cached(("keys", metric), compute)

    def per_device(self, metric: str, key: str | None, include: Iterable[str], min_runs: int | None
                   ) -> tuple[str | None, list[dict[str, Any]]]:
        """Each device's median per pattern over its runs (devices with at least min_runs runs), from device_stats."""
        need = self.min_runs if min_runs is None else min_runs
        inc = tuple(sorted(include))

        def compute() -> tuple[str | None, list[dict[str, Any]]]:
            keys = self.keys(metric)
            k = key if key is not None else keys[0]["key"] if keys else None
            if k is None:
                return None, []
            variant = (1 if "quick" in inc else 0) | (2 if "flagged" in inc else 0)
            where = "" if "emulated" in inc else " AND d.emulated = ''"
            with self.db.connection() as c:
                rows = c.all("SELECT s.device_id, d.model, d.emulated, s.pattern, s.n, s.median FROM device_stats s "
                             "JOIN devices d ON d.id = s.device_id WHERE s.ckey = ? AND s.metric = ? AND "
                             f"s.variant = ? AND s.n >= ?{where}", (k, metric, variant, need))
            by_dev: dict[int, dict[str, Any]] = {}
            for dev, model, emulated, pattern, n, median in rows:
                d = by_dev.setdefault(dev, {"device_id": dev, "model": model, "emulated": emulated or None, "n": 0,
                                            "median": {}})
                d["n"] = max(d["n"], int(n))
                d["median"][pattern] = median
            for d in by_dev.values():
                d["median"] = dict(sorted(d["median"].items()))
            return k, sorted(by_dev.values(), key=lambda d: d["device_id"])
        return self.cached(("per_device", metric, key, inc, need), compute)

    def ranking(self, key: str | None = None, include: Iterable[str] = (), min_runs: int | None = None,
                top: int = 20) -> dict[str, Any]:
        """Figure 6: total bandwidth per model (the sum of the four patterns' medians), each model by its top device."""
        k, devices = self.per_device("bw_mbps", key, include, min_runs)
        models: dict[str, dict[str, Any]] = {}
        count: dict[str, int] = {}
        for d in devices:
            if len(d["median"]) != len(sm.PATTERNS):
                continue
            total = sum(d["median"].values())
            count[d["model"]] = count.get(d["model"], 0) + 1
            best = models.get(d["model"])
            if best is None or total > best["total_mbps"]:
                models[d["model"]] = {**d, "total_mbps": total}
        rows = sorted(models.values(), key=lambda r: (-r["total_mbps"], r["model"]))[:top]
        for i, r in enumerate(rows, 1):
            r["rank"] = i
            r["devices_of_model"] = count[r["model"]]
        return {"key": k, "metric": "bw_mbps", "unit": "MB/s", "min_runs": self.min_runs if min_runs is None
                else min_runs, "include": sorted(include), "rows": rows,
                "describe": next((x["describe"] for x in self.keys("bw_mbps") if x["key"] == k), None)}

    def ecdf(self, metric: str = "lat_ms", key: str | None = None, include: Iterable[str] = (),
             min_runs: int | None = None) -> dict[str, Any]:
        """Figures 5 and 3(b): per pattern, the ECDF across devices of each device's median."""
        k, devices = self.per_device(metric, key, include, min_runs)
        series: dict[str, list[float]] = {}
        for d in devices:
            for p, v in d["median"].items():
                series.setdefault(p, []).append(v)
        order = {p: i for i, p in enumerate(sm.PATTERNS)}
        series = {p: sorted(series[p]) for p in sorted(series, key=lambda p: order.get(p, len(order)))}
        m = sm.METRICS[metric]
        return {"key": k, "metric": metric, "unit": m.unit, "label": m.label, "devices": len(devices),
                "min_runs": self.min_runs if min_runs is None else min_runs, "include": sorted(include),
                "series": series,
                "describe": next((x["describe"] for x in self.keys(metric) if x["key"] == k), None)}


def _metric_table(rows: list[tuple[str, str, str, float]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for _key, metric, pattern, value in rows:
        out.setdefault(metric, {})[pattern] = value
    return out


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of sorted values, by linear interpolation."""
    if not sorted_values:
        return float("nan")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)

"""The web application of `smartio serve` (Starlette; uvicorn serves it, one or several processes).

Pages: / (latest runs), /ranking, /ecdf, /runs/SLUG, /devices/ID, /compare?a=SLUG&b=SLUG; each also as .json and
.csv, and its plot as .svg. API: POST /api/v1/runs (a submission; headers X-Delete-Token and X-Public), DELETE
/api/v1/runs/SLUG (header X-Delete-Token). Every refusal is a JSON {"error", "field"} with a 4xx status, and nothing
is stored unless the whole body arrived and validated.

uvicorn starts worker processes by importing create_app, so its settings come from the environment
(SMARTIO_FLEET_DB, SMARTIO_FLEET_MIN_RUNS, SMARTIO_FLEET_MAX_BODY), which `smartio serve` sets.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from smartio.fleet import pages
from smartio.fleet.db import Database
from smartio.fleet.service import MAX_BODY, MIN_RUNS, Fleet, Forbidden, NotFound
from smartio.fleet.submission import METRICS, Invalid, validate

INCLUDE = ("quick", "emulated", "flagged")
TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
SLUG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class BadRequest(Exception):
    def __init__(self, status: int, field: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


def _fail(status: int, field: str | None, message: str, html: bool = False) -> Response:
    if html:
        return HTMLResponse(pages.error(status, message, field), status_code=status)
    return JSONResponse({"error": message, "field": field}, status_code=status)


def _split(name: str) -> tuple[str, str]:
    """("abc", "json") for "abc.json"; ("abc", "html") without a known suffix."""
    stem, dot, ext = name.rpartition(".")
    if dot and ext in ("json", "csv", "svg"):
        return stem, ext
    return name, "html"


def _options(req: Request) -> dict[str, Any]:
    q = req.query_params
    include = [x for x in q.get("include", "").split(",") if x]
    for x in include:
        if x not in INCLUDE:
            raise BadRequest(400, "include", f"{x[:40]!r} is not one of {', '.join(INCLUDE)}")
    min_runs = None
    if "min_runs" in q:
        try:
            min_runs = int(q["min_runs"])
        except ValueError:
            raise BadRequest(400, "min_runs", "must be an integer") from None
        if not 1 <= min_runs <= 1_000_000:
            raise BadRequest(400, "min_runs", "must be at least 1")
    key = q.get("key") or None
    if key is not None and not re.fullmatch(r"[0-9a-f]{16}", key):
        raise BadRequest(400, "key", "must be a comparability key (16 hex digits) from the page's JSON")
    return {"include": include, "min_runs": min_runs, "key": key}


def _query(req: Request, *names: str) -> dict[str, str]:
    return {n: req.query_params[n] for n in names if n in req.query_params}


def create_app(db: str | None = None, min_runs: int | None = None, max_body: int | None = None) -> Starlette:
    where = db or os.environ.get("SMARTIO_FLEET_DB")
    if not where:
        raise RuntimeError("no fleet database: pass db or set SMARTIO_FLEET_DB")
    need = min_runs if min_runs is not None else int(os.environ.get("SMARTIO_FLEET_MIN_RUNS") or MIN_RUNS)
    cap = max_body if max_body is not None else int(os.environ.get("SMARTIO_FLEET_MAX_BODY") or MAX_BODY)
    fleet = Fleet(Database(where), need)

    def view(fn: Callable[[Request, str], Any]) -> Callable[[Request], Any]:
        """A page handler run in the thread pool (the database calls block); refusals become 4xx replies."""
        async def handler(req: Request) -> Response:
            if "fmt" in req.path_params:
                fmt = req.path_params["fmt"]
                if fmt not in ("json", "csv", "svg"):
                    return _fail(404, None, f"no such format: {fmt[:20]} (json, csv or svg)", True)
            else:
                fmt = _split(req.path_params["name"])[1] if "name" in req.path_params else "html"
            try:
                return await run_in_threadpool(fn, req, fmt)
            except BadRequest as e:
                return _fail(e.status, e.field, e.message, fmt == "html")
            except NotFound as e:
                return _fail(404, None, f"no such run or device: {str(e)[:80]}", fmt == "html")
        return handler

    def reply(fmt: str, data: Any, html: Callable[[], str], csv: Callable[[], str],
              svg: Callable[[], bytes] | None = None) -> Response:
        if fmt == "json":
            return JSONResponse(data)
        if fmt == "csv":
            return Response(csv(), media_type="text/csv; charset=utf-8")
        if fmt == "svg":
            if svg is None:
                raise NotFound("plot")
            return Response(svg(), media_type="image/svg+xml")
        return HTMLResponse(html())

    def index(req: Request, fmt: str) -> Response:
        counts, recent = fleet.counts(), fleet.recent()
        return reply(fmt, {"counts": counts, "recent": recent},
                     lambda: pages.index(counts, recent, fleet.db.describe()),
                     lambda: pages.to_csv(["slug", "started", "experiment", "model"],
                                          [(r["slug"], r["started"], r["experiment"], r["model"]) for r in recent]))

    def ranking(req: Request, fmt: str) -> Response:
        o = _options(req)
        r = fleet.ranking(o["key"], o["include"], o["min_runs"])
        q = _query(req, "key", "include", "min_runs")

        def svg() -> bytes:
            from smartio.report import plots

            key = ("ranking.svg", r["key"], tuple(r["include"]), r["min_runs"])
            return fleet.cached(key, lambda: plots.svg_bytes(
                plots.fleet_ranking(r["rows"], f"Top {len(r['rows'])} models by total bandwidth (median per "
                                    f"device, at least {r['min_runs']} runs)", r["describe"] or "")))
        return reply(fmt, r, lambda: pages.ranking(r, q), lambda: pages.ranking_csv(r), svg)

    def ecdf(req: Request, fmt: str) -> Response:
        o = _options(req)
        metric = req.query_params.get("metric", "lat_ms")
        if metric not in ("lat_ms", "iowait_pct"):
            raise BadRequest(400, "metric", "must be lat_ms or iowait_pct")
        e = fleet.ecdf(metric, o["key"], o["include"], o["min_runs"])
        q = _query(req, "metric", "key", "include", "min_runs")

        def svg() -> bytes:
            from smartio.report import plots

            m = METRICS[metric]
            key = ("ecdf.svg", metric, e["key"], tuple(e["include"]), e["min_runs"])
            return fleet.cached(key, lambda: plots.svg_bytes(
                plots.fleet_ecdf(e["series"], f"{m.label} ({m.unit})", f"ECDF across {e['devices']} devices of "
                                 f"each device's median {m.label}", e["describe"] or "", log=metric == "lat_ms")))
        return reply(fmt, e, lambda: pages.ecdf(e, q), lambda: pages.ecdf_csv(e), svg)

    def run(req: Request, fmt: str) -> Response:
        slug = _split(req.path_params["name"])[0]
        if not SLUG.match(slug):
            raise NotFound(slug)
        r = fleet.run(slug)

        def svg() -> bytes:
            from smartio.report import plots

            m = r["metrics"]
            return plots.svg_bytes(plots.fleet_side_by_side(["this run"], [m.get("bw_mbps", {})], "bandwidth (MB/s)",
                                                            f"{r['model']}: bandwidth per pattern",
                                                            r["document"]["run"]["started"]))
        return reply(fmt, r, lambda: pages.run(r), lambda: pages.run_csv(r), svg)

    def device(req: Request, fmt: str) -> Response:
        ident = _split(req.path_params["name"])[0]
        if not ident.isdigit() or len(ident) > 18:
            raise NotFound(ident)
        d = fleet.device(int(ident))

        def svg() -> bytes:
            from smartio.report import plots

            return plots.svg_bytes(plots.fleet_history([(r["started"], r["bw_mbps"]) for r in d["runs"]],
                                                       f"{d['model']}: its runs over time", f"{len(d['runs'])} runs"))
        return reply(fmt, d, lambda: pages.device(d), lambda: pages.device_csv(d), svg)

    def compare(req: Request, fmt: str) -> Response:
        a = req.query_params.get("a")
        b = req.query_params.get("b")
        if not a:
            raise BadRequest(400, "a", "missing: /compare?a=RUN&b=RUN")
        if not b and fmt == "html":
            return HTMLResponse(pages.pick_runs(a, fleet.recent(100)))
        if not b:
            raise BadRequest(400, "b", "missing: /compare?a=RUN&b=RUN")
        ra, rb = fleet.run(a), fleet.run(b)
        c = {"a": ra, "b": rb, "comparable": ra["key"] == rb["key"]}
        q = _query(req, "a", "b")

        def svg() -> bytes:
            from smartio.report import plots

            return plots.svg_bytes(plots.fleet_side_by_side(
                [f"A {ra['model']}", f"B {rb['model']}"], [ra["metrics"].get("bw_mbps", {}),
                                                         rb["metrics"].get("bw_mbps", {})],
                "bandwidth (MB/s)", "Two runs side by side" + ("" if c["comparable"] else " (NOT comparable)"),
                f"A {ra['document']['run']['started']}, B {rb['document']['run']['started']}"))
        return reply(fmt, c, lambda: pages.compare(c, q), lambda: pages.compare_csv(c), svg)

    async def submit(req: Request) -> Response:
        token = req.headers.get("x-delete-token", "")
        if not TOKEN.match(token):
            return _fail(400, "X-Delete-Token", "missing or malformed: 16 to 128 characters of A-Z a-z 0-9 _ -")
        public = req.headers.get("x-public", "no").lower()
        if public not in ("yes", "no"):
            return _fail(400, "X-Public", "must be yes or no")
        length = req.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            return _fail(413, None, f"the body is over the cap of {cap} bytes")
        body = bytearray()
        try:
            async for chunk in req.stream():
                body += chunk
                if len(body) > cap:
                    return _fail(413, None, f"the body is over the cap of {cap} bytes")
        except ClientDisconnect:
            return _fail(400, None, "the upload ended before its body did; nothing was stored")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return _fail(400, None, f"malformed JSON: {e}")
        except RecursionError:
            return _fail(400, None, "malformed JSON: nested too deeply")
        try:
            validate(doc)
        except Invalid as e:
            return _fail(e.status, e.field or None, e.message)
        try:
            stored = await run_in_threadpool(fleet.submit, doc, token, public == "yes")
        except Exception as e:      # the database is down or refused: say so, and that the client may retry
            return _fail(503, None, f"the database could not store the run ({type(e).__name__}); nothing was "
                                    "stored, retry later")
        url = f"{str(req.base_url).rstrip('/')}/runs/{stored.slug}"
        out = {"id": stored.id, "slug": stored.slug, "url": url, "created": stored.created,
               "public": public == "yes"}
        if stored.created or stored.token_matches:
            out["delete_token"] = token
        else:
            out["note"] = "stored before by another upload; its delete token is the first upload's"
        return JSONResponse(out, status_code=201 if stored.created else 200)

    async def unsubmit(req: Request) -> Response:
        slug = req.path_params["slug"]
        token = req.headers.get("x-delete-token", "")
        if not TOKEN.match(token):
            return _fail(400, "X-Delete-Token", "missing or malformed")
        try:
            await run_in_threadpool(fleet.delete, slug, token)
        except NotFound:
            return _fail(404, "slug", f"no such run: {slug[:80]}")
        except Forbidden:
            return _fail(403, "X-Delete-Token", "does not match this run's delete token; nothing was deleted")
        return JSONResponse({"deleted": slug})

    async def health(req: Request) -> Response:
        return JSONResponse({"ok": True, "schema_version": fleet.db.version(), "pid": os.getpid()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        def warm() -> None:      # the first visitor of a large database should not wait for the medians
            with contextlib.suppress(Exception):
                fleet.ranking()
                fleet.ecdf()
        threading.Thread(target=warm, daemon=True).start()
        yield
        fleet.db.close()

    routes = [
        Route("/", view(index)), Route("/index.{fmt}", view(index)),
        Route("/ranking", view(ranking)), Route("/ranking.{fmt}", view(ranking)),
        Route("/ecdf", view(ecdf)), Route("/ecdf.{fmt}", view(ecdf)),
        Route("/compare", view(compare)), Route("/compare.{fmt}", view(compare)),
        Route("/runs/{name}", view(run)), Route("/devices/{name}", view(device)),
        Route("/api/v1/runs", submit, methods=["POST"]),
        Route("/api/v1/runs/{slug}", unsubmit, methods=["DELETE"]),
        Route("/healthz", health),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.fleet = fleet
    return app

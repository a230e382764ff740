"""The results service (`smartio serve`) end to end, over HTTP on loopback, against a real server process: the same
suite on the embedded SQLite and on a real PostgreSQL started from Debian's packages. Submissions, idempotence,
deletion, the pages in HTML, JSON, CSV and SVG, what is ranked and what is left out, and the bad inputs (each with
a clear status and message naming the field, and nothing stored)."""

from __future__ import annotations

import csv
import io
import json
import secrets
import socket
import time
from collections.abc import Iterator

import pytest
from fleet_support import PRIVATE_HOST, PRIVATE_PATH, get_json, local_doc, post, postgres, request, submission

from smartio.fleet.db import SCHEMA_VERSION, Database
from smartio.fleet.submission import PATTERNS, SCHEMA, comparability_key, content_hash
from smartio.fleet.tempdb import Server

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path_factory.mktemp("fleet") / "fleet.db")
    else:
        with postgres() as pg:
            yield pg.new_database("fleet")


@pytest.fixture(scope="module")
def server(db_url: str) -> Iterator[Server]:
    s = Server(db_url).start()
    try:
        yield s
    finally:
        s.stop()


def _count(db_url: str) -> int:
    db = Database(db_url)
    with db.connection() as c:
        n = int(c.one("SELECT COUNT(*) FROM runs")[0])
    db.close()
    return n


def _unique_size() -> int:
    """A data size no other test uses: its runs get a comparability key of their own, so pages keyed by it show
    this test's runs alone although the module shares one database."""
    return (secrets.randbelow(1 << 20) + 1) << 12


def test_a_submission_is_stored_once_and_its_page_shows_it(server: Server) -> None:
    sub = submission("Acme Phone 1")
    token = secrets.token_urlsafe(24)
    status, out = post(server.url, sub, token)
    assert status == 201 and out["created"] and out["delete_token"] == token
    assert out["url"] == f"{server.url}/runs/{out['slug']}"
    again, out2 = post(server.url, sub, token)          # a replayed upload
    assert again == 200 and out2["id"] == out["id"] and not out2["created"] and out2["delete_token"] == token
    other, out3 = post(server.url, sub)                 # the same document with another token
    assert other == 200 and out3["id"] == out["id"] and "delete_token" not in out3
    page = get_json(f"{out['url']}.json")
    assert page["document"] == sub and page["model"] == "Acme Phone 1" and page["public"]
    status, html, headers = request("GET", out["url"])
    assert status == 200 and headers["content-type"].startswith("text/html") and b"Acme Phone 1" in html
    status, svg, headers = request("GET", f"{out['url']}.svg")
    assert status == 200 and headers["content-type"] == "image/svg+xml" and svg.startswith(b"<?xml")
    rows = list(csv.DictReader(io.StringIO(request("GET", f"{out['url']}.csv")[1].decode())))
    assert {(r["metric"], r["pattern"]) for r in rows} >= {("bw_mbps", p) for p in PATTERNS}


def test_nothing_private_leaves_the_machine(server: Server) -> None:
    sub = submission("Acme Phone 2")
    text = json.dumps(sub)
    assert PRIVATE_HOST not in text and PRIVATE_PATH not in text and "/dev/sda2" not in text
    assert {"host", "command", "target.path", "device.path"} <= set(sub["privacy"]["stripped"])
    assert "fio_raw.*.output.jobs.*.job options.filename" in sub["privacy"]["stripped"]
    assert sub["fio_raw"][0]["output"]["jobs"][0]["job options"]["rw"] == "read"      # the rest of fio's output
    status, out = post(server.url, sub)
    assert status == 201
    assert PRIVATE_HOST.encode() not in request("GET", out["url"])[1]


def test_a_run_is_deleted_only_with_its_token(server: Server) -> None:
    token = secrets.token_urlsafe(24)
    _, out = post(server.url, submission("Acme Phone 3"), token)
    wrong = request("DELETE", f"{server.url}/api/v1/runs/{out['slug']}",
                    headers={"X-Delete-Token": secrets.token_urlsafe(24)})
    assert wrong[0] == 403 and json.loads(wrong[1])["field"] == "X-Delete-Token"
    assert request("GET", out["url"])[0] == 200            # still there
    ok = request("DELETE", f"{server.url}/api/v1/runs/{out['slug']}", headers={"X-Delete-Token": token})
    assert ok[0] == 200
    assert request("GET", out["url"])[0] == 404
    assert request("DELETE", f"{server.url}/api/v1/runs/{out['slug']}", headers={"X-Delete-Token": token})[0] == 404


def test_private_runs_are_reachable_by_their_address_only(server: Server) -> None:
    size = _unique_size()
    _, out = post(server.url, submission("Hidden Phone", size_bytes=size), public=False)
    assert get_json(f"{out['url']}.json")["public"] is False
    key = comparability_key(submission("x", size_bytes=size), "latency", "bw_mbps")
    assert get_json(f"{server.url}/ranking.json?key={key}&min_runs=1")["rows"] == []
    assert out["slug"] not in json.dumps(get_json(f"{server.url}/index.json"))


def test_ranking_is_total_bandwidth_per_model_by_its_top_device_with_a_minimum_of_runs(server: Server) -> None:
    size = _unique_size()
    fast, slow, other = secrets.token_hex(16), secrets.token_hex(16), secrets.token_hex(16)
    for i in range(5):          # model A: a fast and a slow device; model B: one device
        post(server.url, submission("Model A", 0.5 + i * 0.01, fast, size_bytes=size, started=f"2026-12-0{i + 1}"))
        post(server.url, submission("Model A", 2.0 + i * 0.01, slow, size_bytes=size, started=f"2026-12-0{i + 1}"))
        post(server.url, submission("Model B", 1.0 + i * 0.01, other, size_bytes=size, started=f"2026-12-0{i + 1}"))
    post(server.url, submission("Model C", 0.1, size_bytes=size))        # one run only
    post(server.url, submission("Model D", 0.1, size_bytes=size, quick=True))
    post(server.url, submission("emulated", 0.1, size_bytes=size, profile="s5-emmc"))
    post(server.url, submission("Model E", 0.1, size_bytes=size, warnings=["the target was nearly full"]))
    key = comparability_key(submission("x", size_bytes=size), "latency", "bw_mbps")
    r = get_json(f"{server.url}/ranking.json?key={key}&min_runs=5")
    assert [(x["model"], x["n"], x["devices_of_model"]) for x in r["rows"]] == [("Model A", 5, 2), ("Model B", 5, 1)]
    top = r["rows"][0]
    assert top["median"]["seq_read"] == pytest.approx(4096 / 0.52e-3 / 1e6)     # the fast device's median
    assert top["total_mbps"] == pytest.approx(sum(top["median"].values()))
    everything = get_json(f"{server.url}/ranking.json?key={key}&min_runs=1&include=quick,emulated,flagged")
    models = [x["model"] for x in everything["rows"]]
    assert models[:1] != ["Model A"] and {"Model C", "Model D", "emulated s5-emmc", "Model E"} <= set(models)
    assert [x for x in everything["rows"] if x["model"] == "emulated s5-emmc"][0]["emulated"] == "s5-emmc"
    plain = get_json(f"{server.url}/ranking.json?key={key}&min_runs=1")
    assert {x["model"] for x in plain["rows"]} == {"Model A", "Model B", "Model C"}
    status, html, _ = request("GET", f"{server.url}/ranking?key={key}&min_runs=5")
    assert status == 200 and b"Model A" in html and b"<img" in html and b"n runs" in html
    rows = list(csv.DictReader(io.StringIO(request("GET", f"{server.url}/ranking.csv?key={key}&min_runs=5")[1]
                                           .decode())))
    assert [r["model"] for r in rows] == ["Model A", "Model B"] and rows[0]["n"] == "5"
    status, svg, _ = request("GET", f"{server.url}/ranking.svg?key={key}&min_runs=5")
    assert status == 200 and b"Model A" in svg


def test_ecdfs_are_across_devices_of_each_devices_median(server: Server) -> None:
    size = _unique_size()
    for j, base in enumerate((1.0, 2.0, 4.0)):
        dev = secrets.token_hex(16)
        for i in range(3):
            post(server.url, submission(f"Ecdf {j}", base * (1 + i / 10), dev, size_bytes=size, iowait=base))
    key = comparability_key(submission("x", size_bytes=size), "latency", "lat_ms")
    e = get_json(f"{server.url}/ecdf.json?key={key}&min_runs=3")
    assert e["devices"] == 3 and e["series"]["seq_read"] == pytest.approx([1.1, 2.2, 4.4])
    ikey = comparability_key(submission("x", size_bytes=size), "latency", "iowait_pct")
    i = get_json(f"{server.url}/ecdf.json?metric=iowait_pct&key={ikey}&min_runs=3")
    assert i["series"]["all"] == pytest.approx([1.0, 2.0, 4.0])
    rows = list(csv.DictReader(io.StringIO(request("GET", f"{server.url}/ecdf.csv?key={key}&min_runs=3")[1]
                                           .decode())))
    assert [float(r["fraction_of_devices"]) for r in rows if r["pattern"] == "seq_read"] == pytest.approx(
        [1 / 3, 2 / 3, 1])
    assert request("GET", f"{server.url}/ecdf.svg?key={key}&min_runs=3")[0] == 200
    assert b"<img" in request("GET", f"{server.url}/ecdf?key={key}&min_runs=3")[1]


def test_a_device_page_shows_its_history_and_two_runs_compare_side_by_side(server: Server) -> None:
    dev = secrets.token_hex(16)
    a = post(server.url, submission("History Phone", 1.0, dev, started="2026-11-01T00:00:00+00:00"))[1]
    b = post(server.url, submission("History Phone", 2.0, dev, started="2026-11-02T00:00:00+00:00"))[1]
    run = get_json(f"{a['url']}.json")
    d = get_json(f"{server.url}/devices/{run['device_id']}.json")
    assert [r["slug"] for r in d["runs"]] == [a["slug"], b["slug"]]
    assert d["runs"][0]["total_mbps"] == pytest.approx(2 * d["runs"][1]["total_mbps"])
    assert request("GET", f"{server.url}/devices/{run['device_id']}.svg")[0] == 200
    assert b"History Phone" in request("GET", f"{server.url}/devices/{run['device_id']}")[1]
    c = get_json(f"{server.url}/compare.json?a={a['slug']}&b={b['slug']}")
    assert c["comparable"] and c["b"]["metrics"]["lat_ms"]["seq_read"] == pytest.approx(2.0)
    html = request("GET", f"{server.url}/compare?a={a['slug']}&b={b['slug']}")[1]
    assert b"2.00" in html and b"Not comparable" not in html          # B / A of the latency
    quick = post(server.url, submission("History Phone", 1.0, dev, quick=True, size_bytes=8 << 20))[1]
    assert not get_json(f"{server.url}/compare.json?a={a['slug']}&b={quick['slug']}")["comparable"]
    assert b"Not comparable" in request("GET", f"{server.url}/compare?a={a['slug']}&b={quick['slug']}")[1]
    assert request("GET", f"{server.url}/compare.csv?a={a['slug']}&b={b['slug']}")[0] == 200


# --- bad input ------------------------------------------------------------------------------------------------

def _refused(server: Server, db_url: str, status: int, field: str | None, **kw: object) -> dict:
    before = _count(db_url)
    got, out = post(server.url, **kw)     # type: ignore[arg-type]
    assert got == status, out
    assert out["field"] == field and out["error"]
    assert _count(db_url) == before
    return out


def test_malformed_json_is_refused(server: Server, db_url: str) -> None:
    out = _refused(server, db_url, 400, None, doc=None, raw=b'{"schema": "smartio.fleet')
    assert "malformed JSON" in out["error"]


def test_a_wrong_schema_version_is_refused(server: Server, db_url: str) -> None:
    sub = submission("Schema Phone")
    sub["schema"] = "smartio.fleet.submission/99"
    out = _refused(server, db_url, 422, "schema", doc=sub)
    assert SCHEMA in out["error"]


@pytest.mark.parametrize("path", ["device.model", "run.settings.bs", "results.latency.patterns.rand_write.mean_ms.mean",
                                  "privacy"])
def test_a_missing_field_is_named_in_the_reply(server: Server, db_url: str, path: str) -> None:
    sub = submission("Missing Phone")
    *parents, last = path.split(".")
    node = sub
    for p in parents:
        node = node[p]
    del node[last]
    out = _refused(server, db_url, 422, path.replace("privacy", "privacy"), doc=sub)
    assert out["error"] == "missing"


def test_a_body_over_the_cap_is_refused(server: Server, db_url: str) -> None:
    sub = submission("Big Phone")
    sub["fio_raw"] = [{"label": "x", "output": {"pad": "x" * (server.max_body + 10)}}]
    out = _refused(server, db_url, 413, None, doc=sub)
    assert str(server.max_body) in out["error"]


def test_a_missing_delete_token_is_refused(server: Server, db_url: str) -> None:
    before = _count(db_url)
    status, body, _ = request("POST", f"{server.url}/api/v1/runs", json.dumps(submission("T")).encode())
    assert status == 400 and json.loads(body)["field"] == "X-Delete-Token"
    assert _count(db_url) == before


def test_names_with_markup_or_sql_are_stored_literally_and_shown_escaped(server: Server) -> None:
    name = "<script>alert(1)</script>'; DROP TABLE runs; --"
    status, out = post(server.url, submission(name))
    assert status == 201
    assert get_json(f"{out['url']}.json")["model"] == name
    html = request("GET", out["url"])[1].decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&#x27;; DROP TABLE runs; --" in html
    assert b"<script>" not in request("GET", f"{server.url}/")[1]
    svg = request("GET", f"{out['url']}.svg")[1].decode()
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    dev = get_json(f"{out['url']}.json")["device_id"]
    assert b"&lt;script&gt;" in request("GET", f"{server.url}/devices/{dev}")[1]
    csv_text = request("GET", f"{server.url}/ranking.csv?min_runs=1")[1].decode()
    assert "\n=" not in csv_text and ",=" not in csv_text                  # no cell a spreadsheet would run


def test_bad_page_parameters_are_refused_naming_them(server: Server) -> None:
    for query, field in (("include=everything", "include"), ("min_runs=0", "min_runs"), ("min_runs=x", "min_runs"),
                         ("key=%27%3B", "key")):
        status, body, _ = request("GET", f"{server.url}/ranking.json?{query}")
        assert status == 400 and json.loads(body)["field"] == field, query
    status, body, _ = request("GET", f"{server.url}/ecdf.json?metric=evil")
    assert status == 400 and json.loads(body)["field"] == "metric"
    assert request("GET", f"{server.url}/runs/nosuchrun")[0] == 404
    assert request("GET", f"{server.url}/devices/99999999")[0] == 404
    assert request("GET", f"{server.url}/ranking.exe")[0] == 404


def test_a_server_restarted_mid_upload_stores_nothing_and_takes_the_retry(db_url: str) -> None:
    s = Server(db_url).start()
    try:
        before = _count(db_url)
        sub = submission("Restart Phone")
        body = json.dumps(sub).encode()
        token = secrets.token_urlsafe(24)
        sock = socket.create_connection(("127.0.0.1", s.port))
        head = (f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Delete-Token: "
                f"{token}\r\nX-Public: yes\r\nContent-Length: {len(body)}\r\n\r\n")
        sock.sendall(head.encode() + body[:len(body) // 2])
        time.sleep(0.3)
        s.kill()                # mid-upload: half the body sent
        sock.close()
        assert _count(db_url) == before
        s.start()
        status, out = post(s.url, sub, token)
        assert status == 201 and _count(db_url) == before + 1
        assert post(s.url, sub, token)[0] == 200 and _count(db_url) == before + 1
    finally:
        s.stop()


def test_the_schema_is_migrated_once_and_a_newer_one_is_refused(db_url: str) -> None:
    from smartio.errors import UsageError

    db = Database(db_url)
    assert db.version() == SCHEMA_VERSION
    Database(db_url).close()            # opening again migrates nothing
    with db.connection() as c:
        assert [r[0] for r in c.all("SELECT version FROM schema_migrations ORDER BY version")] == list(
            range(1, SCHEMA_VERSION + 1))
    with db.transaction() as c:
        c.execute("INSERT INTO schema_migrations (version, applied) VALUES (?, ?)", (SCHEMA_VERSION + 1, "later"))
    with pytest.raises(UsageError, match="newer smartio"):
        Database(db_url)
    with db.transaction() as c:
        c.execute("DELETE FROM schema_migrations WHERE version = ?", (SCHEMA_VERSION + 1,))
    db.close()


def test_the_content_hash_ignores_key_order() -> None:
    sub = submission("Hash Phone")
    assert content_hash(sub) == content_hash(json.loads(json.dumps(sub, sort_keys=True)))
    assert local_doc()["host"] == PRIVATE_HOST


def test_device_statistics_follow_deletions_and_are_rebuilt_when_a_migration_asks(server: Server, db_url: str) -> None:
    from smartio.fleet.service import Fleet

    size = _unique_size()
    dev = secrets.token_hex(16)
    tokens = [secrets.token_urlsafe(24) for _ in range(3)]
    outs = [post(server.url, submission("Stats Phone", lat, dev, size_bytes=size), tok)[1]
            for lat, tok in zip((1.0, 2.0, 9.0), tokens, strict=True)]
    key = comparability_key(submission("x", size_bytes=size), "latency", "lat_ms")
    e = get_json(f"{server.url}/ecdf.json?key={key}&min_runs=1")
    assert e["series"]["seq_read"] == pytest.approx([2.0])                 # the median of 1, 2, 9
    request("DELETE", f"{server.url}/api/v1/runs/{outs[2]['slug']}", headers={"X-Delete-Token": tokens[2]})
    assert get_json(f"{server.url}/ecdf.json?key={key}&min_runs=1")["series"]["seq_read"] == pytest.approx([1.5])
    assert get_json(f"{server.url}/ecdf.json?key={key}&min_runs=3")["devices"] == 0
    db = Database(db_url)
    with db.transaction() as c:
        c.execute("DELETE FROM device_stats")
        c.execute("INSERT INTO pending_rebuilds (what) VALUES ('device_stats')")
    fleet = Fleet(db, min_runs=1)
    assert fleet.ecdf("lat_ms", key)["series"]["seq_read"] == pytest.approx([1.5])
    db.close()


def test_json_nested_too_deeply_or_numbers_too_large_are_refused(server: Server, db_url: str) -> None:
    _refused(server, db_url, 400, None, doc=None, raw=b"[" * 100_000 + b"]" * 100_000)
    sub = submission("Huge Phone")
    raw = json.dumps(sub).replace('"bs": 4096', '"bs": 1' + "0" * 400).encode()
    _refused(server, db_url, 422, "run.settings.bs", doc=None, raw=raw)
    sub = submission("Odd Phone")
    sub["results"]["slowdown"] = [1, 2]
    _refused(server, db_url, 422, "results.slowdown", doc=sub)


def test_a_lost_database_connection_is_a_503_and_the_next_upload_is_stored() -> None:
    import psycopg

    with postgres() as pg:
        url = pg.new_database("lost")
        s = Server(url).start()
        try:
            assert post(s.url, submission("Before Phone"))[0] == 201
            with psycopg.connect(url, autocommit=True) as c:      # what a database restart does to the server
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'lost' AND "
                          "pid <> pg_backend_pid()")
            statuses = []
            for name in ("After Phone 1", "After Phone 2", "After Phone 3"):
                status, out = post(s.url, submission(name))
                assert status in (201, 503), out
                statuses.append(status)
                if status == 503:
                    assert "nothing was stored" in out["error"]
            assert statuses[-1] == 201 and _count(url) == 1 + statuses.count(201)
        finally:
            s.stop()

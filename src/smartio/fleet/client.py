"""Sending stored runs to a fleet server: `smartio results submit`, `unsubmit`, and `smartio bench ... --submit`.

The local results database stays the source of truth. Each submission is first written to an outbox beside it
(RESULTS.submissions.json: the server, the run, a delete token made here, its state), then sent; a failed upload
stays pending there and is sent again by the next submit to that server. Because the token is made here and the
server recognises a document it has (its content hash), a retry after a lost reply finds the first upload again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from smartio.errors import UsageError
from smartio.fleet.identity import install_id, submission_of
from smartio.fleet.submission import Invalid, validate
from smartio.results import Store, default_path

TIMEOUT_S = 30


def check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")) or len(url) > 2000:
        raise UsageError("URL", url, "must be the server's http:// or https:// address, e.g. http://127.0.0.1:8046")
    return url.rstrip("/")


class Outbox:
    """The submissions of one results database, in a JSON file beside it, read and written under a lock."""

    def __init__(self, results_db: Path) -> None:
        self.path = results_db.with_name(results_db.name + ".submissions.json")

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = {"version": 1, "entries": {}}
            yield data
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.path)

    def entries(self) -> dict[str, Any]:
        with self.edit() as data:
            return dict(data["entries"])


def _key(url: str, run_id: int) -> str:
    return f"{url} {run_id}"


def post(url: str, body: bytes, token: str, public: bool, timeout: float = TIMEOUT_S) -> tuple[int, dict[str, Any]]:
    """POST a submission; (status, reply). Raises OSError when the server cannot be reached."""
    req = urllib.request.Request(f"{url}/api/v1/runs", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Delete-Token": token, "X-Public": "yes" if public else "no"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {"error": f"HTTP {e.code} without a JSON reply"}


def delete(url: str, slug: str, token: str, timeout: float = TIMEOUT_S) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{url}/api/v1/runs/{slug}", method="DELETE", headers={"X-Delete-Token": token})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {"error": f"HTTP {e.code} without a JSON reply"}


def submit(store: Store, url: str, ids: list[int], *, public: bool, model: str | None,
           data_dir: Path | None = None) -> tuple[list[str], bool]:
    """Queue the runs `ids` for `url` (none: every StoreBench run not yet sent there), send every pending one, and
    return a line per run and whether all arrived. Runs that cannot be submitted at all raise UsageError."""
    url = check_url(url)
    install = install_id(data_dir or default_path().parent)
    outbox = Outbox(store.path)
    if not ids:
        known = outbox.entries()
        ids = [r.id for r in reversed(store.list(None)) if r.experiment in ("latency", "slowdown", "concurrency",
                                                                           "mixed", "all")
               and _key(url, r.id) not in known]
    docs = {}
    for i in ids:
        doc = store.get(i)
        sub = submission_of(doc, install=install, model=model)
        try:
            validate(sub)
        except Invalid as e:
            raise UsageError("ID", i, f"cannot be submitted: {e}") from None
        docs[i] = sub
    with outbox.edit() as data:
        for i in ids:
            data["entries"].setdefault(_key(url, i), {"url": url, "run": i, "token": secrets.token_urlsafe(24),
                                                      "public": public, "state": "pending"})
    lines, ok = [], True
    pending = {k: e for k, e in outbox.entries().items() if e["url"] == url and e["state"] == "pending"}
    for key, item in sorted(pending.items(), key=lambda kv: kv[1]["run"]):
        run_id = int(item["run"])
        try:
            sub = docs.get(run_id) or submission_of(store.get(run_id), install=install, model=model)
        except UsageError as refused:
            lines.append(f"run {run_id}: {refused}")
            ok = False
            continue
        try:
            status, reply = post(url, json.dumps(sub).encode(), item["token"], item["public"])
        except OSError as down:
            lines.append(f"run {run_id}: not submitted ({getattr(down, 'reason', down)}); kept, and sent again by the "
                         f"next `smartio results submit {url}`")
            ok = False
            continue
        with outbox.edit() as data:
            entry = data["entries"][key]
            if status in (200, 201):
                entry.update(state="submitted", slug=reply["slug"], run_url=reply["url"])
                if "delete_token" not in reply:
                    entry["token"] = None       # stored before by another upload, with another token
                vis = "public" if item["public"] else "private"
                lines.append(f"run {run_id}: {reply['url']} ({vis}{'' if status == 201 else ', stored before'}; "
                             f"`smartio results unsubmit {url} {run_id}` deletes it)")
            elif status >= 500:
                lines.append(f"run {run_id}: not submitted (the server said {status}: {reply.get('error')}); kept, "
                             f"and sent again by the next `smartio results submit {url}`")
                ok = False
            else:
                field = f" (field {reply.get('field')})" if reply.get("field") else ""
                entry.update(state="refused", error=f"{status}: {reply.get('error')}{field}")
                lines.append(f"run {run_id}: refused by the server, {status}: {reply.get('error')}{field}")
                ok = False
    if not pending:
        lines.append(f"nothing to submit to {url}")
    return lines, ok


def unsubmit(store: Store, url: str, ids: list[int]) -> list[str]:
    url = check_url(url)
    outbox = Outbox(store.path)
    known = outbox.entries()
    lines = []
    for i in ids:
        e = known.get(_key(url, i))
        if e is None or e["state"] != "submitted":
            raise UsageError("ID", i, f"was not submitted to {url} from this database")
        if not e.get("token"):
            raise UsageError("ID", i, "was stored there by an earlier upload; this database has no delete token")
        try:
            status, reply = delete(url, e["slug"], e["token"])
        except OSError as err:
            raise UsageError("URL", url, f"cannot be reached: {getattr(err, 'reason', err)}") from None
        if status not in (200, 404):
            raise UsageError("ID", i, f"the server refused: {status}: {reply.get('error')}")
        with outbox.edit() as data:
            data["entries"].pop(_key(url, i), None)
        lines.append(f"run {i}: deleted from {url}" + (" (it was already gone)" if status == 404 else ""))
    return lines

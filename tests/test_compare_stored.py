"""Every comparison is kept in the host's results database (`smartio results list` and
`show`), with the guest's results, also one that was interrupted or failed; its id is in compare.json. Recorded
comparisons of each kind stand in for the runs (the VM tests store real ones)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smartio.cli import main
from smartio.compare.run import DOCUMENT, keep
from smartio.results import Store

DATA = Path(__file__).parent / "data"
RECORDED = {
    "slowdown and mixed": DATA.parent.parent / "runs/storebench-compare-20261127/1r1w/compare.json",
    "launch": DATA / "launch/run-20261126g/compare.json",
    "qasio": DATA / "qasio/m1-three-runs/compare.json",
}


@pytest.mark.parametrize("kind", list(RECORDED))
def test_a_comparison_is_stored_listed_and_shown(kind, tmp_path, capsys):
    doc = json.loads(RECORDED[kind].read_text())
    db = tmp_path / "r.db"
    keep(doc, tmp_path, db)
    on_disk = json.loads((tmp_path / DOCUMENT).read_text())
    assert on_disk["id"] == doc["id"] == 1
    stored = Store(db).get(1)
    assert stored == on_disk                      # the whole document, the guest's runs included
    assert main(["results", "list", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    row = out.splitlines()[1]
    assert row.split()[:3] == ["1", doc["started"], "compare"] and "s5-emmc" in row and "testbed" in row
    assert main(["results", "show", "1", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"run 1: {doc['command']}") and "Traceback" not in shown
    assert {"slowdown and mixed": "Figure 11", "launch": "cold seq-write/idle", "qasio": "M1"}[kind] in shown


def test_a_run_that_goes_on_is_stored_in_its_place(tmp_path):
    # compare.json is written as the run goes (plots added, a --resume session): one row, the latest document,
    # found by the run's run_uid, also when the id never reached compare.json (stopped between the two writes).
    doc = json.loads(RECORDED["launch"].read_text()) | {"run_uid": "run-a"}
    db = tmp_path / "r.db"
    keep(doc, tmp_path, db)
    doc["sessions"] = [{"artifacts": "vm-2"}]
    keep({k: v for k, v in doc.items() if k != "id"}, tmp_path, db)
    store = Store(db)
    assert [r.id for r in store.list()] == [1] and store.get(1)["sessions"] == [{"artifacts": "vm-2"}]
    assert json.loads((tmp_path / DOCUMENT).read_text())["id"] == 1
    # Another run, even with the same plan and an id that names run 1 (compare.json copied, another --db): a new row.
    other = json.loads(RECORDED["launch"].read_text()) | {"run_uid": "run-b", "id": 1}
    keep(other, tmp_path, db)
    assert other["id"] == 2 and Store(db).get(1)["run_uid"] == "run-a"
    # A document with no run_uid (written before there was one) is a new row each time: never another's.
    keep(json.loads(RECORDED["qasio"].read_text()), tmp_path, db)
    assert [r.id for r in Store(db).list()] == [3, 2, 1]


def test_a_database_that_fails_loses_nothing(tmp_path, capsys):
    # After hours of measuring, a database that cannot be opened only warns: compare.json is written all the same.
    doc = json.loads(RECORDED["launch"].read_text())
    (tmp_path / "db").mkdir()
    keep(doc, tmp_path, tmp_path / "db")
    assert json.loads((tmp_path / DOCUMENT).read_text())["cells"] == doc["cells"] and "id" not in doc
    assert "is not in the results database" in capsys.readouterr().err


def test_compare_refuses_a_bad_db_before_booting(tmp_path, capsys):
    (tmp_path / "db").write_text("not sqlite")
    assert main(["compare", "--schedulers", "none", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "o")]) == 2
    assert "--db" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [["--schedulers", "cfq"], ["--profile", "nosuch"], ["--timeout", "nan"],
                                  ["--experiment", "launch", "--time-scale", "0"]])
def test_bad_input_touches_no_database(argv, tmp_path, capsys):
    # The plan and the flags are checked before --db is opened: a refused command creates no database file.
    db = tmp_path / "r.db"
    assert main(["compare", *argv, "--db", str(db), "--out", str(tmp_path / "o")]) == 2
    assert not db.exists() and "Traceback" not in capsys.readouterr().err

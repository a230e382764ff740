"""One CLI grammar: `smartio bench EXPERIMENT` and `smartio compare EXPERIMENT | analyze DIR | resume DIR`, the old
spellings rewritten with a notice, and `compare analyze` reading back each kind of comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from smartio import registry
from smartio.cli import aliases, build_parser, main

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("old, new", [
    (["sqlite", "--target", "d"], ["bench", "sqlite", "--target", "d"]),
    (["launch", "run", "--target", "d", "--", "true"], ["bench", "launch", "--target", "d", "--", "true"]),
    (["launch", "replay", "t.json", "--target", "d"], ["bench", "launch", "--replay", "t.json", "--target", "d"]),
    (["compare", "--experiment", "qasio", "--quick"], ["compare", "qasio", "--quick"]),
    (["compare", "--experiment=sqlite"], ["compare", "sqlite"]),
    (["compare", "--quick"], ["compare", "slowdown", "--quick"]),
    (["compare", "--experiment", "launch", "--resume", "d", "--timeout", "9"], ["compare", "resume", "d", "--timeout",
                                                                               "9"]),
    (["compare", "--resume", "d"], ["compare", "resume", "d"]),
    (["compare", "--exp", "launch", "--res", "d"], ["compare", "resume", "d"]),       # argparse's abbreviations
    (["compare", "--resume", "d", "--profile", "s5-emmc"], ["compare", "resume", "d"]),   # ignored, as before
    (["launch", "replay", "--target", "d", "t.json", "--repeats", "3"],
     ["bench", "launch", "--replay", "t.json", "--target", "d", "--repeats", "3"]),
    (["compare"], ["compare", "slowdown"]),
])
def test_old_spellings_are_rewritten_with_a_notice(old, new, capsys):
    assert aliases.rewrite(old, registry.COMPARE) == new
    assert "is now" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["bench", "slowdown", "--quick"], ["compare", "launch", "--quick"], ["compare", "analyze", "d"],
    ["launch", "record", "-o", "t", "--", "true"], ["results", "show", "3"], [],
])
def test_the_current_grammar_is_left_alone(argv, capsys):
    assert aliases.rewrite(list(argv), registry.COMPARE) == argv
    assert capsys.readouterr().err == ""


def test_old_spelling_parses_to_the_same_namespace_as_the_new():
    old = build_parser().parse_args(["compare", "--experiment", "launch", "--apps", "editor", "--repeats", "2"])
    new = build_parser().parse_args(["compare", "launch", "--apps", "editor", "--repeats", "2"])
    assert vars(old) == vars(new) and new.experiment == "launch"


def test_an_option_of_another_experiment_is_refused(capsys):
    assert main(["compare", "mixed", "--apps", "editor"]) == 2
    assert "unrecognized arguments: --apps editor" in capsys.readouterr().err
    assert main(["bench", "latency", "--dependency", "all"]) == 2
    assert main(["compare", "sqlite", "--schedulers", "bfq"]) == 2     # it compares filesystems, not schedulers
    assert "unrecognized arguments: --schedulers bfq" in capsys.readouterr().err


def test_every_comparison_of_the_registry_has_its_options():
    from smartio.cli import compare

    assert set(compare.OPTIONS) == set(registry.COMPARE)
    assert set(compare.PLANS) | {"slowdown", "mixed", "both"} == set(registry.COMPARE)


@pytest.mark.parametrize("run, shows, plots", [
    ("runs/storebench-compare-20261127/1r1w", "Figure 11", True),
    ("runs/qasio-table2-deep-20261125", "M1", False),
    ("tests/data/launch/full-run", "Launch time per scheduler", True),
])
def test_compare_analyze_reprints_each_kind_of_comparison(run, shows, plots, tmp_path, capsys):
    assert main(["compare", "analyze", str(REPO / run)]) == 0
    out = capsys.readouterr().out
    assert shows in out
    doc, exp, _ = registry.read_comparison(REPO / run)
    assert out.rstrip("\n") == "\n".join(registry.analysis(REPO / run, doc, exp)).rstrip("\n")
    rc = main(["compare", "analyze", str(REPO / run), "--plots", str(tmp_path / "p")])
    if plots:
        assert rc == 0 and list((tmp_path / "p").glob("*.png"))
    else:
        assert rc == 2 and "has no plots" in capsys.readouterr().err


def test_compare_analyze_of_what_is_not_a_comparison(tmp_path, capsys):
    assert main(["compare", "analyze", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["compare", "analyze", str(tmp_path)]) == 2
    assert "holds no comparison" in capsys.readouterr().err
    (tmp_path / "compare.json").write_text("{")
    assert main(["compare", "analyze", str(tmp_path)]) == 2
    assert "not readable" in capsys.readouterr().err


def test_every_reference_of_the_registry_resolves():
    import importlib.util

    for e in registry.EXPERIMENTS:
        refs = [e.bench]
        if e.compare is not None:
            c = e.compare
            refs += [c.plan, c.run, c.render, c.plot, c.analyze, c.notes]
            assert importlib.util.find_spec(c.guest) is not None, f"{e.name}: no guest module {c.guest}"
        for ref in filter(None, refs):
            assert callable(registry.resolve(ref)), f"{e.name}: {ref}"

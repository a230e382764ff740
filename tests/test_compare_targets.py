"""The comparison's target checks (smartio.storebench.targets) on intervals and on a recorded comparison
(tests/data/compare/two-schedulers, one repeat: no intervals, so nothing there can be `met`)."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import pytest

from smartio.storebench import targets
from smartio.storebench.compare import Plan, assemble
from smartio.storebench.targets import Figure, below, highest, lowest

DATA = Path(__file__).parent / "data" / "compare" / "two-schedulers"


def _doc() -> dict:
    recorded = json.loads((DATA / "profile.json").read_text())
    profile = types.SimpleNamespace(record=lambda: recorded)
    return assemble(Plan.from_json((DATA / "plan.json").read_text()), DATA, profile=profile, command="test",
                    started="t", vm_result=None)


def test_a_bound_is_met_only_by_the_whole_interval():
    assert below(Figure(1.4, 1.35, 1.45), 1.5) == "met"
    assert below(Figure(1.4, 1.3, 1.6), 1.5) == "undecided"       # straddles the bound
    assert below(Figure(1.6, 1.55, 1.65), 1.5) == "NOT met"
    assert below(Figure(1.4, None, None), 1.5) == "undecided"     # measured once


def test_lowest_and_highest_need_separate_intervals():
    others = [Figure(2.0, 1.9, 2.1), Figure(3.0, 2.5, 3.5)]
    assert lowest(Figure(1.5, 1.4, 1.6), others) == "met"
    assert lowest(Figure(1.85, 1.7, 1.95), others) == "undecided"
    assert lowest(Figure(2.2, 2.1, 2.3), others) == "NOT met"
    assert highest(Figure(4.0, 3.8, 4.2), others) == "met"
    assert highest(Figure(3.2, 2.9, 3.4), others) == "undecided"
    assert highest(Figure(1.0, 0.9, 1.1), others) == "NOT met"


def test_halfwidth():
    assert Figure(2.0, 1.9, 2.1).halfwidth_pct == pytest.approx(5.0)
    assert Figure(2.0, None, None).halfwidth_pct is None


def test_checks_on_a_recorded_comparison():
    doc = _doc()
    checks = targets.slowdown_checks(doc, "smartio", ["mq-deadline"])
    assert [c.name for c in checks[:4]] == ["1R1W seq read slowdown", "1R1W seq write slowdown",
                                            "1R1W seq read slowdown, lowest of all",
                                            "1R1W seq efficiency, highest of all"]
    assert len(checks) == 8 and all(c.verdict in ("undecided", "NOT met") for c in checks)
    smartio = doc["runs"]["smartio"]["slowdown"]["results"]["detail"]["seq"]["read_slowdown"]["mean"]
    assert checks[0].verdict == ("NOT met" if smartio > 1.5 else "undecided")
    mixed, reduction = targets.mixed_checks(doc, "smartio", ["mq-deadline"])
    assert [c.name for c in mixed] == [f"mixed {m} {x}% reads, lowest response" for m in ("seq", "rand")
                                       for x in (20, 80)]
    r = doc["results"]
    want = 100 * sum(r["smartio"]["response_s"]["seq"][x] / r["mq-deadline"]["response_s"]["seq"][x] - 1
                     for x in ("20", "80")) / 2
    assert reduction["seq"]["mq-deadline"] == pytest.approx(want, abs=0.5)
    widest = targets.halfwidths([doc], ["smartio"])
    assert widest[0][0] == math.inf            # one repeat: no interval
    assert all("under smartio" in name for _, name in widest)


def test_a_missing_run_is_not_met():
    doc = _doc()
    del doc["runs"]["smartio"]["slowdown"]
    checks = targets.slowdown_checks(doc, "smartio", ["mq-deadline"])
    assert [c.verdict for c in checks] == ["NOT met", "NOT met"]


def test_a_missing_other_scheduler_is_named_not_confused():
    doc = _doc()
    checks = targets.slowdown_checks(doc, "smartio", ["kyber", "mq-deadline"])   # kyber never ran
    lowest_read = next(c for c in checks if c.name == "1R1W seq read slowdown, lowest of all")
    mq = doc["runs"]["mq-deadline"]["slowdown"]["results"]["detail"]["seq"]["read_slowdown"]["mean"]
    assert lowest_read.target == f"< mq-deadline {mq:.2f}, kyber missing"
    assert targets.lowest(Figure(1.0, 0.9, 1.1), []) == "undecided"
    del doc["runs"]["smartio"]["slowdown"], doc["runs"]["mq-deadline"]["slowdown"]
    assert [c.verdict for c in targets.slowdown_checks(doc, "smartio", ["mq-deadline"])] == ["NOT met"]


def _fig(values: list[float]) -> Figure:
    from smartio.storebench.stats import Stat

    return Figure.of(Stat.of(values).to_json())


def test_lowest_is_decided_by_the_ratio_of_the_repeats_not_by_overlap():
    """Two intervals that overlap can still differ at 95 %: with the repeats recorded, the verdict comes from the
    interval of the ratio (Welch on the logarithms), as the figures' own intervals are taken."""
    mine = _fig([0.9, 1.1, 0.95, 1.05, 1.0, 1.0])
    other = _fig([1.1, 1.2, 1.0, 1.3, 1.15, 1.15])
    assert mine.hi is not None and other.lo is not None and mine.hi > other.lo     # the intervals overlap
    ci = targets.ratio_ci(mine, other)
    assert ci is not None and ci[1] < 1
    assert lowest(mine, [other]) == "met" and highest(other, [mine]) == "met"
    close = _fig([0.95, 1.2, 1.0, 1.25, 1.1, 1.12])                    # mean below, ratio's interval across 1
    ci = targets.ratio_ci(mine, close)
    assert close.mean > mine.mean and ci is not None and ci[1] > 1
    assert lowest(mine, [close]) == "undecided" and highest(close, [mine]) == "undecided"
    assert lowest(mine, [other, close]) == "undecided"                  # every other must be beaten
    # Without the repeats' values (older documents) the intervals themselves must be apart.
    bare = Figure(other.mean, other.lo, other.hi)
    assert lowest(Figure(mine.mean, mine.lo, mine.hi), [bare]) == "undecided"

"""Plots of bench and compare documents: every figure says where its numbers come from, and the mixed workload's
figure has error bars on a zero-based axis. Figures are caught as they are closed."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from PIL import Image, PngImagePlugin

from smartio.report import plots

pytestmark = pytest.mark.timeout(120)

DATA = Path(__file__).parent / "data" / "fio"


@pytest.fixture
def closed_figures(monkeypatch):
    """The figures the code under test closes (it closes every figure it saves)."""
    figs = []
    real = plt.close

    def close(fig=None):
        if fig is not None and hasattr(fig, "texts"):
            figs.append(fig)
        real(fig)

    monkeypatch.setattr(plt, "close", close)
    return figs


def _texts(fig) -> str:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return "\n".join(out)


@pytest.mark.parametrize("experiment", ("latency", "slowdown", "concurrency", "mixed"))
def test_every_bench_plot_carries_its_provenance(experiment, tmp_path, closed_figures):
    doc = json.loads((DATA / experiment / "document.json").read_text())
    [path] = plots.write_plots(doc, tmp_path)
    [fig] = closed_figures
    text = _texts(fig)
    for words in ("device vda", "scheduler mq-deadline", "1 MiB", "2 runs", doc["started"], doc["kernel"]):
        assert words in text, (words, text)
    # The PNG read on its own says it too.
    png = Image.open(path)
    assert isinstance(png, PngImagePlugin.PngImageFile)
    assert doc["started"] in png.text.get("Description", "")


def test_mixed_plot_has_error_bars_from_zero(tmp_path, closed_figures):
    doc = json.loads((DATA / "mixed" / "document.json").read_text())
    plots.write_plots(doc, tmp_path)
    [fig] = closed_figures
    [ax] = fig.axes
    assert ax.get_ylim()[0] == 0
    bars = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer" and c.has_yerr]
    assert len(bars) == 2   # seq and rand
    # The bars reach the 95 % CI of each point, and none goes below zero.
    seq = doc["results"]["detail"]["seq"]
    segments = bars[0].lines[2][0].get_segments()
    for (x0, lo), (_x1, hi) in segments:
        stat = seq[str(int(x0))]
        assert (lo, hi) == pytest.approx(tuple(stat["ci95"]), abs=1e-9)
        assert lo >= 0


def test_compare_plots_carry_provenance(tmp_path, closed_figures):
    import test_compare_units as cu

    from smartio.storebench import compare_report as report

    doc = cu._doc()
    report.write_plots(doc, tmp_path)
    assert len(closed_figures) == 2
    for fig in closed_figures:
        text = _texts(fig)
        assert "s5-emmc" in text and "mq-deadline, smartio" in text and "0.25 MiB" in text
        assert "1 repeat(s)" in text and "6.1.0-56-cloud-amd64" in text
    mixed = closed_figures[1]
    assert all(ax.get_ylim()[0] == 0 for ax in mixed.axes)


def test_bench_plot_names_the_emulated_profile(tmp_path, closed_figures, monkeypatch):
    from smartio.engine.fake import ReplayEngine
    from smartio.storebench.options import Settings
    from smartio.storebench.runner import check, run_bench

    # In the testbed, SMARTIO_PROFILE names the emulated device; bench records it in the document.
    monkeypatch.setenv("SMARTIO_PROFILE", "s5-emmc")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    settings = Settings(repeats=2, size=1 << 20)
    doc = run_bench("latency", check("latency", str(scratch), settings, False), settings,
                    ReplayEngine(DATA / "latency"), scheduler=None, command="t", progress=False)
    assert doc["profile"] == "s5-emmc"
    plots.write_plots(doc, tmp_path)
    assert "(emulated s5-emmc)" in _texts(closed_figures[0])


def test_trace_report_figures_carry_provenance(tmp_path, closed_figures):
    from smartio.trace.analyze import analyze
    from smartio.trace.formats import read_trace
    from smartio.trace.report import write_html

    src = Path(__file__).parent / "data" / "traces" / "sqlite-delete.smtrace"
    t = read_trace(src)
    write_html(analyze(t), t, tmp_path / "r.html", source=str(src))
    assert len(closed_figures) >= 4
    for fig in closed_figures:
        text = _texts(fig)
        assert f"trace {src}" in text and "devices 7,0" in text and "command sh" in text

"""Every plot kind writes PNG and SVG files with the expected axes and titles."""

from __future__ import annotations

import matplotlib
import pytest
from click.testing import CliRunner

from climb_bayes.cli.plot_cmd import plot
from climb_bayes.viz import plots

matplotlib.use("Agg")

EXPECTED = {
    "fit": ("observed vs predicted", "observed loss (nats/token)", "predicted loss (nats/token)"),
    "ratio": ("effective vs actual share", "r (en share)", "rt (en effective share)"),
    "transfer": ("transfer into en", "budget D (tokens)", "alpha_j->i(D)"),
    "heatmap": ("Transfer matrix b", "target language i", "source language j"),
    "fan": ("loss vs budget", "budget D (tokens)", "loss (nats/token)"),
    "rstar": ("r* at D =", "language", "optimal share r*"),
    "rstar_budget": ("r*(D)", "budget D (tokens)", "optimal share r*"),
    "trace": ("trace:", "draw", None),
}


def test_kinds_registry_complete():
    assert set(plots.KINDS) == set(EXPECTED)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_plot_kind_axes_titles_and_files(kind, nuts_fit3, tmp_path):
    fig = plots.KINDS[kind](nuts_fit3)
    title, xlabel, ylabel = EXPECTED[kind]
    ax = fig.axes[0]
    assert title in ax.get_title()
    assert ax.get_xlabel() == xlabel
    if ylabel is not None:
        assert ax.get_ylabel() == ylabel
    paths = plots.save_figure(fig, tmp_path, kind)
    assert [p.suffix for p in paths] == [".png", ".svg"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    assert b"<svg" in paths[1].read_bytes()[:1000]


def test_per_language_panels(nuts_fit3):
    fig = plots.plot_fit(nuts_fit3)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == len(nuts_fit3.languages)
    assert all(t.startswith(lang) for t, lang in zip(titles, nuts_fit3.languages, strict=True))


def test_point_fit_plots(map_fit3, tmp_path):
    for kind in ("heatmap", "trace", "rstar"):
        fig = plots.KINDS[kind](map_fit3)
        assert plots.save_figure(fig, tmp_path, kind, formats=("png",))[0].is_file()


def test_rstar_draws_on_simplex(nuts_fit3):
    from climb_bayes.decisions.rstar import rstar_draws

    draws = rstar_draws(nuts_fit3, 2.5e11, max_draws=20)
    assert draws.shape[1] == 3
    assert abs(draws.sum(axis=1) - 1).max() < 1e-9
    assert (draws > 0).all()


def test_plot_cli(map_fit3, tmp_path):
    fit_path = tmp_path / "fit.nc"
    map_fit3.save(fit_path)
    out = tmp_path / "figs"
    result = CliRunner().invoke(
        plot, [str(fit_path), "--kind", "heatmap", "--kind", "fit", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "fit.png",
        "fit.svg",
        "heatmap.png",
        "heatmap.svg",
    ]


def test_fan_chart_shows_the_default_predictive_and_fits_its_title(nuts_fit3):
    """The fan is one new run's loss under the default predictive (discrepancy and noise
    included), with the laws' expected-loss band drawn inside it; the title wraps to the
    figure's width instead of running off its edges."""
    import numpy as np

    fig = plots.plot_fan(nuts_fit3, n_samples=400)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "95% new run" in labels and "95% expected loss" in labels
    bands = {c.get_label(): c for c in ax.collections}
    band = bands["80% new run"].get_paths()[0].vertices  # even the 80% band holds it
    x_far = band[:, 0].max()
    far = band[np.isclose(band[:, 0], x_far), 1]
    lo, hi = (line.get_ydata()[-1] for line in ax.get_lines() if line.get_linestyle() == "--")
    assert far.min() < lo < hi < far.max()
    title = fig._suptitle.get_text()
    assert "default predictive" in title
    assert max(len(line) for line in title.splitlines()) <= max(40, fig.get_figwidth() * 11)


def test_rstar_figure_shows_the_default_predictive_beside_climb(nuts_fit3, map_fit3):
    for fit in (nuts_fit3, map_fit3):  # a point fit's CLIMB r* is one point
        labels = [t.get_text() for t in plots.plot_rstar(fit).axes[0].get_legend().get_texts()]
        assert "r*, default predictive" in labels
        assert any(label.startswith("r*, CLIMB alone") for label in labels)

"""Figures of a fitted CLIMB law (matplotlib, Agg backend; PNG and SVG).

Every plot kind is one function ``plot_<kind>(fit, **options) -> Figure`` registered in
:data:`KINDS`; :func:`save_figure` writes a figure as PNG and SVG. Bands are posterior
intervals computed from (at most :data:`~climb_bayes.decisions.rstar.MAX_DRAWS`) posterior
draws; a point fit (``method="map"``) has one draw, so its "bands" collapse to lines. The fan
chart shows the default predictive (stacked laws, extrapolation discrepancy and noise), as
``climb-bayes predict`` does, and the ``r*`` figure shows it beside CLIMB's own posterior.

Kinds
-----
``fit``
    Observed vs predicted loss per language, with 90% posterior predictive intervals.
``ratio``
    Effective ratio ``rt_i`` vs share ``r_i`` per language at several budgets (paper Fig. 2).
``transfer``
    Transfer strength ``alpha_{j->i}(D) = b_ji + k_ji / D`` vs budget, with bands.
``heatmap``
    Posterior mean of the transfer matrix ``b`` with ``P(b > 0)`` in every cell.
``fan``
    Loss vs budget fan charts for the uniform mixture, per language: 50/80/95% bands of one
    new run's loss under the default predictive, and the 95% band of the laws' expected loss.
``rstar``
    The optimal mixture ``r*`` at a target budget under the default predictive and under CLIMB
    alone, with baselines overlaid.
``rstar_budget``
    ``r*(D)``: median and 90% band of each language's optimal share vs budget.
``trace``
    Trace and rank plots of the worst-mixing parameters (NUTS fits).

References
----------
.. [1] Guo et al. (2025), "CLIMB: Cross-Lingual Interaction-aware Multilingual Balancing",
   Figure 2 (rt vs r) and Eq. (4)-(6).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from climb_bayes.atomic import atomic_path  # noqa: E402
from climb_bayes.decisions.rstar import (  # noqa: E402
    RSTAR_SOURCE,
    default_target_budget,
    predictive_rstar_draws,
    rstar_draws,
    subsample_law,
)
from climb_bayes.errors import ClimbError  # noqa: E402
from climb_bayes.inference.fitresult import Fit  # noqa: E402
from climb_bayes.model.law import LawParams, effective_ratio, log_loss, transfer_strength  # noqa: E402

__all__ = [
    "KINDS",
    "plot_fit",
    "plot_ratio",
    "plot_transfer",
    "plot_heatmap",
    "plot_fan",
    "plot_rstar",
    "plot_rstar_budget",
    "plot_trace",
    "save_figure",
    "figure_png_base64",
    "predict_log_loss",
    "baseline_mixtures",
    "format_tokens",
]

"""Most posterior draws used for bands (evenly thinned; keeps plots fast on 2 cores)."""


# -- shared computations ------------------------------------------------------------------------
def format_tokens(d: float) -> str:
    """``2.5e10 -> '25B'`` (T, B, M, k suffixes)."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if d >= div:
            return f"{d / div:.3g}{suffix}"
    return f"{d:.3g}"


def predict_log_loss(law: LawParams, r: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Log-loss of every draw at every (mixture, budget): ``(S, G, m)``.

    Parameters
    ----------
    law : LawParams
        Draws with a leading axis ``S``.
    r : array (G, m)
        Mixtures.
    d : array (G,)
        Budgets in tokens.
    """
    r = jnp.asarray(r, dtype=float)[None]
    d = jnp.asarray(d, dtype=float)[None]
    out = log_loss(
        r,
        d,
        law.log_B[:, None],
        law.beta[:, None],
        law.log_E[:, None],
        law.b[:, None],
        law.k[:, None],
        law.eta[:, None],
    )
    return np.asarray(out)


def baseline_mixtures(fit: Fit, budget: float) -> dict[str, np.ndarray]:
    """Reference mixtures to overlay on ``r*``: uniform, plus baselines from
    :mod:`climb_bayes.decisions.baselines` when that module is available."""
    m = len(fit.languages)
    out: dict[str, np.ndarray] = {"uniform": np.full(m, 1.0 / m)}
    try:  # pragma: no cover - depends on a module another engineer is writing
        from climb_bayes.decisions import baselines as _bl

        fn = getattr(_bl, "baseline_mixtures", None)
        if fn is not None:
            for name, r in dict(fn(fit, budget)).items():
                r = np.asarray(r, dtype=float)
                if r.shape == (m,):
                    out[str(name)] = r
    except Exception:  # noqa: BLE001 - baselines are optional decoration
        pass
    return out


def _band(x: np.ndarray, level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    q = (1.0 - level) / 2.0
    return np.quantile(x, q, axis=axis), np.quantile(x, 1.0 - q, axis=axis)


def _grid(n: int) -> tuple[Figure, np.ndarray]:
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def _suptitle(fig: Figure, fit: Fit, text: str) -> None:
    label = str(fit.attrs.get("data_label", "") or "")
    extra = f" - {label}" if label else ""
    # wrapped to the figure's width (about 11 characters per inch at 10 pt): a long data
    # label would otherwise run off both edges
    width = max(40, int(fig.get_figwidth() * 11))
    fig.suptitle(textwrap.fill(f"{text} ({fit.method_label}{extra})", width), fontsize=10)


# -- plot kinds ----------------------------------------------------------------------------------
def plot_fit(fit: Fit, level: float = 0.9) -> Figure:
    """Observed vs predicted final-point and curve losses per language, with intervals.

    Intervals are posterior predictive (law + observation noise) at ``level``.
    """
    langs = fit.languages
    obs = np.exp(np.asarray(fit.tree["observed_data"]["log_loss"].values))
    pp = np.exp(np.asarray(fit.tree["posterior_predictive"]["log_loss"].values))
    pp = pp.reshape((-1, pp.shape[-1]))
    lo, hi = _band(pp, level)
    med = np.median(pp, axis=0)
    obs_lang = np.asarray(fit.tree["constant_data"]["obs_language"].values)
    fig, axes = _grid(len(langs))
    for i, (ax, lang) in enumerate(zip(axes, langs, strict=False)):
        sel = obs_lang == i
        ax.errorbar(
            obs[sel],
            med[sel],
            yerr=[med[sel] - lo[sel], hi[sel] - med[sel]],
            fmt="o",
            ms=3,
            lw=0.8,
            alpha=0.7,
            label=f"median, {int(level * 100)}% PI",
        )
        lims = [min(obs[sel].min(), lo[sel].min()), max(obs[sel].max(), hi[sel].max())]
        ax.plot(lims, lims, "k--", lw=0.8, label="y = x")
        inside = np.mean((obs[sel] >= lo[sel]) & (obs[sel] <= hi[sel]))
        ax.set_title(f"{lang}: observed vs predicted (coverage {inside:.0%})", fontsize=9)
        ax.set_xlabel("observed loss (nats/token)")
        ax.set_ylabel("predicted loss (nats/token)")
        ax.legend(fontsize=7)
    _suptitle(fig, fit, "Observed vs predicted loss")
    fig.tight_layout()
    return fig


def plot_ratio(fit: Fit, budgets: Sequence[float] | None = None, level: float = 0.9) -> Figure:
    """Effective ratio ``rt_i`` vs ``r_i`` per language at several budgets (paper Figure 2).

    The other languages share ``1 - r_i`` equally.
    """
    law = subsample_law(fit)
    langs = fit.languages
    m = len(langs)
    runs = fit.runs
    if budgets is None:
        budgets = [float(np.min(runs.run_budgets)), float(np.max(runs.run_budgets))]
        budgets.append(default_target_budget(fit))
    grid = np.linspace(0.01, 0.99, 50)
    fig, axes = _grid(m)
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(budgets)))
    for i, (ax, lang) in enumerate(zip(axes, langs, strict=False)):
        r = np.full((grid.size, m), 0.0)
        r[:, :] = ((1.0 - grid) / max(m - 1, 1))[:, None]
        r[:, i] = grid
        for d, c in zip(budgets, colors, strict=True):
            rt = np.asarray(
                effective_ratio(
                    jnp.asarray(r)[None],
                    jnp.asarray(d),
                    law.b[:, None],
                    law.k[:, None],
                    law.eta[:, None],
                )
            )[..., i]
            lo, hi = _band(rt, level)
            ax.fill_between(grid, lo, hi, color=c, alpha=0.25)
            ax.plot(grid, np.median(rt, axis=0), color=c, label=f"D = {format_tokens(d)}")
        ax.plot([0, 1], [0, 1], "k:", lw=0.8, label="rt = r")
        ax.set_title(f"{lang}: effective vs actual share", fontsize=9)
        ax.set_xlabel(f"r ({lang} share)")
        ax.set_ylabel(f"rt ({lang} effective share)")
        ax.legend(fontsize=7)
    _suptitle(fig, fit, f"Interaction-aware ratio, {int(level * 100)}% bands")
    fig.tight_layout()
    return fig


def plot_transfer(fit: Fit, level: float = 0.9) -> Figure:
    """Transfer strength ``alpha_{j->i}(D)`` vs budget, one panel per target language."""
    law = subsample_law(fit)
    langs = fit.languages
    runs = fit.runs
    d = np.geomspace(0.5 * np.min(runs.run_budgets), 100 * np.max(runs.run_budgets), 60)
    alpha = np.asarray(transfer_strength(jnp.asarray(d)[None], law.b[:, None], law.k[:, None]))
    fig, axes = _grid(len(langs))
    for i, (ax, lang) in enumerate(zip(axes, langs, strict=False)):
        for j, src in enumerate(langs):
            if j == i:
                continue
            a = alpha[:, :, j, i]
            lo, hi = _band(a, level)
            (line,) = ax.plot(d, np.median(a, axis=0), label=f"{src} -> {lang}")
            ax.fill_between(d, lo, hi, color=line.get_color(), alpha=0.2)
        ax.axhline(0.0, color="k", lw=0.6)
        ax.axvspan(np.min(runs.run_budgets), np.max(runs.run_budgets), color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_title(f"transfer into {lang}", fontsize=9)
        ax.set_xlabel("budget D (tokens)")
        ax.set_ylabel("alpha_j->i(D)")
        ax.legend(fontsize=7)
    _suptitle(fig, fit, f"Transfer strength, {int(level * 100)}% bands (grey: fitted budgets)")
    fig.tight_layout()
    return fig


def plot_heatmap(fit: Fit) -> Figure:
    """Posterior mean of the transfer matrix ``b`` (source rows, target columns) with ``P(b>0)``."""
    b = fit.draws("b")
    langs = fit.languages
    m = len(langs)
    mean = b.mean(axis=0)
    ppos = (b > 0).mean(axis=0)
    lim = max(float(np.abs(mean).max()), 1e-6)
    fig, ax = plt.subplots(figsize=(1.3 * m + 2.5, 1.1 * m + 1.8))
    im = ax.imshow(np.where(np.eye(m, dtype=bool), np.nan, mean), cmap="RdBu", vmin=-lim, vmax=lim)
    for j in range(m):
        for i in range(m):
            if i == j:
                continue
            ax.text(
                i,
                j,
                f"{mean[j, i]:+.2f}\nP>0={ppos[j, i]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
            )
    ax.set_xticks(range(m), langs)
    ax.set_yticks(range(m), langs)
    ax.set_xlabel("target language i")
    ax.set_ylabel("source language j")
    ax.set_title("Transfer matrix b (posterior mean, P(b>0))", fontsize=10)
    fig.colorbar(im, ax=ax, label="b_ji")
    fig.tight_layout()
    return fig


def plot_fan(
    fit: Fit, mixture: Sequence[float] | None = None, n_samples: int = 1000, seed: int = 0
) -> Figure:
    """Loss vs budget fan charts per language for one mixture (default uniform), under the
    fit's default predictive.

    Bands: 50/80/95% intervals of one new run's loss (the stacked laws with their
    extrapolation discrepancy, run effect and noise: what ``climb-bayes predict`` calls
    ``predictive``); dashed: the 95% interval of the laws' expected loss (parameter and law
    uncertainty only), which alone would look far too sure beyond the fitted budgets.
    """
    langs = fit.languages
    m = len(langs)
    runs = fit.runs
    r = np.full(m, 1.0 / m) if mixture is None else np.asarray(mixture, dtype=float)
    d = np.geomspace(0.5 * np.min(runs.run_budgets), 100 * np.max(runs.run_budgets), 40)
    law_ll, new_ll = fit.ensemble().law_and_predictive_draws(
        np.tile(r, (d.size, 1)), d, n_samples, seed=seed
    )
    law, loss = np.exp(law_ll), np.exp(new_ll)
    fig, axes = _grid(m)
    for i, (ax, lang) in enumerate(zip(axes, langs, strict=False)):
        for level, alpha in ((0.95, 0.15), (0.8, 0.25), (0.5, 0.35)):
            lo, hi = _band(loss[:, :, i], level)
            label = f"{int(level * 100)}% new run"
            ax.fill_between(d, lo, hi, color="C0", alpha=alpha, label=label)
        ax.plot(d, np.median(loss[:, :, i], axis=0), color="C0", lw=1.2, label="median")
        lo, hi = _band(law[:, :, i], 0.95)
        ax.plot(d, lo, color="C1", ls="--", lw=0.9, label="95% expected loss")
        ax.plot(d, hi, color="C1", ls="--", lw=0.9)
        ax.axvspan(np.min(runs.run_budgets), np.max(runs.run_budgets), color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_title(f"{lang}: loss vs budget", fontsize=9)
        ax.set_xlabel("budget D (tokens)")
        ax.set_ylabel("loss (nats/token)")
        ax.legend(fontsize=7)
    mix = ", ".join(f"{lg}={x:.2f}" for lg, x in zip(langs, r, strict=True))
    _suptitle(fig, fit, f"Loss fan chart at r = ({mix}), default predictive")
    fig.tight_layout()
    return fig


def plot_rstar(
    fit: Fit, budget: float | None = None, weights: Sequence[float] | None = None
) -> Figure:
    """The optimal mixture ``r*`` at ``budget`` (default 10x the largest fitted budget), per
    language: under the default predictive (stacked laws with their extrapolation discrepancy,
    ``optimize``'s ``r* (default)``) and under CLIMB's posterior alone, side by side, with
    baseline mixtures overlaid."""
    budget = default_target_budget(fit) if budget is None else float(budget)
    climb, source = rstar_draws(fit, budget, weights), RSTAR_SOURCE
    stacked = predictive_rstar_draws(fit, budget, weights, start=np.median(climb, axis=0))
    langs = fit.languages
    m = len(langs)
    x = np.arange(m)
    fig, ax = plt.subplots(figsize=(1.4 * m + 3.5, 3.8))
    for draws, dx, color, label in (
        (stacked, -0.18, "C0", "r*, default predictive"),
        (climb, 0.18, "C7", "r*, CLIMB alone"),
    ):
        if draws.shape[0] > 1:
            parts = ax.violinplot(draws, positions=x + dx, widths=0.32, showmedians=True)
            for body in parts["bodies"]:
                body.set_facecolor(color)
                body.set_alpha(0.35)
            for key in ("cbars", "cmins", "cmaxes", "cmedians"):
                parts[key].set_color(color)
            ax.plot([], [], color=color, lw=6, alpha=0.5, label=label)  # legend entry
        else:
            ax.scatter(x + dx, draws[0], marker="D", color=color, label=f"{label} (point fit)")
    markers = iter("o^sPvX*")
    for k, (name, r) in enumerate(baseline_mixtures(fit, budget).items()):
        ax.scatter(
            x,
            r,
            marker=next(markers, "o"),
            facecolors="none",
            label=name,
            zorder=4,
            edgecolors=f"C{k + 1}",
            s=60,
            linewidths=1.5,
        )
    ax.set_xticks(x, langs)
    ax.set_xlabel("language")
    ax.set_ylabel("optimal share r*")
    ax.set_ylim(0, 1)
    ax.set_title(f"r* at D = {format_tokens(budget)} tokens with baselines", fontsize=10)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.01, f"r* from: {source}", fontsize=6, color="0.4")
    fig.tight_layout()
    return fig


def plot_rstar_budget(
    fit: Fit,
    budgets: Sequence[float] | None = None,
    level: float = 0.9,
    weights: Sequence[float] | None = None,
) -> Figure:
    """``r*(D)``: per-language median and ``level`` band of the optimal share vs budget, over
    CLIMB's posterior draws alone (``climb-bayes optimize --budgets`` gives ``r*`` under the
    default predictive)."""
    runs = fit.runs
    if budgets is None:
        budgets = np.geomspace(np.min(runs.run_budgets), 100 * np.max(runs.run_budgets), 6)
    langs = fit.languages
    res = np.stack([rstar_draws(fit, float(d), weights, max_draws=100) for d in budgets], 1)
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for i, lang in enumerate(langs):
        lo, hi = _band(res[:, :, i], level)
        (line,) = ax.plot(budgets, np.median(res[:, :, i], axis=0), marker="o", ms=3, label=lang)
        ax.fill_between(budgets, lo, hi, color=line.get_color(), alpha=0.2)
    ax.axvspan(np.min(runs.run_budgets), np.max(runs.run_budgets), color="0.9", zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("budget D (tokens)")
    ax.set_ylabel("optimal share r*")
    ax.set_title(
        f"r*(D) under CLIMB alone, {int(level * 100)}% bands (grey: fitted budgets)", fontsize=10
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _worst_parameters(fit: Fit, n: int) -> list[tuple[str, dict]]:
    """(variable, selection) of the ``n`` latent scalars with the largest R-hat."""
    import json

    import arviz_stats as azs

    post = fit.tree["posterior"].to_dataset()
    names = [v for v in json.loads(fit.attrs.get("latent_sites", "[]")) if v in post]
    names = names or [v for v in post.data_vars if post[v].ndim <= 3]
    rhat = azs.rhat(post[names], sample_dims=["chain", "draw"])
    flat: list[tuple[float, str, dict]] = []
    for name in names:
        da = rhat[name]
        vals = np.atleast_1d(np.asarray(da.values, dtype=float))
        for idx in np.ndindex(vals.shape if da.ndim else (1,)):
            sel = {dim: str(da[dim].values[k]) for dim, k in zip(da.dims, idx, strict=True)}
            v = float(vals[idx]) if da.ndim else float(vals[0])
            flat.append((v if np.isfinite(v) else np.inf, name, sel))
    flat.sort(key=lambda t: -t[0])
    return [(name, sel) for _v, name, sel in flat[:n]]


def plot_trace(fit: Fit, n_params: int = 4) -> Figure:
    """Trace (left) and rank (right) plots of the ``n_params`` worst-mixing latent parameters
    (largest R-hat); a point fit or Laplace fit gets a figure saying there are no chains."""
    post = fit.tree["posterior"]
    if fit.method != "nuts" or post.sizes["draw"] < 2:
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.set_axis_off()
        ax.set_title("Trace / rank plots", fontsize=10)
        ax.text(0.5, 0.5, f"{fit.method_label}: no MCMC chains to show", ha="center", va="center")
        return fig
    chosen = _worst_parameters(fit, n_params)
    fig, axes = plt.subplots(len(chosen), 2, figsize=(10, 2.1 * len(chosen)), squeeze=False)
    for row, (name, sel) in enumerate(chosen):
        da = post[name]
        if sel:
            da = da.sel(sel)
        x = np.asarray(da.values)  # (chain, draw)
        label = name + ("[" + ",".join(sel.values()) + "]" if sel else "")
        n_chain, n_draw = x.shape
        ranks = np.argsort(np.argsort(x.ravel())).reshape(x.shape)
        bins = np.linspace(0, x.size, 21)
        for c in range(n_chain):
            axes[row, 0].plot(x[c], lw=0.5, alpha=0.8, label=f"chain {c}")
            axes[row, 1].hist(ranks[c], bins=bins, histtype="step", label=f"chain {c}")
        axes[row, 1].axhline(n_draw / 20, color="k", ls=":", lw=0.8)
        axes[row, 0].set_title(f"trace: {label}", fontsize=9)
        axes[row, 1].set_title(f"rank: {label}", fontsize=9)
        axes[row, 0].set_xlabel("draw")
        axes[row, 0].set_ylabel(name)
        axes[row, 1].set_xlabel("rank (all chains)")
        axes[row, 1].set_ylabel("count")
    axes[0, 0].legend(fontsize=6)
    _suptitle(fig, fit, "Worst-mixing parameters (largest R-hat)")
    fig.tight_layout()
    return fig


KINDS: dict[str, Callable[..., Figure]] = {
    "fit": plot_fit,
    "ratio": plot_ratio,
    "transfer": plot_transfer,
    "heatmap": plot_heatmap,
    "fan": plot_fan,
    "rstar": plot_rstar,
    "rstar_budget": plot_rstar_budget,
    "trace": plot_trace,
}
"""Plot kind -> function ``(fit, **options) -> Figure``."""


def save_figure(
    fig: Figure,
    out_dir: str | Path,
    name: str,
    formats: Sequence[str] = ("png", "svg"),
    dpi: int = 110,
) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for every format and close it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        if fmt not in ("png", "svg", "pdf"):
            raise ClimbError(f"--format must be png, svg or pdf, got {fmt!r}.")
        path = out_dir / f"{name}.{fmt}"
        with atomic_path(path) as tmp:  # an interrupted write leaves no half-written figure
            fig.savefig(tmp, dpi=dpi, format=fmt)
        paths.append(path)
    plt.close(fig)
    return paths


def figure_png_base64(fig: Figure, dpi: int = 90) -> str:
    """PNG of ``fig`` as base64 text (for embedding in HTML); closes the figure."""
    import base64

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")

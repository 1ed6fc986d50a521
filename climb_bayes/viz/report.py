"""One self-contained HTML report of a fit (figures embedded as base64 PNG).

Sections: data summary (synthetic data is labelled as such), diagnostics (the sampler's, or a
Laplace fit's mode search and Pareto k; the command line's warning when any law of the stack
failed its checks), the default predictive (stacking weights, inner leave-future-out check,
extrapolation discrepancy), parameter table, fit quality, predictions at target budgets and
``r*`` under the default predictive (as ``predict`` and ``optimize`` give them; CLIMB's own
``r*`` beside it) with baselines, and robustness verdicts when a robustness results file
(:mod:`climb_bayes.evaluation.robustness`) is given.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from climb_bayes.decisions.mixture_support import mixture_support_warning
from climb_bayes.inference.convergence import fit_gate
from climb_bayes.inference.fitresult import Fit
from climb_bayes.viz.fit_text import ensemble_lines, laplace_summary

__all__ = ["render_report", "write_report", "parameter_table", "prediction_table", "rstar_table"]

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right} th{background:#f3f3f3}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.85em}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.5em .8em}
.ok{background:#e6f4ea;border:1px solid #8c8;padding:.5em .8em}
.bad{background:#fde2e1;border:1px solid #d88;padding:.5em .8em}
img{max-width:100%;border:1px solid #eee;margin:.4em 0}
.note{color:#666;font-size:.85em}
"""

_PARAMS = ("log_B", "beta", "log_E", "eta", "sigma", "b_offdiag", "kappa_offdiag")


def _esc(text: object) -> str:
    return html.escape(str(text))


def _table(df: pd.DataFrame, table_id: str, float_format: str = "{:.4g}") -> str:
    return df.to_html(
        table_id=table_id,
        float_format=lambda x: float_format.format(x),
        border=0,
        na_rep="-",
    )


def parameter_table(fit: Fit) -> pd.DataFrame:
    """Posterior summary (``arviz_stats.summary``) of the law's parameters; point values for a
    point fit."""
    post = fit.tree["posterior"]
    names = [n for n in _PARAMS if n in post]
    if fit.method != "map":
        try:
            import arviz_stats as azs

            # one chain of independent Laplace draws: no R-hat or ESS to report
            kind = "all" if fit.method == "nuts" else "stats"
            # unrounded (the table prints 4 significant digits: a noise scale of 0.004 is not
            # "0"); effective sample sizes as whole draws
            table = azs.summary(fit.tree, var_names=names, kind=kind, ci_prob=0.9, round_to="none")
            for col in [c for c in table.columns if str(c).startswith("ess")]:
                table[col] = table[col].round().astype("Int64")
            return table
        except Exception:  # noqa: BLE001 - fall back to a plain table below
            pass
    rows = {}
    for name in names:
        da = post[name]
        vals = np.asarray(da.values).reshape((-1,) + da.shape[2:])
        labels = [str(x) for x in da[da.dims[2]].values] if da.ndim == 3 else [""]
        for k, label in enumerate(labels):
            v = vals[:, k] if da.ndim == 3 else vals
            key = f"{name}[{label}]" if label else name
            rows[key] = {"mean": float(v.mean()), "sd": float(v.std())}
    return pd.DataFrame.from_dict(rows, orient="index")


def prediction_table(
    fit: Fit,
    budgets: Sequence[float],
    mixture: Sequence[float] | None = None,
    level: float = 0.9,
    n_samples: int = 2000,
) -> pd.DataFrame:
    """Predicted loss per language and budget under the fit's default predictive.

    The stacked laws with their extrapolation discrepancy (:meth:`Fit.ensemble`, as
    ``climb-bayes predict`` uses them): the median and ``level`` interval of one new run's loss
    (``predictive``: also the discrepancy, the run effect and noise) and the ``level`` interval
    of the laws' expected loss (``param``: parameter and law uncertainty only), in nats/token.
    ``mixture`` defaults to the uniform one.
    """
    from climb_bayes.decisions.prediction import ensemble_table
    from climb_bayes.viz.plots import format_tokens

    m = len(fit.languages)
    r = np.full(m, 1.0 / m) if mixture is None else np.asarray(mixture, dtype=float)
    d = np.asarray(budgets, dtype=float)
    table = ensemble_table(
        fit.ensemble(), np.tile(r, (d.size, 1)), d, levels=(level,), n_samples=n_samples
    )
    pct = f"{100 * level:g}"
    lo, hi = f"{pct}%_lo", f"{pct}%_hi"
    rows = []
    for (budget, language), g in table.groupby(["budget", "language"], sort=False):
        new, law = (g[g["quantity"] == q].iloc[0] for q in ("predictive", "expected"))
        rows.append(
            {
                "budget": format_tokens(budget),
                "language": language,
                "median": float(new["median"]),
                f"{pct}% predictive low": float(new[lo]),
                f"{pct}% predictive high": float(new[hi]),
                f"{pct}% param low": float(law[lo]),
                f"{pct}% param high": float(law[hi]),
            }
        )
    return pd.DataFrame(rows).set_index(["budget", "language"])


def rstar_table(fit: Fit, budget: float, level: float = 0.9) -> tuple[pd.DataFrame, str]:
    """``r*`` (median and interval per language) under the default predictive and under CLIMB
    alone, and baseline mixtures with their predicted mean loss at ``budget`` (CLIMB's
    posterior median); also returns how ``r*`` was computed."""
    from climb_bayes.decisions.rstar import (
        RSTAR_SOURCE,
        predictive_rstar_draws,
        rstar_draws,
        subsample_law,
    )
    from climb_bayes.viz.plots import baseline_mixtures, predict_log_loss

    climb, source = rstar_draws(fit, budget), RSTAR_SOURCE
    draws = predictive_rstar_draws(fit, budget, start=np.median(climb, axis=0))
    law = subsample_law(fit)
    q = (1 - level) / 2
    rows = {}
    med = np.median(draws, axis=0)
    rows["r* median"] = med
    rows[f"r* {int(level * 100)}% low"] = np.quantile(draws, q, axis=0)
    rows[f"r* {int(level * 100)}% high"] = np.quantile(draws, 1 - q, axis=0)
    rows["CLIMB r* median"] = np.median(climb, axis=0)
    rows[f"CLIMB r* {int(level * 100)}% low"] = np.quantile(climb, q, axis=0)
    rows[f"CLIMB r* {int(level * 100)}% high"] = np.quantile(climb, 1 - q, axis=0)
    mixes = {"r* median": med} | baseline_mixtures(fit, budget)
    for name, r in baseline_mixtures(fit, budget).items():
        rows[f"baseline: {name}"] = r
    df = pd.DataFrame(rows, index=list(fit.languages)).T
    losses = {}
    for name, r in mixes.items():
        r = np.asarray(r) / np.sum(r)
        ll = predict_log_loss(law, r[None], np.array([budget]))[:, 0]
        losses["r* median" if name == "r* median" else f"baseline: {name}"] = float(
            np.median(np.exp(ll).mean(axis=-1))
        )
    df["predicted mean loss"] = pd.Series(losses)
    return df, source


def _img(fig: object, alt: str) -> str:
    from climb_bayes.viz.plots import figure_png_base64

    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{figure_png_base64(fig)}">'


def _robustness_section(data: dict | None) -> str:
    if data is None:
        return (
            '<p class="note">No robustness results given. Run <code>climb-bayes robustness '
            "fit.nc</code> and pass <code>--robustness</code> to include them.</p>"
        )
    parts = []
    verdict = data.get("verdict", {})
    ok = verdict.get("robust", "sbc" in data) and verdict.get("sbc_passed", True)
    cls = "ok" if ok else "bad"
    parts.append(
        f'<div class="{cls}" id="robustness-verdict"><pre>'
        f"{_esc(verdict.get('text', ''))}</pre></div>"
    )
    rows = []
    for name, study in data.get("studies", {}).items():
        rows.append(
            {
                "study": name,
                "verdict": study.get("verdict", ""),
                "max |shift r*|": study.get("max_rstar_shift", np.nan),
                "max rel. shift of extrapolated loss": study.get("max_loss_shift", np.nan),
                "flag": "FLAG" if study.get("flagged") else "ok",
            }
        )
    sbc = data.get("sbc")
    if sbc:
        rows.append(
            {
                "study": "sbc",
                "verdict": str(sbc.get("verdict", "")).splitlines()[0],
                "max |shift r*|": np.nan,
                "max rel. shift of extrapolated loss": np.nan,
                "flag": "ok" if sbc.get("passed") else "FLAG",
            }
        )
    if rows:
        parts.append(_table(pd.DataFrame(rows).set_index("study"), "robustness-table"))
    return "\n".join(parts)


def render_report(
    fit: Fit,
    *,
    budgets: Sequence[float] | None = None,
    robustness: str | os.PathLike[str] | None = None,
    title: str | None = None,
    include_plots: bool = True,
    log: Callable[[str], None] | None = None,
) -> str:
    """Render the report as one HTML string (no external resources).

    Parameters
    ----------
    fit : Fit
        The fit to describe.
    budgets : sequence of float, optional
        Target budgets (tokens) for predictions; default 1x, 10x and 100x the largest fitted
        budget. ``r*`` is reported at the second one (10x by default).
    robustness : path, optional
        JSON written by ``climb-bayes robustness``.
    title : str, optional
        Page title.
    include_plots : bool
        Embed the figures (set False for a fast text-only report).
    log : callable, optional
        Called with one line as each section starts (progress; ``climb-bayes report`` prints
        them on stderr).
    """
    from climb_bayes.evaluation.robustness import load_results
    from climb_bayes.viz import plots

    say = log or (lambda _line: None)
    results = None if robustness is None else load_results(robustness)  # fail before the work
    runs = fit.runs
    dmax = float(np.max(runs.run_budgets))
    budgets = list(budgets) if budgets else [dmax, 10 * dmax, 100 * dmax]
    target = budgets[1] if len(budgets) > 1 else budgets[0]
    title = title or f"climb-bayes report: {', '.join(fit.languages)}"
    label = str(fit.attrs.get("data_label", "") or "")
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
    ]
    if "synthetic" in label.lower():
        out.append(f'<p class="warn" id="data-label"><b>SYNTHETIC DATA:</b> {_esc(label)}</p>')
    elif label:
        out.append(f'<p class="note" id="data-label">Data: {_esc(label)}</p>')
    method = fit.method_label + (" (MAP; no uncertainty)" if fit.method == "map" else "")
    out.append(
        f'<p class="note">Method: {_esc(method)}; {fit.n_draws} draws; likelihood '
        f"{_esc(fit.attrs.get('likelihood', ''))}; climb-bayes "
        f"{_esc(fit.attrs.get('climb_bayes_version', ''))}; data sha256 "
        f"{_esc(str(fit.attrs.get('data_sha256', ''))[:12])}</p>"
    )

    out.append('<h2 id="data">Data summary</h2>')
    out.append(f"<pre>{_esc(runs.summary())}</pre>")

    out.append('<h2 id="diagnostics">Diagnostics</h2>')
    gate = fit_gate(fit)
    if not gate.ok:  # every law of the stack, as the command line warns
        out.append(f'<div class="bad" id="fit-warning"><b>{_esc(gate.warning())}</b></div>')
    diag = fit.diagnostics
    if fit.method == "laplace":
        cls = "ok" if gate.ok else "bad"
        out.append(
            f'<div class="{cls}"><pre id="diagnostics-report">'
            f"{_esc(laplace_summary(fit.attrs))}</pre></div>"
        )
    elif diag is None:
        out.append('<p class="note">Point fit: no sampler diagnostics (no chains).</p>')
        if "point_starts" in fit.attrs:
            out.append(f"<p>Point-fit starts: {_esc(fit.attrs['point_starts'])}</p>")
    else:
        cls = "ok" if diag.ok else "bad"
        out.append(
            f'<div class="{cls}"><pre id="diagnostics-report">{_esc(diag.report())}</pre></div>'
        )
    predictive = ensemble_lines(fit)
    if predictive:
        out.append('<h2 id="predictive">Default predictive</h2>')
        out.append(f'<pre id="predictive-summary">{_esc(chr(10).join(predictive).strip())}</pre>')

    out.append('<h2 id="parameters">Parameters</h2>')
    out.append(
        '<p class="note">log_B and k in tokens units; b and kappa are off-diagonal '
        "transfer pairs (source->target).</p>"
    )
    out.append(_table(parameter_table(fit), "parameter-table"))

    say("report: parameters and fit quality")
    out.append('<h2 id="fit-quality">Fit quality</h2>')
    obs = np.asarray(fit.tree["observed_data"]["log_loss"].values)
    pp = np.asarray(fit.tree["posterior_predictive"]["log_loss"].values).reshape((-1, obs.size))
    lang_idx = np.asarray(fit.tree["constant_data"]["obs_language"].values)
    lo, hi = np.quantile(pp, 0.05, axis=0), np.quantile(pp, 0.95, axis=0)
    med = np.median(pp, axis=0)
    quality = pd.DataFrame(
        {
            lang: {
                "observations": int((lang_idx == i).sum()),
                "RMSE of log-loss": float(np.sqrt(np.mean((med - obs)[lang_idx == i] ** 2))),
                "90% PI coverage": float(np.mean(((obs >= lo) & (obs <= hi))[lang_idx == i])),
            }
            for i, lang in enumerate(fit.languages)
        }
    ).T
    out.append(_table(quality, "fit-quality-table"))
    if include_plots:
        out.append(_img(plots.plot_fit(fit), "observed vs predicted"))

    say("report: predictions under the default predictive")
    out.append('<h2 id="predictions">Predictions at target budgets</h2>')
    out.append(
        '<p class="note">Uniform mixture, under the default predictive (the stacked laws with '
        "their extrapolation discrepancy, as <code>climb-bayes predict</code> gives it): median "
        "and 90% interval of one new run's loss (nats/token; the discrepancy, which grows with "
        "the distance beyond the fitted budgets, and run-to-run noise included), and the 90% "
        "interval of the laws' expected loss (param: parameter and law uncertainty only).</p>"
    )
    out.append(_table(prediction_table(fit, budgets), "prediction-table"))
    if include_plots:
        out.append(_img(plots.plot_fan(fit), "loss fan chart"))

    say("report: r* under the default predictive and under CLIMB")
    out.append(f'<h2 id="rstar">Optimal mixture r* at {plots.format_tokens(target)} tokens</h2>')
    table, source = rstar_table(fit, target)
    out.append(_table(table, "rstar-table", "{:.4f}"))
    out.append(
        '<p class="note">r*: the per-draw optimum under the default predictive (the stacked '
        "laws' draws with their extrapolation discrepancy, as the r* (default) column of "
        "<code>climb-bayes optimize</code>); CLIMB r*: the same over CLIMB's posterior draws "
        f"alone. Computed by: {_esc(source)}. Predicted mean loss: CLIMB's posterior median "
        "(<code>climb-bayes optimize</code> compares the mixtures under the default predictive)."
        "</p>"
    )
    median = table.loc["r* median", list(fit.languages)].to_numpy(dtype=float)
    if warning := mixture_support_warning(
        ["r* median"], median[None], fit.runs.run_proportions, fit.languages
    ):
        out.append(f'<div class="bad" id="rstar-extrapolates">{_esc(warning)}</div>')
    if include_plots:
        out.append(_img(plots.plot_rstar(fit, budget=target), "r* with baselines"))
        out.append(_img(plots.plot_ratio(fit), "rt vs r"))
        out.append(_img(plots.plot_heatmap(fit), "transfer matrix"))
        out.append(_img(plots.plot_transfer(fit), "transfer strength"))
        if fit.method == "nuts":
            out.append(_img(plots.plot_trace(fit), "trace and rank plots"))

    out.append('<h2 id="robustness">Robustness</h2>')
    out.append(_robustness_section(results))
    out.append("</body></html>")
    return "\n".join(out)


def write_report(fit: Fit, path: str | os.PathLike[str], **options: object) -> Path:
    """Render :func:`render_report` and write it to ``path`` (UTF-8, atomically: a failed
    render or write leaves any earlier report in place)."""
    from climb_bayes.atomic import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render_report(fit, **options))  # type: ignore[arg-type]
    return path

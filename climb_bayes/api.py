"""The public Python API: read runs, fit, predict with intervals, optimise the mixture, check.

Each function does what the ``climb-bayes`` command of the same name does, with the same
defaults, and returns data instead of printing (``fit`` and ``evaluate`` log progress through
``log`` when given). They call :func:`climb_bayes.setup_jax` first, so a script needs no set-up
of its own. ``import climb_bayes as cb`` exposes everything here as ``cb.<name>``.

Examples
--------
>>> import climb_bayes as cb
>>> runs = cb.read_runs(cb.dataset_path("default"))        # the shipped real runs
>>> runs.languages
('en', 'de', 'ru', 'zh', 'ja')

Then ``fit = cb.fit(runs)`` (NUTS and the stacked laws, as ``climb-bayes fit``; minutes),
``cb.predict(fit, {"en": 0.4, ...}, 1e12)``, ``cb.optimize(fit, 1e12)``; each function's
Examples section runs a quick point fit (``method="map"``). docs/api.md is generated from
these docstrings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from climb_bayes.data.datasets import dataset_path
from climb_bayes.data.design import algorithm1_design, holdout_design
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import RunsData, read_runs
from climb_bayes.decisions.constraints import Constraints
from climb_bayes.errors import ClimbError
from climb_bayes.inference.fitresult import Fit, load_fit
from climb_bayes.inference.nuts import FIT_SAMPLER
from climb_bayes.model.priors import Priors, load_priors
from climb_bayes.runtime import setup_jax

__all__ = [
    "read_runs",
    "RunsData",
    "Priors",
    "load_priors",
    "fit",
    "Fit",
    "load_fit",
    "predict",
    "optimize",
    "evaluate",
    "algorithm1_design",
    "holdout_design",
    "Constraints",
    "ClimbError",
    "dataset_path",
    "setup_jax",
]

MixtureLike = Mapping[str, float] | Sequence[float] | np.ndarray | str


def fit(
    runs: RunsData,
    priors: Priors | None = None,
    *,
    method: str = "nuts",
    laws: Sequence[str] = ("climb", "msl", "dml", "isolated"),
    chains: int = FIT_SAMPLER.chains,
    warmup: int = FIT_SAMPLER.warmup,
    samples: int = FIT_SAMPLER.samples,
    target_accept: float | None = None,
    max_tree_depth: int = 10,
    init: str = "laplace",
    blocks: str = "auto",
    seed: int = 0,
    lfo: str = "laplace",
    lfo_cuts: Sequence[float] | None = None,
    nuts_all_laws: bool = False,
    families: str | Path | None = "auto",
    progress: bool = False,
    data_label: str = "",
    log: Callable[[str], None] | None = None,
) -> Fit:
    """Fit CLIMB and the other laws to a runs table and stack them (``climb-bayes fit``).

    Parameters
    ----------
    runs : RunsData
        From :func:`read_runs`.
    priors : Priors, optional
        CLIMB's priors (defaults when omitted; :func:`load_priors` reads a TOML file).
    method : {"nuts", "laplace", "map"}
        Full posterior of every law by NUTS; the same posteriors by Laplace approximation at
        their modes (``samples`` draws, seconds); or point fits (one draw; intervals show
        noise only).
    laws : sequence of str
        Laws to fit and stack; must include ``"climb"``. ``("climb",)`` fits CLIMB alone.
    chains, warmup, samples, target_accept, max_tree_depth : int, int, int, float, int
        NUTS settings; ``samples`` is the total kept over all chains. The defaults (4 x (500
        + 1000) at 0.98) passed the convergence gate on the default data for 4 of 4 seeds,
        Stan-like 4 x (1000 + 500) at 0.95 for none (docs/model.md, "Default sampler").
        ``target_accept=None`` (the default) gives each law its own
        (:attr:`~climb_bayes.laws.base.Law.nuts_target_accept`: CLIMB and the DML 0.98,
        Isolated and MSL 0.9); a value applies to every law.
    init : {"laplace", "prior-centre", "median", "prior", "map"}
        Initialisation of the chains.
    blocks : {"auto", "joint", "language"}
        NUTS on the joint posterior or one target language at a time (``auto``: from 8
        languages up).
    seed : int
        Seed of the sampler and the random starts.
    lfo : {"laplace", "nuts", "map", "none"}
        Leave-future-out refits inside the data (>= 3 budgets) that calibrate each law's
        extrapolation discrepancy and the stacking weights.
    lfo_cuts : sequence of float, optional
        Where those refits end (tokens, each a budget level below the largest; ``fit
        --lfo-cuts``); by default the two budget levels below the largest, the folds nearest
        the full fit (docs/model.md, "Early folds bend more").
    nuts_all_laws : bool
        Sample every law by NUTS; by default (``method="nuts"``, inner folds present) a law other
        than CLIMB whose stacking weight is below 0.01 gets a Laplace fit instead
        (:attr:`~climb_bayes.inference.ensemble.EnsembleOptions.nuts_min_weight`).
    families : {"auto", "none"} or path
        MSL's language families (:mod:`climb_bayes.laws.families`).
    progress : bool
        Progress bars of the sampler.
    data_label : str
        Provenance note stored with the fit (e.g. which shipped dataset).
    log : callable, optional
        Receives one line per step (e.g. ``print``).

    Returns
    -------
    Fit
        Posterior draws, diagnostics, the other laws and the stacked predictive;
        :meth:`Fit.save` writes it as NetCDF.

    Examples
    --------
    >>> import climb_bayes as cb
    >>> runs = cb.read_runs(cb.dataset_path("default"))
    >>> fit = cb.fit(runs, laws=("climb",), method="map", lfo="none")
    >>> fit.languages
    ('en', 'de', 'ru', 'zh', 'ja')
    """
    setup_jax()
    from climb_bayes.inference.ensemble import shipped_options
    from climb_bayes.inference.nuts import NutsConfig
    from climb_bayes.inference.pipeline import fit_runs_ensemble
    from climb_bayes.laws.families import describe_families, resolve_families

    config = NutsConfig(
        chains=chains,
        warmup=warmup,
        samples=samples,
        target_accept=FIT_SAMPLER.target_accept if target_accept is None else target_accept,
        max_tree_depth=max_tree_depth,
        init=init,
        progress_bar=progress,
        blocks=blocks,
    )
    choice = resolve_families(families, runs.languages)
    if log is not None and "msl" in laws:
        log(describe_families(choice, runs.languages))
    return fit_runs_ensemble(
        runs,
        priors or Priors(),
        method=method,
        config=config,
        laws=list(laws),
        ensemble=shipped_options(method, lfo, nuts_all_laws=nuts_all_laws, lfo_cuts=lfo_cuts),
        target_accept=target_accept,
        seed=seed,
        families=choice.mapping,
        data_label=data_label,
        log=log,
    )


def _by_language(values: Mapping[str, float], languages: Sequence[str], what: str) -> np.ndarray:
    """``values`` (language -> number; missing languages 0) in the order of ``languages``."""
    unknown = sorted(set(values) - set(languages))
    if unknown:
        raise ClimbError(
            f"{what} name unknown language(s) {', '.join(unknown)}; the fit has "
            f"{', '.join(languages)}."
        )
    return np.array([float(values.get(g, 0.0)) for g in languages])


def _mixture_rows(mixtures: MixtureLike, languages: Sequence[str]) -> np.ndarray:
    """``(B, m)`` shares from a ``{language: share}`` dict, an array or ``"uniform"``."""
    m = len(languages)
    if isinstance(mixtures, str):
        if mixtures != "uniform":
            raise ClimbError(f"unknown mixture {mixtures!r}: give shares, or 'uniform'.")
        return np.full((1, m), 1.0 / m)
    if isinstance(mixtures, Mapping):
        rows = _by_language(mixtures, languages, "mixture")[None]
    else:
        rows = np.atleast_2d(np.asarray(mixtures, dtype=float))
    if rows.shape[-1] != m:
        raise ClimbError(f"a mixture needs {m} shares ({', '.join(languages)}), got {rows.shape}.")
    if np.any(rows < 0) or np.any(np.abs(rows.sum(axis=1) - 1.0) > 1e-6):
        raise ClimbError("mixture shares must be >= 0 and sum to 1 in every row.")
    return rows


def predict(
    fit: Fit,
    mixtures: MixtureLike | None,
    budgets: float | Sequence[float],
    *,
    law: str | None = None,
    levels: Sequence[float] = (0.5, 0.9),
    seed: int = 0,
    n_samples: int = 4000,
    combine: str = "quantile",
    continue_run: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """Loss of every language at given mixtures and budgets, with intervals (``predict``).

    Parameters
    ----------
    fit : Fit
        From :func:`fit` or :func:`load_fit`.
    mixtures : dict, array (m,) or (B, m), "uniform", or None
        Shares per language (a dict may omit languages with share 0); ``None`` with
        ``continue_run`` (the run's own mixture).
    budgets : float or sequence of float
        Training tokens; one per mixture row, or one for all.
    law : str, optional
        Predict with one law of the fit (e.g. ``"climb"``) instead of the stacked predictive.
    levels : sequence of float
        Central interval levels.
    seed, n_samples : int
        Predictive draws.
    combine : {"quantile", "mixture"}
        How the stacked laws' intervals are combined: their quantiles averaged with the
        stacking weights, or their distributions mixed (``predict --combine``).
    continue_run : str or sequence of str, optional
        A fitted training run to continue, named by its ``run_series`` label or any of its
        checkpoints' ``run_id``, several such names, or ``"all"`` (every training run of the
        fit) (``predict --continue-run``; :mod:`climb_bayes.decisions.continuation`): the
        ``"predictive"`` rows are then those runs at ``budgets`` (every run at every budget;
        ``mixture`` ``"run <name>"``), each run's fitted deviation from the law carried
        forward, instead of new runs.

    Returns
    -------
    pandas.DataFrame
        One row per (mixture, budget, language, quantity): ``quantity`` ``"expected"`` (the
        laws' prediction: parameter and law uncertainty) or ``"predictive"`` (one new run, or
        the continued one: also the extrapolation discrepancy and run-to-run noise); mean,
        median and ``lo``/``hi`` columns per level, in nats/token.

    Examples
    --------
    >>> import climb_bayes as cb
    >>> runs = cb.read_runs(cb.dataset_path("default"))
    >>> fit = cb.fit(runs, laws=("climb",), method="map", lfo="none")
    >>> t = cb.predict(fit, "uniform", [1e6, 1e9])
    >>> t.query("quantity == 'predictive'").shape[0]
    10
    >>> run = fit.runs.run_ids[0]  # a fitted run, continued to 1e7 tokens
    >>> c = cb.predict(fit, None, 1e7, continue_run=run)
    >>> c["mixture"].iloc[0] == f"run {run}"
    True
    """
    setup_jax()
    from climb_bayes.decisions.prediction import ensemble_grid, ensemble_table

    ens = fit.ensemble()
    if law is not None:
        ens = ens.only(law.strip().lower())
    options = {"levels": levels, "seed": seed, "n_samples": n_samples, "combine": combine}
    if continue_run is None:
        rows = _mixture_rows(mixtures, fit.languages)
        return ensemble_table(ens, rows, budgets, **options)
    from climb_bayes.decisions.continuation import continued_runs

    if mixtures is not None:
        raise ClimbError("continue_run keeps the runs' own mixtures: pass mixtures=None.")
    chosen = continued_runs(fit.runs, continue_run)
    return ensemble_grid(
        ens,
        np.stack([r.shares for r in chosen]),
        [f"run {r.name}" for r in chosen],
        budgets,
        series=np.array([r.series for r in chosen]),
        **options,
    )


def optimize(
    fit: Fit,
    budget: float,
    *,
    weights: Mapping[str, float] | Sequence[float] | None = None,
    constraints: Constraints | None = None,
    law: str | None = None,
    risk: float | None = None,
    rho: float = 100.0,
    levels: Sequence[float] = (0.5, 0.9),
    seed: int = 0,
):
    """The mixture to train at ``budget`` and its uncertainty (``climb-bayes optimize``).

    Parameters
    ----------
    fit : Fit
        From :func:`fit` or :func:`load_fit`.
    budget : float
        Target budget (tokens).
    weights : dict or sequence, optional
        Importance of each language's loss (equal by default; normalised).
    constraints : Constraints, optional
        Share bounds and availability caps (:meth:`Constraints.build`).
    law : str, optional
        Decide under one law (e.g. ``"climb"``) instead of the stacked predictive.
    risk : float, optional
        CVaR level in (0, 1): recommend the risk-averse decision.
    rho : float
        Penalty of the paper's two-step reference answer (Eq. 8).
    levels : sequence of float
        Central interval levels.
    seed : int
        Seed of the decision draws.

    Returns
    -------
    OptimizeResult
        ``bayes`` (the recommendation), per-draw optima ``direct`` and ``stacked``, the
        two-step reference, comparisons with baselines (``comparisons``); see
        :class:`climb_bayes.decisions.optimization.OptimizeResult`.

    Examples
    --------
    >>> import climb_bayes as cb
    >>> runs = cb.read_runs(cb.dataset_path("default"))
    >>> fit = cb.fit(runs, laws=("climb",), method="map", lfo="none")
    >>> res = cb.optimize(fit, 1e9)
    >>> round(float(res.bayes.sum()), 6)
    1.0
    """
    setup_jax()
    from climb_bayes.decisions.optimization import optimize_mixture

    langs = fit.languages
    if weights is None:
        w = np.full(len(langs), 1.0 / len(langs))
    elif isinstance(weights, Mapping):
        w = _by_language(weights, langs, "weights")
    else:
        w = np.asarray(weights, dtype=float)
    if w.shape != (len(langs),) or np.any(w < 0) or w.sum() <= 0:
        raise ClimbError(f"weights need {len(langs)} values >= 0, not all 0 ({', '.join(langs)}).")
    ens = fit.ensemble()
    if law is not None:
        ens = ens.only(law.strip().lower())
    params = fit.law_draws()
    return optimize_mixture(
        params,
        langs,
        float(budget),
        weights=w / w.sum(),
        constraints=constraints,
        rho=rho,
        risk=risk,
        levels=levels,
        ensemble=ens,
        n_decision_draws=int(params.beta.shape[0]),
        seed=seed,
    )


def evaluate(
    runs: RunsData,
    holdout: np.ndarray | str,
    *,
    laws: Sequence[str] = ("climb", "isolated", "msl", "dml"),
    method: str | None = None,
    families: str | Path | None = "auto",
    seed: int = 0,
    shipped: bool = False,
    lfo_cuts: Sequence[float] | None = None,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Fit each law on part of ``runs`` and score it on the held-out runs (``evaluate``).

    By default each law's bare fit is scored. With ``shipped=True`` the whole :func:`fit`
    pipeline runs on the other runs (every law with its extrapolation discrepancy, the stacking
    weights, ``fit``'s sampler) and each law and the stacked predictive -- the intervals
    :func:`predict` gives -- are scored per extrapolation ratio (``evaluate --shipped``).

    Parameters
    ----------
    runs : RunsData
        The runs table.
    holdout : str or bool array (n_runs,)
        Held-out runs: an expression as ``evaluate --holdout`` takes (``"tokens>=5e10"``,
        ``"run_id~holdout"``) or a mask over ``runs.run_ids``.
    laws : sequence of str
        Laws to compare.
    method : {"map", "laplace", "nuts"}, optional
        Inference of every law: by default ``"map"`` for the bare fits and ``"nuts"`` with
        ``shipped`` (as :func:`fit`).
    families : {"auto", "none"} or path
        MSL's language families.
    seed : int
        Seed of starts and sampler.
    shipped : bool
        Score what ``fit`` ships instead of each law's bare fit.
    lfo_cuts : sequence of float, optional
        With ``shipped``: where the inner leave-future-out refits on the fitted runs end
        (:func:`fit`'s ``lfo_cuts``).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    pandas.DataFrame
        One row per (law, subset) with the metrics of ``evaluate --json`` as columns
        (``r2_pooled``, ``r2_group_mean``, ``mre``, ``coverage`` per level, ``crps``, ``lpd``;
        docs/evaluate.md). With ``shipped``: one row per (``predictive``, ``ratio_bin``), the
        predictives being the laws and ``"stacked"``, ``"stacked-mixture"``; ``attrs`` holds
        the stacking ``weights``, the ``calibration`` line of ``evaluate --shipped`` and the
        ``warnings`` of fits that failed their checks.

    Examples
    --------
    >>> import climb_bayes as cb
    >>> runs = cb.read_runs(cb.dataset_path("default"))
    >>> scores = cb.evaluate(runs, "run_id~holdout", laws=("climb", "isolated"))
    >>> list(scores["law"])
    ['climb', 'isolated']
    >>> bool(scores["mre"].iloc[0] < 0.1)
    True
    """
    setup_jax()
    from climb_bayes.data.holdout import holdout_mask
    from climb_bayes.data.observations import Observations
    from climb_bayes.evaluation.holdout_scores import evaluate_laws, rows_to_json
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.families import resolve_families
    from climb_bayes.laws.registry import parse_laws

    if isinstance(holdout, str):
        mask = holdout_mask(runs, holdout)
    else:
        mask = np.asarray(holdout, dtype=bool)
        if mask.shape != (runs.n_runs,):
            raise ClimbError(f"holdout mask needs one entry per run ({runs.n_runs}).")
    choice = resolve_families(families, runs.languages)
    law_objs = parse_laws(",".join(laws), families=choice.mapping)
    obs = Observations.from_runs(runs)
    if shipped:
        return _evaluate_shipped(obs, mask, law_objs, method or "nuts", seed, lfo_cuts, log)
    if lfo_cuts is not None:
        raise ClimbError("lfo_cuts sets the inner folds of shipped=True; the bare fits have none.")
    rows, _ = evaluate_laws(
        obs.select_runs(~mask),
        obs.select_runs(mask),
        law_objs,
        method=method or "map",
        options=FitOptions(seed=seed),
        dataset=str(runs.source),
        log=log,
    )
    flat = [
        {k: v for k, v in row.items() if k not in ("metrics", "info")} | row["metrics"]
        for row in rows_to_json(rows)
    ]
    return pd.DataFrame(flat)


def _evaluate_shipped(
    obs: Observations,
    mask: np.ndarray,
    laws: list,
    method: str,
    seed: int,
    lfo_cuts: Sequence[float] | None,
    log: Callable[[str], None] | None,
) -> pd.DataFrame:
    """:func:`evaluate` with ``shipped=True``: the ``fit`` pipeline and its sampler."""
    from climb_bayes.evaluation.lfo_evaluate import (
        calibration_lines,
        evaluate_extrapolation,
        fold_warnings,
        row_records,
    )
    from climb_bayes.inference.ensemble import shipped_options
    from climb_bayes.laws.base import FitOptions

    options = FitOptions(
        seed=seed,
        chains=FIT_SAMPLER.chains,
        warmup=FIT_SAMPLER.warmup,
        samples=FIT_SAMPLER.samples,
        target_accept=None,  # each law's own, as `fit`
    )
    train, test = obs.select_runs(~mask), obs.select_runs(mask)
    ensemble = shipped_options(method, lfo_cuts=lfo_cuts)
    result = evaluate_extrapolation(train, test, laws, options, ensemble, log=log)
    frame = pd.DataFrame(row_records(result))
    frame.attrs["weights"] = dict(result.folds[0]["weights"])
    frame.attrs["calibration"] = calibration_lines(result)
    frame.attrs["warnings"] = fold_warnings(result)
    return frame

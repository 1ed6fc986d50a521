"""Leave-future-out evaluation: what would ``climb-bayes fit`` have promised, and did it hold?

For each outer leave-future-out cut (:func:`climb_bayes.inference.lfo.lfo_folds`) the *whole*
fitting pipeline of ``climb-bayes fit`` runs on the budgets up to the cut -- every law, its inner
leave-future-out discrepancy calibration and the stacking weights
(:func:`climb_bayes.inference.ensemble.fit_ensemble`) -- and every larger budget is scored. Nothing
of a scored budget enters any fit, inner folds included (nested LFO). Scores are pooled per
extrapolation ratio ``D_target / D_cut`` (:data:`climb_bayes.inference.lfo.RATIO_BINS`), for each
law and for the stacked predictive: interval coverage (50/80/90/95%), CRPS and mean relative error.
The stacked predictive is scored as shipped (:data:`STACKED`: the laws' quantiles averaged) and
as the textbook mixture of the laws' distributions (:data:`STACKED_MIXTURE`), so the cost of
either combination is visible (:mod:`climb_bayes.inference.ensemble`, "How the laws are
combined").

This is the check the interval needs: coverage on real runs at budgets larger than the fit.

References
----------
.. [1] Bürkner, Gabry & Vehtari (2020), "Approximate leave-future-out cross-validation for
   Bayesian time series models", J. Stat. Comput. Simul. 90(14).
.. [2] Gneiting & Raftery (2007), "Strictly proper scoring rules, prediction, and estimation",
   JASA 102(477) (CRPS).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from climb_bayes.data.observations import Observations
from climb_bayes.errors import ClimbError
from climb_bayes.evaluation.metrics import COVERAGE_LEVELS, score
from climb_bayes.inference.convergence import MIN_STACK_WEIGHT, ConvergenceGate, law_problems
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble
from climb_bayes.inference.lfo import RATIO_BINS, check_no_leakage, lfo_folds, ratio_bin
from climb_bayes.inference.predictive import predictive_samples
from climb_bayes.laws.base import FitOptions, Law

__all__ = [
    "LfoRow",
    "LfoEvaluation",
    "Split",
    "evaluate_lfo",
    "evaluate_extrapolation",
    "format_lfo_table",
    "fold_warnings",
    "row_records",
    "calibration_lines",
    "STACKED",
    "STACKED_MIXTURE",
]

STACKED = "stacked"
"""Name of the stacked predictive in the rows (quantile average, the shipped intervals)."""

STACKED_MIXTURE = "stacked-mixture"
"""Name of the mixture of the laws' predictives, same weights (for comparison)."""


class LfoRow(NamedTuple):
    """Scores of one predictive (a law or :data:`STACKED`) on one extrapolation-ratio bin."""

    law: str
    ratio_bin: str  # "(2, 4]" or "all"
    n: int
    metrics: dict[str, Any]


class LfoEvaluation(NamedTuple):
    """Result of :func:`evaluate_lfo`."""

    rows: list[LfoRow]
    folds: list[dict[str, Any]]  # cut, levels, n_fit, n_test, weights, problems, seconds


def _bin_label(j: int) -> str:
    lo, hi = RATIO_BINS[j]
    return f"({lo:g}, {hi:g}]" if np.isfinite(hi) else f"> {lo:g}"


def evaluate_lfo(
    obs: Observations,
    laws: Sequence[Law],
    options: FitOptions | None = None,
    ens: EnsembleOptions | None = None,
    *,
    max_folds: int | None = 3,
    n_predictive: int = 1000,
    levels: Sequence[float] = COVERAGE_LEVELS,
    log: Callable[[str], None] | None = None,
) -> LfoEvaluation:
    """Nested leave-future-out evaluation of the fitting pipeline on ``obs``.

    Parameters
    ----------
    obs : Observations
        Runs at three or more budget levels.
    laws : sequence of Law
        The laws ``climb-bayes fit`` would stack.
    options, ens : FitOptions, EnsembleOptions
        Settings of each outer fit (as ``climb-bayes fit``).
    max_folds : int, optional
        Most outer cuts (spread from the earliest to the latest).
    n_predictive : int
        Predictive samples per scored observation.
    levels : sequence of float
        Coverage levels.
    log : callable, optional
        Progress lines.

    Returns
    -------
    LfoEvaluation
        One row per predictive and ratio bin (plus ``"all"``), and one record per fold.
    """
    common = _usable_by_all(obs, laws)
    folds = lfo_folds(common, max_folds=max_folds)
    if not folds:
        raise ClimbError(
            "leave-future-out evaluation needs runs at 3 or more budgets (2 to fit, 1 to "
            f"predict); these data have {np.unique(common.run_budget).size}."
        )
    splits = []
    for fold in folds:
        check_no_leakage(common, fold)
        splits.append(
            Split(common.select(fold.fit), common.select(fold.test), fold.ratio(common), fold.cut)
        )
    return _evaluate_splits(
        splits, laws, options, ens, n_predictive=n_predictive, levels=levels, log=log
    )


def _usable_by_all(obs: Observations, laws: Sequence[Law]) -> Observations:
    """The observations every law can predict (laws compare on the same points)."""
    common = obs
    for law in laws:
        common = law.prepare(obs).usable(common)
    return common


class Split(NamedTuple):
    """Fit on ``train``, score ``test``; ``ratio`` is each test observation's ``D / cut``."""

    train: Observations
    test: Observations
    ratio: np.ndarray
    cut: float


def evaluate_extrapolation(
    train: Observations,
    test: Observations,
    laws: Sequence[Law],
    options: FitOptions | None = None,
    ens: EnsembleOptions | None = None,
    *,
    n_predictive: int = 1000,
    levels: Sequence[float] = COVERAGE_LEVELS,
    log: Callable[[str], None] | None = None,
) -> LfoEvaluation:
    """Fit the ``climb-bayes fit`` pipeline on ``train`` and score it on a given ``test`` set.

    The same scoring as :func:`evaluate_lfo` for one explicit split (published curves with
    a fixed fit/held-out boundary): every law with its learned discrepancy, and the stacked
    predictive, per extrapolation ratio ``D_test / max D_train`` (run budgets).

    Parameters
    ----------
    train, test : Observations
        Fitting and held-out observations (same groups).
    laws, options, ens, n_predictive, levels, log
        As in :func:`evaluate_lfo`.

    Returns
    -------
    LfoEvaluation
    """
    common_train, common_test = _usable_by_all(train, laws), _usable_by_all(test, laws)
    cut = float(np.max(common_train.run_budget[common_train.run]))
    ratio = common_test.run_budget[common_test.run] / cut
    split = Split(common_train, common_test, ratio, cut)
    return _evaluate_splits(
        [split], laws, options, ens, n_predictive=n_predictive, levels=levels, log=log
    )


def _evaluate_splits(
    splits: Sequence[Split],
    laws: Sequence[Law],
    options: FitOptions | None,
    ens: EnsembleOptions | None,
    *,
    n_predictive: int,
    levels: Sequence[float],
    log: Callable[[str], None] | None,
) -> LfoEvaluation:
    options = options or FitOptions()
    ens = ens or EnsembleOptions()
    log = log or (lambda _msg: None)
    scored: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    records = []
    for f, (train, test, _, cut) in enumerate(splits):
        t0 = time.perf_counter()
        levels_fit = np.unique(train.run_budget[train.run]).size
        log(
            f"outer fold {f + 1}/{len(splits)}: fit budgets <= {cut:.3g} "
            f"({levels_fit} levels, {train.n} observations), score {test.n}"
        )
        ensemble = fit_ensemble(train, laws, options, ens, log=lambda m: log("  " + m))
        preds = {
            name: predictive_samples(fit, test, n_predictive, seed=options.seed)
            for name, fit in ensemble.fits.items()
        }
        if len(ensemble.fits) > 1:
            for name, combine in ((STACKED, "quantile"), (STACKED_MIXTURE, "mixture")):
                preds[name] = ensemble.predictive_samples(
                    test, n_predictive, seed=options.seed, combine=combine
                )
        for name, s in preds.items():
            scored.setdefault(name, []).append((s, np.median(s, axis=0)))
        problems = {name: law_problems(fit.info) for name, fit in ensemble.fits.items()}
        records.append(
            {
                "cut": cut,
                "levels": levels_fit,
                "n_fit": train.n,
                "n_test": test.n,
                "weights": dict(ensemble.weights),
                "problems": {k: [str(p) for p in v] for k, v in problems.items() if v},
                "approximation_only": sorted(
                    k
                    for k, v in problems.items()
                    if v and ConvergenceGate(tuple(v)).approximation_only
                ),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    ratio = np.concatenate([s.ratio for s in splits])
    group = np.concatenate([s.test.group for s in splits])
    loss = np.concatenate([s.test.loss for s in splits])
    n_groups = splits[0].test.m
    bins = ratio_bin(ratio)
    rows: list[LfoRow] = []
    for name, chunks in scored.items():
        samples = np.concatenate([c[0] for c in chunks], axis=1)  # equal draws per fold
        point = np.concatenate([c[1] for c in chunks])
        for j in [*sorted(set(bins.tolist()) - {-1}), None]:
            sel = np.ones(ratio.size, bool) if j is None else bins == j
            m = score(
                loss[sel],
                group[sel],
                point[sel],
                samples[:, sel],
                n_groups=n_groups,
                levels=levels,
            )
            rows.append(LfoRow(name, "all" if j is None else _bin_label(j), int(sel.sum()), m))
    return LfoEvaluation(rows, records)


def fold_warnings(result: LfoEvaluation) -> list[str]:
    """One ``WARNING:`` line per outer fit whose law did not converge or is a poor Laplace
    approximation of its posterior: the rows of that law, and the stacked rows where the law has
    stacking weight, are computed from it.

    Parameters
    ----------
    result : LfoEvaluation
        From :func:`evaluate_lfo` or :func:`evaluate_extrapolation`.

    Returns
    -------
    list of str
        Empty when every outer fit passed its checks.
    """
    out = []
    many = len(result.folds) > 1
    for f, fold in enumerate(result.folds):
        poor = set(fold.get("approximation_only", ()))
        where = f"outer fold {f + 1} (fit <= {fold['cut']:.3g}): " if many else ""
        for law, problems in fold.get("problems", {}).items():
            what = "is a poor approximation of its posterior" if law in poor else "NOT converged"
            weight = float(fold.get("weights", {}).get(law, 0.0))
            rows = (
                f"its rows and the stacked rows (weight {weight:.2f})"
                if weight >= MIN_STACK_WEIGHT
                else f"its rows (not the stacked ones: weight below {MIN_STACK_WEIGHT:g})"
            )
            out.append(
                f"WARNING: {where}{law} {what}: {'; '.join(problems)}; {rows} are computed "
                "from it and are not trustworthy."
            )
    return out


def row_records(result: LfoEvaluation) -> list[dict[str, Any]]:
    """The rows of ``result`` as flat records (``predictive``, ``ratio_bin``, ``n`` and the
    metrics but the per-group R² array), as ``evaluate --json`` writes them."""
    return [
        {"predictive": r.law, "ratio_bin": r.ratio_bin, "n": r.n}
        | {k: v for k, v in r.metrics.items() if k != "r2_group"}
        for r in result.rows
    ]


def calibration_lines(result: LfoEvaluation, levels: Sequence[float] = (0.5, 0.9)) -> list[str]:
    """Whether the default predictive's coverage over all scored points is evidence of
    miscalibration: its coverage at ``levels`` against the 5-95% range a calibrated predictive
    would show on the same points (:func:`~climb_bayes.evaluation.metrics.coverage_if_calibrated`:
    the errors cluster by group, so the range is wider than a binomial count suggests).

    Parameters
    ----------
    result : LfoEvaluation
        From :func:`evaluate_lfo` or :func:`evaluate_extrapolation`.
    levels : sequence of float
        Interval levels to report.

    Returns
    -------
    list of str
        One line for :data:`STACKED` (or the single law when nothing is stacked); empty when
        the rows carry no calibrated range.
    """
    overall = {r.law: r for r in result.rows if r.ratio_bin == "all"}
    name = STACKED if STACKED in overall else next(iter(overall), None)
    if name is None:
        return []
    metrics = overall[name].metrics
    cov, band = metrics.get("coverage", {}), metrics.get("coverage_if_calibrated", {})
    parts, verdicts = [], set()
    for level in levels:
        key = str(level)
        if key not in cov or key not in band:
            return []
        low, high = band[key]
        c = cov[key]
        verdicts.add("too wide" if c > high else "too narrow" if c < low else "consistent")
        parts.append(f"{level:.0%} intervals cover {c:.2f} (calibrated: {low:.2f}-{high:.2f})")
    if verdicts == {"consistent"}:
        verdict = "consistent with calibrated intervals on these points"
    else:
        verdict = " and ".join(sorted(verdicts - {"consistent"})) + ": evidence of miscalibration"
    return [
        f"calibration of {name}: {'; '.join(parts)}; {verdict} (calibrated: the 5-95% range "
        "a calibrated predictive shows on these points, whose errors cluster by group)"
    ]


def format_lfo_table(result: LfoEvaluation, markdown: bool = False) -> str:
    """A table: predictive, ratio bin, n, cov50/80/90/95, CRPS, MRE."""
    head = ["predictive", "D/D_fit", "n", "cov50", "cov80", "cov90", "cov95", "CRPS", "MRE"]
    body = []
    for row in result.rows:
        cov = row.metrics.get("coverage", {})
        cells = [row.law, row.ratio_bin, str(row.n)]
        cells += [f"{cov.get(str(lvl), float('nan')):.2f}" for lvl in (0.5, 0.8, 0.9, 0.95)]
        cells += [f"{row.metrics.get('crps', float('nan')):.4f}", f"{row.metrics['mre']:.2%}"]
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c) + " |" for c in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head), *(fmt.format(*c) for c in body)])

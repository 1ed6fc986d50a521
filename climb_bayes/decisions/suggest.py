"""Which run to train next: rank candidate runs by the information they are expected to give.

Preposterior analysis under the default predictive. A *joint draw* ``s`` of the predictive is one
law (in proportion to its stacking weight), one posterior draw of it and one realisation of its
extrapolation discrepancy, evaluated at every budget at once
(:func:`climb_bayes.decisions.ensemble_decision.decision_draws` with one seed). Per joint draw
there is a target ``Q_s`` at the target budget -- the optimal mixture ``r*_s``, or the weighted
loss of the recommended mixture -- and, for a candidate run ``c`` (mixture ``r_c``, budget
``D_c``), a simulated outcome ``y_s``: the mean log-loss of the run's tail per language
(evaluation points at ``0.85, 0.9, 0.95, 1.0`` of ``D_c``, the points a fit uses) under the same
draw, plus the noise of a tail mean (``t_df(0, sqrt(s^2 / 4 + t^2))`` with the law's per-point
scale ``s`` and run effect ``t``, :mod:`climb_bayes.model.observation`).

The expected spread of ``Q`` after the run is estimated by regression (Strong, Oakley & Brennan
2015): the out-of-fold mean squared error of the least-squares prediction of ``Q`` from
``[1, y]`` (two folds), summed over the components of ``Q``. The posterior mean ``E[Q | y]`` is
the best predictor of ``Q`` from ``y``, and ``E[Var(Q | y)]`` is its mean squared error, so a
linear predictor's error is an *upper* bound on the spread after the run: the reported reduction
is a lower bound -- a run is never credited with more than a linear read of its outcome gives.

Because the draws carry the discrepancy, a run beyond the fitted budgets is credited with what
it shows about how far the laws extrapolate (its outcome and the target's loss share the draw's
discrepancy ``a`` and the law's bend), and with telling the laws apart; a run inside the fitted
range only sharpens the laws' parameters.

Why regression and not importance reweighting of the draws (what this module did before
2026-12-02, on CLIMB's posterior alone): a run beyond the fitted budgets is predicted with a
spread of a few times its noise in every language at once, so each simulated outcome's
likelihood leaves few effective draws, and a weighted variance of few draws understates the
spread left. Measured on the default data (``benchmarks/suggest_estimators.py``: target 1e8
tokens, 1000 joint draws, the uniform mixture at 12M tokens, 4x the largest fitted budget):
median effective sample size 11-19; spread of ``r*`` 0.213 -> 0.197 by reweighting, 0.208 by
this regression (the same with squared outcomes added); weighted loss 0.291 -> 0.153 and 0.165
nats. The regression uses every draw, needs no likelihood, and errs on the side of crediting a
run too little.

Each candidate also gets one line of reasoning: which language's outcome the draws disagree
about most, relative to the noise (a run is informative where the predictive predicts it poorly
compared with how precisely it is measured), and the share of the target's spread the run's
outcome explains.

Units
-----
Budgets in tokens; spreads of ``r*`` in share units (standard deviation summed in quadrature
over languages); spreads of the loss in nats/token.

References
----------
.. [1] Raiffa & Schlaifer (1961), "Applied Statistical Decision Theory" (preposterior analysis).
.. [2] Strong, Oakley, Brennan & Breeze (2015), "Estimating the expected value of sample
   information using the probabilistic sensitivity analysis sample: a fast, nonparametric
   regression-based method", Medical Decision Making 35(5) (the expected posterior spread as the
   residual of a regression of the target on simulated data).
.. [3] Goldstein & Wooff (2007), "Bayes Linear Statistics", Ch. 3 (the linear adjustment's
   variance bounds the expected posterior variance).
.. [4] Guo et al. (2025), "CLIMB", Algorithm 1 (the runs a fit uses: the last 15% of training).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from climb_bayes.data.design import format_budget
from climb_bayes.decisions.ensemble_decision import decision_draws, draw_log_losses
from climb_bayes.decisions.mixtures import format_mixture
from climb_bayes.errors import ClimbError

__all__ = [
    "TARGETS",
    "TAIL_FRACTIONS",
    "Candidate",
    "default_candidates",
    "read_candidates",
    "tail_noise",
    "noise_draws",
    "outcome_draws",
    "spread_after",
    "rank_candidates",
]

TARGETS = ("rstar", "loss")
"""What the next run should make more certain: the optimal mixture or the weighted loss."""

TAIL_FRACTIONS = (0.85, 0.9, 0.95, 1.0)
"""Evaluation points (fractions of the run's budget) a candidate run contributes."""

MIN_DRAWS = 20
"""Fewest joint draws :func:`rank_candidates` accepts (more with many languages)."""


@dataclass(frozen=True)
class Candidate:
    """A possible next run.

    Attributes
    ----------
    name : str
        Label (e.g. ``focus-de``).
    shares : ndarray (m,)
        Mixture.
    budget : float
        Budget (tokens).
    """

    name: str
    shares: np.ndarray
    budget: float


def default_candidates(
    languages: Sequence[str],
    budgets: Sequence[float],
    *,
    recommended: np.ndarray | None = None,
    n_random: int = 6,
    focus_share: float = 0.6,
    seed: int = 0,
) -> list[Candidate]:
    """Candidate runs: every mixture below at every budget.

    Mixtures: the recommended mixture (when given), uniform, one Algorithm-1-style mixture per
    language (``focus_share`` on it, the rest split equally) and ``n_random`` random mixtures
    (``0.9 Dirichlet(1) + 0.1 uniform``, drawn with ``seed``).
    """
    m = len(languages)
    mixes: list[tuple[str, np.ndarray]] = []
    if recommended is not None:
        mixes.append(("recommended", np.asarray(recommended, dtype=float)))
    mixes.append(("uniform", np.full(m, 1.0 / m)))
    for i, lang in enumerate(languages):
        r = np.full(m, (1.0 - focus_share) / (m - 1))
        r[i] = focus_share
        mixes.append((f"focus-{lang}", r))
    rng = np.random.default_rng(seed)
    for j in range(n_random):
        # Dirichlet(1) blended with 10% uniform: no language below 0.1 / m (runs that starve a
        # language are rarely trained and sit where the law is least trustworthy).
        mixes.append((f"random-{j + 1}", 0.9 * rng.dirichlet(np.ones(m)) + 0.1 / m))
    return [Candidate(name, r, float(b)) for b in budgets for name, r in mixes]


def read_candidates(path: str, languages: Sequence[str]) -> list[Candidate]:
    """Candidates from a plan CSV (``run_id, tokens, r_<lang>...``; ``climb-bayes plan``)."""
    try:
        df = pd.read_csv(path, dtype={"run_id": str})
    except FileNotFoundError:
        raise ClimbError(f"{path}: candidates file not found.") from None
    except Exception as exc:  # noqa: BLE001 - any parser failure means the same to the user
        raise ClimbError(f"{path}: cannot read the candidates CSV ({exc}).") from None
    need = ["run_id", "tokens"] + [f"r_{lang}" for lang in languages]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ClimbError(
            f"{path}: missing column(s) {', '.join(missing)}; a candidates file is a plan CSV "
            f"run_id,tokens,r_<lang>... with every language of the fit."
        )
    out = []
    for k, row in df.iterrows():
        r = np.array([float(row[f"r_{lang}"]) for lang in languages])
        budget = float(row["tokens"])
        if not math.isfinite(budget) or budget <= 0:
            raise ClimbError(f"{path}: row {k + 2}: tokens must be positive, got {row['tokens']}.")
        if np.any(~np.isfinite(r)) or np.any(r < 0) or abs(r.sum() - 1.0) > 1e-3:
            raise ClimbError(f"{path}: row {k + 2}: shares must be >= 0 and sum to 1.")
        out.append(Candidate(str(row["run_id"]), r / r.sum(), budget))
    if not out:
        raise ClimbError(f"{path}: no candidate rows.")
    return out


def tail_noise(ens: object, draws: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """Noise of a new run's tail mean under every joint draw: ``(S, m)`` scale and df.

    The tail mean of ``F`` points that share a run effect (per-point scale ``s``, run effect
    ``t``; :mod:`climb_bayes.model.observation`) has scale ``sqrt(s^2 / F + t^2)``; for a
    Student-t group, degrees of freedom of the law's draw (``inf``: Normal).

    Parameters
    ----------
    ens : LawEnsemble
        The predictive the draws come from.
    draws : sequence of LawDraws
        :func:`~climb_bayes.decisions.ensemble_decision.decision_draws` of ``ens`` (their
        ``index`` names each law's posterior draws).
    """
    total = sum(ld.n for ld in draws)
    f = len(TAIL_FRACTIONS)
    scale, df = [], []
    for name, ld in zip(ens.allocation(total), draws, strict=True):
        fit = ens.fits[name]
        s = np.asarray(fit.sigma, dtype=float)[ld.index]
        t = 0.0 if fit.sigma_run is None else np.asarray(fit.sigma_run, dtype=float)[ld.index]
        scale.append(np.sqrt(s**2 / f + t**2))
        df.append(fit.df_draws()[ld.index])
    return np.concatenate(scale), np.concatenate(df)


def outcome_draws(ens: object, candidate: Candidate, n_draws: int, seed: int = 0) -> np.ndarray:
    """``(S, m)`` mean log-loss of the candidate run's tail under every joint draw (no noise).

    The points at :data:`TAIL_FRACTIONS` of its budget, each from
    :func:`~climb_bayes.decisions.ensemble_decision.decision_draws` with the same ``n_draws``
    and ``seed`` as the target's draws, so draw ``s`` here and there is one joint draw.
    """
    points = [
        draw_log_losses(
            decision_draws(ens, f * candidate.budget, n_draws, seed=seed), candidate.shares
        )
        for f in TAIL_FRACTIONS
    ]
    return np.mean(points, axis=0)


def spread_after(
    values: np.ndarray, outcomes: np.ndarray, *, n_folds: int = 2, seed: int = 0
) -> float:
    """Expected spread of ``values`` after seeing ``outcomes``: out-of-fold least squares.

    Parameters
    ----------
    values : ndarray (S, k)
        The target per draw.
    outcomes : ndarray (S, p)
        The simulated outcome per draw (noise included).
    n_folds : int
        Folds of the cross-fitting (each draw's residual comes from a fit without it).
    seed : int
        Seed of the fold assignment.

    Returns
    -------
    float
        ``sum_j mean_s (Q_sj - Qhat_sj)^2``: the summed mean squared error of predicting the
        target from ``[1, outcomes]``, an upper bound (up to Monte Carlo error) on the expected
        posterior variance ``E[sum_j Var(Q_j | y)]`` (Strong et al. 2015; Goldstein & Wooff
        2007); at most the spread now (a regression that predicts worse than the mean teaches
        nothing).
    """
    q = np.asarray(values, dtype=float)
    q = q[:, None] if q.ndim == 1 else q
    y = np.asarray(outcomes, dtype=float)
    sd = y.std(axis=0)
    x = np.column_stack([np.ones(len(y)), (y - y.mean(axis=0)) / np.where(sd > 0, sd, 1.0)])
    fold = np.random.default_rng(seed).permutation(len(y)) % n_folds
    resid = np.empty_like(q)
    for k in range(n_folds):
        train, test = fold != k, fold == k
        coef, *_ = np.linalg.lstsq(x[train], q[train], rcond=None)
        resid[test] = q[test] - x[test] @ coef
    now = float(np.sum(q.var(axis=0)))
    return min(float(np.sum(np.mean(resid**2, axis=0))), now)


def noise_draws(rng: np.random.Generator, scale: np.ndarray, df: np.ndarray) -> np.ndarray:
    """One noise draw per entry of ``scale``: ``scale * t_df`` (Normal where ``df`` is ``inf``);
    with :func:`tail_noise`'s ``(scale, df)``, the noise of a run's tail mean in one draw.
    (:func:`climb_bayes.model.observation.draw_noise` draws the per-point noise of observed
    groups; averaging its draws over a simulated tail would be the exact model, this the
    closed-form scale of the mean.)"""
    finite = np.isfinite(df)
    t = rng.standard_t(np.where(finite, df, 1.0))
    return scale * np.where(finite, t, rng.standard_normal(scale.shape))


def rank_candidates(
    ens: object,
    draws: Sequence[object],
    languages: Sequence[str],
    candidates: Sequence[Candidate],
    target_values: np.ndarray,
    *,
    target: str = "rstar",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Expected reduction of the spread of the target for every candidate run.

    Parameters
    ----------
    ens : LawEnsemble
        The predictive (:meth:`Fit.ensemble`, or one law of it: ``LawEnsemble.only``).
    draws : sequence of LawDraws
        ``decision_draws(ens, target_budget, S, seed=seed)``: the joint draws at the target
        budget.
    languages : sequence of str
        Names.
    candidates : sequence of Candidate
        Runs to rank.
    target_values : ndarray (S,) or (S, k)
        The target per joint draw of ``draws`` (``r*`` per draw from
        :func:`~climb_bayes.decisions.ensemble_decision.optimum_draws`, or the weighted loss of
        the recommended mixture from ``draw_losses``).
    target : {"rstar", "loss"}
        Only used for the wording.
    seed : int
        The seed ``draws`` were drawn with (the candidates' outcomes are the same joint draws
        at their budgets); the outcomes' noise and the folds use seeds derived from it.
    progress : callable, optional
        ``(done, total)`` after each candidate.

    Returns
    -------
    pandas.DataFrame
        One row per candidate, best first: ``rank, candidate, budget, shares, spread_now,
        spread_after, reduction, reduction_pct, snr_max, most_informative, reason``.
    """
    if target not in TARGETS:
        raise ClimbError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}.")
    q = np.asarray(target_values, dtype=float)
    q = q[:, None] if q.ndim == 1 else q
    s, m = q.shape[0], len(languages)
    if sum(ld.n for ld in draws) != s:
        raise ClimbError(f"{s} target values for {sum(ld.n for ld in draws)} draws.")
    need = max(MIN_DRAWS, 10 * (m + 1))
    if s < need:
        raise ClimbError(
            f"suggest needs at least {need} draws for {m} languages (the regression of the "
            f"target on a run's outcome has {m + 1} coefficients); got {s}. Raise --max-draws."
        )
    rng = np.random.default_rng([seed, 1])
    scale, df = tail_noise(ens, draws)
    spread_now = float(np.sum(q.var(axis=0)))
    rows = []
    for c_idx, cand in enumerate(candidates):
        keep = cand.shares > 0
        mu = outcome_draws(ens, cand, s, seed=seed)[:, keep]
        y = mu + noise_draws(rng, scale[:, keep], df[:, keep])
        after = spread_after(q, y, seed=seed)
        snr = np.std(mu, axis=0) / np.median(scale[:, keep], axis=0)
        names = [lang for lang, k in zip(languages, keep, strict=True) if k]
        j = int(np.argmax(snr))
        rows.append(
            {
                "candidate": cand.name,
                "budget": cand.budget,
                "shares": format_mixture(cand.shares, languages),
                "spread_now": math.sqrt(spread_now),
                "spread_after": math.sqrt(after),
                "reduction": math.sqrt(spread_now) - math.sqrt(after),
                "reduction_pct": 100.0 * (1.0 - math.sqrt(after / spread_now))
                if spread_now > 0
                else 0.0,
                "snr_max": float(snr[j]),
                "most_informative": names[j],
                "reason": "",
            }
        )
        if progress is not None:
            progress(c_idx + 1, len(candidates))
    out = pd.DataFrame(rows).sort_values("reduction", ascending=False, kind="stable")
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    what = "r* spread" if target == "rstar" else "weighted-loss spread"
    unit = "" if target == "rstar" else " nats"
    out["reason"] = [_reason(row, what, unit) for row in out.itertuples(index=False)]
    return out.reset_index(drop=True)


def _reason(row: object, what: str, unit: str) -> str:
    at = format_budget(row.budget)
    lead = (
        f"at {at} tokens the draws disagree on {row.most_informative}'s loss by "
        f"{row.snr_max:.1f}x the noise"
    )
    if row.snr_max < 1.0:
        lead = (
            f"at {at} tokens the predictive already predicts this run within the noise "
            f"(largest disagreement {row.snr_max:.1f}x, {row.most_informative})"
        )
    fmt = "{:.3f}" if unit == "" else "{:.4f}"
    change = (
        f"; expected {what} {fmt.format(row.spread_now)} -> {fmt.format(row.spread_after)}{unit} "
        f"(-{row.reduction_pct:.0f}%)"
    )
    return lead + change

"""Which run to train next: rank candidate runs by the information they are expected to give.

Preposterior analysis with importance reweighting of the posterior draws. For a candidate run
``c`` (mixture ``r_c``, budget ``D_c``) and a target quantity ``Q`` computed per draw (the
optimal mixture ``r*`` at the target budget, or the weighted loss of the recommended mixture
there):

1. simulate ``K`` outcomes of the run: pick a draw ``t_k`` from the posterior, predict the
   tail of the run's loss curve (evaluation points at ``0.85, 0.9, 0.95, 1.0`` of ``D_c``, the
   points a fit uses) and add the fit's observation noise;
2. for each outcome, reweight every draw ``s`` by the likelihood of the outcome under ``s``
   (the draw that generated it is left out, so an outcome does not trivially single out its
   own draw); the weighted draws approximate the posterior after that run;
3. the expected spread after the run is the mean over outcomes of the weighted spread of ``Q``
   (the summed variance over languages for ``r*``; the variance for the loss).

The **expected reduction** is the current spread minus the expected spread after. Each
candidate also gets one line of reasoning: which language's outcome the draws disagree about
most, relative to the noise (a run is informative where the posterior predicts it poorly
compared with how precisely it is measured), and the effective sample size of the weights
(below ~20 the estimate is optimistic: too few draws to represent the updated posterior).

Units
-----
Budgets in tokens; spreads of ``r*`` in share units (standard deviation summed in quadrature
over languages); spreads of the loss in nats/token.

References
----------
.. [1] Raiffa & Schlaifer (1961), "Applied Statistical Decision Theory" (preposterior analysis).
.. [2] Chaloner & Verdinelli (1995), "Bayesian Experimental Design: A Review", Statist. Sci.
.. [3] Guo et al. (2025), "CLIMB", Algorithm 1 (the runs a fit uses: the last 15% of training).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.special
import scipy.stats

from climb_bayes.data.design import format_budget
from climb_bayes.decisions.mixtures import format_mixture
from climb_bayes.decisions.prediction import NoiseModel, law_log_loss
from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams

__all__ = [
    "TARGETS",
    "TAIL_FRACTIONS",
    "Candidate",
    "default_candidates",
    "read_candidates",
    "weighted_spread",
    "rank_candidates",
]

TARGETS = ("rstar", "loss")
"""What the next run should make more certain: the optimal mixture or the weighted loss."""

TAIL_FRACTIONS = (0.85, 0.9, 0.95, 1.0)
"""Evaluation points (fractions of the run's budget) a candidate run contributes."""


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


def weighted_spread(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Summed weighted variance over the last axis of ``values`` (S, k) for weights (..., S)."""
    mean = weights @ values  # (..., k)
    second = weights @ (values**2)
    return np.sum(np.maximum(second - mean**2, 0.0), axis=-1)


def _loglik(
    y: np.ndarray, mu: np.ndarray, sigma: np.ndarray, noise: NoiseModel, df: np.ndarray
) -> np.ndarray:
    # Log density; the Normal's constant is common to every draw (it cancels in the weights),
    # the Student-t's is not where each draw has its own df.
    z = (y - mu) / sigma
    if noise.likelihood == "student_t":
        return scipy.stats.t.logpdf(z, df) - np.log(sigma)
    return -0.5 * z * z - np.log(sigma)


def rank_candidates(
    params: LawParams,
    noise: NoiseModel,
    languages: Sequence[str],
    candidates: Sequence[Candidate],
    target_values: np.ndarray,
    *,
    target: str = "rstar",
    n_outcomes: int = 64,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Expected reduction of the posterior spread of the target for every candidate run.

    Parameters
    ----------
    params : LawParams
        Posterior draws (tokens units), ``S`` of them.
    noise : NoiseModel
        The fit's observation noise.
    languages : sequence of str
        Names.
    candidates : sequence of Candidate
        Runs to rank.
    target_values : ndarray (S,) or (S, k)
        The target per draw (``r*`` per draw, or the weighted loss at the recommendation).
    target : {"rstar", "loss"}
        Only used for the wording.
    n_outcomes : int
        Simulated outcomes per candidate.
    seed : int
        Seed of the simulated outcomes.
    progress : callable, optional
        ``(done, total)`` after each candidate.

    Returns
    -------
    pandas.DataFrame
        One row per candidate, best first: ``rank, candidate, budget, shares, spread_now,
        spread_after, reduction, reduction_pct, ess_median, reason``.
    """
    if target not in TARGETS:
        raise ClimbError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}.")
    q = np.asarray(target_values, dtype=float)
    q = q[:, None] if q.ndim == 1 else q
    s = q.shape[0]
    if s < 20:
        raise ClimbError(
            f"suggest needs posterior draws (a NUTS fit); this fit has {s} draw(s). Refit with "
            f"`climb-bayes fit --method nuts`."
        )
    if n_outcomes < 2:
        raise ClimbError(f"--outcomes must be >= 2, got {n_outcomes}.")
    uniform = np.full(s, 1.0 / s)
    spread_now = float(weighted_spread(q, uniform))
    rng = np.random.default_rng(seed)
    fr = np.asarray(TAIL_FRACTIONS)
    rows = []
    for c_idx, cand in enumerate(candidates):
        keep = cand.shares > 0
        tokens = cand.budget * fr
        mu = law_log_loss(params, np.tile(cand.shares, (fr.size, 1)), tokens)[:, :, keep]
        sig = noise.sigma[:, keep]  # (S, m')
        df = noise.df_draws()[:, keep]  # (S, m')
        truth = rng.integers(0, s, size=n_outcomes)
        if noise.likelihood == "student_t":
            e = rng.standard_t(df[truth][:, None, :], size=(n_outcomes,) + mu.shape[1:])
        else:
            e = rng.standard_normal(size=(n_outcomes,) + mu.shape[1:])
        y = mu[truth] + sig[truth][:, None, :] * e  # (K, F, m')
        ll = _loglik(y[:, None], mu[None], sig[None, :, None, :], noise, df[None, :, None, :])
        ll = ll.sum(axis=(2, 3))  # (K, S)
        ll[np.arange(n_outcomes), truth] = -np.inf  # leave the generating draw out
        w = np.exp(ll - scipy.special.logsumexp(ll, axis=1, keepdims=True))
        after = weighted_spread(q, w)  # (K,)
        ess = 1.0 / np.sum(w**2, axis=1)
        spread_after = float(np.mean(after))
        # reasoning: the most informative language (posterior disagreement / noise at D_c)
        sd_pred = np.std(mu[:, -1, :], axis=0)
        snr = sd_pred / np.median(sig, axis=0)
        names = [lang for lang, k in zip(languages, keep, strict=True) if k]
        j = int(np.argmax(snr))
        rows.append(
            {
                "candidate": cand.name,
                "budget": cand.budget,
                "shares": format_mixture(cand.shares, languages),
                "spread_now": math.sqrt(spread_now),
                "spread_after": math.sqrt(spread_after),
                "reduction": math.sqrt(spread_now) - math.sqrt(spread_after),
                "reduction_pct": 100.0 * (1.0 - math.sqrt(spread_after / spread_now))
                if spread_now > 0
                else 0.0,
                "ess_median": float(np.median(ess)),
                "snr_max": float(snr[j]),
                "most_informative": names[j],
                "reason": "",
            }
        )
        if progress is not None:
            progress(c_idx + 1, len(candidates))
    df = pd.DataFrame(rows).sort_values("reduction", ascending=False, kind="stable")
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    what = "r* spread" if target == "rstar" else "weighted-loss spread"
    unit = "" if target == "rstar" else " nats"
    df["reason"] = [_reason(row, what, unit) for row in df.itertuples(index=False)]
    return df.reset_index(drop=True)


def _reason(row: object, what: str, unit: str) -> str:
    at = format_budget(row.budget)
    lead = (
        f"at {at} tokens the draws disagree on {row.most_informative}'s loss by "
        f"{row.snr_max:.1f}x the noise"
    )
    if row.snr_max < 1.0:
        lead = (
            f"at {at} tokens the posterior already predicts this run within the noise "
            f"(largest disagreement {row.snr_max:.1f}x, {row.most_informative})"
        )
    fmt = "{:.3f}" if unit == "" else "{:.4f}"
    change = (
        f"; expected {what} {fmt.format(row.spread_now)} -> {fmt.format(row.spread_after)}{unit} "
        f"(-{row.reduction_pct:.0f}%)"
    )
    caveat = "; few effective draws (ESS < 20): optimistic" if row.ess_median < 20 else ""
    return lead + change + caveat

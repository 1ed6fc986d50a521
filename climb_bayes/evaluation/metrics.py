"""Scores of a law's predictions on held-out observations: accuracy and calibration.

Pure NumPy; every function takes plain arrays so it can score any law, point fit or posterior.

Accuracy (point predictions)
    :func:`r2` (pooled over every observation, and :func:`r2_by_group` per language or domain,
    across runs), :func:`huber_log` (the Chinchilla replication's Huber loss on log-loss,
    ``delta = 1e-3``), :func:`huber_loss` (Huber on the loss itself, ``delta = 1``, the scale of
    the CLIMB paper's Table 1), :func:`mean_relative_error` and :func:`rmsle`.
Calibration (predictive distributions, from samples)
    :func:`interval_coverage` of central intervals, :func:`calibration_error` (mean squared
    gap between coverage and nominal level), :func:`crps_samples` (continuous ranked
    probability score) and :func:`log_predictive_density`. :func:`coverage_if_calibrated` says
    how far a *calibrated* predictive's coverage would stray on the same points, whose errors
    cluster (one domain's law error is shared by every mixture), so that a miss can be told
    from chance.

Pooled R² over all (run, group) observations is inflated by the spread *between* groups (a law
that only knew each group's mean loss would already score high), so both pooled and per-group
R² are reported by :func:`score`.

Units
-----
Losses in nats/token. Log-scale quantities (Huber, RMSLE, samples passed to the calibration
functions, CRPS, log predictive density) are on ``log(loss)``; CRPS is then in log-nats and the
log predictive density is that of ``log(loss)``.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Section 5 (R² and Huber loss of held-out predictions).
.. [2] Besiroglu et al. (2024), "Chinchilla Scaling: A replication attempt" (Huber on log-loss,
   delta = 1e-3).
.. [3] Gneiting & Raftery (2007), "Strictly Proper Scoring Rules, Prediction, and
   Estimation", JASA 102(477), Eq. (20)-(21) (CRPS, its energy form).
.. [4] Gelman, Hwang & Vehtari (2014), "Understanding predictive information criteria for
   Bayesian models", Stat. Comput. 24 (log pointwise predictive density).
.. [5] Gneiting, Balabdaoui & Raftery (2007), "Probabilistic forecasts, calibration and
   sharpness", JRSS B 69(2) (the probability integral transform of a calibrated forecast is
   uniform).
.. [6] Searle, Casella & McCulloch (1992), "Variance Components", Section 3.6 (the one-way
   ANOVA estimator of the intra-class correlation, unbalanced groups).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

__all__ = [
    "HUBER_DELTA",
    "HUBER_LOSS_DELTA",
    "huber_loss",
    "COVERAGE_LEVELS",
    "r2",
    "r2_by_group",
    "huber_log",
    "mean_relative_error",
    "rmsle",
    "interval_coverage",
    "calibration_error",
    "coverage_if_calibrated",
    "crps_samples",
    "log_predictive_density",
    "score",
]

HUBER_DELTA = 1e-3
"""Huber threshold on log-loss residuals (Hoffmann et al. 2022; the Chinchilla replication)."""

HUBER_LOSS_DELTA = 1.0
"""Huber threshold on loss residuals (nats) of :func:`huber_loss`.

The CLIMB paper reports "Huber loss" (Table 1, 0.2-8 x 1e-3) without its delta or scale. A
Huber on the loss with ``delta = 1`` (the PyTorch and scikit-learn default) is ``r^2/2`` for
1-4% errors at losses of 2-3 nats, i.e. 0.2-7 x 1e-3: the paper's range; on log-loss with
``delta = 1e-3`` the same errors give ~1e-5. An assumption, stated as one."""

COVERAGE_LEVELS = (0.5, 0.8, 0.9, 0.95)
"""Nominal levels of the central predictive intervals whose coverage is reported."""


def _pair(y: np.ndarray, yhat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=float).ravel()
    yhat = np.asarray(yhat, dtype=float).ravel()
    if y.shape != yhat.shape:
        raise ValueError(f"observed and predicted have different sizes: {y.size} vs {yhat.size}")
    return y, yhat


def r2(y: np.ndarray, yhat: np.ndarray) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot``.

    Parameters
    ----------
    y, yhat : array (N,)
        Observed and predicted values (e.g. losses in nats/token).

    Returns
    -------
    float
        R² (can be negative: worse than predicting the mean); NaN with fewer than 2 values or
        no spread in ``y``.

    Units
    -----
    Unit-free.

    References
    ----------
    .. [1] Guo et al. (2025), Section 5.
    """
    y, yhat = _pair(y, yhat)
    if y.size < 2:
        return float("nan")
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot


def r2_by_group(
    y: np.ndarray, yhat: np.ndarray, group: np.ndarray, n_groups: int | None = None
) -> np.ndarray:
    """R² computed separately within each group (language or domain), across runs.

    Parameters
    ----------
    y, yhat : array (N,)
        Observed and predicted values.
    group : array of int (N,)
        Group index of each value.
    n_groups : int, optional
        Length of the result (``max(group) + 1`` by default).

    Returns
    -------
    array (n_groups,)
        R² per group; NaN for groups with fewer than 2 values or no spread.

    Units
    -----
    Unit-free.
    """
    y, yhat = _pair(y, yhat)
    group = np.asarray(group, dtype=int).ravel()
    n_groups = int(group.max()) + 1 if n_groups is None and group.size else int(n_groups or 0)
    return np.array([r2(y[group == g], yhat[group == g]) for g in range(n_groups)])


def _huber_mean(res: np.ndarray, delta: float) -> float:
    a = np.abs(res)
    h = np.where(a <= delta, 0.5 * res**2, delta * (a - 0.5 * delta))
    return float(np.mean(h)) if h.size else float("nan")


def huber_loss(
    pred_loss: np.ndarray, obs_loss: np.ndarray, delta: float = HUBER_LOSS_DELTA
) -> float:
    """Mean Huber loss of the loss residuals ``pred - obs`` (nats), ``delta`` = 1 by default.

    The scale on which the CLIMB paper's Table 1 reads (see :data:`HUBER_LOSS_DELTA`).

    Parameters
    ----------
    pred_loss, obs_loss : array (N,)
        Predicted and observed losses (nats/token).
    delta : float
        Threshold (nats).

    Returns
    -------
    float
        Mean over observations.

    Units
    -----
    nats^2 (for residuals beyond ``delta``, ``delta`` times the absolute error).

    References
    ----------
    .. [1] Huber (1964), "Robust Estimation of a Location Parameter".
    .. [2] Guo et al. (2025), Table 1 (Huber loss as a metric; delta not given).
    """
    obs, pred = _pair(obs_loss, pred_loss)
    return _huber_mean(pred - obs, delta)


def huber_log(pred_loss: np.ndarray, obs_loss: np.ndarray, delta: float = HUBER_DELTA) -> float:
    """Mean Huber loss of the log-loss residuals ``log pred - log obs``.

    ``h(x) = x^2 / 2`` for ``|x| <= delta`` and ``delta (|x| - delta / 2)`` beyond.

    Parameters
    ----------
    pred_loss, obs_loss : array (N,)
        Predicted and observed losses (> 0).
    delta : float
        Threshold (1e-3 as in Hoffmann et al. 2022 and the Chinchilla replication).

    Returns
    -------
    float
        Mean over observations (the papers' fitting objective is the sum; the mean makes test
        sets of different sizes comparable).

    Units
    -----
    log-nats (for residuals beyond ``delta``, ``delta`` times the absolute log error).

    References
    ----------
    .. [1] Huber (1964), "Robust Estimation of a Location Parameter".
    .. [2] Besiroglu et al. (2024).
    """
    obs, pred = _pair(obs_loss, pred_loss)
    return _huber_mean(np.log(pred) - np.log(obs), delta)


def mean_relative_error(pred_loss: np.ndarray, obs_loss: np.ndarray) -> float:
    """Mean of ``|pred - obs| / obs``.

    Units
    -----
    Unit-free (a fraction: 0.01 is 1%).
    """
    obs, pred = _pair(obs_loss, pred_loss)
    return float(np.mean(np.abs(pred - obs) / obs)) if obs.size else float("nan")


def rmsle(pred_loss: np.ndarray, obs_loss: np.ndarray) -> float:
    """Root mean squared log error ``sqrt(mean((log pred - log obs)^2))``.

    Losses are strictly positive, so the plain log is used (no ``log1p``).

    Units
    -----
    log-nats (about a relative error for small values).
    """
    obs, pred = _pair(obs_loss, pred_loss)
    if not obs.size:
        return float("nan")
    return float(np.sqrt(np.mean((np.log(pred) - np.log(obs)) ** 2)))


def interval_coverage(
    samples: np.ndarray, y: np.ndarray, levels: Sequence[float] = COVERAGE_LEVELS
) -> np.ndarray:
    """Fraction of observations inside the central predictive intervals.

    The interval at level ``l`` spans the ``(1 - l) / 2`` and ``(1 + l) / 2`` sample quantiles
    (linear interpolation) of each observation's predictive samples.

    Parameters
    ----------
    samples : array (S, N)
        Predictive samples for each of the ``N`` observations.
    y : array (N,)
        Observed values, on the scale of ``samples``.
    levels : sequence of float
        Nominal levels in (0, 1).

    Returns
    -------
    array (len(levels),)
        Empirical coverage per level. A calibrated forecast has coverage close to the level;
        coverage well below the level means intervals are too narrow (over-confident).

    Units
    -----
    Unit-free (fractions).
    """
    samples = np.asarray(samples, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if samples.ndim != 2 or samples.shape[1] != y.size:
        raise ValueError(f"samples must have shape (S, {y.size}), got {samples.shape}")
    levels = np.asarray(levels, dtype=float)
    if np.any((levels <= 0) | (levels >= 1)):
        raise ValueError(f"levels must lie in (0, 1), got {levels.tolist()}")
    q = np.concatenate([(1.0 - levels) / 2.0, (1.0 + levels) / 2.0])
    bounds = np.quantile(samples, q, axis=0)  # (2L, N)
    lo, hi = bounds[: levels.size], bounds[levels.size :]
    inside = (y[None, :] >= lo) & (y[None, :] <= hi)
    return inside.mean(axis=1) if y.size else np.full(levels.size, np.nan)


def calibration_error(coverage: np.ndarray, levels: Sequence[float] = COVERAGE_LEVELS) -> float:
    """Mean squared calibration error ``mean_l (coverage_l - l)^2``.

    Parameters
    ----------
    coverage : array (L,)
        From :func:`interval_coverage`.
    levels : sequence of float
        The matching nominal levels.

    Returns
    -------
    float
        0 for perfectly calibrated intervals; e.g. coverages of 0.25/0.4/0.45/0.5 at
        0.5/0.8/0.9/0.95 give about 0.14.

    Units
    -----
    Unit-free (squared fractions).
    """
    coverage = np.asarray(coverage, dtype=float)
    levels = np.asarray(levels, dtype=float)
    if coverage.shape != levels.shape:
        raise ValueError("coverage and levels must have the same length")
    return float(np.mean((coverage - levels) ** 2))


def coverage_if_calibrated(
    samples: np.ndarray,
    y: np.ndarray,
    cluster: np.ndarray,
    levels: Sequence[float] = COVERAGE_LEVELS,
    *,
    probs: tuple[float, float] = (0.05, 0.95),
    n_sim: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """Range of the coverage a calibrated predictive would show on these points.

    Held-out errors of one data set are not independent: a law's extrapolation error in one
    domain is shared by every mixture (and checkpoint) of that domain, so with 5-7 domains a
    calibrated predictive's empirical coverage moves in steps of a domain, far more than a
    binomial count of the points suggests. This estimates the intra-class correlation ``icc``
    of the probit-transformed probability integral transform (PIT) values within ``cluster``
    (one-way ANOVA estimator) and simulates ``n_sim`` sets of Gaussian errors with that
    correlation and the clusters' sizes, each scored by a calibrated (standard Normal)
    predictive: the ``probs`` quantiles of their coverage. An observed coverage outside the
    range is evidence of miscalibration; inside it, the data cannot tell. With few clusters the
    estimated ``icc`` is itself uncertain and the range somewhat narrow: over 150 simulated
    calibrated sets of 5 clusters x 40 points (``icc`` 0.8) the 90% coverage fell inside its
    5-95% range in 81% of them (a binomial range over the points: 27%;
    tests/evaluation/test_metrics.py).

    Parameters
    ----------
    samples : array (S, N)
        Predictive samples for each observation.
    y : array (N,)
        Observed values, on the scale of ``samples``.
    cluster : array of int (N,)
        Cluster of each observation (e.g. the language or domain).
    levels : sequence of float
        Nominal levels in (0, 1).
    probs : (float, float)
        Quantiles of the simulated coverage to return.
    n_sim : int
        Simulated sets.
    seed : int
        Seed of the simulation (the result is deterministic).

    Returns
    -------
    array (len(levels), 2)
        Lower and upper quantile of a calibrated predictive's coverage per level.

    Units
    -----
    Unit-free (fractions).
    """
    from scipy import stats

    samples = np.asarray(samples, dtype=float)
    y = np.asarray(y, dtype=float)
    s = samples.shape[0]
    below = (samples < y[None, :]).sum(axis=0) + 0.5 * (samples == y[None, :]).sum(axis=0)
    u = stats.norm.ppf((below + 0.5) / (s + 1.0))  # mid-rank PIT, inside (0, 1)
    _, cl = np.unique(np.asarray(cluster), return_inverse=True)
    cl = cl.ravel()
    sizes = np.bincount(cl)
    n, k = u.size, sizes.size
    icc = 0.0
    if k >= 2 and n > k:
        means = np.bincount(cl, weights=u) / sizes
        msb = np.sum(sizes * (means - u.mean()) ** 2) / (k - 1)
        msw = np.sum((u - means[cl]) ** 2) / (n - k)
        n0 = (n - np.sum(sizes**2) / n) / (k - 1)
        icc = float(np.clip((msb - msw) / (msb + (n0 - 1.0) * msw), 0.0, 1.0))
    rng = np.random.default_rng(seed)
    z = np.sqrt(icc) * rng.standard_normal((n_sim, k))[:, cl] + np.sqrt(
        1.0 - icc
    ) * rng.standard_normal((n_sim, n))
    half = stats.norm.ppf((1.0 + np.asarray(levels, dtype=float)) / 2.0)
    cov = (np.abs(z)[:, :, None] < half[None, None, :]).mean(axis=1)  # (n_sim, levels)
    return np.quantile(cov, probs, axis=0).T


def crps_samples(samples: np.ndarray, y: np.ndarray) -> np.ndarray:
    """CRPS of each observation from predictive samples (energy form).

    ``CRPS(F, y) = E|X - y| - 0.5 E|X - X'|`` with ``X, X'`` independent draws of ``F``. The
    second term is computed exactly over all sample pairs via the sorted-sample identity
    ``sum_{s,t} |x_s - x_t| = 2 sum_i (2 i - S - 1) x_(i)`` (``i = 1..S``), in
    ``O(S log S)``.

    Parameters
    ----------
    samples : array (S, N)
        Predictive samples.
    y : array (N,)
        Observations.

    Returns
    -------
    array (N,)
        CRPS per observation (>= 0, lower is better; equals the absolute error for a point
        forecast).

    Units
    -----
    Those of ``y`` (log-nats when scoring log-loss).

    References
    ----------
    .. [1] Gneiting & Raftery (2007), Eq. (21).
    """
    x = np.sort(np.asarray(samples, dtype=float), axis=0)
    y = np.asarray(y, dtype=float).ravel()
    if x.ndim != 2 or x.shape[1] != y.size:
        raise ValueError(f"samples must have shape (S, {y.size}), got {x.shape}")
    s = x.shape[0]
    term1 = np.mean(np.abs(x - y[None, :]), axis=0)
    w = (2.0 * np.arange(1, s + 1) - s - 1.0)[:, None]
    pair_sum = 2.0 * np.sum(w * x, axis=0)  # sum over all ordered pairs |x_s - x_t|
    term2 = 0.5 * pair_sum / (s * s)
    return term1 - term2


def log_predictive_density(loglik: np.ndarray) -> np.ndarray:
    """Log pointwise predictive density ``log( (1/S) sum_s p(y_n | theta_s) )``.

    Parameters
    ----------
    loglik : array (S, N)
        ``log p(y_n | theta_s)`` for each posterior draw ``s`` (``S = 1`` for a point fit).

    Returns
    -------
    array (N,)
        Per-observation log predictive density (higher is better).

    Units
    -----
    log of a density of the scored variable (of log-loss here).

    References
    ----------
    .. [1] Gelman, Hwang & Vehtari (2014), Eq. (3) (lppd).
    """
    loglik = np.asarray(loglik, dtype=float)
    if loglik.ndim != 2:
        raise ValueError(f"loglik must have shape (S, N), got {loglik.shape}")
    return logsumexp(loglik, axis=0) - np.log(loglik.shape[0])


def score(
    obs_loss: np.ndarray,
    group: np.ndarray,
    point_log: np.ndarray,
    samples_log: np.ndarray | None = None,
    loglik: np.ndarray | None = None,
    *,
    lpd: np.ndarray | None = None,
    n_groups: int | None = None,
    levels: Sequence[float] = COVERAGE_LEVELS,
    delta: float = HUBER_DELTA,
) -> dict[str, object]:
    """Every metric at once, as a flat dict (what ``climb-bayes evaluate`` reports).

    Parameters
    ----------
    obs_loss : array (N,)
        Observed losses (nats/token).
    group : array of int (N,)
        Group (language or domain) index per observation.
    point_log : array (N,)
        Point prediction of ``log(loss)``.
    samples_log : array (S, N), optional
        Predictive samples of ``log(loss)``; enables coverage, calibration error and CRPS.
    loglik : array (S', N), optional
        Pointwise log-likelihood per draw; enables the log predictive density.
    lpd : array (N,), optional
        Pointwise log predictive density computed elsewhere (instead of ``loglik``).
    n_groups : int, optional
        Number of groups (for per-group R²).
    levels, delta
        Coverage levels and Huber threshold.

    Returns
    -------
    dict
        ``n``, ``r2_pooled``, ``r2_group_mean``, ``r2_group`` (list), ``huber_log`` (on
        log-loss, ``delta``), ``huber_loss`` (on loss, :data:`HUBER_LOSS_DELTA`), ``mre``,
        ``rmsle`` and, when available, ``coverage`` (dict level -> fraction),
        ``coverage_if_calibrated`` (dict level -> ``[low, high]``, the 5-95% range of a
        calibrated predictive's coverage with the errors clustered by ``group``,
        :func:`coverage_if_calibrated`), ``cal_error``, ``crps``, ``lpd`` (means over
        observations).
    """
    obs_loss = np.asarray(obs_loss, dtype=float).ravel()
    pred = np.exp(np.asarray(point_log, dtype=float).ravel())
    per_group = r2_by_group(obs_loss, pred, group, n_groups)
    finite = per_group[np.isfinite(per_group)]
    out: dict[str, object] = {
        "n": int(obs_loss.size),
        "r2_pooled": r2(obs_loss, pred),
        "r2_group_mean": float(np.mean(finite)) if finite.size else float("nan"),
        "r2_group": [float(v) for v in per_group],
        "huber_log": huber_log(pred, obs_loss, delta),
        "huber_loss": huber_loss(pred, obs_loss),
        "mre": mean_relative_error(pred, obs_loss),
        "rmsle": rmsle(pred, obs_loss),
    }
    y_log = np.log(obs_loss)
    if samples_log is not None and obs_loss.size:
        cov = interval_coverage(samples_log, y_log, levels)
        out["coverage"] = {f"{lvl:g}": float(c) for lvl, c in zip(levels, cov, strict=True)}
        rng_cov = coverage_if_calibrated(samples_log, y_log, group, levels)
        out["coverage_if_calibrated"] = {
            f"{lvl:g}": [float(a), float(b)] for lvl, (a, b) in zip(levels, rng_cov, strict=True)
        }
        out["cal_error"] = calibration_error(cov, levels)
        out["crps"] = float(np.mean(crps_samples(samples_log, y_log)))
    if loglik is not None and obs_loss.size:
        out["lpd"] = float(np.mean(log_predictive_density(loglik)))
    elif lpd is not None and obs_loss.size:
        out["lpd"] = float(np.mean(lpd))
    return out

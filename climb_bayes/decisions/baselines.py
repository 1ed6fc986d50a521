"""Baseline mixtures: the allocations people use today, and the optimum of the Isolated law.

* ``uniform``: ``r_i = 1 / m``.
* ``natural``: proportional to the available tokens, ``r_i = n_i / sum_j n_j``.
* ``temperature``: temperature sampling, ``r_i ∝ (n_i / sum_j n_j)^tau`` with ``tau = 0.3`` as in
  XLM-R and mT5 (``tau = 1 / T``: ``tau = 1`` is natural, ``tau = 0`` uniform).
* ``unimax``: UniMax -- a uniform budget per language, capped at ``max_epochs`` passes over its
  data, the leftover redistributed uniformly among the remaining languages (smallest first).
* ``isolated``: the optimum of the law without cross-lingual transfer,
  ``min_r sum_i w_i B_i / (D r_i)^beta_i`` on the (capped) simplex, solved exactly through its
  Lagrangian: ``r_i(lambda) = clip((w_i B_i beta_i / (lambda D^beta_i))^(1/(beta_i+1)), lo_i,
  hi_i)`` with the 1-D root ``sum_i r_i(lambda) = 1`` found by bisection on ``log lambda``. With
  equal ``beta`` this is the paper's closed-form direction ``p`` (Eq. 7); with unequal ``beta``
  the closed form is not the optimum (``lambda`` does not cancel).

Units
-----
Token counts and budgets in tokens; ``log_B`` in log(nats * tokens**beta); shares unit-free.

References
----------
.. [1] Conneau et al. (2020), "Unsupervised Cross-lingual Representation Learning at Scale"
   (XLM-R), Section 3.1: ``q_i ∝ p_i^alpha``, ``alpha = 0.3``.
.. [2] Xue et al. (2021), "mT5: A Massively Multilingual Pre-trained Text-to-Text Transformer",
   Section 2: ``alpha = 0.3``.
.. [3] Chung et al. (2023), "UniMax: Fairer and More Effective Language Sampling for Large-Scale
   Multilingual Pretraining", ICLR, Algorithm 1.
.. [4] Guo et al. (2025), "CLIMB", Eq. (7) and Appendix B (the Isolated law and its direction).
"""

from __future__ import annotations

import math

import numpy as np

from climb_bayes.errors import ClimbError

__all__ = [
    "BASELINES",
    "DEFAULT_TAU",
    "uniform_mixture",
    "natural_mixture",
    "temperature_mixture",
    "unimax_mixture",
    "isolated_optimum",
    "baseline_mixtures",
]

BASELINES = ("uniform", "natural", "temperature", "unimax", "isolated")
"""Names of the built-in baseline mixtures (``msl`` is added when that law is available)."""

DEFAULT_TAU = 0.3
"""Temperature-sampling exponent of XLM-R and mT5."""


def _tokens(tokens: np.ndarray) -> np.ndarray:
    n = np.asarray(tokens, dtype=float)
    if n.ndim != 1 or n.size == 0 or np.any(~np.isfinite(n)) or np.any(n <= 0):
        raise ClimbError(f"token counts must be positive numbers, got {n.tolist()}.")
    return n


def uniform_mixture(m: int) -> np.ndarray:
    """``r_i = 1 / m``."""
    if m < 1:
        raise ClimbError("a mixture needs at least one language.")
    return np.full(m, 1.0 / m)


def natural_mixture(tokens: np.ndarray) -> np.ndarray:
    """Shares proportional to the available tokens ``n_i`` (tokens)."""
    n = _tokens(tokens)
    return n / n.sum()


def temperature_mixture(tokens: np.ndarray, tau: float = DEFAULT_TAU) -> np.ndarray:
    """Temperature sampling ``r_i ∝ (n_i / sum_j n_j)^tau`` (``tau = 1 / T``).

    Parameters
    ----------
    tokens : ndarray (m,)
        Available tokens per language.
    tau : float
        Exponent in [0, 1] (0.3 in XLM-R and mT5).

    References
    ----------
    .. [1] Conneau et al. (2020), Section 3.1. .. [2] Xue et al. (2021), Section 2.
    """
    if not math.isfinite(tau) or not 0.0 <= tau <= 1.0:
        raise ClimbError(f"temperature exponent tau must be in [0, 1], got {tau}.")
    n = _tokens(tokens)
    logits = tau * np.log(n / n.sum())
    q = np.exp(logits - logits.max())
    return q / q.sum()


def unimax_mixture(
    tokens: np.ndarray, budget: float, max_epochs: float | np.ndarray = 1.0
) -> np.ndarray:
    """UniMax shares at ``budget`` tokens with at most ``max_epochs`` passes per language.

    Languages are visited from the smallest to the largest corpus; each gets
    ``min(remaining budget / remaining languages, max_epochs_i * n_i)``.

    Raises
    ------
    ClimbError
        When even ``max_epochs`` passes over every language cannot fill the budget.

    References
    ----------
    .. [1] Chung et al. (2023), Algorithm 1.
    """
    n = _tokens(tokens)
    if not math.isfinite(budget) or budget <= 0:
        raise ClimbError(f"budget must be a positive number of tokens, got {budget}.")
    epochs = np.broadcast_to(np.asarray(max_epochs, dtype=float), n.shape)
    if np.any(~np.isfinite(epochs)) or np.any(epochs <= 0):
        raise ClimbError(f"max epochs must be positive, got {np.asarray(max_epochs).tolist()}.")
    caps = n * epochs
    if caps.sum() < budget * (1.0 - 1e-12):
        raise ClimbError(
            f"UniMax: the data ({caps.sum():.4g} tokens counting max epochs) cannot fill a "
            f"budget of {budget:.4g} tokens; allow more epochs or lower the budget."
        )
    alloc = np.zeros_like(n)
    remaining = float(budget)
    order = np.argsort(caps, kind="stable")
    for pos, i in enumerate(order):
        share = remaining / (n.size - pos)
        alloc[i] = min(share, caps[i])
        remaining -= alloc[i]
    return alloc / alloc.sum()


def isolated_optimum(
    log_B: np.ndarray,
    beta: np.ndarray,
    budget: float,
    weights: np.ndarray | None = None,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
) -> np.ndarray:
    """Exact optimum of the Isolated (no-transfer) law on the capped simplex.

    Minimises ``sum_i w_i (B_i / (D r_i)^beta_i + E_i)`` subject to ``sum r = 1``,
    ``lo <= r <= hi``. Stationarity gives ``r_i(lambda)`` (module docstring), clipped to the
    bounds (KKT); ``sum_i r_i(lambda)`` is decreasing in ``lambda``, so the multiplier is the root
    of a monotone 1-D equation, found by bisection on ``log lambda`` (120 halvings of a bracket
    of width ~200 nats: exact to machine precision). Languages with ``w_i = 0`` sit at ``lo_i``
    and take any slack the others cannot (pro rata of their room).

    Parameters
    ----------
    log_B, beta : ndarray (..., m)
        Monolingual law parameters in tokens units (any leading axes, e.g. draws).
    budget : float
        ``D`` in tokens.
    weights : ndarray (m,), optional
        Importance weights ``w_i >= 0`` (uniform by default).
    lo, hi : ndarray (m,), optional
        Share bounds (0 and 1 by default).

    Returns
    -------
    ndarray (..., m)
        Optimal shares.

    References
    ----------
    .. [1] Guo et al. (2025), Appendix B (Lagrangian of the uncoupled problem).
    """
    log_B = np.asarray(log_B, dtype=float)
    beta = np.asarray(beta, dtype=float)
    m = log_B.shape[-1]
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    lo = np.zeros(m) if lo is None else np.asarray(lo, dtype=float)
    hi = np.ones(m) if hi is None else np.asarray(hi, dtype=float)
    pos = w > 0
    # a_i: log of w_i B_i beta_i D^-beta_i; r_i = exp((a_i - l) / (beta_i + 1)).
    a = np.log(np.where(pos, w, 1.0)) + log_B + np.log(beta) - beta * math.log(budget)
    span = 60.0 * (beta + 1.0)
    left = np.min(np.where(pos, a - span, np.inf), axis=-1, keepdims=True)
    right = np.max(np.where(pos, a + span, -np.inf), axis=-1, keepdims=True)
    if not np.any(pos):
        raise ClimbError("importance weights are all zero; give at least one positive weight.")

    def shares(log_lambda: np.ndarray) -> np.ndarray:
        raw = np.exp(np.minimum((a - log_lambda) / (beta + 1.0), 0.0))
        return np.where(pos, np.clip(raw, lo, hi), lo)

    for _ in range(120):
        mid = 0.5 * (left + right)
        over = shares(mid).sum(axis=-1, keepdims=True) > 1.0
        left = np.where(over, mid, left)
        right = np.where(over, right, mid)
    r = shares(0.5 * (left + right))
    slack = 1.0 - r.sum(axis=-1, keepdims=True)
    room = np.where(pos, 0.0, hi - lo)
    room_total = room.sum(axis=-1, keepdims=True)
    fill = np.where(room_total > 0, slack * room / np.where(room_total > 0, room_total, 1.0), 0.0)
    r = r + np.where(slack > 1e-12, fill, 0.0)
    return r / r.sum(axis=-1, keepdims=True)


def baseline_mixtures(
    fit: object,
    budget: float,
    *,
    tokens: np.ndarray | None = None,
    max_epochs: float | np.ndarray = 1.0,
    weights: np.ndarray | None = None,
    tau: float = DEFAULT_TAU,
) -> dict[str, np.ndarray]:
    """The baseline mixtures of a fit at ``budget`` (for plots and reports).

    ``uniform`` and ``isolated`` (from the posterior medians of ``log_B`` and ``beta``) always;
    ``natural``, ``temperature`` and ``unimax`` when ``tokens`` (available tokens per language,
    in the fit's order) are given. UniMax is left out when the data cannot fill the budget.
    """
    law = fit.law_draws()
    m = np.asarray(law.beta).shape[-1]
    out = {"uniform": uniform_mixture(m)}
    log_b = np.median(np.asarray(law.log_B), axis=0)
    beta = np.median(np.asarray(law.beta), axis=0)
    out["isolated"] = isolated_optimum(log_b, beta, budget, weights)
    if tokens is not None:
        out["natural"] = natural_mixture(tokens)
        out[f"temperature(tau={tau:g})"] = temperature_mixture(tokens, tau)
        try:
            out["unimax"] = unimax_mixture(tokens, budget, max_epochs)
        except ClimbError:
            pass
    return out

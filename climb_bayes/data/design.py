"""Experiment designs: the CLIMB Algorithm-1 run list and held-out validation mixtures.

A design is a plan table ``run_id, tokens, r_<lang>...`` (one row per run), the format that
``climb-bayes plan`` writes and the ``training`` package reads (``docs/runs-format.md``).

References
----------
.. [1] Guo et al. (2025), Algorithm 1 and Appendix D (proportion grid).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from climb_bayes.errors import ClimbError

__all__ = [
    "PAPER_SHARES",
    "CENTRAL_SHARES",
    "SHARE_POOLS",
    "PAPER_RELIABLE_TOKENS",
    "algorithm1_design",
    "holdout_design",
    "format_budget",
]

PAPER_SHARES = (0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.75, 0.8, 0.9, 0.95, 0.975, 0.98)
"""Shares ``c`` the CLIMB paper sweeps for the focal language (Appendix D)."""

CENTRAL_SHARES = (0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.75)
"""The central part of :data:`PAPER_SHARES` earlier versions drew ``c`` from
(``pool="central"``): it never samples the small shares that identify ``eta``."""

SHARE_POOLS = ("paper", "central")

PAPER_RELIABLE_TOKENS = 2.5e10
"""Below this fitting budget the CLIMB paper reports limited accuracy (``plan`` warns)."""


def format_budget(tokens: float) -> str:
    """Short label of a token budget: ``5e9 -> '5B'``, ``2.5e10 -> '25B'``, ``3e5 -> '300K'``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:g}{unit}"
    return f"{tokens:g}"


def _check(languages: Sequence[str], budgets: Sequence[float]) -> None:
    if len(languages) < 2:
        raise ClimbError(f"a design needs at least 2 languages (got {len(languages)}).")
    if len(set(languages)) != len(languages):
        raise ClimbError(f"languages must be distinct, got {', '.join(languages)}.")
    if not budgets or any(not np.isfinite(b) or b <= 0 for b in budgets):
        raise ClimbError(f"budgets must be positive token counts, got {list(budgets)}.")


def algorithm1_design(
    languages: Sequence[str],
    budgets: Sequence[float],
    *,
    shares: Sequence[float] | None = None,
    seed: int = 0,
    pool: str = "paper",
) -> pd.DataFrame:
    """The paper's Algorithm-1 run list: ``3 * m * len(budgets)`` runs.

    Per language ``i``: one monolingual run (``r_i = 1``) and two runs with ``r_i = c`` and every
    other language at ``(1 - c) / (m - 1)``, each at every budget.

    Parameters
    ----------
    languages : sequence of str
        Language (or domain) names.
    budgets : sequence of float
        Token budgets ``D`` (tokens).
    shares : sequence of two floats, optional
        The same two focal shares ``c`` for every language (instead of drawing them).
    seed : int
        Seed for the share draw.
    pool : {"paper", "central"}
        Where the two ``c`` per language are drawn from. ``"paper"`` (default): the paper's
        15-value grid :data:`PAPER_SHARES`, one from each half (``c <= 0.5`` and ``c > 0.5``), so
        small shares -- where ``eta`` is identified -- and large ones are both sampled.
        ``"central"``: two distinct values of :data:`CENTRAL_SHARES` (earlier versions).

    Returns
    -------
    pandas.DataFrame
        Plan table ``run_id, tokens, r_<lang>...``.

    References
    ----------
    .. [1] Guo et al. (2025), Algorithm 1.

    Examples
    --------
    >>> plan = algorithm1_design(["en", "de", "zh"], [1e9, 5e9], seed=0)
    >>> len(plan), list(plan.columns)
    (18, ['run_id', 'tokens', 'r_en', 'r_de', 'r_zh'])
    >>> bool((plan[["r_en", "r_de", "r_zh"]].sum(axis=1) - 1.0).abs().max() < 1e-12)
    True
    """
    languages = list(languages)
    _check(languages, budgets)
    m = len(languages)
    rng = np.random.default_rng(seed)
    if pool not in SHARE_POOLS:
        raise ClimbError(f"share pool must be one of {', '.join(SHARE_POOLS)}, got {pool!r}.")
    low = [c for c in PAPER_SHARES if c <= 0.5]
    high = [c for c in PAPER_SHARES if c > 0.5]
    if shares is not None:
        shares = [float(c) for c in shares]
        if len(shares) != 2 or any(not 0 < c < 1 for c in shares):
            raise ClimbError(f"shares must be two numbers in (0, 1), got {shares}.")
    rows = []
    for i, lang in enumerate(languages):
        if shares is not None:
            cs = shares
        elif pool == "paper":
            cs = [float(rng.choice(low)), float(rng.choice(high))]
        else:
            cs = sorted(rng.choice(CENTRAL_SHARES, 2, replace=False))
        mixes = [("mono", np.eye(m)[i])]
        for c in cs:
            r = np.full(m, (1.0 - c) / (m - 1))
            r[i] = c
            mixes.append((f"c{c:g}", r))
        for D in budgets:
            for tag, r in mixes:
                rows.append(
                    {"run_id": f"{lang}-{tag}-{format_budget(D)}", "tokens": float(D)}
                    | {f"r_{lang2}": float(x) for lang2, x in zip(languages, r, strict=True)}
                )
    return pd.DataFrame(rows)


HOLDOUT_CANDIDATES = 64
"""Dirichlet candidates per held-out mixture that :func:`holdout_design` draws."""

HOLDOUT_MIN_DISTANCE = 0.1
"""Smallest total-variation distance between two held-out mixtures (relaxed by 0.8x steps when
the candidates cannot meet it, e.g. many mixtures of few languages)."""


def holdout_design(
    languages: Sequence[str],
    budget: float,
    n: int,
    *,
    seed: int = 0,
    concentration: float = 1.0,
    spread: bool = True,
    max_shares: Sequence[float] | None = None,
) -> pd.DataFrame:
    """``n`` held-out validation mixtures at ``budget``.

    Parameters
    ----------
    languages : sequence of str
        Language (or domain) names.
    budget : float
        Token budget of every held-out run (tokens).
    n : int
        Number of mixtures.
    seed : int
        Seed of the draws.
    concentration : float
        Dirichlet concentration of the candidates (1: uniform on the simplex).
    spread : bool
        Default: Dirichlet draws in order, each kept only if its total-variation distance to
        every kept one is at least :data:`HOLDOUT_MIN_DISTANCE` (relaxed if needed), so the
        mixtures follow the Dirichlet but no two are near-duplicates. ``False``: the first ``n``
        raw draws (earlier versions; two could be 0.007 apart).
    max_shares : sequence of float, optional
        Per-language upper bound on the share (same order as ``languages``), e.g. the tokens a
        language has available divided by ``budget`` so that no held-out run repeats data
        beyond an allowed number of epochs. Candidates above a bound are skipped (the draws stay
        Dirichlet, conditioned on the bounds).

    Returns
    -------
    pandas.DataFrame
        Plan table ``run_id, tokens, r_<lang>...``.
    """
    languages = list(languages)
    _check(languages, [budget])
    rng = np.random.default_rng(seed)
    alpha = np.full(len(languages), concentration)
    if (spread and n > 1) or max_shares is not None:
        cand = rng.dirichlet(alpha, size=HOLDOUT_CANDIDATES * n)
    if max_shares is not None:
        cap = np.asarray(max_shares, dtype=float)
        if cap.shape != (len(languages),) or cap.sum() < 1.0:
            raise ClimbError(
                f"max_shares must give one bound per language ({len(languages)}) summing to at"
                f" least 1, got {list(cap)}."
            )
        cand = cand[np.all(cand <= cap, axis=1)]
        if len(cand) < n:
            raise ClimbError(
                f"only {len(cand)} of {HOLDOUT_CANDIDATES * n} Dirichlet draws respect"
                f" max_shares {list(cap)}; raise the bounds or lower the budget."
            )
    if spread and n > 1:
        d_min = HOLDOUT_MIN_DISTANCE
        while True:
            kept = [cand[0]]
            for c in cand[1:]:
                if len(kept) == n:
                    break
                if min(0.5 * np.abs(c - k).sum() for k in kept) >= d_min:
                    kept.append(c)
            if len(kept) == n:
                break
            d_min *= 0.8
        r = np.stack(kept)
    elif max_shares is not None:
        r = cand[:n]
    else:
        r = rng.dirichlet(alpha, size=n)
    r = np.round(r, 4)
    r[:, -1] = 1.0 - r[:, :-1].sum(axis=1)
    r = np.clip(r, 0.0, 1.0)
    r /= r.sum(axis=1, keepdims=True)
    rows = [
        {"run_id": f"holdout-{j:02d}-{format_budget(budget)}", "tokens": float(budget)}
        | {f"r_{lang}": float(x) for lang, x in zip(languages, r[j], strict=True)}
        for j in range(n)
    ]
    return pd.DataFrame(rows)

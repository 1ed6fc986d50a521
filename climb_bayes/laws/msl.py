"""MSL: the multilingual scaling law of He et al. (2024), per group or per family of groups.

``L_i(D, r) = (E_i + B_i / D^beta_i) * s_i^(-gamma_i)``, where ``s_i`` is the share of the
budget given to group ``i`` (per-group form) or to the *family* of group ``i`` (the sum of the
shares of all groups in that family; per-family form). The law's premise is that a group's
loss depends on the mixture only through its own (family's) share: there is no transfer
between families, and within a family all groups profit from the family's whole share. The
model-size term ``A_i / N^alpha_i`` of the paper is left out: the runs tables here vary ``D``
and ``r`` at a fixed model size.

Families are read from a file (:func:`read_families`): CSV with columns ``group,family`` (or
``language,family``) or a JSON object ``{"group": "family", ...}``. Groups missing from the
file form a family of their own.

:func:`optimal_mixture` minimises a weighted sum of the groups' predicted losses over the
simplex in closed form up to a scalar (a Lagrange multiplier found by bisection).

Units
-----
Reference units: ``d = D / d_ref``, so ``log_B`` is the log reducible loss at ``d_ref`` tokens;
losses in nats/token; ``gamma`` unit-free.

References
----------
.. [1] He, Y. et al. (2024), "Scaling Laws for Multilingual Language Models", arXiv 2410.12883,
   Eq. (2) (``L_i = L_i*(N, D) p_i^(-gamma_i)``) and Section 4 (optimal sampling ratios).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from climb_bayes.data.observations import Observations
from climb_bayes.errors import ClimbError
from climb_bayes.laws.base import Law, LawFit, Params, ParamSpec
from climb_bayes.laws.isolated import IsolatedLaw
from climb_bayes.model.priors import Priors

__all__ = ["MSLLaw", "read_families", "family_matrix", "optimal_mixture", "optimal_mixture_fit"]

_R_FLOOR = 1e-30


def read_families(path: str | Path) -> dict[str, str]:
    """Read a group -> family mapping from a CSV (``group,family``) or JSON file.

    Raises
    ------
    ClimbError
        Missing file, unknown format, missing columns or a group listed twice.
    """
    path = Path(path)
    if not path.is_file():
        raise ClimbError(f"{path}: families file not found.")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClimbError(f"{path}: not valid JSON ({exc}).") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ClimbError(f'{path}: expected an object {{"group": "family", ...}}.')
        return {str(k): v for k, v in data.items()}
    if path.suffix.lower() != ".csv":
        raise ClimbError(f"{path}: families file must be .csv (group,family) or .json.")
    import pandas as pd

    df = pd.read_csv(path, dtype=str)
    key = "group" if "group" in df.columns else "language" if "language" in df.columns else None
    if key is None or "family" not in df.columns:
        raise ClimbError(
            f"{path}: needs columns 'group' (or 'language') and 'family'; found "
            f"{', '.join(df.columns)}."
        )
    dup = df[key][df[key].duplicated()].tolist()
    if dup:
        raise ClimbError(f"{path}: group {dup[0]!r} is listed twice.")
    return dict(zip(df[key].astype(str), df["family"].astype(str), strict=True))


def family_matrix(groups: Sequence[str], families: Mapping[str, str] | None) -> np.ndarray:
    """``(m, m)`` 0/1 matrix ``S[j, i] = 1`` iff groups ``j`` and ``i`` share a family.

    ``r @ S`` gives each group's family share. Identity without families.
    """
    m = len(groups)
    if not families:
        return np.eye(m)
    fam = [families.get(g, f"__own__{g}") for g in groups]
    return np.array([[float(fam[j] == fam[i]) for i in range(m)] for j in range(m)])


@dataclass(frozen=True)
class MSLLaw(Law):
    """``log L_i = logaddexp(log E_i, log B_i - beta_i log d) - gamma_i log s_i``.

    Attributes
    ----------
    families : tuple of (group, family) pairs, optional
        Family of each group; ``None`` for the per-group form.
    """

    name: ClassVar[str] = "msl"
    description: ClassVar[str] = "MSL (He et al. 2024): (E + B/D^beta) * share^-gamma"
    zero_share_ok: ClassVar[bool] = False
    nuts_target_accept: ClassVar[float] = 0.9
    """Lower than CLIMB's 0.98, as Isolated's (no transfers, no funnel). Measured (2026-12-05,
    `fit`'s 4 x (500 + 1000), the fit splits of the ten sets of docs/benchmarks.md'
    shipped-predictive section): at 0.9 0 divergences, max R-hat 1.0025-1.0071, min bulk ESS
    611-3,980 on every set; against 0.98 on four of them 1.2-2.1x fewer leapfrog steps per
    draw (5mix-70M 64 against 127, rp-70M 63 against 115, 5mix-1B 169 against 271) with about
    the same or a higher ESS. The DML keeps 0.98: it misses the gate at either target on
    5mix-305M, rp-160M, rp-305M and 5mix-1B (at 0.98 R-hat 1.0109-1.0406, ESS 133-389: its
    geometry, not the step size), and at 0.9 also on rp-410M (R-hat 1.0139 against 1.0052);
    measured before the DML's centred exponent (:mod:`climb_bayes.laws.dml`)."""
    families: tuple[tuple[str, str], ...] | None = None
    groups: tuple[str, ...] | None = None

    @classmethod
    def with_families(cls, families: Mapping[str, str] | None) -> MSLLaw:
        """An MSL law using ``families`` (group -> family); per-group when ``None``."""
        return cls(families=tuple(sorted(families.items())) if families else None)

    def prepare(self, obs: Observations) -> MSLLaw:
        if self.families:
            known = {g for g, _ in self.families}
            if not known & set(obs.groups):
                raise ClimbError(
                    "the families file names none of the groups of the data "
                    f"({', '.join(obs.groups)})."
                )
        return replace(self, groups=obs.groups)

    def _same(self, m: int) -> np.ndarray:
        if self.families is None:
            return np.eye(m)
        if self.groups is None or len(self.groups) != m:
            raise ClimbError("MSLLaw with families must be prepared on data first (prepare()).")
        return family_matrix(self.groups, dict(self.families))

    def shares(self, r: np.ndarray) -> np.ndarray:
        """``(..., m)`` the share each group's loss depends on (own or family share)."""
        r = np.asarray(r, dtype=float)
        return r @ self._same(r.shape[-1])

    def usable(self, obs: Observations) -> Observations:
        s = self.shares(obs.r)[np.arange(obs.n), obs.group]
        return obs.select(s > 0)

    def param_specs(self, m: int) -> dict[str, ParamSpec]:
        # the isolated law's parameters (Chinchilla data term), then the share exponent
        specs = IsolatedLaw().param_specs(m)
        return specs | {"gamma": ParamSpec((m,), positive=True, spread=0.5)}

    def power_law(self) -> tuple[str, str, str]:
        return IsolatedLaw().power_law()

    def log_loss(self, params: Params, r: jax.Array, d: jax.Array) -> jax.Array:
        s = r @ jnp.asarray(self._same(r.shape[-1]))
        base = jnp.logaddexp(
            params["log_E"], params["log_B"] - params["beta"] * jnp.log(d)[..., None]
        )
        return base - params["gamma"] * jnp.log(jnp.maximum(s, _R_FLOOR))

    def init(self, obs: Observations) -> dict[str, np.ndarray]:
        return IsolatedLaw().init(obs) | {"gamma": np.full(obs.m, 0.05)}

    def priors(self, obs: Observations, priors: Priors) -> dict[str, Any]:
        import numpyro.distributions as dist

        return IsolatedLaw().priors(obs, priors) | {
            "gamma": dist.LogNormal(np.full(obs.m, np.log(0.1)), 1.0)
        }


def optimal_mixture(
    C: np.ndarray,
    gamma: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    same: np.ndarray | None = None,
    within: np.ndarray | None = None,
    n_iter: int = 100,
) -> np.ndarray:
    """Mixture minimising ``sum_i w_i C_i s_i^(-gamma_i)`` on the simplex (MSL's optimum).

    With one group per family the KKT conditions give ``r_i = (w_i C_i gamma_i / lam)^(1 /
    (1 + gamma_i))``; in general each family's share ``x_F`` solves
    ``sum_{i in F} w_i C_i gamma_i x_F^(-gamma_i - 1) = lam``. ``lam`` is found by bisection on
    its log so that the shares sum to 1 (the objective is convex, so this is the optimum).
    Within a family the share is split by ``within`` (equal by default): MSL predicts the same
    losses for every split.

    Parameters
    ----------
    C : array (..., m)
        ``E_i + B_i / D^beta_i`` at the target budget (nats/token).
    gamma : array (..., m)
        Share exponents (> 0).
    weights : array (m,) or (..., m), optional
        Importance of each group's loss (uniform by default).
    same : array (m, m), optional
        Family matrix (:func:`family_matrix`); identity by default.
    within : array (m,), optional
        Relative split of a family's share among its groups.
    n_iter : int
        Bisection steps for the multiplier (on its log; 100 reach float64 precision).

    Returns
    -------
    array (..., m)
        Optimal shares (sum to 1 over the last axis).

    Units
    -----
    Unit-free shares.

    References
    ----------
    .. [1] He, Y. et al. (2024), Section 4 (closed-form optimal sampling ratios).
    """
    C = np.asarray(C, dtype=float)
    gamma = np.broadcast_to(np.asarray(gamma, dtype=float), C.shape)
    m = C.shape[-1]
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    if np.any(w < 0) or not np.any(w > 0):
        raise ClimbError("weights must be >= 0 with at least one > 0.")
    same = np.eye(m) if same is None else np.asarray(same, dtype=float)
    # family representatives: first group of each family
    reps = [i for i in range(m) if not np.any(same[:i, i] > 0)]
    member = same[:, reps]  # (m, F): group j in family f
    a = np.broadcast_to(w, C.shape) * C * gamma  # (..., m)

    def family_share(log_lam: np.ndarray) -> np.ndarray:
        # solve sum_{i in F} a_i x^(-gamma_i-1) = lam for x in (0, 1], per family, by bisection
        lo = np.full(log_lam.shape + (len(reps),), -80.0)
        hi = np.zeros_like(lo)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            g = _family_grad(a, gamma, member, mid)
            too_small = g > np.exp(log_lam)[..., None]  # derivative still large -> grow x
            lo = np.where(too_small, mid, lo)
            hi = np.where(too_small, hi, mid)
        x = np.exp(0.5 * (lo + hi))
        active = np.einsum("...m,mf->...f", a, member) > 0
        return np.where(active, x, 0.0)

    lo = np.full(C.shape[:-1], -200.0)
    hi = np.full(C.shape[:-1], 200.0)
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        total = family_share(mid).sum(axis=-1)
        too_much = total > 1.0  # shares too large -> raise lambda
        lo = np.where(too_much, mid, lo)
        hi = np.where(too_much, hi, mid)
    x = family_share(0.5 * (lo + hi))
    x = x / x.sum(axis=-1, keepdims=True)
    split = np.ones(m) if within is None else np.asarray(within, dtype=float)
    frac = split / (split @ same)  # share of each group within its family
    return (x @ member.T) * frac


def _family_grad(
    a: np.ndarray, gamma: np.ndarray, member: np.ndarray, log_x: np.ndarray
) -> np.ndarray:
    """``sum_{i in F} a_i x_F^(-gamma_i - 1)`` for every family, ``log_x`` (..., F)."""
    log_x_group = log_x @ member.T  # (..., m): each group's family log-share
    return np.einsum("...m,mf->...f", a * np.exp(-(gamma + 1.0) * log_x_group), member)


def optimal_mixture_fit(
    fit: LawFit,
    tokens: float,
    *,
    weights: np.ndarray | None = None,
    within: np.ndarray | None = None,
) -> np.ndarray:
    """Optimal mixture of a fitted MSL law at a budget, per draw: ``(S, m)``.

    Parameters
    ----------
    fit : LawFit
        A fit of :class:`MSLLaw`.
    tokens : float
        Target budget (tokens).
    weights, within
        As in :func:`optimal_mixture`.
    """
    if not isinstance(fit.law, MSLLaw):
        raise ClimbError(f"optimal_mixture_fit needs an MSL fit, got {fit.law.name!r}.")
    dr = fit.draws
    d = float(tokens) / fit.d_ref
    C = np.exp(np.logaddexp(dr["log_E"], dr["log_B"] - dr["beta"] * np.log(d)))
    return optimal_mixture(
        C, dr["gamma"], weights=weights, same=fit.law._same(C.shape[-1]), within=within
    )

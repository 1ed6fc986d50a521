"""Isolated law: CLIMB without cross-group transfer (``b = k = 0``).

``L_i(D, r) = B_i / (D r_i)^beta_i + E_i``: each group (language or domain) learns only from
its own share of the budget, as if it were trained alone on ``r_i D`` tokens. It is CLIMB's
ablation baseline; ``eta`` has no effect without transfer and is not a parameter.

Units
-----
Reference units: ``d = D / d_ref``, so ``log_B`` is the log reducible loss of a run of
``d_ref`` tokens of the group alone; losses in nats/token.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Eq. (6) with ``alpha = 0`` (the paper's no-transfer baseline).
.. [2] Hoffmann et al. (2022), Eq. (2) (data term).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from climb_bayes.data.observations import Observations, median_loss
from climb_bayes.laws.base import Law, Params, ParamSpec
from climb_bayes.model.law import log_loss as climb_log_loss
from climb_bayes.model.priors import Priors

__all__ = ["IsolatedLaw", "auto_locations"]


def auto_locations(obs: Observations, priors: Priors) -> tuple[np.ndarray, np.ndarray]:
    """Prior locations of ``log_A`` (= ``log_B`` in reference units) and ``log_E``.

    ``"auto"`` means ``log(median loss / 2)`` per group, as in the CLIMB model
    (:func:`climb_bayes.model.climb_model.prior_locations`).
    """
    auto = np.log(median_loss(obs) / 2.0)

    def resolve(setting: Any) -> np.ndarray:
        if isinstance(setting, str):
            return auto
        if isinstance(setting, dict):
            return np.array(
                [float(setting.get(g, a)) for g, a in zip(obs.groups, auto, strict=True)]
            )
        return np.full(obs.m, float(setting))

    return resolve(priors.reducible_loc), resolve(priors.irreducible_loc)


@dataclass(frozen=True)
class IsolatedLaw(Law):
    """CLIMB with ``b = k = 0``: ``log L_i = logaddexp(log B_i - beta_i log(d r_i), log E_i)``."""

    name: ClassVar[str] = "isolated"
    description: ClassVar[str] = "CLIMB without transfer (b = k = 0)"
    zero_share_ok: ClassVar[bool] = False
    nuts_target_accept: ClassVar[float] = 0.9
    """Lower than CLIMB's 0.98: without transfers the posterior has no funnel to step into, and
    the smaller target halves the leapfrog steps. Measured (2026-12-05, `fit`'s 4 x (500 +
    1000), the fit splits of the ten sets of docs/benchmarks.md' shipped-predictive section and
    the default data): 0 divergences at 0.9 everywhere, max R-hat 1.002-1.0075, min bulk ESS
    422-3,063; on the default data 59.5 -> 32.4 steps per draw (ESS 2,170 -> 1,839); at 0.98
    5mix-410M failed the gate (R-hat 1.0118, ESS 334; 0.9: 1.0049, 499) and 5mix-1B too (ESS
    277; 0.9: 422), with 1.6-1.9x the steps per draw (5mix-70M 191 against 118)."""

    def param_specs(self, m: int) -> dict[str, ParamSpec]:
        return {
            "log_B": ParamSpec((m,), spread=0.5),
            "beta": ParamSpec((m,), positive=True, spread=0.3),
            "log_E": ParamSpec((m,), spread=0.5),
        }

    def power_law(self) -> tuple[str, str, str]:
        return ("log_B", "beta", "log_E")

    def log_loss(self, params: Params, r: jax.Array, d: jax.Array) -> jax.Array:
        m = r.shape[-1]
        zeros = jnp.zeros((m, m))
        return climb_log_loss(
            r, d, params["log_B"], params["beta"], params["log_E"], zeros, zeros, jnp.ones(m)
        )

    def init(self, obs: Observations) -> dict[str, np.ndarray]:
        red, irr = auto_locations(obs, Priors())
        return {"log_B": red, "beta": np.full(obs.m, 0.3), "log_E": irr}

    def priors(self, obs: Observations, priors: Priors) -> dict[str, Any]:
        import numpyro.distributions as dist

        red, irr = auto_locations(obs, priors)
        return {
            "log_B": dist.Normal(red, priors.reducible_scale),
            "beta": dist.LogNormal(np.full(obs.m, np.log(priors.beta_median)), priors.beta_log_sd),
            "log_E": dist.Normal(irr, priors.irreducible_scale),
        }

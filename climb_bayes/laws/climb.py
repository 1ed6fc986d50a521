"""CLIMB as a :class:`~climb_bayes.laws.base.Law`: an adapter around the core model.

Predictions use :func:`climb_bayes.model.law.log_loss`; fitting delegates to
:func:`climb_bayes.inference.fitting.fit_runs` (the multi-start Huber point fit for ``"map"``, the
NumPyro model with its priors for ``"nuts"``), so the evaluation scores exactly what
``climb-bayes fit`` produces.

Units
-----
Reference units: ``d = D / d_ref`` with the fit's ``d_ref``; ``log_B`` and ``k`` are converted
with :func:`climb_bayes.model.law.to_reference_units`.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Eq. (4)-(6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import numpy as np

from climb_bayes.data.observations import Observations
from climb_bayes.laws.base import FitOptions, Law, LawFit, Params, ParamSpec, likelihood_df
from climb_bayes.laws.isolated import IsolatedLaw
from climb_bayes.model.law import LawParams, log_loss, to_reference_units
from climb_bayes.model.observation import identifiable_noise
from climb_bayes.model.priors import Priors

__all__ = ["ClimbLaw", "lawfit_from_fit"]


@dataclass(frozen=True)
class ClimbLaw(Law):
    """The CLIMB law with transfer ``alpha_{j->i}(D) = b_ji + k_ji / D`` (see
    :mod:`climb_bayes.model.law`)."""

    name: ClassVar[str] = "climb"
    description: ClassVar[str] = "CLIMB (Guo et al. 2025): interaction-aware ratios with transfer"
    zero_share_ok: ClassVar[bool] = False

    def param_specs(self, m: int) -> dict[str, ParamSpec]:
        return IsolatedLaw().param_specs(m) | {
            "b": ParamSpec((m, m), spread=0.25),
            "k": ParamSpec((m, m), spread=0.25),
            "eta": ParamSpec((m,), positive=True),
        }

    def n_params(self, m: int) -> int:
        return 3 * m + 2 * m * (m - 1) + m

    def log_loss(self, params: Params, r: jax.Array, d: jax.Array) -> jax.Array:
        return log_loss(
            r,
            d,
            params["log_B"],
            params["beta"],
            params["log_E"],
            params["b"],
            params["k"],
            params["eta"],
        )

    def init(self, obs: Observations) -> dict[str, np.ndarray]:
        m = obs.m
        return IsolatedLaw().init(obs) | {
            "b": np.zeros((m, m)),
            "k": np.zeros((m, m)),
            "eta": np.full(m, 5.0),
        }

    def priors(self, obs: Observations, priors: Priors) -> dict[str, Any]:
        raise NotImplementedError("CLIMB's NUTS fit uses climb_bayes.model.climb_model.climb_model")

    def fit(
        self,
        obs: Observations,
        method: str = "map",
        options: FitOptions | None = None,
        log: Callable[[str], None] | None = None,
    ) -> LawFit:
        """Fit with :func:`climb_bayes.inference.fitting.fit_runs` on the positive-share
        observations."""
        from climb_bayes.inference.fitting import fit_runs
        from climb_bayes.inference.nuts import NutsConfig

        options = options or FitOptions()
        usable = self.usable(obs)
        runs = usable.to_runs()
        if method == "laplace":
            return _climb_laplace(self, usable, runs, options, log)
        config = NutsConfig(
            chains=options.chains,
            warmup=options.warmup,
            samples=options.samples,
            target_accept=options.target_accept_for(self),
            progress_bar=False,
        )
        fit = fit_runs(
            runs,
            options.priors,
            method=method,
            config=config,
            seed=options.seed,
            n_starts=options.n_starts,
            log=log,
        )
        out = lawfit_from_fit(fit, self)
        out.info |= {"n_fit": usable.n, "n_params": self.n_params(obs.m)}
        return out


def lawfit_from_fit(fit: Any, law: ClimbLaw | None = None) -> LawFit:
    """Wrap a :class:`climb_bayes.inference.fitresult.Fit` (in memory or loaded) as a
    :class:`LawFit`.

    MAP fits get a Normal plug-in predictive with the point fit's robust noise scale (as every
    other law's MAP fit); NUTS fits keep the model's likelihood.
    """
    d_ref = fit.d_ref
    params = to_reference_units(LawParams(*fit.law_draws()), d_ref)
    draws = {k: np.asarray(v) for k, v in params._asdict().items()}
    info: dict[str, Any] = {}
    if fit.method == "map":
        info["objective"] = float(fit.attrs.get("point_objective", np.nan))
        info["starts"] = str(fit.attrs.get("point_starts", ""))
        info["far_from_prior"] = str(fit.attrs.get("point_far_from_prior", ""))
        likelihood = "normal"
    else:
        likelihood = fit.priors.likelihood
        diag = fit.diagnostics
        if diag is not None:
            info["diagnostics"] = diag.to_json()
        if fit.method == "laplace":
            from climb_bayes.inference.convergence import laplace_info

            info |= laplace_info(fit.attrs)
        info["seconds"] = float(fit.attrs.get("sampling_seconds", np.nan))
    post = fit.tree["posterior"]
    return LawFit(
        law or ClimbLaw(),
        fit.languages,
        d_ref,
        fit.method,
        draws,
        np.asarray(fit.sigma_draws()),
        likelihood,
        likelihood_df(fit.priors, {"df": fit.draws("df")} if "df" in post else {}),
        info=info,
        native=fit,
        sigma_run=fit.draws("sigma_run") if "sigma_run" in post else None,
        fit_obs=Observations.from_runs(fit.runs),
        discrepancy=fit.discrepancy("climb"),
    )


def _climb_laplace(
    law: ClimbLaw,
    usable: Observations,
    runs: Any,
    options: FitOptions,
    log: Callable[[str], None] | None,
) -> LawFit:
    """CLIMB's model by Laplace approximation
    (:func:`climb_bayes.inference.fitting.climb_laplace`), as a :class:`LawFit` without the
    DataTree that ``fit --method laplace`` builds (the inner folds refit it many times).

    The noise model is resolved on ``runs`` as every fit resolves it
    (:func:`climb_bayes.model.observation.identifiable_noise`: no run effect and a learned
    ``df`` bounded at 2 where every group is one point); until 2026-12-07 this path skipped
    that and fitted a table of final losses with both scales and the bound of 1."""
    from climb_bayes.inference.fitting import climb_laplace
    from climb_bayes.inference.laplace import laplace_modes
    from climb_bayes.model.climb_model import model_data, pad_model_data

    priors = identifiable_noise(options.priors, runs.obs_group, log)
    data = model_data(runs, priors)
    if options.pad_to is not None:  # programs shared with the other folds' fits
        data = pad_model_data(data, options.pad_to)
    res = climb_laplace(data, priors, options.seed, options.samples)
    sm = res.samples
    params = to_reference_units(
        LawParams(sm["log_B"], sm["beta"], sm["log_E"], sm["b"], sm["k"], sm["eta"]), data.d_ref
    )
    if log:
        log(f"climb: Laplace fit ({laplace_modes(res)})")
    return LawFit(
        law,
        usable.groups,
        data.d_ref,
        "laplace",
        {k: np.asarray(v) for k, v in params._asdict().items()},
        sm["sigma"],
        priors.likelihood,
        likelihood_df(priors, sm),
        info={
            "converged": res.converged,
            "pareto_k": res.pareto_k,
            "pareto_k_max": res.pareto_k_max,
            "n_fit": usable.n,
            "n_params": law.n_params(usable.m),
        },
        sigma_run=sm.get("sigma_run"),
        fit_obs=Observations.from_runs(runs),
    )

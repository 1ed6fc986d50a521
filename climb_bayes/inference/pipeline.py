"""What ``climb-bayes fit`` does: CLIMB's posterior, then the other laws, calibration, stacking.

:func:`fit_runs_ensemble` fits CLIMB with :func:`climb_bayes.inference.fitting.fit_runs` (NUTS by
default), the other laws with :func:`climb_bayes.inference.ensemble.fit_ensemble` (same sampler
settings), learns each law's extrapolation discrepancy from leave-future-out folds inside the
data, stacks the laws, and stores all of it in the returned
:class:`~climb_bayes.inference.fitresult.Fit` (:mod:`climb_bayes.inference.ensemble_store`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import RunsData
from climb_bayes.errors import ClimbError
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble, shipped_options
from climb_bayes.inference.ensemble_store import store_ensemble
from climb_bayes.inference.fitresult import Fit
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.lfo import lfo_folds
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.laws.base import FitOptions
from climb_bayes.laws.climb import lawfit_from_fit
from climb_bayes.laws.registry import DEFAULT_LAWS, get_law
from climb_bayes.model.observation import identifiable_noise
from climb_bayes.model.priors import Priors

__all__ = ["fit_runs_ensemble"]


def fit_runs_ensemble(
    runs: RunsData,
    priors: Priors | None = None,
    *,
    method: str = "nuts",
    config: NutsConfig | None = None,
    laws: Sequence[str] = DEFAULT_LAWS,
    ensemble: EnsembleOptions | None = None,
    target_accept: float | None = None,
    seed: int = 0,
    n_starts: int = 8,
    families: dict[str, str] | None = None,
    data_label: str = "",
    log: Callable[[str], None] | None = None,
) -> Fit:
    """Fit every law to ``runs``, calibrate, stack, and return one :class:`Fit`.

    Parameters
    ----------
    runs : RunsData
        The runs table.
    priors : Priors, optional
        CLIMB's priors; the other laws take their noise model and shared priors from it.
    method : {"nuts", "laplace", "map"}
        Inference of every full fit.
    config : NutsConfig, optional
        Sampler settings (every law; its ``target_accept`` is CLIMB's).
    laws : sequence of str
        Laws to stack; must include ``"climb"``.
    ensemble : EnsembleOptions, optional
        Inner leave-future-out and discrepancy settings (default: ``method``'s, with laws of
        stacking weight below :data:`~climb_bayes.inference.convergence.MIN_STACK_WEIGHT`
        fitted by Laplace instead of NUTS).
    target_accept : float, optional
        NUTS target acceptance of the other laws; ``None``: each law's own
        (:attr:`~climb_bayes.laws.base.Law.nuts_target_accept`).
    seed : int
        Seed of everything random.
    n_starts : int
        Point-fit starts.
    families : dict, optional
        Group -> family for MSL's per-family form.
    data_label : str
        Stored with the fit.
    log : callable, optional
        Progress lines.

    Returns
    -------
    Fit
        CLIMB's DataTree with the other laws, discrepancies and weights added.
    """
    log = log or (lambda _msg: None)
    # resolved once here, so the law and fold fits below do not each report it
    priors = identifiable_noise(priors or Priors(), runs.obs_group, log)
    config = config or NutsConfig()
    names = [n.strip().lower() for n in laws]
    if "climb" not in names:
        raise ClimbError("--laws must include climb (the fit file is built around its posterior).")
    ens_opts = ensemble or shipped_options(method)
    if ens_opts.method != method:
        raise ClimbError("the ensemble's method must be the fit's method.")
    if ens_opts.lfo_cuts is not None:  # a cut that cannot be used fails before any fit
        lfo_folds(Observations.from_runs(runs), cuts=ens_opts.lfo_cuts)
    fit = fit_runs(
        runs,
        priors,
        method=method,
        config=config,
        seed=seed,
        n_starts=n_starts,
        data_label=data_label,
        log=log,
    )
    if len(names) == 1 and not ens_opts.discrepancy:
        return fit
    t0 = time.perf_counter()
    options = FitOptions(
        seed=seed,
        n_starts=n_starts,
        chains=config.chains,
        warmup=config.warmup,
        samples=config.samples,
        target_accept=target_accept,
        priors=priors,
    )
    obs = Observations.from_runs(runs)
    law_objs = [get_law(n, families=families) for n in names]
    ens = fit_ensemble(
        obs, law_objs, options, ens_opts, prefit={"climb": lawfit_from_fit(fit)}, log=log
    )
    store_ensemble(fit.tree, ens)
    fit.tree.attrs["ensemble_seconds"] = float(time.perf_counter() - t0)
    return fit

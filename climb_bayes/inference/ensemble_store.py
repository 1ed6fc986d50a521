"""Store a :class:`~climb_bayes.inference.ensemble.LawEnsemble` in a fit's DataTree, and read it
back.

Layout inside ``fit.nc`` (besides CLIMB's own groups at the root):

* ``laws/<name>``: each other law's posterior draws (dim ``draw``), ``sigma`` and ``sigma_run``
  (dims ``draw, language``); attributes ``law`` (:func:`~climb_bayes.laws.registry.law_spec`),
  ``d_ref``, ``method``, ``likelihood``, ``student_df`` (a number, or ``"learned"`` with the
  draws in the variable ``student_df``), ``info`` (JSON);
* ``discrepancy/<name>``: ``tau`` (``draw, language``), ``rho`` (``draw``), ``lo``, ``hi``
  (``language``, tokens); attributes ``source``, ``length_scale``, ``growth`` (absent in fits
  stored before the bend term: read as ``"linear"``);
* root attributes ``stacking_weights`` and ``lfo_summary`` (JSON) and ``weight_method``.

A file without them (written by climb-bayes < 0.2, format 1) still loads: its ensemble is
CLIMB alone, with the discrepancy drawn from its prior (:func:`load_ensemble` says so in
``LawEnsemble.lfo["note"]``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import xarray as xr

from climb_bayes.data.observations import Observations, budget_range
from climb_bayes.inference.ensemble import LawEnsemble
from climb_bayes.laws.base import LawFit
from climb_bayes.laws.registry import law_from_spec, law_spec
from climb_bayes.model.discrepancy import Discrepancy, discrepancy_prior, prior_discrepancy
from climb_bayes.model.priors import LEARNED

__all__ = ["store_ensemble", "load_ensemble", "discrepancy_from_tree", "OLD_FILE_NOTE"]

OLD_FILE_NOTE = (
    "this fit file has no law stacking or leave-future-out calibration (written by an older "
    "climb-bayes); predictions use CLIMB alone with the discrepancy's prior. Refit with "
    "`climb-bayes fit` to get them."
)


def _discrepancy_tree(d: Discrepancy, languages: list[str]) -> xr.DataTree:
    ds = xr.Dataset(
        {
            "tau": (("draw", "language"), np.asarray(d.tau)),
            "rho": (("draw",), np.asarray(d.rho)),
            "lo": (("language",), np.asarray(d.lo)),
            "hi": (("language",), np.asarray(d.hi)),
        },
        coords={"language": languages},
        attrs={"source": d.source, "length_scale": float(d.length_scale), "growth": d.growth},
    )
    if d.trend is not None:
        ds["trend"] = (("draw",), np.asarray(d.trend))
    return xr.DataTree(ds)


def discrepancy_from_tree(node: xr.DataTree) -> Discrepancy:
    """The :class:`Discrepancy` stored in a ``discrepancy/<law>`` node."""
    ds = node.to_dataset()
    return Discrepancy(
        np.asarray(ds["tau"].values),
        np.asarray(ds["rho"].values),
        np.asarray(ds["lo"].values),
        np.asarray(ds["hi"].values),
        str(ds.attrs.get("source", "prior")),
        float(ds.attrs.get("length_scale", 0.2)),
        # stored before the bend term: its tau was learned with the linear form
        str(ds.attrs.get("growth", "linear")),
        np.asarray(ds["trend"].values) if "trend" in ds else None,
    )


def _law_tree(fit: LawFit) -> xr.DataTree:
    data: dict[str, Any] = {}
    for name, v in fit.draws.items():
        v = np.asarray(v)
        data[name] = (("draw",) + tuple(f"{name}_dim_{i}" for i in range(v.ndim - 1)), v)
    data["sigma"] = (("draw", "language"), np.asarray(fit.sigma))
    if fit.sigma_run is not None:
        data["sigma_run"] = (("draw", "language"), np.asarray(fit.sigma_run))
    learned = np.ndim(fit.student_df) > 0
    if learned:
        data["student_df"] = (("draw", "language"), np.asarray(fit.student_df))
    attrs = {
        "law": law_spec(fit.law),
        "d_ref": float(fit.d_ref),
        "method": fit.method,
        "likelihood": fit.likelihood,
        "student_df": LEARNED if learned else float(fit.student_df),
        "info": json.dumps({k: v for k, v in fit.info.items() if _plain(v)}),
    }
    return xr.DataTree(xr.Dataset(data, coords={"language": list(fit.groups)}, attrs=attrs))


def _plain(v: Any) -> bool:
    return isinstance(v, str | int | float | bool) or v is None


def store_ensemble(tree: xr.DataTree, ens: LawEnsemble) -> xr.DataTree:
    """Add the ensemble's other laws, discrepancies, weights and LFO summary to ``tree``."""
    languages = list(ens.groups)
    for name, fit in ens.fits.items():
        if name != "climb":
            tree[f"laws/{name}"] = _law_tree(fit)
        if fit.discrepancy is not None:
            tree[f"discrepancy/{name}"] = _discrepancy_tree(fit.discrepancy, languages)
    tree.attrs["stacking_weights"] = json.dumps(ens.weights)
    tree.attrs["weight_method"] = ens.weight_method
    tree.attrs["lfo_summary"] = json.dumps(ens.lfo)
    return tree


def load_ensemble(fit: Any) -> LawEnsemble:
    """The ensemble of a :class:`~climb_bayes.inference.fitresult.Fit` (CLIMB alone for old
    files)."""
    from climb_bayes.laws.climb import lawfit_from_fit

    climb = lawfit_from_fit(fit)
    tree = fit.tree
    weights_text = tree.attrs.get("stacking_weights")
    if not weights_text:
        obs = Observations.from_runs(fit.runs)
        lo, hi = budget_range(obs)
        disc = prior_discrepancy(discrepancy_prior("climb"), lo, hi, climb.n_draws, seed=0)
        climb.discrepancy = disc
        return LawEnsemble({"climb": climb}, {"climb": 1.0}, "single", {"note": OLD_FILE_NOTE})
    weights = json.loads(weights_text)
    fits = {"climb": climb}
    obs = climb.fit_obs
    for name in weights:
        if name == "climb":
            continue
        node = tree[f"laws/{name}"]
        ds = node.to_dataset()
        law = law_from_spec(ds.attrs["law"])
        noise = ("sigma", "sigma_run", "student_df")
        draws = {k: np.asarray(ds[k].values) for k in ds.data_vars if k not in noise}
        df = ds.attrs["student_df"]
        df = np.asarray(ds["student_df"].values) if df == LEARNED else float(df)
        fits[name] = LawFit(
            law,
            fit.languages,
            float(ds.attrs["d_ref"]),
            str(ds.attrs["method"]),
            draws,
            np.asarray(ds["sigma"].values),
            str(ds.attrs["likelihood"]),
            df,
            info=json.loads(ds.attrs.get("info", "{}")),
            sigma_run=np.asarray(ds["sigma_run"].values) if "sigma_run" in ds else None,
            fit_obs=law.usable(obs) if obs is not None else None,
            discrepancy=(
                discrepancy_from_tree(tree[f"discrepancy/{name}"])
                if "discrepancy" in tree.children and name in tree["discrepancy"].children
                else None
            ),
        )
    return LawEnsemble(
        fits,
        {k: float(v) for k, v in weights.items()},
        str(tree.attrs.get("weight_method", "lfo-stacking")),
        json.loads(tree.attrs.get("lfo_summary", "{}")),
    )

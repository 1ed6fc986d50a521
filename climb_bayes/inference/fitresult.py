"""The fit result: an ArviZ-style xarray DataTree with everything needed to reuse a fit.

Groups: ``posterior`` (latent and derived parameters, in tokens units where named ``log_B``,
``B``, ``k``), ``sample_stats``, ``log_likelihood``, ``observed_data``,
``posterior_predictive`` and ``constant_data`` (the runs table the fit saw). Dims:
``language`` (target), ``source_language``, ``pair`` (off-diagonal ``src->tgt``), ``run``,
``point`` (evaluation points) and ``obs`` (likelihood observations). Root attributes hold the
metadata (languages, ``d_ref``, priors as TOML, data hash, package version, seed, method,
diagnostics, NUTS settings and, for per-language blocks, ``block_thinning`` as JSON).

A file is written atomically (temporary file, then rename) and loaded with
:func:`load_fit`, which rebuilds the runs table and priors, so predictions from a loaded fit
equal those from the in-memory one bit for bit.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from climb_bayes.atomic import atomic_path
from climb_bayes.data.runs import RunsData
from climb_bayes.errors import FitFileError
from climb_bayes.inference.diagnostics import Diagnostics
from climb_bayes.model.law import LawParams
from climb_bayes.model.priors import Priors, load_priors

if TYPE_CHECKING:
    from climb_bayes.inference.ensemble import LawEnsemble
    from climb_bayes.model.discrepancy import Discrepancy

__all__ = ["Fit", "load_fit", "FORMAT_VERSION", "PARAM_DIMS", "METHOD_LABELS"]

FORMAT_VERSION = 2
"""2: run-effect likelihood (log-likelihood per run group), other laws, discrepancy, stacking.
1: climb-bayes < 0.2 (still read; predictions then use CLIMB alone)."""

PARAM_DIMS: dict[str, list[str]] = {
    "log_L0": ["language"],
    "logit_f": ["language"],
    "log_slope": ["language"],
    "b_saturated": ["pair"],
    "kappa_saturated": ["pair"],
    "log_A": ["language"],
    "log_E": ["language"],
    "log_B": ["language"],
    "B": ["language"],
    "E": ["language"],
    "beta": ["language"],
    "eta": ["language"],
    "sigma": ["language"],
    "sigma_run": ["language"],
    "df": ["language"],
    "b_offdiag": ["pair"],
    "b_z": ["pair"],
    "kappa_offdiag": ["pair"],
    "b": ["source_language", "language"],
    "k": ["source_language", "language"],
    "log_loss": ["obs"],
}


METHOD_LABELS = {
    "nuts": "NUTS posterior",
    "laplace": "Laplace approximation",
    "map": "point fit",
}
"""How commands name each fitting method's draws."""


@dataclass
class Fit:
    """A fitted CLIMB law: the DataTree plus convenient accessors.

    Attributes
    ----------
    tree : xarray.DataTree
        The ArviZ-convention tree (see module docstring).
    """

    tree: xr.DataTree

    # -- metadata ----------------------------------------------------------------------------
    @property
    def attrs(self) -> dict:
        """Root attributes."""
        return self.tree.attrs

    @property
    def languages(self) -> tuple[str, ...]:
        """Language (or domain) names, in the order of every ``language`` axis."""
        return tuple(json.loads(self.attrs["languages"]))

    @property
    def d_ref(self) -> float:
        """Reference budget (tokens) the model was sampled in."""
        return float(self.attrs["d_ref"])

    @property
    def method(self) -> str:
        """``"nuts"``, ``"laplace"`` or ``"map"``."""
        return str(self.attrs["method"])

    @property
    def method_label(self) -> str:
        """What the draws are, in words (``"NUTS posterior"``, ``"Laplace approximation"``,
        ``"point fit"``)."""
        return METHOD_LABELS.get(self.method, self.method)

    @property
    def priors(self) -> Priors:
        """Priors used for the fit."""
        import tomllib

        settings = tomllib.loads(self.attrs["priors_toml"])["priors"]
        # fits stored before 2026-11-27 were sampled with the data's median share
        settings.setdefault("reference_share", "median")
        return load_priors(None, **settings)

    @property
    def diagnostics(self) -> Diagnostics | None:
        """Sampler diagnostics (None for point fits)."""
        text = self.attrs.get("diagnostics", "")
        return Diagnostics.from_json(text) if text else None

    @property
    def runs(self) -> RunsData:
        """The runs table the fit saw, rebuilt from ``constant_data`` (with the counts of the
        losses its reader left out, where the fit file records them)."""
        cd = self.tree["constant_data"]
        counts = {
            key: int(self.attrs[key])
            for key in ("n_excluded_zero_share", "n_points_dropped_head")
            if key in self.attrs
        }
        if counts:  # the per-point counts are not stored: unknown, not 0
            counts |= {"point_n_excluded": None, "run_n_dropped_head": None}
        return RunsData.from_arrays(
            self.languages,
            [str(x) for x in cd["run"].values],
            np.asarray(cd["run_proportions"].values),
            np.asarray(cd["run_budgets"].values),
            np.asarray(cd["point_run"].values),
            np.asarray(cd["point_tokens"].values),
            np.asarray(cd["point_loss"].values),
            source=str(self.attrs.get("data_source", "<fit>")),
            sha256=str(self.attrs.get("data_sha256", "")),
            tail_start=float(self.attrs.get("tail_start", 0.85)),
            run_series=np.asarray(cd["run_series"].values) if "run_series" in cd else None,
            series_labels=[str(x) for x in cd["run_series_label"].values]
            if "run_series_label" in cd
            else None,
            **counts,
        )

    # -- draws -------------------------------------------------------------------------------
    @property
    def n_draws(self) -> int:
        """Total number of posterior draws (chains x draws)."""
        post = self.tree["posterior"]
        return int(post.sizes["chain"] * post.sizes["draw"])

    def draws(self, name: str) -> np.ndarray:
        """Posterior draws of one variable, chains stacked: shape ``(n_draws, ...)``."""
        da = self.tree["posterior"][name]
        values = np.asarray(da.values)
        return values.reshape((-1,) + values.shape[2:])

    def law_draws(self) -> LawParams:
        """Posterior draws of the law in tokens units, each field ``(n_draws, ...)``."""
        return LawParams(
            log_B=self.draws("log_B"),
            beta=self.draws("beta"),
            log_E=self.draws("log_E"),
            b=self.draws("b"),
            k=self.draws("k"),
            eta=self.draws("eta"),
        )

    def sigma_draws(self) -> np.ndarray:
        """Observation-noise draws on log-loss, ``(n_draws, m)``."""
        return self.draws("sigma")

    def discrepancy(self, law: str = "climb") -> Discrepancy | None:
        """The extrapolation discrepancy learned for ``law`` (``None`` if not stored)."""
        from climb_bayes.inference.ensemble_store import discrepancy_from_tree

        node = self.tree.children.get("discrepancy")
        if node is None or law not in node.children:
            return None
        return discrepancy_from_tree(node[law])

    def ensemble(self) -> LawEnsemble:
        """Every law of the fit with its discrepancy and stacking weight (the default
        predictive of ``predict``, ``optimize``, ``suggest`` and ``report``)."""
        from climb_bayes.inference.ensemble_store import load_ensemble

        return load_ensemble(self)

    # -- I/O -----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tree to NetCDF atomically (temporary file in the same folder, then rename)."""
        with atomic_path(path) as tmp:
            self.tree.to_netcdf(tmp, engine="h5netcdf")
        return Path(path)


def load_fit(path: str | os.PathLike[str]) -> Fit:
    """Open a ``fit.nc`` written by :meth:`Fit.save` (clear errors for anything else).

    Parameters
    ----------
    path : str or path-like
        The NetCDF file ``climb-bayes fit`` (or :meth:`Fit.save`) wrote.

    Returns
    -------
    Fit
        Posterior draws (:meth:`Fit.law_draws`), diagnostics, the runs it was fitted on
        (:attr:`Fit.runs`) and the stacked predictive (:meth:`Fit.ensemble`).

    Raises
    ------
    FitFileError
        Missing or unreadable file, not a climb-bayes fit, or a newer format (names the fix).

    Examples
    --------
    >>> from climb_bayes.inference.fitresult import load_fit
    >>> try:
    ...     load_fit("no-such-fit.nc")
    ... except FitFileError as exc:
    ...     print(exc)
    no-such-fit.nc: fit file not found. Create one with `climb-bayes fit`.
    """
    path = Path(path)
    if not path.is_file():
        raise FitFileError(f"{path}: fit file not found. Create one with `climb-bayes fit`.")
    try:
        tree = xr.open_datatree(path, engine="h5netcdf")
        tree = tree.load()
    except Exception as exc:  # noqa: BLE001 - any reader failure means the same to the user
        raise FitFileError(
            f"{path}: not a readable NetCDF/HDF5 file ({exc}). Fix: pass the fit file that "
            "`climb-bayes fit` wrote (fit.nc by default)."
        ) from None
    if tree.attrs.get("climb_bayes_format") is None or "posterior" not in tree.children:
        raise FitFileError(
            f"{path}: not a climb-bayes fit (no 'climb_bayes_format' attribute or no posterior)."
        )
    if int(tree.attrs["climb_bayes_format"]) > FORMAT_VERSION:
        raise FitFileError(
            f"{path}: written by a newer climb-bayes (format {tree.attrs['climb_bayes_format']});"
            " upgrade climb-bayes."
        )
    return Fit(tree)

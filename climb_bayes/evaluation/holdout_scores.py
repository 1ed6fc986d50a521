"""Fit several laws on one part of the data and score them on the held-out part.

Used by ``climb-bayes evaluate`` and ``benchmarks/real_data.py``. Each law is fitted on every
fit-set observation it can explain (CLIMB, Isolated and MSL cannot explain a group's loss at
share 0; the Data Mixing Law can) and scored on

* ``positive``: held-out observations whose group had a positive share -- the same set for
  every law, so these rows compare laws;
* ``zero``: held-out observations at share 0, only for laws that predict there (reported as
  separate rows, with their count).

Metrics are those of :func:`climb_bayes.evaluation.metrics.score`. Calibration metrics use the
posterior predictive for NUTS fits and, for MAP fits, a plug-in predictive (the point
prediction plus Normal noise with the per-group robust residual scale): a point fit ignores
parameter uncertainty, so its intervals are expected to be too narrow when extrapolating.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from climb_bayes.data.observations import Observations
from climb_bayes.evaluation.metrics import COVERAGE_LEVELS, score
from climb_bayes.inference.convergence import ConvergenceGate, law_problems
from climb_bayes.inference.predictive import (
    log_predictive_density,
    predictive_parts,
    predictive_samples,
)
from climb_bayes.laws.base import FitOptions, Law, LawFit

__all__ = ["EvalRow", "evaluate_laws", "format_table", "rows_to_json", "METRIC_COLUMNS"]

METRIC_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("r2_pooled", "R² pooled", "{:.3f}"),
    ("r2_group_mean", "R² per-group", "{:.3f}"),
    ("huber_log", "Huber(log)", "{:.2e}"),
    ("huber_loss", "Huber(loss)", "{:.2e}"),
    ("mre", "MRE", "{:.2%}"),
    ("rmsle", "RMSLE", "{:.4f}"),
    ("cov50", "cov50", "{:.2f}"),
    ("cov80", "cov80", "{:.2f}"),
    ("cov90", "cov90", "{:.2f}"),
    ("cov95", "cov95", "{:.2f}"),
    ("cal_error", "cal.err", "{:.3f}"),
    ("crps", "CRPS", "{:.4f}"),
    ("lpd", "LPD", "{:.2f}"),
)
"""(key, header, format) of the metric columns of the table."""


@dataclass
class EvalRow:
    """One law scored on one subset of the held-out observations."""

    law: str
    method: str
    subset: str
    n_fit: int
    n_params: int
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""

    def flat(self) -> dict[str, Any]:
        """Metrics with coverage flattened to ``cov50`` ... ``cov95``."""
        out = dict(self.metrics)
        for lvl, c in dict(out.pop("coverage", {}) or {}).items():
            out[f"cov{round(float(lvl) * 100)}"] = c
        return out


def evaluate_laws(
    fit_obs: Observations,
    test_obs: Observations,
    laws: Sequence[Law],
    *,
    method: str = "map",
    options: FitOptions | None = None,
    n_predictive: int = 1000,
    levels: Sequence[float] = COVERAGE_LEVELS,
    dataset: str = "",
    log: Callable[[str], None] | None = None,
) -> tuple[list[EvalRow], dict[str, LawFit]]:
    """Fit each law on ``fit_obs`` and score it on ``test_obs``.

    Parameters
    ----------
    fit_obs, test_obs : Observations
        Disjoint fit and held-out observations over the same groups.
    laws : sequence of Law
        Laws to compare (see :mod:`climb_bayes.laws.registry`).
    method : {"map", "nuts"}
        Inference for every law.
    options : FitOptions, optional
        Starts, seed, NUTS settings and priors.
    n_predictive : int
        Predictive samples per observation for coverage and CRPS.
    levels : sequence of float
        Coverage levels.
    dataset : str
        Label stored in each row.
    log : callable, optional
        Progress lines.

    Returns
    -------
    rows : list of EvalRow
        One ``positive`` row per law and one ``zero`` row per law that predicts zero-share
        observations when there are any.
    fits : dict of str to LawFit
        The fitted laws by name.
    """
    options = options or FitOptions()
    log = log or (lambda _msg: None)
    rows: list[EvalRow] = []
    fits: dict[str, LawFit] = {}
    zero = test_obs.zero_share
    subsets = {"positive": test_obs.select(~zero), "zero": test_obs.select(zero)}
    for law in laws:
        t0 = time.perf_counter()
        law = law.prepare(fit_obs)
        log(f"fitting {law.name} ({method}) on {law.usable(fit_obs).n} observations")
        fit = law.fit(fit_obs, method, options, log=log)
        fits[law.name] = fit
        seconds = time.perf_counter() - t0
        for subset, obs in subsets.items():
            if subset == "zero" and (not law.zero_share_ok or obs.n == 0):
                continue
            usable = fit.law.usable(obs)
            if subset == "positive" and usable.n < obs.n:
                log(f"{law.name}: {obs.n - usable.n} held-out observations it cannot predict")
            metrics = _score_fit(fit, usable, n_predictive, levels, options.seed)
            info = {k: v for k, v in fit.info.items() if _jsonable(v)}
            info["fit_seconds"] = round(seconds, 2)
            rows.append(
                EvalRow(
                    law.name,
                    fit.method,
                    subset,
                    int(fit.info.get("n_fit", 0)),
                    int(fit.info.get("n_params", law.n_params(fit_obs.m))),
                    metrics,
                    info,
                    dataset,
                )
            )
    return rows, fits


def _score_fit(
    fit: LawFit, obs: Observations, n_predictive: int, levels: Sequence[float], seed: int
) -> dict[str, Any]:
    if obs.n == 0:
        return {"n": 0}
    parts = predictive_parts(fit, obs)
    point = np.median(parts.centre, axis=0)
    samples = predictive_samples(fit, obs, n_predictive, seed=seed, parts=parts)
    lpd = log_predictive_density(fit, obs, seed=seed, parts=parts)
    return score(obs.loss, obs.group, point, samples, lpd=lpd, n_groups=obs.m, levels=levels)


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool) or v is None


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return fmt.format(value)


def format_table(
    rows: Sequence[EvalRow], *, markdown: bool = True, with_dataset: bool = False
) -> str:
    """Laws x metrics table (markdown by default; plain aligned text otherwise)."""
    head = (["dataset"] if with_dataset else []) + [
        "law",
        "method",
        "subset",
        "n test",
        "n fit",
        "params",
    ]
    head += [h for _k, h, _f in METRIC_COLUMNS]
    head.append("converged")
    body, notes = [], []
    for row in rows:
        problems = law_problems(row.info)
        # a Laplace approximation far from its posterior converged: say what failed, as the
        # fit gate does (ConvergenceGate.verdict)
        poor = ConvergenceGate(tuple(problems)).approximation_only
        if problems and row.subset == "positive":
            where = f" on {row.dataset}" if row.dataset else ""
            what = "is a poor approximation of its posterior" if poor else "NOT converged"
            notes.append(f"{row.law} ({row.method}{where}) {what}: {'; '.join(problems)}")
        flat = row.flat()
        cells = ([row.dataset] if with_dataset else []) + [
            row.law,
            row.method,
            "r>0" if row.subset == "positive" else "r=0",
            str(flat.get("n", 0)),
            str(row.n_fit),
            str(row.n_params),
        ]
        cells += [_fmt(flat.get(k), f) for k, _h, f in METRIC_COLUMNS]
        cells.append(("poor approx." if poor else "NO") + " (see below)" if problems else "yes")
        body.append(cells)
    notes = [f"WARNING: {n}; its numbers are not trustworthy." for n in notes]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(c) + " |" for c in body]
        return "\n".join(lines + ([""] + notes if notes else []))
    widths = [
        max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(lines + notes)


def rows_to_json(rows: Sequence[EvalRow]) -> list[dict[str, Any]]:
    """Rows as JSON-able dicts (NaN becomes ``None``)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, np.generic):
            return clean(v.item())
        return v

    return [
        clean(
            {
                "dataset": r.dataset,
                "law": r.law,
                "method": r.method,
                "subset": r.subset,
                "n_fit": r.n_fit,
                "n_params": r.n_params,
                "metrics": r.metrics,
                "info": r.info,
            }
        )
        for r in rows
    ]

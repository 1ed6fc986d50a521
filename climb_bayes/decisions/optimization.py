"""The optimal mixture of a fit, as a posterior distribution plus one recommended mixture.

For a target budget ``D`` and importance weights ``w`` this computes, per posterior draw,

* the paper's **two-step** solution (direction ``p`` of Eq. 7, then the magnitude problem of
  Eq. 8 with penalty ``rho``), and
* the **direct** minimiser of ``sum_i w_i L_i(D, r)`` -- the true optimum of the fitted law,

both with the batched solver of :mod:`climb_bayes.decisions.solvers` (or, with
``solver="trust-constr"``, scipy's trust-region interior-point method per draw, the paper's method
and the reference), then the **Bayes decision** and optionally the **risk-averse** (CVaR) decision
(:mod:`climb_bayes.decisions.decision`), and compares the recommendation with baseline mixtures
(:mod:`climb_bayes.decisions.baselines`, plus the MSL law's optimum when the runs are at hand).

Units
-----
Budgets and token counts in tokens; losses in nats/token; shares and weights unit-free.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Eq. (6)-(8), Algorithm 1 Part II, Appendices B-C, and
   Figure 7 (optimal shares against the budget).
.. [2] Berger (1985), Ch. 4 (Bayes decisions); Rockafellar & Uryasev (2000) (CVaR).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from climb_bayes.decisions.baselines import (
    DEFAULT_TAU,
    isolated_optimum,
    natural_mixture,
    temperature_mixture,
    uniform_mixture,
    unimax_mixture,
)
from climb_bayes.decisions.constraints import Constraints
from climb_bayes.decisions.decision import (
    Comparison,
    bayes_decision,
    central_interval,
    compare,
    cvar,
    cvar_decision,
    draw_losses,
)
from climb_bayes.decisions.solvers import (
    direct_batch,
    direct_trust_constr,
    direction_draws,
    two_step_batch,
    two_step_trust_constr,
)
from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams

__all__ = [
    "DEFAULT_RHO",
    "DEFAULT_LEVELS",
    "SOLVERS",
    "OptimizeResult",
    "thin_index",
    "thin_draws",
    "median_params",
    "check_budget",
    "optimize_mixture",
    "optimize_budgets",
    "trajectory_frame",
    "msl_baseline",
]

DEFAULT_RHO = 100.0
"""Default penalty ``rho`` of the two-step magnitude problem (Eq. 8).

The paper gives no value. The penalty is a sum of squared share differences (~1e-3 for a
noticeable deviation) against a magnitude term of order 0.1, so ``rho`` of order 1 lets the
magnitude term win and starves languages (shares of 0 -- unbounded loss -- with 16 languages);
with ``rho = 100`` the solution follows the direction ``p``. That does not make it the direct
optimum: with transfer the two-step loss was measured 1e-3 to 6e-2 nats above the direct one
(issue 16; sometimes worse than uniform), so the recommendation is the direct Bayes decision and
the two-step answer is shown as the paper's method.
"""

DEFAULT_LEVELS = (0.5, 0.9)
"""Central interval levels reported by default."""

SOLVERS = ("fast", "trust-constr")


def check_budget(budget: float, option: str = "--budget") -> float:
    """A positive, finite budget in tokens (else a clear error)."""
    try:
        value = float(budget)
    except (TypeError, ValueError):
        raise ClimbError(f"{option}: {budget!r} is not a number of tokens (e.g. 1e12).") from None
    if not math.isfinite(value) or value <= 0:
        raise ClimbError(f"{option}: budgets must be positive numbers of tokens, got {budget!r}.")
    return value


def thin_index(n: int, max_draws: int | None) -> np.ndarray:
    """Indices of at most ``max_draws`` of ``n`` draws, evenly spaced (all when ``None``)."""
    if max_draws is None or max_draws >= n:
        return np.arange(n)
    if max_draws < 1:
        raise ClimbError(f"--max-draws must be >= 1, got {max_draws}.")
    return np.unique(np.linspace(0, n - 1, max_draws).round().astype(int))


def thin_draws(params: LawParams, max_draws: int | None) -> LawParams:
    """At most ``max_draws`` draws, evenly spaced (all when ``None`` or enough)."""
    params = LawParams(*(np.asarray(x, dtype=float) for x in params))
    idx = thin_index(params.beta.shape[0], max_draws)
    return LawParams(*(x[idx] for x in params))


def median_params(params: LawParams) -> LawParams:
    """Element-wise posterior medians, as a one-draw ``LawParams`` (a plug-in point estimate)."""
    return LawParams(*(np.median(np.asarray(x), axis=0)[None] for x in params))


@dataclass
class OptimizeResult:
    """Everything :func:`optimize_mixture` computes at one budget.

    Attributes
    ----------
    languages : tuple of str
        Language order of every ``(..., m)`` array.
    budget : float
        Target budget (tokens).
    weights : ndarray (m,)
        Normalised importance weights.
    rho : float
        Two-step penalty.
    levels : tuple of float
        Interval levels.
    lo, hi : ndarray (m,)
        Share bounds used.
    direction : ndarray (S, m)
        The paper's direction ``p`` per draw (Eq. 7).
    two_step : ndarray (S, m)
        Two-step solution per draw.
    two_step_loss : ndarray (S,)
        Weighted loss of each draw's two-step solution under that draw (nats/token).
    direct : ndarray (S, m)
        Direct minimiser per draw (the fitted law's optimum ``r*``).
    direct_loss : ndarray (S,)
        Weighted loss at each draw's ``r*`` (nats/token).
    bayes : ndarray (m,)
        Bayes decision (minimises the posterior expected weighted loss).
    bayes_losses : ndarray (S,)
        Weighted loss of :attr:`bayes` under every draw.
    risk : float or None
        CVaR level when the risk-averse decision was asked for.
    risk_averse : ndarray (m,) or None
        The CVaR decision.
    risk_losses : ndarray (S,) or None
        Its weighted loss under every draw.
    comparisons : list of Comparison
        Recommendation, alternatives and baselines, each against the recommendation.
    skipped : dict
        Baselines not computed, with the reason.
    solver : str
        ``"fast"`` or ``"trust-constr"``.
    seconds : float
        Wall time of the computation.
    stacked : ndarray (S', m) or None
        Per-draw optimum under the default (stacked) predictive: a mixture over laws,
        posterior draws and discrepancy realisations
        (:mod:`climb_bayes.decisions.ensemble_decision`).
    predictive : str
        What the decisions and comparisons are taken under: ``"climb"`` (its posterior) or
        ``"stacked: climb 0.71, msl 0.29"``.
    gain_noise : float
        sd over the decision draws of the loss difference between the recommendation and the
        uniform mixture (nats/token): a gain smaller than this is within the uncertainty.
    """

    languages: tuple[str, ...]
    budget: float
    weights: np.ndarray
    rho: float
    levels: tuple[float, ...]
    lo: np.ndarray
    hi: np.ndarray
    direction: np.ndarray
    two_step: np.ndarray
    two_step_loss: np.ndarray
    direct: np.ndarray
    direct_loss: np.ndarray
    bayes: np.ndarray
    bayes_losses: np.ndarray
    risk: float | None = None
    risk_averse: np.ndarray | None = None
    risk_losses: np.ndarray | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    stacked: np.ndarray | None = None
    predictive: str = "climb"
    gain_noise: float = 0.0
    solver: str = "fast"
    seconds: float = 0.0

    @property
    def n_draws(self) -> int:
        """Number of posterior draws used."""
        return int(self.direct.shape[0])

    @property
    def recommended_name(self) -> str:
        """``"bayes"`` or ``"cvar(alpha)"``."""
        return "bayes" if self.risk is None else f"cvar({self.risk:g})"

    @property
    def recommended(self) -> np.ndarray:
        """The recommended mixture (the CVaR decision when a risk level was given)."""
        return self.bayes if self.risk_averse is None else self.risk_averse

    @property
    def recommended_losses(self) -> np.ndarray:
        """Weighted loss of the recommendation under every draw."""
        return self.bayes_losses if self.risk_losses is None else self.risk_losses

    def mixture_table(self) -> pd.DataFrame:
        """Per-language table: weight, recommendation, Bayes/CVaR, and the medians and central
        intervals of the per-draw two-step and direct optima."""
        rows = []
        for i, lang in enumerate(self.languages):
            row: dict[str, object] = {
                "language": lang,
                "weight": float(self.weights[i]),
                "recommended": float(self.recommended[i]),
                "bayes": float(self.bayes[i]),
            }
            if self.risk_averse is not None:
                row[f"cvar_{self.risk:g}"] = float(self.risk_averse[i])
            sols = [("direct", self.direct), ("two_step", self.two_step)]
            if self.stacked is not None:
                sols.insert(0, ("stacked", self.stacked))
            for key, draws in sols:
                row[f"{key}_median"] = float(np.median(draws[:, i]))
                for lv in self.levels:
                    a, b = central_interval(draws[:, i], lv)
                    row[f"{key}_{_pct(lv)}_lo"] = float(a)
                    row[f"{key}_{_pct(lv)}_hi"] = float(b)
            row["direction_median"] = float(np.median(self.direction[:, i]))
            row["min_share"] = float(self.lo[i])
            row["max_share"] = float(self.hi[i])
            rows.append(row)
        return pd.DataFrame(rows)

    def comparison_table(self) -> pd.DataFrame:
        """One row per compared mixture: expected weighted loss, intervals, ``P(beaten)``."""
        rows = []
        for c in self.comparisons:
            row: dict[str, object] = {
                "mixture": c.name,
                "expected_loss": c.mean,
                "excess_vs_recommended": c.excess,
                "p_recommended_better": c.p_beaten,
            }
            for lv, (a, b) in c.intervals.items():
                row[f"loss_{_pct(lv)}_lo"] = a
                row[f"loss_{_pct(lv)}_hi"] = b
            row["shares"] = ",".join(
                f"{lang}={x:.4f}" for lang, x in zip(self.languages, c.shares, strict=True)
            )
            row["note"] = c.note
            rows.append(row)
        return pd.DataFrame(rows)

    def draws_frame(self) -> pd.DataFrame:
        """Long table of the per-draw solutions: ``budget, draw, solver, r_<lang>...``."""
        frames = []
        for name, draws in (
            ("direct", self.direct),
            ("two_step", self.two_step),
            ("direction", self.direction),
        ):
            df = pd.DataFrame(draws, columns=[f"r_{lang}" for lang in self.languages])
            df.insert(0, "solution", name)
            df.insert(0, "draw", np.arange(draws.shape[0]))
            df.insert(0, "budget", self.budget)
            frames.append(df)
        return pd.concat(frames, ignore_index=True)

    def to_dict(self, include_draws: bool = True) -> dict:
        """JSON-able summary (and the per-draw solutions when ``include_draws``)."""
        out = {
            "budget": self.budget,
            "languages": list(self.languages),
            "weights": self.weights.tolist(),
            "rho": self.rho,
            "predictive": self.predictive,
            "gain_noise": self.gain_noise,
            "solver": self.solver,
            "n_draws": self.n_draws,
            "recommended": {"name": self.recommended_name, "shares": _shares(self)},
            "bayes": dict(zip(self.languages, self.bayes.tolist(), strict=True)),
            "cvar": None
            if self.risk_averse is None
            else {
                "alpha": self.risk,
                "shares": dict(zip(self.languages, self.risk_averse.tolist(), strict=True)),
                "value": cvar(self.risk_losses, self.risk),
            },
            "bounds": {"min": self.lo.tolist(), "max": self.hi.tolist()},
            "mixtures": _records(self.mixture_table()),
            "comparisons": _records(self.comparison_table()),
            "skipped_baselines": self.skipped,
            "seconds": self.seconds,
        }
        if include_draws:
            out["draws"] = {
                "direct": self.direct.tolist(),
                "two_step": self.two_step.tolist(),
                "direction": self.direction.tolist(),
                "direct_loss": self.direct_loss.tolist(),
                "two_step_loss": self.two_step_loss.tolist(),
            }
            if self.stacked is not None:
                out["draws"]["stacked"] = self.stacked.tolist()
        return out


def _shares(res: OptimizeResult) -> dict[str, float]:
    return dict(zip(res.languages, res.recommended.tolist(), strict=True))


def _records(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.to_json(orient="records"))


def _pct(level: float) -> str:
    return f"{100 * level:g}"


def msl_baseline(
    runs: object, families: dict[str, str] | None = None
) -> Callable[[float, np.ndarray], np.ndarray]:
    """The MSL law's optimum as a baseline: fit MSL (point fit) to ``runs`` once, then
    ``(budget, weights) -> shares``.

    Uses :mod:`climb_bayes.laws.msl` (He et al. 2024): the per-group form, or the per-family
    form when ``families`` (group -> family) is given.

    Raises
    ------
    ClimbError
        When that module is not available or the fit fails.
    """
    try:
        from climb_bayes.data.observations import Observations
        from climb_bayes.laws.msl import MSLLaw, optimal_mixture_fit
    except ImportError as exc:  # pragma: no cover - the module ships with the package
        raise ClimbError(f"MSL law not available ({exc}).") from None
    obs = Observations.from_runs(runs)
    fitted = MSLLaw.with_families(families).fit(obs, method="map")

    def optimum(budget: float, weights: np.ndarray) -> np.ndarray:
        return np.asarray(optimal_mixture_fit(fitted, budget, weights=weights))[0]

    return optimum


def optimize_mixture(
    params: LawParams,
    languages: Sequence[str],
    budget: float,
    *,
    weights: np.ndarray | None = None,
    constraints: Constraints | None = None,
    rho: float = DEFAULT_RHO,
    risk: float | None = None,
    levels: Sequence[float] = DEFAULT_LEVELS,
    solver: str = "fast",
    baselines: bool = True,
    tau: float = DEFAULT_TAU,
    msl: Callable[[float, np.ndarray], np.ndarray] | None = None,
    progress: Callable[[str], None] | None = None,
    ensemble: object | None = None,
    n_decision_draws: int = 1000,
    seed: int = 0,
) -> OptimizeResult:
    """Optimal mixture at one budget: per-draw two-step and direct optima, decisions, baselines.

    Parameters
    ----------
    params : LawParams
        Posterior draws in tokens units (:meth:`Fit.law_draws`; thin with :func:`thin_draws`).
    languages : sequence of str
        Names, in the order of the ``m`` axis.
    budget : float
        Target budget ``D`` (tokens).
    weights : ndarray (m,), optional
        Importance weights ``>= 0`` (normalised here); equal by default.
    constraints : Constraints, optional
        Share bounds and availability caps; the simplex only by default.
    rho : float
        Two-step penalty (Eq. 8).
    risk : float, optional
        CVaR level in (0, 1); when given the recommendation is the risk-averse decision.
    levels : sequence of float
        Central interval levels.
    solver : {"fast", "trust-constr"}
        Batched interior-point Newton (default) or scipy's ``trust-constr`` per draw (slow).
    baselines : bool
        Compare with the baseline mixtures (uniform, natural, temperature, UniMax, Isolated, MSL
        -- those whose inputs are available).
    tau : float
        Temperature-sampling exponent of the ``temperature`` baseline.
    msl : callable, optional
        ``(budget, weights) -> shares`` of the MSL law (:func:`msl_baseline`).
    progress : callable, optional
        Receives one line per step.
    ensemble : LawEnsemble, optional
        The default predictive (:meth:`Fit.ensemble`): the recommendation, its comparisons and
        the stacked ``r*`` distribution are then taken under the stacked laws with their
        extrapolation discrepancy; CLIMB's per-draw direct and two-step optima stay as
        references.
    n_decision_draws : int
        Draws of the stacked predictive.
    seed : int
        Seed of the stacked predictive's draws.

    Returns
    -------
    OptimizeResult

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6)-(8) and Algorithm 1 Part II.
    """
    t0 = time.perf_counter()
    log = progress or (lambda _msg: None)
    languages = tuple(languages)
    m = len(languages)
    budget = check_budget(budget)
    params = LawParams(*(np.asarray(x, dtype=float) for x in params))
    if params.beta.shape[-1] != m:
        raise ClimbError(f"the fit has {params.beta.shape[-1]} languages, got {m} names.")
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (m,) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ClimbError(f"weights must be {m} numbers >= 0 with a positive sum, got {w.tolist()}.")
    w = w / w.sum()
    if not math.isfinite(rho) or rho < 0:
        raise ClimbError(f"--rho must be a number >= 0, got {rho}.")
    if solver not in SOLVERS:
        raise ClimbError(f"--solver must be one of {', '.join(SOLVERS)}, got {solver!r}.")
    levels = tuple(float(lv) for lv in levels)
    if not levels or any(not 0.0 < lv < 1.0 for lv in levels):
        raise ClimbError(f"--levels must be numbers in (0, 1), got {list(levels)}.")
    constraints = constraints or Constraints.none(languages)
    lo, hi = constraints.bounds(budget)
    n = params.beta.shape[0]

    med = median_params(params)
    if solver == "fast":
        # The plug-in (posterior-median) problems ride along as one more row of each batch.
        both = LawParams(*(np.concatenate([a, b]) for a, b in zip(params, med, strict=True)))
        log(f"  D={budget:.3g}: direct optimum for {n} draws (batched interior-point Newton)")
        direct_all = direct_batch(both, budget, w, lo, hi).x
        log(f"  D={budget:.3g}: two-step (paper, rho={rho:g}) for {n} draws")
        two_all, p_all = two_step_batch(both, budget, w, lo, hi, rho)
        direct, plug = direct_all[:n], direct_all[n]
        two, two_med, p = two_all.x[:n], two_all.x[n], p_all[:n]
    else:

        def tick(what: str) -> Callable[[int, int], None]:
            def f(done: int, total: int) -> None:
                if done == total or done % max(1, total // 10) == 0:
                    log(f"  D={budget:.3g}: {what} trust-constr {done}/{total} draws")

            return f

        direct, _ = direct_trust_constr(params, budget, w, lo, hi, progress=tick("direct"))
        two, _ = two_step_trust_constr(params, budget, w, lo, hi, rho, progress=tick("two-step"))
        p = direction_draws(params, budget, w)
        plug = direct_trust_constr(med, budget, w, lo, hi)[0][0]
        two_med = two_step_trust_constr(med, budget, w, lo, hi, rho)[0][0]
    direct_loss = draw_losses(params, budget, direct, w)
    two_loss = draw_losses(params, budget, two, w)

    start = direct[np.argmin(np.abs(direct_loss - np.median(direct_loss)))]
    stacked = None
    predictive = "climb"
    if ensemble is not None:
        from climb_bayes.decisions import ensemble_decision as ed

        predictive = "stacked: " + ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(ensemble.weights.items(), key=lambda kv: -kv[1])
        )
        log(f"  D={budget:.3g}: {n_decision_draws} draws of the default predictive ({predictive})")
        draws = ed.decision_draws(ensemble, budget, n_decision_draws, seed=seed)
        stacked = ed.optimum_draws(draws, w, lo, hi, start=start)

        def losses_of(shares: np.ndarray) -> np.ndarray:
            return ed.draw_losses(draws, shares, w)

        log(f"  D={budget:.3g}: Bayes decision under the default predictive")
        bayes = ed.bayes_decision(draws, w, lo, hi, start=np.median(stacked, axis=0))
        risk_averse = None
        if risk is not None:
            log(f"  D={budget:.3g}: risk-averse decision (CVaR {risk:g})")
            risk_averse, _ = ed.cvar_decision(draws, w, lo, hi, risk, start=bayes)
    else:

        def losses_of(shares: np.ndarray) -> np.ndarray:
            return draw_losses(params, budget, shares, w)

        log(f"  D={budget:.3g}: Bayes decision (posterior expected weighted loss)")
        bayes, _ = bayes_decision(params, budget, w, lo, hi, start=start)
        risk_averse = None
        if risk is not None:
            log(f"  D={budget:.3g}: risk-averse decision (CVaR {risk:g})")
            risk_averse, _ = cvar_decision(params, budget, w, lo, hi, risk, start=bayes)
    bayes_losses = losses_of(bayes)
    risk_losses = None if risk_averse is None else losses_of(risk_averse)

    res = OptimizeResult(
        languages=languages,
        budget=budget,
        weights=w,
        rho=float(rho),
        levels=levels,
        lo=lo,
        hi=hi,
        direction=np.asarray(p),
        two_step=np.asarray(two),
        two_step_loss=two_loss,
        direct=np.asarray(direct),
        direct_loss=direct_loss,
        bayes=bayes,
        bayes_losses=bayes_losses,
        risk=None if risk is None else float(risk),
        risk_averse=risk_averse,
        risk_losses=risk_losses,
        solver=solver,
        stacked=stacked,
        predictive=predictive,
    )
    rec = res.recommended_losses
    diff = losses_of(uniform_mixture(m)) - rec
    res.gain_noise = float(np.std(diff[np.isfinite(diff)])) if np.isfinite(diff).any() else 0.0

    def add(name: str, shares: np.ndarray, note: str = "") -> None:
        shares = np.asarray(shares, dtype=float)
        if not constraints.check(shares, budget, tol=1e-6):
            note = (note + "; " if note else "") + "violates the constraints"
        res.comparisons.append(compare(name, shares, losses_of(shares), rec, levels, note))

    add(f"recommended ({res.recommended_name})", res.recommended)
    if risk is not None:
        add("bayes", bayes)
    if n > 1:
        add("plug-in optimum (posterior medians)", plug)
    add(f"two-step, paper (rho={rho:g}; posterior medians)", two_med)
    if baselines:
        _add_baselines(res, add, params, constraints, budget, w, tau, msl, lo, hi, log)
    res.seconds = time.perf_counter() - t0
    return res


def _add_baselines(
    res: OptimizeResult,
    add: Callable[..., None],
    params: LawParams,
    constraints: Constraints,
    budget: float,
    w: np.ndarray,
    tau: float,
    msl: Callable[[float, np.ndarray], np.ndarray] | None,
    lo: np.ndarray,
    hi: np.ndarray,
    log: Callable[[str], None],
) -> None:
    m = len(res.languages)
    add("uniform", uniform_mixture(m))
    avail = constraints.availability
    if avail is None:
        why = "needs token counts (--available FILE)"
        for name in ("natural", f"temperature(tau={tau:g})", "unimax"):
            res.skipped[name] = why
    else:
        add("natural", natural_mixture(avail.tokens))
        add(f"temperature(tau={tau:g})", temperature_mixture(avail.tokens, tau))
        try:
            add("unimax", unimax_mixture(avail.tokens, budget, avail.max_epochs))
        except ClimbError as exc:
            res.skipped["unimax"] = str(exc)
    med = median_params(params)
    iso = isolated_optimum(med.log_B[0], med.beta[0], budget, w, lo, hi)
    add("isolated-law optimum (no transfer)", iso)
    if msl is None:
        res.skipped["msl"] = "MSL baseline needs the fit's runs (climb_bayes.laws.msl)"
    else:
        try:
            add("msl-law optimum", msl(budget, w), "MSL optimum ignores share bounds")
        except Exception as exc:  # noqa: BLE001 - a baseline failing must not stop the result
            res.skipped["msl"] = f"MSL optimum failed: {exc}"
            log(f"  MSL baseline skipped: {exc}")


def optimize_budgets(
    params: LawParams,
    languages: Sequence[str],
    budgets: Sequence[float],
    *,
    progress: Callable[[str], None] | None = None,
    **kwargs: object,
) -> list[OptimizeResult]:
    """:func:`optimize_mixture` at every budget (how ``r*`` moves with scale, Figure 7)."""
    budgets = [check_budget(b, "--budgets") for b in budgets]
    log = progress or (lambda _msg: None)
    out = []
    for k, b in enumerate(budgets):
        log(f"budget {k + 1}/{len(budgets)}: {b:.4g} tokens")
        out.append(optimize_mixture(params, languages, b, progress=progress, **kwargs))
    return out


def trajectory_frame(results: Sequence[OptimizeResult]) -> pd.DataFrame:
    """Long table ``budget, language, recommended, direct median and intervals, two-step
    median and intervals`` over several budgets (the data of the paper's Figure 7)."""
    frames = []
    for res in results:
        df = res.mixture_table()
        df.insert(0, "budget", res.budget)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)

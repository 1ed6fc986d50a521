"""One convergence gate for everything read from a fit file.

A fit file holds CLIMB's posterior (NUTS draws with
:class:`~climb_bayes.inference.diagnostics.Diagnostics`, or a point fit with its L-BFGS starts) and
the other stacked laws (each with an ``info`` record: R-hat, ESS and divergences for NUTS, converged
starts for MAP, optimizer success for Laplace). :func:`fit_gate` turns all of it into one verdict
that every command reading the file prints as a single warning line (and that ``--strict`` turns
into exit code 2), so no number computed from an unconverged or failed fit is shown without a
warning.

Thresholds are :mod:`climb_bayes.inference.diagnostics`' (Vehtari et al. 2021): R-hat <= 1.01, bulk
ESS >= 400, no divergent transitions; a point fit fails when none of its starts converged, or
when its estimate lies more than :data:`~climb_bayes.inference.point_fit.FAR_FROM_PRIOR` prior
sds from the prior centre (no finite minimiser: the estimate is where L-BFGS stopped).
:func:`law_problems` applies the same thresholds to a law's ``info`` record (``evaluate`` shows them
per law in its table).

References
----------
.. [1] Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization, folding, and
   localization: An improved R-hat for assessing convergence of MCMC", Bayesian Analysis.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from climb_bayes.inference.diagnostics import ESS_MIN, RHAT_MAX

__all__ = [
    "Problem",
    "ConvergenceGate",
    "law_problems",
    "starts_problem",
    "laplace_info",
    "fit_gate",
    "MIN_STACK_WEIGHT",
]

MIN_STACK_WEIGHT = 0.01
"""Laws with a smaller stacking weight do not move predictions; the gate skips them."""


class Problem(str):
    """One failed check: its text as printed, and :attr:`kind`, which fix it needs.

    ``"sampler"`` (R-hat, ESS, divergences, tree depth, E-BFMI: more draws or a higher target
    acceptance), ``"point_fit"`` (the text names the fix), ``"optimizer"`` (a Laplace mode
    search that did not converge) or ``"approximation"`` (a Laplace approximation whose Pareto
    k says the posterior is far from Gaussian). A ``str`` so that the lists of problems print
    and compare as text.
    """

    kind: str

    def __new__(cls, text: str, kind: str) -> Problem:
        obj = super().__new__(cls, text)
        obj.kind = kind
        return obj

    def __getnewargs__(self) -> tuple[str, str]:  # pickle and copy keep the kind
        return (str(self), self.kind)

    def for_law(self, law: str) -> Problem:
        """The same problem prefixed with the law it belongs to (``"climb: ..."``)."""
        return Problem(f"{law}: {self}", self.kind)


class ConvergenceGate(NamedTuple):
    """Verdict of :func:`fit_gate`: ``problems`` is empty when every check passed; ``note``
    qualifies them for the reader (e.g. that the failed law has no stacking weight)."""

    problems: tuple[Problem, ...]
    note: str = ""

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.problems

    @property
    def kinds(self) -> set[str]:
        """The kinds of the problems (:class:`Problem`; a plain string counts as a sampler
        problem)."""
        return {getattr(p, "kind", "sampler") for p in self.problems}

    @property
    def approximation_only(self) -> bool:
        """True when the only problems are Laplace approximations with a high Pareto k (the
        fits converged; their Gaussians are far from the posterior)."""
        return self.kinds == {"approximation"}

    @property
    def verdict(self) -> str:
        """What failed, as the warning says it: ``"did not converge"`` when a sampler, mode
        search or point fit failed; ``"is a poor approximation of its posterior"`` when the
        only problems are Laplace approximations with a high Pareto k (they converged)."""
        if self.approximation_only:
            return "is a poor approximation of its posterior"
        return "did not converge"

    @property
    def fix(self) -> str:
        """The advice that fits the problems' kinds (empty when a problem already says it)."""
        if "sampler" in self.kinds:
            return "Refit with more --warmup/--samples or a higher --target-accept"
        if not any("--method nuts" in p for p in self.problems):  # not said already
            return "Refit with --method nuts"  # a failed point fit or Laplace approximation
        return ""

    def warning(self, path: object = "") -> str:
        """One line for stderr (empty when :attr:`ok`)."""
        if self.ok:
            return ""
        where = f" {path}" if str(path) else ""
        fix = self.fix
        fix = f" {fix}" if fix else ""
        note = f" ({self.note})" if self.note else ""
        return (
            f"WARNING: fit{where} {self.verdict} ({'; '.join(self.problems)}); numbers computed "
            f"from it are not trustworthy{note}.{fix} (--strict refuses)."
        )


def _without_advice(problem: str) -> str:
    """A diagnostics problem (``"what: advice"``) without its advice: cut at the first ``": "``
    outside parentheses, so ``"55 divergent transitions (language blocks: ubuntu_irc 50,
    dm_mathematics 5): raise ..."`` keeps the blocks."""
    depth = 0
    for i, ch in enumerate(problem):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and problem.startswith(": ", i):
            return problem[:i]
    return problem


def starts_problem(starts: str) -> Problem | None:
    """``"0/8 converged"`` -> a problem; ``"3/8 converged"`` (or unparsable) -> None."""
    head = str(starts).split()[0] if str(starts).strip() else ""
    num, _, den = head.partition("/")
    if num.isdigit() and den.isdigit() and int(num) == 0:
        return Problem(f"point fit: 0/{den} L-BFGS starts converged", "point_fit")
    return None


def law_problems(info: Mapping[str, Any]) -> list[Problem]:
    """Problems in a law's ``info`` record (NUTS, MAP or Laplace); empty when none.

    Parameters
    ----------
    info : mapping
        ``LawFit.info``: ``max_rhat``, ``min_ess``, ``divergences`` (NUTS; CLIMB's as a
        ``diagnostics`` JSON), ``starts`` (MAP, ``"k/n converged"``) or ``converged``
        (Laplace).

    Returns
    -------
    list of Problem
        Short problem descriptions (``"R-hat 1.83 > 1.01"``) with the kind of fix each needs.
    """
    out: list[Problem] = []
    if info.get("diagnostics"):  # every NUTS fit carries its full Diagnostics (arviz-stats)
        from climb_bayes.inference.diagnostics import Diagnostics

        diag = Diagnostics.from_json(info["diagnostics"])
        out += [Problem(_without_advice(p), "sampler") for p in diag.problems]
    else:  # fit files written before law fits stored their Diagnostics
        rhat = info.get("max_rhat")
        if rhat is not None and (not math.isfinite(float(rhat)) or float(rhat) > RHAT_MAX):
            out.append(Problem(f"R-hat {float(rhat):.3f} > {RHAT_MAX}", "sampler"))
        ess = info.get("min_ess")
        if ess is not None and (not math.isfinite(float(ess)) or float(ess) < ESS_MIN):
            out.append(Problem(f"ESS {math.floor(float(ess))} < {ESS_MIN}", "sampler"))
        div = info.get("divergences")
        if div:
            out.append(Problem(f"{int(div)} divergences", "sampler"))
    if "starts" in info and (p := starts_problem(info["starts"])) is not None:
        out.append(p)
    if info.get("far_from_prior"):  # MAP: the Huber loss had no finite minimiser
        text = (
            f"point fit: {info['far_from_prior']}: the loss keeps falling along a ray, so the "
            "estimate is where L-BFGS stopped; refit with --method nuts"
        )
        out.append(Problem(text, "point_fit"))
    if info.get("converged") is False:
        out.append(Problem("optimizer did not converge", "optimizer"))
    k, k_max = info.get("pareto_k"), info.get("pareto_k_max")
    if k is not None and k_max is not None and float(k) > float(k_max):  # nan: not computed
        text = (
            f"Laplace approximation: Pareto k {float(k):.2f} > {float(k_max):.2f} (the posterior "
            "is far from the Gaussian at its mode)"
        )
        out.append(Problem(text, "approximation"))
    return out


def laplace_info(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A Laplace fit file's record of its mode search and Pareto k (``fit --method laplace``),
    in the keys of a law's ``info`` that :func:`law_problems` checks."""
    out: dict[str, Any] = {"converged": bool(int(attrs.get("laplace_converged", 1)))}
    if "laplace_pareto_k" in attrs:
        out["pareto_k"] = float(attrs["laplace_pareto_k"])
        out["pareto_k_max"] = float(attrs["laplace_pareto_k_max"])
    return out


def fit_gate(fit: Any) -> ConvergenceGate:
    """Check CLIMB's posterior and every stacked law of a
    :class:`~climb_bayes.inference.fitresult.Fit`.

    Parameters
    ----------
    fit : Fit
        A loaded fit file.

    Returns
    -------
    ConvergenceGate
        Problems prefixed with the law they belong to (``"climb: R-hat 1.014 > 1.01 (...)"``).
    """
    problems: list[Problem] = []
    diag = fit.diagnostics
    climb_info = {
        "diagnostics": diag.to_json() if diag is not None else "",
        "starts": fit.attrs.get("point_starts", ""),
        "far_from_prior": fit.attrs.get("point_far_from_prior", ""),
    }
    if fit.method == "laplace":  # its mode search and Pareto k, as every law's Laplace fit
        climb_info |= laplace_info(fit.attrs)
    problems += [p.for_law("climb") for p in law_problems(climb_info)]
    weights = json.loads(fit.attrs.get("stacking_weights", "{}") or "{}")
    note = ""
    if problems and len(weights) > 1 and float(weights.get("climb", 0.0)) < MIN_STACK_WEIGHT:
        # still checked (its parameter tables, --law climb), but the default predictive does
        # not rest on it
        note = (
            f"climb's stacking weight is {float(weights.get('climb', 0.0)):.2f}: the default "
            "predictive does not use it; its parameter tables and --law climb do"
        )
    if "laws" in fit.tree.children:
        for name, node in fit.tree["laws"].children.items():
            if weights and float(weights.get(name, 0.0)) < MIN_STACK_WEIGHT:
                continue
            info = json.loads(node.attrs.get("info", "{}") or "{}")
            problems += [p.for_law(name) for p in law_problems(info)]
    return ConvergenceGate(tuple(problems), note)

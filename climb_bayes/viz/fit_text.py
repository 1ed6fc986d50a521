"""Plain-text summaries of a fit that ``climb-bayes fit``/``summary`` print and the report shows.

A Laplace fit's one line (its modes, mode search and Pareto k) and the default predictive's
lines (stacking weights and how they were found, the inner leave-future-out check, the
extrapolation discrepancy).
"""

from __future__ import annotations

import json
import textwrap

import numpy as np

from climb_bayes.data.tail_slopes import FINAL_POINT_TAIL, misleading_tails
from climb_bayes.model.mixture_discrepancy import mixture_scale, share_range

__all__ = [
    "laplace_summary",
    "no_lfo_reason",
    "tail_slope_hint",
    "ensemble_lines",
    "mixture_lines",
    "TEXT_WIDTH",
    "DISCREPANCY_SOURCE_WORDS",
]

DISCREPANCY_SOURCE_WORDS = {
    "lfo": "learned from leave-future-out residuals",
    "prior": "from its prior",
}
"""Where a law's extrapolation discrepancy came from (``Discrepancy.source``), in words."""

TEXT_WIDTH = 100
"""Characters per line of the wrapped text (the width of the command line's tables)."""


def laplace_summary(attrs) -> str:
    """One line on a Laplace fit: its modes, its mode search and its Pareto k."""
    ok = bool(int(attrs.get("laplace_converged", 1)))
    line = f"Laplace approximation: {attrs.get('laplace_modes', '')}; mode search " + (
        "converged" if ok else "did NOT converge"
    )
    if "laplace_pareto_k" in attrs:
        k, k_max = float(attrs["laplace_pareto_k"]), float(attrs["laplace_pareto_k_max"])
        verdict = (
            "the posterior is far from the Gaussian at its mode: its intervals are not "
            "reliable; --method nuts"
            if k > k_max  # as the gate (convergence.law_problems): nan is not computed
            else "the Gaussian matches the posterior where it draws"
        )
        line += f"; Pareto k {k:.2f} (want <= {k_max:.2f}: {verdict})"
    return line


def no_lfo_reason(result) -> str:
    """Why a fit's laws were stacked without leave-future-out folds."""
    from climb_bayes.inference.lfo import MIN_FIT_LEVELS, budget_levels

    n = budget_levels(result.runs.run_budgets).size
    if n > MIN_FIT_LEVELS:
        return "leave-future-out folds off (--lfo none): extrapolation is not checked"
    reason = (
        f"{n} budget(s); a leave-future-out check needs {MIN_FIT_LEVELS + 1}: extrapolation is "
        "not checked, so plan a third budget to check it on your own runs"
    )
    return reason + tail_slope_hint(result.runs, n)


def tail_slope_hint(runs, n_levels: int) -> str:
    """A hint for a fit whose runs' tails mislead its slope in ``D``
    (:func:`climb_bayes.data.tail_slopes.misleading_tails`): two budget levels, several tail
    points per run, and tails that fall unlike the runs across budgets. ``fit`` reads final
    points only there unless ``--tail-start`` is given, so the hint reaches a user who asked for
    the tails.

    Parameters
    ----------
    runs : RunsData
        The fitted runs.
    n_levels : int
        Their number of budget levels.

    Returns
    -------
    str
        ``""``, or a clause that continues :func:`no_lfo_reason`'s text.
    """
    from climb_bayes.inference.lfo import MIN_FIT_LEVELS

    slopes = misleading_tails(runs) if n_levels == MIN_FIT_LEVELS else None
    if slopes is None:
        return ""
    return (
        f"; the runs' tails fall at {slopes.median_ratio:.2f}x the slope across budgets (the "
        "learning-rate schedule, not the law): on our own two-budget runs, final points only "
        f"(--tail-start {FINAL_POINT_TAIL}, the default here) extrapolated 1.3-3x better "
        "(docs/model.md)"
    )


def ensemble_lines(result, width: int = TEXT_WIDTH) -> list[str]:
    """The default predictive: stacking weights, the inner LFO check and the discrepancy."""
    weights_text = result.attrs.get("stacking_weights")
    if not weights_text:
        return []
    weights = json.loads(weights_text)
    method = result.attrs.get("weight_method", "")
    how = {
        "lfo-bootstrap-stacking": "stacked by their leave-future-out log score (Bayesian "
        "bootstrap over the folds' language blocks)",
        "lfo-stacking": "stacked by their leave-future-out log score",
        "loo-stacking": "stacked by PSIS-LOO (" + no_lfo_reason(result) + ")",
        "single": "one law",
    }.get(method, method)
    order = sorted(weights, key=lambda k: -weights[k])
    lines = [
        "",
        *textwrap.wrap(
            f"default predictive (predict, optimize, suggest, report): {len(weights)} law(s) "
            + how,
            width,
            subsequent_indent="  ",
        ),
        "  weights: " + ", ".join(f"{k} {weights[k]:.2f}" for k in order),
    ]
    lfo = json.loads(result.attrs.get("lfo_summary", "{}"))
    stacked = [k for k in order if weights[k] > 0]
    pairs = [
        f"{a}~{b} {lfo[a]['error_correlation'][b]:.2f}"
        for i, a in enumerate(stacked)
        for b in stacked[i + 1 :]
        if b in (lfo.get(a) or {}).get("error_correlation", {})
    ]
    if pairs:
        lines += textwrap.wrap(
            "intervals join the stacked laws' quantiles by the correlation of their "
            "leave-future-out errors (1 would average the quantiles): " + ", ".join(pairs),
            width,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    rows = [
        (k, lfo[k]) for k in order if isinstance(lfo.get(k), dict) and "with_discrepancy" in lfo[k]
    ]
    if rows:
        folds = rows[0][1].get("folds", 0)
        cuts = rows[0][1].get("cuts")  # fits stored before 2026-12-05 lack them
        at = "" if not cuts else " cut at " + ", ".join(f"{c:.3g}" for c in cuts) + " tokens"
        lines += textwrap.wrap(
            f"leave-future-out check ({folds} fold(s){at}: refit on the smaller budgets, predict "
            "the larger; coverage of 50%/90% intervals without -> with discrepancy, the latter "
            "in-sample for the discrepancy; `evaluate --lfo`, and `evaluate --holdout EXPR "
            "--shipped` on held-out runs, score them out of sample):",
            width,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
        name_w = max(len(k) for k, _ in rows)
        for k, r in rows:
            a, b = r["without_discrepancy"], r["with_discrepancy"]
            lines.append(
                f"    {k:<{name_w}} n={r['n']:<5} MRE {b['mre']:>5.1%}  cov50 {a['cov50']:.2f} -> "
                f"{b['cov50']:.2f}  cov90 {a['cov90']:.2f} -> {b['cov90']:.2f}"
            )
    rough = [
        f"{k} (Pareto k up to {lfo[k]['fold_pareto_k']:.2f})"
        for k in order
        if isinstance(lfo.get(k), dict)
        and lfo[k].get("fold_pareto_k", 0.0) > lfo[k].get("fold_pareto_k_max", np.inf)
    ]
    if rough:
        lines += textwrap.wrap(
            "the folds' Laplace refits are far from their posteriors for "
            + ", ".join(rough)
            + ": the discrepancies and weights above rest on them; `--lfo nuts` refits the "
            "folds by NUTS (minutes)",
            width,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    disc = result.discrepancy("climb")
    if disc is not None:
        # the sd at 10x each language's largest fitted budget: a number in log-loss units
        sd10 = np.median(disc.tau, axis=0) * disc.distance_at(10.0 * disc.hi)
        src = DISCREPANCY_SOURCE_WORDS.get(disc.source, disc.source)
        lines += textwrap.wrap(
            f"CLIMB extrapolation discrepancy ({src}): sd of log-loss at 10x the largest fitted "
            "budget "
            + ", ".join(f"{lang} {t:.3f}" for lang, t in zip(result.languages, sd10, strict=True)),
            width,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    props = np.asarray(result.tree["constant_data"]["run_proportions"].values)
    return lines + mixture_lines(result.languages, props, stacked, width)


def mixture_lines(
    languages: tuple[str, ...],
    run_proportions: np.ndarray,
    laws: list[str],
    width: int = TEXT_WIDTH,
) -> list[str]:
    """The mixture discrepancy of ``laws``, where the fitted runs' mixtures (``(R, m)``) leave
    some language's share range short of [0, 1] (Algorithm-1 designs never do: then ``[]``)."""
    lo, hi = share_range(run_proportions)
    short = [
        f"{lang} {a:.2f}-{b:.2f}"
        for lang, a, b in zip(languages, lo, hi, strict=True)
        if a > 0 or b < 1
    ]
    if not short or not laws:
        return []
    shown = ", ".join(short[:4]) + (f" and {len(short) - 4} more" if len(short) > 4 else "")
    kappas = ", ".join(f"{k} {mixture_scale(k).kappa:.3f}" for k in laws)
    return textwrap.wrap(
        f"mixture discrepancy: the fitted runs give {shown} as share ranges; a mixture beyond "
        "them gets an error of sd kappa x (log share ratio beyond the ranges, summed over "
        f"languages) on log-loss, kappa {kappas} (calibrated on published runs, "
        "docs/model.md)",
        width,
        initial_indent="  ",
        subsequent_indent="    ",
    )

"""``climb-bayes suggest``: rank candidate next runs by the information they are expected to give
about the optimal mixture (or the loss) at a target budget."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import numpy as np

from climb_bayes.cli._decide import (
    TABLE_WIDTH,
    echo_err,
    fit_header,
    fmt_tokens,
    load_fit_checked,
    parse_budget,
    parse_budgets,
    predictive_line,
    render_table,
    strict_option,
    write_frame,
)
from climb_bayes.errors import ClimbError

__all__ = ["suggest"]


LOWER_BOUND_NOTE = (
    "note: a reduction is a lower bound: it counts what a linear read of the run's outcome "
    'tells about the target (docs/decisions.md, "suggest").'
)
"""Printed under the ranking."""

SMALL_REDUCTION_PCT = 5.0
"""Below this best reduction (percent), :data:`SMALL_REDUCTION_NOTE` is printed."""

SMALL_REDUCTION_NOTE = (
    "note: no candidate narrows the target by 5% or more. Under the default predictive most of "
    "the spread of r* far beyond the fitted budgets is how differently the laws may be off for "
    "different mixtures, which one run measures at one mixture only; several runs at a larger "
    "budget, or `--target loss` (the loss of the recommended mixture), are what one run can "
    "inform."
)
"""Printed when no candidate reaches :data:`SMALL_REDUCTION_PCT`."""


def _echo_wrapped(text: str, indent: str = "  ") -> None:
    click.echo(textwrap.fill(text, TABLE_WIDTH, subsequent_indent=indent))


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@click.argument("fit_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--budget", required=True, help="Target budget in tokens (1e12, 1T).")
@click.option(
    "--target",
    type=click.Choice(["rstar", "loss"]),
    default="rstar",
    show_default=True,
    help="Reduce the posterior spread of the optimal mixture r*, or of the weighted loss of "
    "the recommended mixture, at the target budget.",
)
@click.option(
    "--weights",
    default=None,
    help="Importance weights: en=2,de=1 (others 1) or one value per language in fit order.",
)
@click.option(
    "--candidates",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Plan CSV of candidate runs (run_id,tokens,r_<lang>...) [default: generated].",
)
@click.option(
    "--candidate-budgets",
    default=None,
    help="Budgets of the generated candidates [default: the largest fitted budget and 4x it].",
)
@click.option(
    "--n-random",
    type=int,
    default=6,
    show_default=True,
    help="Random (Dirichlet) candidate mixtures.",
)
@click.option(
    "--outcomes",
    type=int,
    default=None,
    hidden=True,
    help="Ignored since 2026-12-02 (every draw simulates one outcome); kept so old command "
    "lines run.",
)
@click.option(
    "--max-draws",
    type=int,
    default=1000,
    show_default=True,
    help="Joint draws of the predictive (law, posterior draw, discrepancy) to simulate.",
)
@click.option(
    "--law",
    "law_name",
    default=None,
    help="Rank under one law of the fit (e.g. climb) instead of the default stacked "
    "predictive (all laws by their stacking weights, with their extrapolation discrepancy).",
)
@click.option("--top", type=int, default=10, show_default=True, help="Print the best N candidates.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the candidates and simulations."
)
@click.option(
    "-o",
    "--out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the full ranking (.csv or .json).",
)
@strict_option
def suggest(
    fit_file: Path,
    strict: bool,
    budget: str,
    target: str,
    weights: str | None,
    candidates: Path | None,
    candidate_budgets: str | None,
    n_random: int,
    outcomes: int | None,
    max_draws: int,
    law_name: str | None,
    top: int,
    seed: int,
    out: Path | None,
) -> None:
    """Rank candidate next runs (mixture, budget) by the expected reduction of the spread of
    r* (or of the weighted loss) at the target budget under the default predictive.

    Preposterior analysis: every joint draw of the predictive (a law by its stacking weight, a
    posterior draw of it, a realisation of its extrapolation discrepancy) gives the target at
    the target budget and a simulated outcome of each candidate run (its tail's loss plus
    noise); the spread left after the run is what a regression of the target on the outcome
    cannot explain. A run beyond the fitted budgets is credited with what it shows about how far
    the laws extrapolate. One line of reasoning per candidate.

    Example: climb-bayes suggest fit.nc --budget 1e12
    """
    from climb_bayes.decisions import ensemble_decision as ed
    from climb_bayes.decisions.mixtures import parse_weights
    from climb_bayes.decisions.optimization import thin_index
    from climb_bayes.decisions.solvers import direct_batch
    from climb_bayes.decisions.suggest import default_candidates, rank_candidates, read_candidates
    from climb_bayes.model.law import LawParams

    target_budget = parse_budget(budget)
    fit = load_fit_checked(fit_file, strict)
    langs = fit.languages
    if fit.method == "map" or fit.n_draws < 20:
        raise ClimbError(
            f"{fit_file}: suggest needs posterior draws (a NUTS or Laplace fit); this is a "
            f"{'point fit' if fit.method == 'map' else f'fit with {fit.n_draws} draws'}. "
            f"Refit with `climb-bayes fit --method nuts`."
        )
    if outcomes is not None:
        echo_err("note: --outcomes is ignored (every draw simulates one outcome of each run).")
    if max_draws < 1:
        raise ClimbError(f"--max-draws must be >= 1, got {max_draws}.")
    w = parse_weights(weights, langs)
    ens = fit.ensemble()
    if law_name is not None:
        ens = ens.only(law_name.strip().lower())
    m = len(langs)
    lo, hi = np.zeros(m), np.ones(m)
    idx = thin_index(fit.n_draws, max_draws)
    climb = LawParams(*(np.asarray(x)[idx] for x in fit.law_draws()))
    start = np.median(direct_batch(climb, target_budget, w, lo, hi).x, axis=0)
    echo_err(
        f"optimal mixture per joint draw at {fmt_tokens(target_budget)} ({max_draws} draws of "
        "the predictive)..."
    )
    draws = ed.decision_draws(ens, target_budget, max_draws, seed=seed)
    rstar = ed.optimum_draws(draws, w, lo, hi, start=start)
    rec = ed.bayes_decision(draws, w, lo, hi, start=np.median(rstar, axis=0))
    values = rstar if target == "rstar" else ed.draw_losses(draws, rec, w)
    if candidates is not None:
        cands = read_candidates(str(candidates), langs)
    else:
        fitted_max = float(np.max(fit.runs.run_budgets))
        cb = (
            parse_budgets(candidate_budgets, "--candidate-budgets")
            if candidate_budgets
            else [fitted_max, 4.0 * fitted_max]
        )
        cands = default_candidates(langs, cb, recommended=rec, n_random=n_random, seed=seed)

    def tick(done: int, total: int) -> None:
        if done == total or done % max(1, total // 5) == 0:
            echo_err(f"  preposterior analysis: {done}/{total} candidates")

    table = rank_candidates(
        ens, draws, langs, cands, values, target=target, seed=seed, progress=tick
    )
    click.echo(fit_header(fit, fit_file))
    click.echo(predictive_line(ens))
    what = (
        "spread of r* (sd summed over languages)"
        if target == "rstar"
        else ("sd of the weighted loss of the recommended mixture (nats/token)")
    )
    _echo_wrapped(
        f"target: {what} at {fmt_tokens(target_budget)} tokens; now "
        f"{table['spread_now'].iloc[0]:.4f}; {len(cands)} candidates, {max_draws} joint draws "
        "(after: expected spread after the run; signal: the language whose loss the draws "
        "disagree on most, in units of its noise)"
    )
    rows = [
        [
            str(r.rank),
            r.candidate,
            fmt_tokens(r.budget),
            r.shares,
            f"{r.spread_after:.4f}",
            f"{r.reduction_pct:.0f}%",
            f"{r.most_informative} {r.snr_max:.1f}x",
        ]
        for r in table.head(top).itertuples(index=False)
    ]
    click.echo(
        render_table(
            rows,
            ["rank", "candidate", "budget", "mixture", "after", "reduced", "signal"],
        )
    )
    click.echo("\nwhy:")
    for r in table.head(top).itertuples(index=False):
        _echo_wrapped(
            f"  {r.rank}. {r.candidate} @ {fmt_tokens(r.budget)}: {r.reason}", indent="     "
        )
    _echo_wrapped(LOWER_BOUND_NOTE)
    if target == "rstar" and table["reduction_pct"].max() < SMALL_REDUCTION_PCT:
        _echo_wrapped(SMALL_REDUCTION_NOTE)
    if out is not None:
        write_frame(table, out)
        echo_err(f"wrote {out}")

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
    render_table,
    strict_option,
    write_frame,
)
from climb_bayes.errors import ClimbError

__all__ = ["suggest"]


SCOPE_NOTE = (
    "note: the spreads are those of CLIMB's posterior alone: the other laws of the default "
    "predictive and the extrapolation discrepancy (which `optimize` includes in r* (default)) "
    "are not reweighted, so a run's value for learning how far the law extrapolates is not "
    "counted."
)
"""What the ranking leaves out (printed under it; docs/decisions.md, "suggest")."""


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
    "--outcomes", type=int, default=64, show_default=True, help="Simulated outcomes per candidate."
)
@click.option(
    "--max-draws",
    type=int,
    default=1000,
    show_default=True,
    help="Use at most this many posterior draws.",
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
    outcomes: int,
    max_draws: int,
    top: int,
    seed: int,
    out: Path | None,
) -> None:
    """Rank candidate next runs (mixture, budget) by the expected reduction of the posterior
    spread of r* (or of the weighted loss) at the target budget.

    Preposterior analysis: for each candidate, outcomes are simulated from the posterior
    predictive, the posterior draws are reweighted by each outcome's likelihood, and the spread
    of the target under the reweighted draws is averaged. One line of reasoning per candidate.

    Example: climb-bayes suggest fit.nc --budget 1e12
    """
    from climb_bayes.decisions.decision import bayes_decision, draw_losses
    from climb_bayes.decisions.mixtures import parse_weights
    from climb_bayes.decisions.optimization import thin_index
    from climb_bayes.decisions.prediction import noise_model
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
    if outcomes < 2:
        raise ClimbError(f"--outcomes must be >= 2, got {outcomes}.")
    w = parse_weights(weights, langs)
    idx = thin_index(fit.n_draws, max_draws)
    law = LawParams(*(np.asarray(x)[idx] for x in fit.law_draws()))
    nm0 = noise_model(fit)
    nm = nm0.take(idx)
    m = len(langs)
    lo, hi = np.zeros(m), np.ones(m)
    echo_err(f"optimal mixture per draw at {fmt_tokens(target_budget)} ({len(idx)} draws)...")
    rstar = direct_batch(law, target_budget, w, lo, hi).x
    rec, _ = bayes_decision(law, target_budget, w, lo, hi, start=np.median(rstar, axis=0))
    if target == "rstar":
        values = rstar
    else:
        values = draw_losses(law, target_budget, rec, w)
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
        law, nm, langs, cands, values, target=target, n_outcomes=outcomes, seed=seed, progress=tick
    )
    click.echo(fit_header(fit, fit_file))
    what = (
        "spread of r* (sd summed over languages)"
        if target == "rstar"
        else ("sd of the weighted loss of the recommended mixture (nats/token)")
    )
    click.echo(
        f"target: {what} at {fmt_tokens(target_budget)} tokens; now "
        f"{table['spread_now'].iloc[0]:.4f}; {len(cands)} candidates, {outcomes} simulated "
        f"outcomes each, {len(idx)} draws"
    )
    rows = [
        [
            str(r.rank),
            r.candidate,
            fmt_tokens(r.budget),
            r.shares,
            f"{r.spread_after:.4f}",
            f"{r.reduction_pct:.0f}%",
            f"{r.ess_median:.0f}",
        ]
        for r in table.head(top).itertuples(index=False)
    ]
    click.echo(
        render_table(
            rows, ["rank", "candidate", "budget", "mixture", "spread after", "reduction", "ESS"]
        )
    )
    click.echo("\nwhy:")
    for r in table.head(top).itertuples(index=False):
        click.echo(f"  {r.rank}. {r.candidate} @ {fmt_tokens(r.budget)}: {r.reason}")
    click.echo(textwrap.fill(SCOPE_NOTE, TABLE_WIDTH, subsequent_indent="  "))
    if out is not None:
        write_frame(table, out)
        echo_err(f"wrote {out}")

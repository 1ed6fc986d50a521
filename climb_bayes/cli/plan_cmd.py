"""``climb-bayes plan``: the paper's Algorithm-1 run list as a plan CSV for training."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from climb_bayes.cli._decide import echo_err, fmt_tokens, parse_budget, parse_budgets, write_frame
from climb_bayes.errors import ClimbError

__all__ = ["plan"]


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@click.option(
    "--languages", required=True, help="Comma-separated languages (or domains), e.g. en,de,zh."
)
@click.option(
    "--budgets",
    "budgets_text",
    default="5e9,2.5e10",
    show_default=True,
    help="Comma-separated token budgets; every Algorithm-1 run is trained at each.",
)
@click.option(
    "--shares",
    default=None,
    help="The two focal shares c (e.g. 0.2,0.5); by default two are drawn per language.",
)
@click.option(
    "--share-pool",
    type=click.Choice(["paper", "central"]),
    default="paper",
    show_default=True,
    help="Where the two c per language are drawn from: the paper's 15-value grid, one from each "
    "half (<= 0.5 and > 0.5), or the central values 0.1-0.75 of earlier versions.",
)
@click.option(
    "--no-spread",
    is_flag=True,
    help="Hold-out mixtures as raw Dirichlet draws (earlier versions) instead of keeping them "
    "at least 0.1 apart in total variation.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the share draw and the hold-out runs.",
)
@click.option(
    "--holdout",
    type=int,
    default=0,
    show_default=True,
    help="Add N random mixtures at a larger budget (validation).",
)
@click.option(
    "--holdout-budget",
    default=None,
    help="Budget of the hold-out runs [default: 4x the largest budget].",
)
@click.option(
    "-o",
    "--out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Plan CSV to write [default: print to stdout].",
)
def plan(
    languages: str,
    budgets_text: str,
    shares: str | None,
    share_pool: str,
    no_spread: bool,
    seed: int,
    holdout: int,
    holdout_budget: str | None,
    out: Path | None,
) -> None:
    """Write the Algorithm-1 run list: per language a monolingual run and two mixtures with the
    language at share c (others equal), each at every budget (3 x languages x budgets runs).

    The plan CSV (run_id, tokens, r_<lang>...) is what `climb-bayes train --plan` reads.

    Example: climb-bayes plan --languages en,de,ru,zh,ja --budgets 5e9,2.5e10 --holdout 6
    """
    import pandas as pd

    from climb_bayes.data.design import PAPER_RELIABLE_TOKENS, algorithm1_design, holdout_design
    from climb_bayes.decisions.mixtures import parse_number
    from climb_bayes.inference.lfo import MIN_FIT_LEVELS, budget_levels

    langs = [x.strip() for x in languages.split(",") if x.strip()]
    budgets = [float(round(b)) for b in parse_budgets(budgets_text)]  # whole tokens
    share_list = None
    if shares is not None:
        share_list = [parse_number(x, "--shares") for x in shares.split(",") if x.strip()]
    if holdout < 0:
        raise ClimbError(f"--holdout must be >= 0, got {holdout}.")
    df = algorithm1_design(langs, budgets, shares=share_list, seed=seed, pool=share_pool)
    if min(budgets) < PAPER_RELIABLE_TOKENS:
        echo_err(
            f"warning: budgets below {fmt_tokens(PAPER_RELIABLE_TOKENS)} tokens "
            f"({', '.join(fmt_tokens(b) for b in budgets if b < PAPER_RELIABLE_TOKENS)}): the "
            "CLIMB paper reports limited accuracy when the law is fitted below 25B tokens "
            "(check extrapolation with `evaluate --lfo` on the trained runs)."
        )
    n_main = len(df)
    if holdout:
        hb = float(
            round(parse_budget(holdout_budget, "--holdout-budget"))
            if holdout_budget is not None
            else 4.0 * max(budgets)
        )
        df = pd.concat(
            [df, holdout_design(langs, hb, holdout, seed=seed + 1, spread=not no_spread)],
            ignore_index=True,
        )
    levels = budget_levels(df["tokens"].to_numpy(dtype=float)).size
    if levels <= MIN_FIT_LEVELS:
        echo_err(
            f"note: {levels} budget level(s): `fit` and `evaluate --lfo` cannot check the law's "
            f"extrapolation on these runs (a leave-future-out check fits {MIN_FIT_LEVELS} budget "
            "levels and predicts a larger one); add a budget to --budgets, or hold-out runs at "
            "a larger budget (--holdout N)."
        )
    total = float(df["tokens"].sum())
    summary = (
        f"{n_main} Algorithm-1 runs ({len(langs)} languages x 3 mixtures x {len(budgets)} "
        f"budget(s))"
        + (
            f" + {holdout} hold-out runs at {fmt_tokens(df['tokens'].iloc[-1])} (after training, "
            "`climb-bayes evaluate RUNS --holdout 'run_id~holdout' --shipped` scores on them the "
            "intervals `fit` gives from the other runs)"
            if holdout
            else ""
        )
        + f"; {fmt_tokens(total)} training tokens in total"
    )
    if out is None:
        sys.stdout.write(df.to_csv(index=False))
        echo_err(summary)
    else:
        write_frame(df, out)
        click.echo(f"wrote {out}: {summary}")

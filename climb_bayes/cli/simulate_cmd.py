"""``climb-bayes simulate``: a synthetic runs table on the Algorithm-1 design."""

from __future__ import annotations

from pathlib import Path

import click

from climb_bayes.atomic import atomic_path, atomic_write_text

__all__ = ["simulate"]


@click.command()
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Output runs table (.csv or .parquet, long form with curves).",
)
@click.option("--languages", default="en,de,ru,zh,ja", show_default=True)
@click.option(
    "--budgets",
    default="5e9,2.5e10",
    show_default=True,
    help="Comma-separated token budgets of the Algorithm-1 design.",
)
@click.option("--shares", default=None, help="Two focal shares c, e.g. 0.2,0.6 (default: drawn).")
@click.option(
    "--holdout",
    type=int,
    default=0,
    show_default=True,
    help="Also simulate N random mixtures at --holdout-budget.",
)
@click.option(
    "--holdout-budget",
    type=float,
    default=None,
    help="Budget of the holdout runs (default 10x the largest budget).",
)
@click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON with true parameters (languages, B, beta, E, b, k, eta, sigma).",
)
@click.option("--from-prior", is_flag=True, help="Draw the true parameters from the priors.")
@click.option(
    "--sigma",
    type=float,
    default=0.01,
    show_default=True,
    help="Noise sd on log-loss (overrides the parameters' sigma).",
)
@click.option(
    "--curve",
    default="0.25,0.5,0.75,0.85,0.9,0.95,1.0",
    show_default=True,
    help="Evaluation points as fractions of each budget.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--params-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the true parameters used as JSON here.",
)
def simulate(
    out,
    languages,
    budgets,
    shares,
    holdout,
    holdout_budget,
    params_file,
    from_prior,
    sigma,
    curve,
    seed,
    params_out,
):
    """Simulate loss curves from known CLIMB parameters plus noise."""
    import dataclasses

    import jax
    import numpy as np
    import pandas as pd

    from climb_bayes.data.design import algorithm1_design, holdout_design
    from climb_bayes.errors import ClimbError
    from climb_bayes.model.climb_model import reference_budget
    from climb_bayes.model.simulate import TrueParams, example_params, prior_params, simulate_runs

    def floats(text: str, name: str) -> list[float]:
        try:
            return [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ClimbError(f"{name}: expected comma-separated numbers, got {text!r}.") from None

    if not (np.isfinite(sigma) and sigma >= 0):
        raise ClimbError(f"--sigma is a noise sd on log-loss and must be >= 0, got {sigma:g}.")
    langs = [s.strip() for s in languages.split(",") if s.strip()]
    budget_list = floats(budgets, "--budgets")
    if params_file is not None:
        params = TrueParams.read(params_file)
        langs = list(params.languages)
    elif from_prior:
        params = prior_params(jax.random.PRNGKey(seed), langs, reference_budget(budget_list))
    else:
        params = example_params(langs, seed=seed)
    params = dataclasses.replace(params, sigma=np.full(len(langs), sigma))
    design = algorithm1_design(
        langs, budget_list, shares=floats(shares, "--shares") if shares else None, seed=seed
    )
    if holdout:
        hb = holdout_budget or 10 * max(budget_list)
        design = pd.concat([design, holdout_design(langs, hb, holdout, seed=seed + 1)])
    frame = simulate_runs(params, design, seed=seed, curve_fractions=floats(curve, "--curve"))
    out = Path(out)
    if out.suffix.lower() in {".parquet", ".pq"}:
        with atomic_path(out) as tmp:
            frame.to_parquet(tmp, index=False)
    elif out.suffix.lower() == ".csv":
        atomic_write_text(out, frame.to_csv(index=False, float_format="%.10g"))
    else:
        raise ClimbError(f"{out}: output must end in .csv or .parquet.")
    if params_out is not None:
        atomic_write_text(Path(params_out), params.to_json())
    click.echo(
        f"wrote {out}: {design.shape[0]} runs x {len(frame) // design.shape[0]} rows "
        f"(languages {', '.join(langs)}; seed {seed}; synthetic)"
    )

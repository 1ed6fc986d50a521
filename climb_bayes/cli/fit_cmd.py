"""``climb-bayes fit`` and ``climb-bayes summary``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from climb_bayes.cli._decide import (
    load_fit_checked,
    render_matrix,
    render_table,
    strict_option,
)
from climb_bayes.cli._runs_table import (
    exclude_option,
    exclude_runs,
    families_option,
    lfo_cuts_option,
    read_fit_runs,
    runs_table_options,
)
from climb_bayes.data.datasets import DATASETS
from climb_bayes.data.tail_slopes import FINAL_POINT_TAIL
from climb_bayes.viz.fit_text import ensemble_lines, laplace_summary

__all__ = ["fit", "summary"]


def _echo(msg: str) -> None:
    click.echo(msg, err=True)


@click.command()
@click.argument("runs_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default="fit.nc",
    show_default=True,
    help="Output NetCDF file (ArviZ DataTree).",
)
@click.option(
    "--method",
    type=click.Choice(["nuts", "laplace", "map"]),
    default="nuts",
    show_default=True,
    help="Full posterior (NUTS); the same posterior by Laplace approximation at its modes "
    "(seconds instead of a minute; no sampler to check a non-Gaussian posterior); or the "
    "paper's multi-start Huber point fit (no parameter uncertainty). Every law of the stack "
    "is fitted the same way.",
)
@click.option(
    "--samples",
    type=int,
    default=4000,
    show_default=True,
    help="Total posterior draws over all chains (4 x 1000: with 2000 the default data's "
    "max R-hat exceeded 1.01 on 1 of 4 seeds, and on 2 of 4 with the former 1000 warm-up "
    "and 0.95; docs/model.md).",
)
@click.option("--chains", type=int, default=4, show_default=True)
@click.option("--warmup", type=int, default=500, show_default=True)
@click.option(
    "--target-accept",
    type=float,
    default=None,
    help="NUTS's target acceptance of every law [default: each law's own: CLIMB and DML 0.98 "
    "(0.95 left one divergence per 2000-4000 draws of CLIMB on the default data; "
    "docs/model.md), Isolated and MSL 0.9 (no funnel: half the leapfrog steps; docs/laws.md)].",
)
@click.option("--max-tree-depth", type=int, default=10, show_default=True)
@click.option(
    "--init",
    "init",
    type=click.Choice(["laplace", "prior-centre", "median", "prior", "map"]),
    default="laplace",
    show_default=True,
    help=(
        "Initialisation of the chains (laplace: each from a Laplace draw at the mode "
        "L-BFGS reaches from its prior-centre start)."
    ),
)
@click.option(
    "--blocks",
    type=click.Choice(["auto", "joint", "language"]),
    default="auto",
    show_default=True,
    help="NUTS on the joint posterior, or one target language at a time (exact: the "
    "posterior factorises without hierarchical transfer). auto: per language from 8 "
    "languages up.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--priors",
    "priors_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file overriding prior settings (see `climb-bayes priors`).",
)
@click.option(
    "--likelihood",
    type=click.Choice(["student_t", "normal"]),
    default=None,
    help="Likelihood on log-loss (default from priors: student_t).",
)
@click.option(
    "--hierarchical-transfer/--no-hierarchical-transfer",
    default=None,
    help="Partial pooling of the transfer matrix b.",
)
@runs_table_options("Comma-separated subset of languages to fit.")
@exclude_option(
    "Leave out the runs this expression selects (fields tokens, run_id, r_<group>; "
    "and/or/not; docs/evaluate.md), e.g. 'tokens>1.6e10' to fit the early checkpoints only, "
    "or 'run_id~holdout'. Recorded in the fit's data label."
)
@click.option(
    "--dataset",
    type=click.Choice(list(DATASETS)),
    default=None,
    help="Shipped dataset to fit when RUNS_FILE is omitted (tiny-2024: the previous default).",
)
@click.option(
    "--laws",
    "laws_spec",
    default="climb,msl,dml,isolated",
    show_default=True,
    help="Laws fitted and stacked into the default predictive (must include climb). "
    "--laws climb fits CLIMB alone.",
)
@click.option(
    "--lfo",
    type=click.Choice(["laplace", "nuts", "map", "none"]),
    default="laplace",
    show_default=True,
    help="Leave-future-out refits inside the data (when it has >= 3 budgets), which calibrate "
    "each law's extrapolation discrepancy and the stacking weights: Laplace approximations "
    "(seconds), short NUTS runs (minutes), point fits, or none (discrepancy from its prior).",
)
@lfo_cuts_option(
    "Where the leave-future-out refits end: budget levels of the data below the largest, in "
    "tokens, comma-separated (e.g. 2.5e5,5e5). Default: the two levels below the largest, the "
    "folds nearest the full fit; earlier cuts extrapolate further but bend more "
    "(docs/model.md, 'Early folds bend more')."
)
@click.option(
    "--nuts-all-laws",
    is_flag=True,
    help="Sample every law by NUTS. By default a law whose leave-future-out stacking weight is "
    "below 0.01 (so it hardly shapes the default predictive) gets a Laplace fit instead, which "
    "saves about a quarter of the default fit's time; its own posterior (--law NAME) is then "
    "the Laplace approximation.",
)
@families_option
@click.option(
    "--strict", is_flag=True, help="Exit with code 3 if R-hat > 1.01, ESS < 400 or any divergence."
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: only on a terminal)."
)
def fit(
    runs_file,
    out,
    method,
    samples,
    chains,
    warmup,
    target_accept,
    max_tree_depth,
    init,
    blocks,
    seed,
    priors_file,
    likelihood,
    hierarchical_transfer,
    where,
    tail_start,
    tail_average,
    renormalize,
    languages,
    exclude_expr,
    dataset,
    laws_spec,
    lfo,
    lfo_cuts,
    nuts_all_laws,
    families_file,
    strict,
    progress,
):
    """Fit the CLIMB law and its rivals to RUNS_FILE (CSV/Parquet; docs/runs-format.md).

    Every law of --laws (CLIMB, MSL, DML, Isolated) is fitted, its extrapolation discrepancy
    learned from leave-future-out refits inside the data, and the laws stacked into the
    default predictive that predict, optimize, suggest and report use. With no RUNS_FILE the
    shipped default dataset is fitted. Writes OUT (default fit.nc) and prints the diagnostics,
    the stacking weights and a parameter summary.
    """
    from climb_bayes import api
    from climb_bayes.data.datasets import dataset_label, dataset_path, default_dataset
    from climb_bayes.errors import ConvergenceError
    from climb_bayes.inference.convergence import fit_gate
    from climb_bayes.laws.registry import parse_laws
    from climb_bayes.model.priors import load_priors

    label = ""
    if runs_file is None:
        name = dataset or default_dataset()
        runs_file = dataset_path(name)
        label = dataset_label(name)
        _echo(f"no runs file given: fitting the shipped '{name}' dataset ({label})")
    runs = read_fit_runs(
        runs_file,
        tail_start=tail_start,
        tail_average=tail_average,
        renormalize=renormalize,
        languages=languages,
        where=where,
        fitted=lambda table: exclude_runs(table, exclude_expr, lambda _msg: None)[0],
        echo=_echo,
    )
    if where:
        note = "rows where " + ", ".join(f"{c} = {v}" for c, v in where.items())
        label = f"{label}; {note}" if label else note
    if tail_start is None and runs.tail_start == FINAL_POINT_TAIL:
        note = "each run's final point only (its tail falls unlike the runs across budgets)"
        label = f"{label}; {note}" if label else note
    runs, excluded = exclude_runs(runs, exclude_expr, _echo)
    if excluded:
        note = f"{len(excluded)} runs excluded by --exclude {exclude_expr!r}"
        label = f"{label}; {note}" if label else note
    _echo(runs.summary())
    priors = load_priors(
        priors_file, likelihood=likelihood, hierarchical_transfer=hierarchical_transfer
    )
    law_names = [x.strip() for x in laws_spec.split(",") if x.strip()]
    parse_laws(",".join(law_names))  # validates names early
    result = api.fit(
        runs,
        priors,
        method=method,
        laws=law_names,
        chains=chains,
        warmup=warmup,
        samples=samples,
        target_accept=target_accept,
        max_tree_depth=max_tree_depth,
        init=init,
        blocks=blocks,
        seed=seed,
        lfo=lfo,
        lfo_cuts=lfo_cuts,
        nuts_all_laws=nuts_all_laws,
        families=families_file,
        progress=progress,
        data_label=label,
        log=_echo,
    )
    result.save(out)
    click.echo(_summary_text(result))
    click.echo(f"\nwrote {out}")
    gate = fit_gate(result)
    if not gate.ok:
        _echo(gate.warning(out))
        if strict:
            raise ConvergenceError(
                "convergence checks failed (--strict): " + "; ".join(gate.problems)
            )


def _summary_text(result) -> str:
    import numpy as np

    lines = []
    if result.attrs.get("data_label"):
        lines.append(f"data: {result.attrs['data_label']}")
    lines.append(
        f"method: {result.method}, {result.n_draws} draw(s), d_ref = "
        f"{result.d_ref:.3g} tokens, likelihood {result.attrs['likelihood']}"
    )
    if result.diagnostics is not None:
        lines += ["", "diagnostics:", result.diagnostics.report()]
    if result.method == "laplace":
        lines += ["", laplace_summary(result.attrs)]
    what = "posterior median [5%, 95%]" if result.n_draws > 1 else "point estimate"
    lines += ["", f"per-language parameters ({what}):"]

    def cell(x):
        q = np.quantile(x, [0.5, 0.05, 0.95])
        return f"{q[0]:.3g}" if x.size == 1 else f"{q[0]:.3g} [{q[1]:.3g}, {q[2]:.3g}]"

    B, beta, E, eta = (result.draws(n) for n in ("B", "beta", "E", "eta"))
    rows = [
        [lang, cell(B[:, i]), cell(beta[:, i]), cell(E[:, i]), cell(eta[:, i])]
        for i, lang in enumerate(result.languages)
    ]
    lines.append(render_table(rows, ["language", "B", "beta", "E", "eta"], indent=""))
    lines += ensemble_lines(result)
    med = np.median(result.draws("b"), axis=0)
    lines += ["", "transfer b[source -> target] (posterior median; rows = source):"]
    lines.append(render_matrix(result.languages, med, corner="source \\ target"))
    return "\n".join(lines)


@click.command()
@click.argument("fit_file", type=click.Path(dir_okay=False, path_type=Path))
@strict_option
def summary(fit_file, strict):
    """Print the diagnostics and parameter summary of FIT_FILE."""
    click.echo(_summary_text(load_fit_checked(fit_file, strict)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(fit())

"""``climb-bayes robustness``: prior, likelihood, budget, influence and bootstrap studies."""

from __future__ import annotations

import click

__all__ = ["robustness"]

_STUDIES = ("prior", "likelihood", "budget", "influence", "bootstrap")


def _parse_studies(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in names if s not in _STUDIES]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown study {', '.join(unknown) or '(none)'}; choose from {','.join(_STUDIES)}."
        )
    return names


@click.command(name="robustness")
@click.argument("fit_path", metavar="FIT.nc", type=click.Path(dir_okay=False))
@click.option(
    "--studies",
    default=",".join(_STUDIES),
    show_default=True,
    callback=_parse_studies,
    help="Comma-separated studies: prior (psense + alternative priors), likelihood "
    "(Student-t vs Normal), budget (leave the largest budget out), influence (PSIS-LOO per run "
    "+ refits without influential runs), bootstrap (over runs).",
)
@click.option(
    "-o",
    "--out",
    "out_path",
    default="robustness.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Results file (JSON; pass it to `climb-bayes report --robustness`).",
)
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Target budget in tokens (default: 10x the largest fitted budget).",
)
@click.option(
    "--n-boot", type=click.IntRange(1), default=20, show_default=True, help="Bootstrap resamples."
)
@click.option(
    "--n-influential",
    type=click.IntRange(0),
    default=2,
    show_default=True,
    help="Most influential runs (highest Pareto k) refitted without.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Worker processes for the refits (one per group of refits).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option(
    "--rstar-tol",
    type=float,
    default=0.05,
    show_default=True,
    help="Flag a study when any language's r* moves more than this (absolute).",
)
@click.option(
    "--loss-tol",
    type=float,
    default=0.02,
    show_default=True,
    help="Flag a study when an extrapolated loss moves more than this (relative).",
)
@click.option(
    "--sbc",
    "sbc_n",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Also run N simulation-based-calibration replications (not available yet).",
)
def robustness(
    fit_path: str,
    studies: tuple[str, ...],
    out_path: str,
    budget: float | None,
    n_boot: int,
    n_influential: int,
    workers: int,
    seed: int,
    rstar_tol: float,
    loss_tol: float,
    sbc_n: int,
) -> None:
    """How much r* and extrapolated losses of FIT.nc depend on priors, likelihood, budgets and
    single runs. Writes one JSON results file and prints a one-screen verdict."""
    from climb_bayes.errors import ClimbError
    from climb_bayes.fitresult import load_fit
    from climb_bayes.robustness import run_robustness, save_results

    if sbc_n:
        raise ClimbError("--sbc is not available in this version; run without --sbc.")
    fit = load_fit(fit_path)
    results = run_robustness(
        fit,
        studies,
        fit_path=fit_path,
        budget=budget,
        n_boot=n_boot,
        n_influential=n_influential,
        workers=workers,
        seed=seed,
        rstar_tol=rstar_tol,
        loss_tol=loss_tol,
        log=lambda msg: click.echo(msg, err=True),
    )
    path = save_results(results, out_path)
    click.echo(results["verdict"]["text"])
    click.echo(f"wrote {path}")

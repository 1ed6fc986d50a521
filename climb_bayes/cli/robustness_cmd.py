"""``climb-bayes robustness``: prior, likelihood, budget, influence and bootstrap studies, and
simulation-based calibration (``--sbc N``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from climb_bayes.cli._decide import load_fit_checked, strict_option

if TYPE_CHECKING:
    from climb_bayes.inference.fitresult import Fit

__all__ = ["robustness"]

_STUDIES = ("prior", "likelihood", "budget", "influence", "bootstrap")


def _parse_sbc(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter(
            f"the number of SBC replications must be a positive integer, got {value} "
            "(e.g. --sbc 100)."
        )
    return value


def _parse_studies(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    if value.strip().lower() == "none":
        return ()
    names = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in names if s not in _STUDIES]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown study {', '.join(unknown) or '(none)'}; choose from {','.join(_STUDIES)} "
            "or 'none' (with --sbc)."
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
    "+ refits without influential runs), bootstrap (over runs); 'none' to run only --sbc.",
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
    help="Worker processes for the refits (a group of many refits is split across them) and "
    "SBC replications.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap and SBC seed.")
@click.option(
    "--refit",
    type=click.Choice(["mode", "nuts"]),
    default="mode",
    show_default=True,
    help="How each variant is refitted: posterior mode + Laplace intervals (fast), or a full "
    "NUTS refit (4 chains x (500 + 250); minutes per variant; bootstrap stays mode refits).",
)
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
    type=int,
    default=None,
    callback=_parse_sbc,
    metavar="N",
    help="Also run N replications of simulation-based calibration on a reduced model (the "
    "fit's first 2 languages at its smallest and largest budget; prior draw, simulate, short "
    "NUTS fit, rank of the truth). Writes an ECDF plot next to the results file.",
)
@strict_option
def robustness(
    fit_path: str,
    strict: bool,
    studies: tuple[str, ...],
    out_path: str,
    budget: float | None,
    n_boot: int,
    n_influential: int,
    workers: int,
    seed: int,
    refit: str,
    rstar_tol: float,
    loss_tol: float,
    sbc_n: int | None,
) -> None:
    """How much r* and extrapolated losses of FIT.nc depend on priors, likelihood, budgets and
    single runs, and (with --sbc) whether the posterior of its model is calibrated. Writes one
    JSON results file and prints a one-screen verdict."""
    from climb_bayes.errors import ClimbError
    from climb_bayes.evaluation.robustness import attach_sbc, run_robustness, save_results

    if not studies and not sbc_n:
        raise ClimbError("--studies none leaves nothing to do: add --sbc N or name studies.")
    fit = load_fit_checked(fit_path, strict)

    def log(msg: str) -> None:
        click.echo(msg, err=True)

    results = None
    if studies:
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
            refit=refit,
            log=log,
        )
    if sbc_n:
        results = attach_sbc(results, _run_sbc(fit, sbc_n, workers, seed, out_path, log))
    path = save_results(results, out_path)
    click.echo(results["verdict"]["text"])
    if sbc_n:
        click.echo(f"wrote {', '.join(results['sbc']['plot'])}")
    click.echo(f"wrote {path}")


def _run_sbc(
    fit: Fit, n: int, workers: int, seed: int, out_path: str, log: Callable[[str], None]
) -> dict[str, Any]:
    """SBC on the fit's reduced model; returns the results entry (with the plot paths)."""
    from pathlib import Path

    import jax

    from climb_bayes.evaluation.sbc import SbcConfig, problem_from_fit, run_sbc
    from climb_bayes.viz.plots import save_figure
    from climb_bayes.viz.sbc_plots import plot_sbc_ecdf

    config = SbcConfig(n_replications=n)
    problem = problem_from_fit(fit, config.n_languages, config.n_curve_points)
    key = jax.random.PRNGKey(seed)
    result = run_sbc(jax.random.fold_in(key, 1), problem, config, workers=workers, log=log)
    out = Path(out_path)
    fig = plot_sbc_ecdf(result, key=jax.random.fold_in(key, 2))
    paths = save_figure(fig, out.parent, f"{out.stem}-sbc-ecdf")
    return result.to_dict() | {"plot": [str(p) for p in paths]}

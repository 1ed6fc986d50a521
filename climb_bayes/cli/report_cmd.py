"""``climb-bayes report``: one self-contained HTML report of a fit."""

from __future__ import annotations

import click

from climb_bayes.cli._decide import echo_err, load_fit_checked, strict_option

__all__ = ["report"]


@click.command(name="report")
@click.argument("fit_path", metavar="FIT.nc", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--out",
    "out_path",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="HTML file to write (figures are embedded; no other files are needed).",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    type=float,
    help="Target budget in tokens for predictions (repeat; r* is shown at the second, or the "
    "only one). Default: 1x, 10x and 100x the largest fitted budget.",
)
@click.option(
    "--robustness",
    "robustness_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Results JSON of `climb-bayes robustness` to include its verdicts.",
)
@click.option("--title", default=None, help="Page title.")
@click.option("--no-plots", is_flag=True, help="Leave the figures out (faster, smaller file).")
@strict_option
def report(
    fit_path: str,
    strict: bool,
    out_path: str,
    budgets: tuple[float, ...],
    robustness_path: str | None,
    title: str | None,
    no_plots: bool,
) -> None:
    """Write an HTML report of the fit in FIT.nc: data, diagnostics, the default predictive
    (stacking weights, leave-future-out check, discrepancy), parameters, fit quality,
    predictions and r* under the default predictive, baselines and (optionally) robustness
    verdicts."""
    from climb_bayes.decisions.optimization import check_budget
    from climb_bayes.viz.report import write_report

    for b in budgets:
        check_budget(b)
    fit = load_fit_checked(fit_path, strict)
    path = write_report(
        fit,
        out_path,
        budgets=list(budgets) or None,
        robustness=robustness_path,
        title=title,
        include_plots=not no_plots,
        log=echo_err,
    )
    click.echo(f"wrote {path}")

"""``climb-bayes plot``: figures of a fit (PNG and SVG)."""

from __future__ import annotations

import click

from climb_bayes.cli._decide import load_fit_checked, strict_option

__all__ = ["plot"]

_KIND_NAMES = ("fit", "ratio", "transfer", "heatmap", "fan", "rstar", "rstar_budget", "trace")


@click.command(name="plot")
@click.argument("fit_path", metavar="FIT.nc", type=click.Path(dir_okay=False))
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(("all",) + _KIND_NAMES),
    default=("all",),
    show_default=True,
    help="Plot kind (repeat for several): fit = observed vs predicted; ratio = rt vs r "
    "(paper Fig. 2); transfer = alpha_j->i(D); heatmap = b with P(b>0); fan = one new run's "
    "loss vs budget under the default predictive; rstar = r* (default predictive and "
    "CLIMB alone) with baselines; "
    "rstar_budget = CLIMB's r*(D); trace = trace/rank of worst-mixing parameters.",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    default="plots",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the figures (created if missing).",
)
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Target budget in tokens for rstar (default: 10x the largest fitted budget).",
)
@click.option(
    "--format",
    "formats",
    multiple=True,
    type=click.Choice(("png", "svg", "pdf")),
    default=("png", "svg"),
    show_default=True,
    help="File format(s).",
)
@strict_option
def plot(
    fit_path: str,
    strict: bool,
    kinds: tuple[str, ...],
    out_dir: str,
    budget: float | None,
    formats: tuple[str, ...],
) -> None:
    """Draw figures of the fit in FIT.nc into a folder, one file per kind and format."""
    from climb_bayes.decisions.optimization import check_budget
    from climb_bayes.viz.plots import KINDS, save_figure

    if budget is not None:
        check_budget(budget)
    fit = load_fit_checked(fit_path, strict)
    selected = list(KINDS) if "all" in kinds else list(dict.fromkeys(kinds))
    for kind in selected:
        options = {"budget": budget} if kind == "rstar" and budget is not None else {}
        fig = KINDS[kind](fit, **options)
        for path in save_figure(fig, out_dir, kind, formats):
            click.echo(f"wrote {path}")

"""``climb-bayes predict``: credible intervals on each language's loss at a budget and mixture."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from climb_bayes.cli._decide import (
    echo_err,
    fit_header,
    fmt_interval,
    fmt_tokens,
    load_fit_checked,
    parse_budget,
    parse_budgets,
    parse_levels,
    predictive_line,
    render_table,
    write_frame,
)
from climb_bayes.errors import ClimbError

__all__ = ["predict"]


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@click.argument("fit_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--budget", default=None, help="Target budget in tokens (1e12, 1T, 300B).")
@click.option(
    "--budgets",
    "budgets_text",
    default=None,
    help="Comma-separated budgets for a loss-vs-budget trajectory (instead of --budget).",
)
@click.option(
    "--mixture",
    default="uniform",
    show_default=True,
    help="Mixture: en=0.3,de=0.2,... | a file (JSON, CSV language,share, plan CSV[#run_id]) | "
    "uniform | natural | temperature[:tau] | unimax[:epochs] | isolated.",
)
@click.option("--levels", default="0.5,0.9", show_default=True, help="Central interval levels.")
@click.option(
    "--available",
    "available",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Tokens available per language (CSV language,tokens[,max_epochs]); needed by "
    "natural, temperature and unimax.",
)
@click.option(
    "--max-epochs",
    type=float,
    default=1.0,
    show_default=True,
    help="Epoch cap where the file has none.",
)
@click.option(
    "--law",
    "law_name",
    default=None,
    help="Predict with one law of the fit (e.g. climb) instead of the default stacked predictive.",
)
@click.option("--max-draws", type=int, default=None, help="Use at most this many posterior draws.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the observation-noise draws."
)
@click.option(
    "-o",
    "--out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the full table (.csv or .json).",
)
def predict(
    fit_file: Path,
    budget: str | None,
    budgets_text: str | None,
    mixture: str,
    levels: str,
    available: Path | None,
    max_epochs: float,
    law_name: str | None,
    max_draws: int | None,
    seed: int,
    out: Path | None,
) -> None:
    """Loss of each language at a budget and mixture, with credible intervals.

    Prints, per language, the expected loss (the fitted law: parameter uncertainty only) and
    the posterior predictive loss of one new run (with the fit's observation noise): mean,
    median and central intervals, in nats/token. A language with share 0 has an unbounded
    predicted loss (reported as inf).

    Example: climb-bayes predict fit.nc --budget 1e12 --mixture en=0.5,de=0.3,zh=0.2
    """
    from climb_bayes.constraints import read_availability
    from climb_bayes.law import LawParams
    from climb_bayes.mixtures import resolve_mixture
    from climb_bayes.optimize import thin_index
    from climb_bayes.predict import ensemble_table

    if (budget is None) == (budgets_text is None):
        raise ClimbError("give exactly one of --budget (one target) or --budgets (a trajectory).")
    budgets = [parse_budget(budget)] if budget is not None else parse_budgets(budgets_text)
    lv = parse_levels(levels)
    fit = load_fit_checked(fit_file)
    langs = fit.languages
    avail = read_availability(available, langs, default_epochs=max_epochs) if available else None
    ens = fit.ensemble()
    if law_name is not None:
        ens = ens.only(law_name.strip().lower())
    idx = thin_index(fit.n_draws, max_draws)
    law = LawParams(*(np.asarray(x)[idx] for x in fit.law_draws()))
    mixes = [
        resolve_mixture(mixture, langs, budget=b, availability=avail, law=law) for b in budgets
    ]
    n_samples = 4000 if max_draws is None else max(max_draws, 200)
    table = ensemble_table(
        ens,
        np.stack([m.shares for m in mixes]),
        budgets,
        levels=lv,
        seed=seed,
        mixture_names=[m.name for m in mixes],
        n_samples=n_samples,
    )
    click.echo(fit_header(fit, fit_file))
    click.echo(predictive_line(ens))
    if fit.method != "nuts":
        click.echo(
            "note: a point fit has one draw: 'expected' intervals are points; the predictive "
            "intervals show observation noise only."
        )
    fitted_max = float(np.max(fit.runs.run_budgets))
    for b, mix in zip(budgets, mixes, strict=True):
        factor = b / fitted_max
        extra = f" ({factor:.3g}x the largest fitted budget: extrapolation)" if factor > 1.0 else ""
        click.echo(f"\nD = {b:.4g} tokens ({fmt_tokens(b)}){extra}; mixture {mix.name}")
        click.echo("  shares: " + ", ".join(f"{k}={v:.3f}" for k, v in mix.as_dict().items()))
        sub = table[table["budget"] == b]
        rows = []
        for lang in langs:
            e = sub[(sub["language"] == lang) & (sub["quantity"] == "expected")].iloc[0]
            p = sub[(sub["language"] == lang) & (sub["quantity"] == "predictive")].iloc[0]
            row = [lang, f"{e['share']:.3f}", _num(e["mean"]), _num(e["median"])]
            row += [fmt_interval(e[f"{_pct(x)}_lo"], e[f"{_pct(x)}_hi"]) for x in lv]
            row += [fmt_interval(p[f"{_pct(x)}_lo"], p[f"{_pct(x)}_hi"]) for x in lv]
            rows.append(row)
        header = ["language", "share", "mean", "median"]
        header += [f"{_pct(x)} param" for x in lv] + [f"{_pct(x)} predictive" for x in lv]
        click.echo(render_table(rows, header))
        zero = [lang for lang, s in mix.as_dict().items() if s == 0]
        if zero:
            click.echo(
                f"  note: {', '.join(zero)} get(s) no data (share 0): CLIMB predicts an "
                f"unbounded loss there (inf)."
            )
    click.echo(
        "\nlosses in nats/token; 'param' = the law's expected loss (parameter and law "
        "uncertainty only); 'predictive' = one new run (also the extrapolation discrepancy, "
        "which grows with the distance beyond the fitted budgets, and run-to-run noise)."
    )
    if out is not None:
        write_frame(table, out)
        echo_err(f"wrote {out}")


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def _num(x: float) -> str:
    return "inf" if np.isinf(x) else f"{x:.4f}"

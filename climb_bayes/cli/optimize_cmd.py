"""``climb-bayes optimize``: the optimal mixture as a posterior distribution, a recommendation,
and how it compares with the mixtures in use today."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import numpy as np

from climb_bayes.cli._decide import (
    TABLE_WIDTH,
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
    strict_option,
    unchecked_extrapolation_warning,
    write_frame,
    write_json,
)
from climb_bayes.cli._runs_table import FAMILIES_HELP
from climb_bayes.decisions.mixture_support import mixture_support_warning
from climb_bayes.errors import ClimbError

__all__ = ["optimize"]


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@click.argument("fit_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--budget", default=None, help="Target budget in tokens (1e12, 1T, 300B).")
@click.option(
    "--budgets",
    "budgets_text",
    default=None,
    help="Comma-separated budgets: how r* moves with scale (instead of --budget).",
)
@click.option(
    "--weights",
    default=None,
    help="Importance weights: en=2,de=1 (others 1) or one value per language in fit order.",
)
@click.option(
    "--rho",
    type=float,
    default=100.0,
    show_default=True,
    help="Penalty of the two-step magnitude problem.",
)
@click.option(
    "--risk",
    type=float,
    default=None,
    help="Also find the risk-averse mixture minimising CVaR at this level (e.g. 0.9) and "
    "recommend it.",
)
@click.option("--min", "min_text", default=None, help="Minimum shares, e.g. en=0.1,de=0.05.")
@click.option("--max", "max_text", default=None, help="Maximum shares, e.g. zh=0.3.")
@click.option(
    "--available",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Tokens available per language (CSV language,tokens[,max_epochs]): caps each share at "
    "tokens x max_epochs / budget; enables the natural, temperature and UniMax baselines.",
)
@click.option(
    "--max-epochs",
    type=float,
    default=1.0,
    show_default=True,
    help="Epoch cap where the file has none.",
)
@click.option(
    "--tau",
    type=float,
    default=0.3,
    show_default=True,
    help="Exponent of the temperature baseline.",
)
@click.option("--levels", default="0.5,0.9", show_default=True, help="Central interval levels.")
@click.option(
    "--solver",
    type=click.Choice(["fast", "trust-constr"]),
    default="fast",
    show_default=True,
    help="Batched interior-point Newton (all draws at once) or scipy trust-constr per draw.",
)
@click.option("--max-draws", type=int, default=None, help="Use at most this many posterior draws.")
@click.option(
    "--baselines/--no-baselines",
    default=True,
    show_default=True,
    help="Compare with uniform, natural, temperature, UniMax, Isolated-law and MSL-law mixtures.",
)
@click.option(
    "--families",
    default="auto",
    show_default=True,
    metavar="auto|none|FILE",
    help="Language families of the MSL baseline: " + FAMILIES_HELP.split(": ", 1)[1],
)
@click.option(
    "--law",
    "law_name",
    default=None,
    help="Decide under one law of the fit (e.g. climb) instead of the default stacked "
    "predictive (all laws by their stacking weights, with their extrapolation discrepancy).",
)
@click.option(
    "-o",
    "--out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the results: .json (everything, draws included) or .csv (per-language table; "
    "the comparisons go to <name>_comparisons.csv).",
)
@click.option(
    "--draws-out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the per-draw solutions (direct, two-step, direction) as CSV.",
)
@strict_option
def optimize(
    fit_file: Path,
    strict: bool,
    budget: str | None,
    budgets_text: str | None,
    weights: str | None,
    rho: float,
    risk: float | None,
    min_text: str | None,
    max_text: str | None,
    available: Path | None,
    max_epochs: float,
    tau: float,
    levels: str,
    solver: str,
    max_draws: int | None,
    baselines: bool,
    families: str,
    law_name: str | None,
    out: Path | None,
    draws_out: Path | None,
) -> None:
    """Optimal language mixture of a fit at a budget, as a posterior distribution.

    Per posterior draw: the paper's two-step solution (direction p, then the penalised
    magnitude problem) and the direct minimiser of the weighted loss sum_i w_i L_i(D, r). Then
    the Bayes decision (the mixture with the lowest posterior expected weighted loss; the
    recommendation) and, with --risk, the mixture minimising CVaR of the weighted loss.
    Baselines are scored against the recommendation: expected loss, interval, and the
    probability that the recommendation is better.

    Example: climb-bayes optimize fit.nc --budget 1e12 --weights en=2 --max zh=0.3
    """
    from climb_bayes.decisions.constraints import Constraints, read_availability
    from climb_bayes.decisions.decision import cvar
    from climb_bayes.decisions.mixtures import parse_language_map, parse_weights
    from climb_bayes.decisions.optimization import (
        msl_baseline,
        optimize_budgets,
        thin_draws,
        trajectory_frame,
    )

    if (budget is None) == (budgets_text is None):
        raise ClimbError("give exactly one of --budget (one target) or --budgets (several).")
    budgets = [parse_budget(budget)] if budget is not None else parse_budgets(budgets_text)
    lv = parse_levels(levels)
    if risk is not None and not 0.0 < risk < 1.0:
        raise ClimbError(f"--risk must be in (0, 1), e.g. 0.9; got {risk}.")
    fit = load_fit_checked(fit_file, strict)
    langs = fit.languages
    w = parse_weights(weights, langs)
    avail = read_availability(available, langs, default_epochs=max_epochs) if available else None
    cons = Constraints.build(
        langs,
        parse_language_map(min_text, langs, option="--min") if min_text else None,
        parse_language_map(max_text, langs, option="--max") if max_text else None,
        avail,
    )
    for b in budgets:  # fail early, before any solving, on infeasible constraints
        cons.bounds(b)
    law = thin_draws(fit.law_draws(), max_draws)
    ens = fit.ensemble()
    if law_name is not None:
        ens = ens.only(law_name.strip().lower())
    msl = None
    if baselines:
        echo_err("fitting the MSL law to the fit's runs (baseline)...")
        from climb_bayes.laws.families import describe_families, resolve_families

        choice = resolve_families(families, fit.runs.languages)  # a bad file: exit 2
        fam = choice.mapping
        echo_err("  " + describe_families(choice, fit.runs.languages))
        try:
            msl = msl_baseline(fit.runs, fam)
        except Exception as exc:  # noqa: BLE001 - a baseline must not stop the command
            echo_err(f"  MSL baseline skipped: {exc}")
    results = optimize_budgets(
        law,
        langs,
        budgets,
        weights=w,
        constraints=cons,
        rho=rho,
        risk=risk,
        levels=lv,
        solver=solver,
        baselines=baselines,
        tau=tau,
        msl=msl,
        progress=echo_err,
        ensemble=ens,
        n_decision_draws=law.beta.shape[0],
    )
    click.echo(fit_header(fit, fit_file))
    click.echo(predictive_line(ens))
    if warning := unchecked_extrapolation_warning(
        ens, budgets, float(np.max(fit.runs.run_budgets))
    ):
        click.echo(textwrap.fill(warning, TABLE_WIDTH))
    click.echo(
        "weights: "
        + ", ".join(f"{k}={v:.3g}" for k, v in zip(langs, w, strict=True))
        + f"; {results[0].n_draws} draws; solver {solver}"
    )
    for res in results:
        _print_result(res, lv, cvar)
    recommended = {
        f"{r.recommended_name} at {fmt_tokens(r.budget)}": r.recommended for r in results
    }
    if warning := mixture_support_warning(
        list(recommended), np.stack(list(recommended.values())), fit.runs.run_proportions, langs
    ):
        click.echo("\n" + textwrap.fill(warning, TABLE_WIDTH))
    if len(results) > 1:
        _print_trajectory(results, lv)
    if out is not None:
        if out.suffix.lower() == ".json":
            write_json({"results": [r.to_dict() for r in results]}, out)
        elif out.suffix.lower() == ".csv":
            write_frame(trajectory_frame(results), out)
            comp = []
            for r in results:
                df = r.comparison_table()
                df.insert(0, "budget", r.budget)
                comp.append(df)
            import pandas as pd

            side = out.with_name(out.stem + "_comparisons.csv")
            write_frame(pd.concat(comp, ignore_index=True), side)
            echo_err(f"wrote {side}")
        else:
            raise ClimbError(f"--out {out}: use a .json or .csv file name.")
        echo_err(f"wrote {out}")
    if draws_out is not None:
        import pandas as pd

        write_frame(pd.concat([r.draws_frame() for r in results], ignore_index=True), draws_out)
        echo_err(f"wrote {draws_out}")


def _print_result(res: object, levels: tuple[float, ...], cvar: object) -> None:
    top = max(levels)
    click.echo(
        f"\nD = {res.budget:.4g} tokens ({fmt_tokens(res.budget)}): recommended mixture "
        f"({res.recommended_name}) "
        + ", ".join(f"{k}={v:.3f}" for k, v in zip(res.languages, res.recommended, strict=True))
    )
    q = [(1 - top) / 2, (1 + top) / 2]
    rows = []
    for i, lang in enumerate(res.languages):
        d = res.direct[:, i]
        t = res.two_step[:, i]
        row = [lang, f"{res.weights[i]:.3f}", f"{res.recommended[i]:.3f}"]
        if res.risk_averse is not None:
            row.append(f"{res.bayes[i]:.3f}")
        if res.stacked is not None:
            row.append(fmt_interval(*np.quantile(res.stacked[:, i], q), digits=3))
        row += [
            f"{np.median(d):.3f}",
            fmt_interval(*np.quantile(d, q), digits=3),
            f"{np.median(t):.3f}",
            fmt_interval(*np.quantile(t, q), digits=3),
            f"[{res.lo[i]:.3g}, {res.hi[i]:.3g}]",
        ]
        rows.append(row)
    pct = f"{100 * top:g}%"
    header = ["language", "weight", "recommended"]
    if res.risk_averse is not None:
        header.append("bayes")
    if res.stacked is not None:
        header.append(f"r* {pct} (default)")
    header += ["CLIMB r*", f"CLIMB r* {pct}", "two-step", f"two-step {pct}", "bounds"]
    click.echo(render_table(rows, header))
    gap = res.two_step_loss - res.direct_loss
    text = (
        f"decisions and comparisons under: {res.predictive}. r* (default) = per-draw optimum "
        "under it (laws, posterior draws and extrapolation discrepancy): the recommendation; "
        "CLIMB r* = direct minimiser per CLIMB posterior draw; two-step = the paper's method "
        f"(rho={res.rho:g}; exact direction p, docs/decisions.md), shown for reference: its "
        f"weighted loss is {np.median(gap):.2e} nats above CLIMB r* (median over draws)."
    )
    click.echo(textwrap.fill(text, TABLE_WIDTH, initial_indent="  ", subsequent_indent="  "))
    if res.risk_averse is not None:
        click.echo(
            f"  CVaR({res.risk:g}) of the weighted loss: recommended "
            f"{cvar(res.risk_losses, res.risk):.4f}, Bayes {cvar(res.bayes_losses, res.risk):.4f}"
        )
    rows, notes = [], []
    for c in res.comparisons:
        first = c is res.comparisons[0]
        mark = ""
        if c.note:  # free text goes under the table, marked, so columns stay narrow
            notes.append(f"  [{len(notes) + 1}] {c.name}: {c.note}")
            mark = f" [{len(notes)}]"
        rows.append(
            [
                c.name + mark,
                f"{c.mean:.4f}",
                fmt_interval(*c.intervals[top]),
                "" if first else f"{c.excess:+.4f}",
                "" if first else f"{c.p_beaten:.2f}",
            ]
        )
    click.echo("\n  weighted loss (nats/token) over the posterior, against the recommendation:")
    click.echo(
        render_table(rows, ["mixture", "expected", f"{pct} interval", "excess", "P(rec. better)"])
    )
    for line in notes:
        click.echo(line)
    small = [
        c.name
        for c in res.comparisons[1:]
        if np.isfinite(c.excess) and abs(c.excess) < res.gain_noise
    ]
    if small:
        text = (
            f"note: the expected gain over {', '.join(small)} is smaller than the spread of "
            f"the loss difference across the predictive ({res.gain_noise:.4f} nats, sd; "
            "extrapolation discrepancy included): the recommendation is not reliably better "
            "there; P(rec. better) says how often it is."
        )
        click.echo(textwrap.fill(text, TABLE_WIDTH, initial_indent="  ", subsequent_indent="  "))
    for name, why in res.skipped.items():
        click.echo(f"  skipped {name}: {why}")


def _print_trajectory(results: list, levels: tuple[float, ...]) -> None:
    top = max(levels)
    langs = results[0].languages
    click.echo(f"\nr* against the budget (median [{100 * top:g}% interval]; recommended):")
    header = ["language"] + [fmt_tokens(r.budget) for r in results]
    rows = []
    for i, lang in enumerate(langs):
        row = [lang]
        for r in results:
            d = r.direct[:, i]
            lo, hi = np.quantile(d, [(1 - top) / 2, (1 + top) / 2])
            row.append(f"{np.median(d):.3f} [{lo:.3f}, {hi:.3f}]; {r.recommended[i]:.3f}")
        rows.append(row)
    click.echo(render_table(rows, header))

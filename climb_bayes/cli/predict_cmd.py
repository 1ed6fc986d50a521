"""``climb-bayes predict``: credible intervals on each language's loss at a budget and mixture."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

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
    strict_option,
    unchecked_extrapolation_warning,
    write_frame,
)
from climb_bayes.decisions.mixture_support import mixture_support_warning
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
    default=None,
    show_default=False,
    help="Mixture: en=0.3,de=0.2,... | a file (JSON, CSV language,share, plan CSV[#run_id]) | "
    "uniform | natural | temperature[:tau] | unimax[:epochs] | isolated.  [default: uniform]",
)
@click.option(
    "--mixtures",
    "mixtures_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Many named mixtures at once (CSV name,<lang>,... or r_<lang> columns, e.g. a plan; "
    "or JSON): every mixture x every budget in one vectorised pass; prints one line per "
    "(mixture, budget, language).",
)
@click.option(
    "--continue-run",
    "continue_run",
    multiple=True,
    metavar="RUN",
    help="Predict a fitted training run, continued to the budget(s) (its mixture; its fitted "
    "deviation from the law carried forward), instead of a new run. RUN is its run_series "
    "label in the runs table (checkpoints of one run share it) or any of its checkpoints' "
    "run_id. Repeat for several runs; 'all' continues every training run of the fit.",
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
@click.option(
    "--combine",
    type=click.Choice(["quantile", "mixture"]),  # ensemble.COMBINE_METHODS
    default="quantile",
    show_default=True,
    help="How the stacked laws' intervals are combined: average their quantiles with the "
    "stacking weights, or mix their distributions (wider where the laws disagree; "
    "docs/model.md).",
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
@strict_option
def predict(
    fit_file: Path,
    strict: bool,
    budget: str | None,
    budgets_text: str | None,
    mixture: str | None,
    mixtures_file: Path | None,
    continue_run: tuple[str, ...],
    levels: str,
    available: Path | None,
    max_epochs: float,
    law_name: str | None,
    combine: str,
    max_draws: int | None,
    seed: int,
    out: Path | None,
) -> None:
    """Loss of each language at a budget and mixture, with credible intervals.

    Prints, per language, the expected loss (the fitted law: parameter uncertainty only) and
    the posterior predictive loss of one new run (with the fit's observation noise): mean,
    median and central intervals, in nats/token. A language with share 0 has an unbounded
    predicted loss (reported as inf).

    With --continue-run RUN the predictive rows are that fitted training run continued (e.g.
    the 60k-step loss of a run checkpointed up to 30k steps; RUN its run_series label or a
    checkpoint's run_id): its own deviation from the law, seen in its fitted checkpoints, is
    carried forward instead of a new run's.

    Example: climb-bayes predict fit.nc --budget 1e12 --mixture en=0.5,de=0.3,zh=0.2
    """
    from climb_bayes.decisions.constraints import read_availability
    from climb_bayes.decisions.continuation import continued_runs
    from climb_bayes.decisions.mixtures import Mixture, read_mixtures_file, resolve_mixture
    from climb_bayes.decisions.optimization import thin_index
    from climb_bayes.decisions.prediction import ensemble_table
    from climb_bayes.model.law import LawParams

    if (budget is None) == (budgets_text is None):
        raise ClimbError("give exactly one of --budget (one target) or --budgets (a trajectory).")
    budgets = [parse_budget(budget)] if budget is not None else parse_budgets(budgets_text)
    lv = parse_levels(levels)
    fit = load_fit_checked(fit_file, strict)
    langs = fit.languages
    avail = read_availability(available, langs, default_epochs=max_epochs) if available else None
    ens = fit.ensemble()
    if law_name is not None:
        ens = ens.only(law_name.strip().lower())
    n_samples = 4000 if max_draws is None else max(max_draws, 200)
    if mixtures_file is not None:
        if mixture is not None:
            raise ClimbError("give --mixture (one) or --mixtures FILE (many), not both.")
        if continue_run:
            raise ClimbError("--continue-run keeps the run's own mixture: leave out --mixtures.")
        names, shares = read_mixtures_file(mixtures_file, fit.languages)
        many = _ManyRows(names, shares, None, f"{len(names)} mixture(s) from {mixtures_file}")
        _predict_many(fit, fit_file, ens, many, budgets, lv, seed, n_samples, out, combine)
        return
    run = None
    if continue_run:
        if mixture is not None:
            raise ClimbError("--continue-run keeps the run's own mixture: leave out --mixture.")
        chosen = continued_runs(fit.runs, continue_run)
        if len(chosen) > 1:
            many = _ManyRows(
                [f"run {r.name}" for r in chosen],
                np.stack([r.shares for r in chosen]),
                np.array([r.series for r in chosen]),
                f"{len(chosen)} fitted training run(s) continued, each named as given (with "
                "'all': its run_series label, or its latest checkpoint), its fitted deviation "
                "from the law carried forward",
            )
            _predict_many(fit, fit_file, ens, many, budgets, lv, seed, n_samples, out, combine)
            return
        run = chosen[0]
        mixes = [Mixture(f"run {run.name}", run.shares, langs)] * len(budgets)
    else:
        idx = thin_index(fit.n_draws, max_draws)
        law = LawParams(*(np.asarray(x)[idx] for x in fit.law_draws()))
        mixes = [
            resolve_mixture(mixture or "uniform", langs, budget=b, availability=avail, law=law)
            for b in budgets
        ]
    table = ensemble_table(
        ens,
        np.stack([m.shares for m in mixes]),
        budgets,
        levels=lv,
        seed=seed,
        mixture_names=[m.name for m in mixes],
        n_samples=n_samples,
        combine=combine,
        series=None if run is None else run.series,
    )
    click.echo(fit_header(fit, fit_file))
    click.echo(predictive_line(ens, combine))
    if run is not None:
        click.echo(_continuation_line(run, ens))
    else:
        if mixture is not None and (hint := _continuation_hint(fit, mixes[0].shares)):
            click.echo(hint)
        unique = {m.name: m.shares for m in mixes}
        if warning := mixture_support_warning(
            list(unique), np.stack(list(unique.values())), fit.runs.run_proportions, langs
        ):
            click.echo(warning)
    fitted_max = float(np.max(fit.runs.run_budgets))
    if warning := unchecked_extrapolation_warning(ens, budgets, fitted_max):
        click.echo(warning)
    if fit.method == "map":
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
    who = "one new run" if run is None else f"{_training_run(run)}, continued"
    click.echo(
        "\nlosses in nats/token; 'param' = the law's expected loss (parameter and law "
        f"uncertainty only); 'predictive' = {who} (also the extrapolation discrepancy, "
        "which grows with the distance beyond the fitted budgets, and run-to-run noise)."
    )
    if out is not None:
        write_frame(table, out)
        echo_err(f"wrote {out}")


class _ManyRows(NamedTuple):
    """The rows of a many-row prediction: names, shares ``(K, m)``, the ``run_series`` code of
    each row's continued training run (``None``: new runs) and a line saying where they are
    from."""

    names: list[str]
    shares: np.ndarray
    series: np.ndarray | None
    source: str


def _predict_many(
    fit: object,
    fit_file: Path,
    ens: object,
    many: _ManyRows,
    budgets: list[float],
    levels: tuple[float, ...],
    seed: int,
    n_samples: int,
    out: Path | None,
    combine: str,
) -> None:
    """``predict --mixtures FILE`` or several ``--continue-run``: every (row, budget) pair in one
    call of the predictive, one line per (row, budget, language)."""
    from climb_bayes.decisions.prediction import ensemble_grid

    table = ensemble_grid(
        ens,
        many.shares,
        many.names,
        budgets,
        series=many.series,
        levels=levels,
        seed=seed,
        n_samples=n_samples,
        combine=combine,
    )
    click.echo(fit_header(fit, fit_file))
    click.echo(predictive_line(ens, combine))
    click.echo(f"{many.source} x {len(budgets)} budget(s)")
    if many.series is None:
        from climb_bayes.decisions.continuation import runs_with_mixtures

        found = runs_with_mixtures(fit.runs, many.shares)
        matched = [n for n, runs in zip(many.names, found, strict=True) if runs]
        if matched:
            click.echo(
                f"note: {len(matched)} of these mixtures ({', '.join(matched[:4])}"
                f"{', ...' if len(matched) > 4 else ''}) are those of checkpointed training runs "
                "of the fit: their rows are new runs; `--continue-run NAME` (or `all`) predicts "
                "the fitted runs continued, their fitted deviation carried forward"
            )
        if warning := mixture_support_warning(
            many.names, many.shares, fit.runs.run_proportions, fit.languages
        ):
            click.echo(warning)
    if many.series is not None and (warning := _no_run_effect_warning(ens)):
        click.echo(warning)
    if warning := unchecked_extrapolation_warning(
        ens, budgets, float(np.max(fit.runs.run_budgets))
    ):
        click.echo(warning)
    pred = table[table["quantity"] == "predictive"]
    header = ["mixture", "D", "language", "share", "median"]
    header += [f"{_pct(x)} predictive" for x in levels]
    rows = [
        [str(r["mixture"]), fmt_tokens(r["budget"]), str(r["language"]), f"{r['share']:.3f}"]
        + [_num(r["median"])]
        + [fmt_interval(r[f"{_pct(x)}_lo"], r[f"{_pct(x)}_hi"]) for x in levels]
        for r in pred.to_dict("records")
    ]
    click.echo(render_table(rows, header))
    who = "one new run" if many.series is None else "the training run, continued"
    click.echo(f"\nlosses in nats/token; predictive = {who} (see `predict --help`).")
    if out is not None:
        write_frame(table, out)
        echo_err(f"wrote {out}")


def _continuation_hint(fit: object, shares: np.ndarray) -> str:
    """A note when the asked mixture is that of checkpointed training runs of the fit (else
    ``""``): the rows are a new run, ``--continue-run`` would continue the fitted one."""
    from climb_bayes.decisions.continuation import runs_with_mixtures

    (runs,) = runs_with_mixtures(fit.runs, shares[None])
    if not runs:
        return ""
    names = ", ".join(r.name for r in runs[:3]) + (", ..." if len(runs) > 3 else "")
    last = max(r.last_budget for r in runs)
    return (
        f"note: this is the mixture of {len(runs)} checkpointed training run(s) of the fit "
        f"({names}; latest checkpoint at {fmt_tokens(last)} tokens): the rows below are a new "
        f"run of it; `--continue-run {runs[0].name}` predicts that run continued, its fitted "
        "deviation from the law carried forward"
    )


def _continuation_line(run: object, ens: object) -> str:
    """What ``--continue-run`` conditions on (and a warning when nothing can be carried)."""
    ids = run.checkpoints
    shown = ", ".join(ids if len(ids) <= 4 else [*ids[:2], "...", ids[-1]])
    line = (
        f"continuing {_training_run(run)}: {len(ids)} fitted checkpoint(s) ({shown}),"
        f" the latest at {fmt_tokens(run.last_budget)} tokens; its fitted deviation from the law "
        "is carried forward"
    )
    warning = _no_run_effect_warning(ens)
    return f"{line}\n{warning}" if warning else line


def _training_run(run: object) -> str:
    """How the header and footer name a continued run: by its label where it has one."""
    return f"training run {run.label!r}" if run.label else f"the training run of {run.run_id}"


def _no_run_effect_warning(ens: object) -> str:
    """A warning line when no law of the fit has a run effect (else ``""``)."""
    if any(f.sigma_run is not None for f in ens.fits.values()):
        return ""
    return (
        "warning: the fit has no run effect (priors run_effect = false), so it has no "
        "run deviation to carry: the predictive is that of a new run of this mixture"
    )


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def _num(x: float) -> str:
    return "inf" if np.isinf(x) else f"{x:.4f}"

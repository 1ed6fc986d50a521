"""``climb-bayes fit`` and ``climb-bayes summary``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import click

from climb_bayes.cli._decide import (
    TABLE_WIDTH,
    load_fit_checked,
    render_matrix,
    render_table,
    strict_option,
)
from climb_bayes.cli._runs_table import (
    exclude_option,
    exclude_runs,
    families_option,
    read_runs_table,
    runs_table_options,
)
from climb_bayes.data.datasets import DATASETS

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
    default=0.98,
    show_default=True,
    help="NUTS's target acceptance (0.95 left one divergence per 2000-4000 draws on the "
    "default data; docs/model.md).",
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
    tail_start,
    tail_average,
    renormalize,
    languages,
    exclude_expr,
    dataset,
    laws_spec,
    lfo,
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
    runs = read_runs_table(
        runs_file,
        tail_start=tail_start,
        tail_average=tail_average,
        renormalize=renormalize,
        languages=languages,
    )
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


def _laplace_summary(attrs) -> str:
    """One line on a Laplace fit: its modes, its mode search and its Pareto k."""
    ok = bool(int(attrs.get("laplace_converged", 1)))
    line = f"Laplace approximation: {attrs.get('laplace_modes', '')}; mode search " + (
        "converged" if ok else "did NOT converge"
    )
    if "laplace_pareto_k" in attrs:
        k, k_max = float(attrs["laplace_pareto_k"]), float(attrs["laplace_pareto_k_max"])
        verdict = (
            "the posterior is far from the Gaussian at its mode: its intervals are not "
            "reliable; --method nuts"
            if k > k_max  # as the gate (convergence.law_problems): nan is not computed
            else "the Gaussian matches the posterior where it draws"
        )
        line += f"; Pareto k {k:.2f} (want <= {k_max:.2f}: {verdict})"
    return line


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
        lines += ["", _laplace_summary(result.attrs)]
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
    lines += _ensemble_lines(result)
    med = np.median(result.draws("b"), axis=0)
    lines += ["", "transfer b[source -> target] (posterior median; rows = source):"]
    lines.append(render_matrix(result.languages, med, corner="source \\ target"))
    return "\n".join(lines)


def _no_lfo_reason(result) -> str:
    """Why a fit's laws were stacked without leave-future-out folds."""
    from climb_bayes.inference.lfo import MIN_FIT_LEVELS, budget_levels

    n = budget_levels(result.runs.run_budgets).size
    if n > MIN_FIT_LEVELS:
        return "leave-future-out folds off (--lfo none): extrapolation is not checked"
    return (
        f"{n} budget(s); a leave-future-out check needs {MIN_FIT_LEVELS + 1}: extrapolation is "
        "not checked, so plan a third budget to check it on your own runs"
    )


def _ensemble_lines(result) -> list[str]:
    """The default predictive: stacking weights, the inner LFO check and the discrepancy."""
    import json

    import numpy as np

    weights_text = result.attrs.get("stacking_weights")
    if not weights_text:
        return []
    weights = json.loads(weights_text)
    method = result.attrs.get("weight_method", "")
    how = {
        "lfo-bootstrap-stacking": "stacked by their leave-future-out log score (Bayesian "
        "bootstrap over the folds' language blocks)",
        "lfo-stacking": "stacked by their leave-future-out log score",
        "loo-stacking": "stacked by PSIS-LOO (" + _no_lfo_reason(result) + ")",
        "single": "one law",
    }.get(method, method)
    order = sorted(weights, key=lambda k: -weights[k])
    lines = [
        "",
        *textwrap.wrap(
            f"default predictive (predict, optimize, suggest, report): {len(weights)} law(s) "
            + how,
            TABLE_WIDTH,
            subsequent_indent="  ",
        ),
        "  weights: " + ", ".join(f"{k} {weights[k]:.2f}" for k in order),
    ]
    lfo = json.loads(result.attrs.get("lfo_summary", "{}"))
    stacked = [k for k in order if weights[k] > 0]
    pairs = [
        f"{a}~{b} {lfo[a]['error_correlation'][b]:.2f}"
        for i, a in enumerate(stacked)
        for b in stacked[i + 1 :]
        if b in (lfo.get(a) or {}).get("error_correlation", {})
    ]
    if pairs:
        lines += textwrap.wrap(
            "intervals join the stacked laws' quantiles by the correlation of their "
            "leave-future-out errors (1 would average the quantiles): " + ", ".join(pairs),
            TABLE_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    rows = [
        (k, lfo[k]) for k in order if isinstance(lfo.get(k), dict) and "with_discrepancy" in lfo[k]
    ]
    if rows:
        folds = rows[0][1].get("folds", 0)
        lines += textwrap.wrap(
            f"leave-future-out check ({folds} fold(s): refit on the smaller budgets, predict "
            "the larger; coverage of 50%/90% intervals without -> with discrepancy, the latter "
            "in-sample for the discrepancy; `evaluate --lfo` gives the out-of-sample check):",
            TABLE_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
        name_w = max(len(k) for k, _ in rows)
        for k, r in rows:
            a, b = r["without_discrepancy"], r["with_discrepancy"]
            lines.append(
                f"    {k:<{name_w}} n={r['n']:<5} MRE {b['mre']:>5.1%}  cov50 {a['cov50']:.2f} -> "
                f"{b['cov50']:.2f}  cov90 {a['cov90']:.2f} -> {b['cov90']:.2f}"
            )
    rough = [
        f"{k} (Pareto k up to {lfo[k]['fold_pareto_k']:.2f})"
        for k in order
        if isinstance(lfo.get(k), dict)
        and lfo[k].get("fold_pareto_k", 0.0) > lfo[k].get("fold_pareto_k_max", np.inf)
    ]
    if rough:
        lines += textwrap.wrap(
            "the folds' Laplace refits are far from their posteriors for "
            + ", ".join(rough)
            + ": the discrepancies and weights above rest on them; `--lfo nuts` refits the "
            "folds by NUTS (minutes)",
            TABLE_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    disc = result.discrepancy("climb")
    if disc is not None:
        # the sd at 10x each language's largest fitted budget: a number in log-loss units
        sd10 = np.median(disc.tau, axis=0) * disc.distance_at(10.0 * disc.hi)
        src = "learned from leave-future-out residuals" if disc.source == "lfo" else "its prior"
        lines += textwrap.wrap(
            f"CLIMB extrapolation discrepancy ({src}): sd of log-loss at 10x the largest fitted "
            "budget "
            + ", ".join(f"{lang} {t:.3f}" for lang, t in zip(result.languages, sd10, strict=True)),
            TABLE_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    return lines


@click.command()
@click.argument("fit_file", type=click.Path(dir_okay=False, path_type=Path))
@strict_option
def summary(fit_file, strict):
    """Print the diagnostics and parameter summary of FIT_FILE."""
    click.echo(_summary_text(load_fit_checked(fit_file, strict)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(fit())

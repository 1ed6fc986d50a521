"""``climb-bayes evaluate``: fit laws on part of a runs table and score them on held-out runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from climb_bayes.cli._runs_table import (
    exclude_option,
    exclude_runs,
    families_option,
    lfo_cuts_option,
    read_fit_runs,
    runs_table_options,
)

__all__ = ["evaluate"]


def _echo(msg: str) -> None:
    click.echo(msg, err=True)


@click.command()
@click.argument("runs_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--holdout",
    "holdout_expr",
    default=None,
    metavar="EXPR",
    help="Held-out runs, e.g. 'tokens>=5e10', 'tokens>1e10 and r_en<0.5', "
    "'run_id~holdout' (fields: tokens, run_id, r_<group>; and/or/not).",
)
@click.option(
    "--holdout-runs",
    "holdout_runs",
    default=None,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File of held-out run ids (one per line, or a CSV with a run_id column).",
)
@click.option(
    "--holdout-mixtures",
    "holdout_mixtures",
    type=int,
    default=None,
    metavar="K",
    help="Hold out all runs of K random mixtures (see --seed).",
)
@exclude_option(
    "Leave runs out of both fitting and scoring (same language as --holdout), e.g. "
    "'run_id~broken or tokens<1e5'."
)
@click.option(
    "--lfo",
    "lfo",
    is_flag=True,
    help="Nested leave-future-out instead of a holdout: for each cut, run the whole `fit` "
    "pipeline (every law, inner-LFO discrepancy, stacking) on the budgets up to the cut and "
    "score the larger ones; prints coverage, CRPS and MRE per extrapolation ratio.",
)
@click.option(
    "--shipped",
    "shipped",
    is_flag=True,
    help="Score what `climb-bayes fit` ships on the held-out runs of --holdout, "
    "--holdout-runs or --holdout-mixtures: the whole pipeline (every law, its inner-LFO "
    "discrepancy, the stacking weights) fitted on the other runs, each law with its "
    "discrepancy and the stacked predictive scored per extrapolation ratio, as --lfo does. "
    "Without it each law's bare posterior (or MAP plug-in) is scored.",
)
@click.option(
    "--lfo-folds",
    type=int,
    default=3,
    show_default=True,
    help="Most outer cuts of --lfo (spread from the earliest to the latest).",
)
@click.option(
    "--inner-lfo",
    type=click.Choice(["laplace", "nuts", "map", "none"]),
    default="laplace",
    show_default=True,
    help="Inner leave-future-out refits of --lfo and --shipped that calibrate each law's "
    "discrepancy (as `fit --lfo`).",
)
@lfo_cuts_option(
    "With --shipped: where the inner leave-future-out refits on the fitted runs end (as `fit "
    "--lfo-cuts`; budget levels of the runs not held out)."
)
@click.option(
    "--laws",
    "laws_spec",
    default="climb,isolated,msl,dml",
    show_default=True,
    help="Comma-separated laws to compare.",
)
@click.option(
    "--method",
    type=click.Choice(["map", "nuts", "laplace"]),
    default="map",
    show_default=True,
    help="Point fit (multi-start Huber L-BFGS), posterior (NUTS) or Laplace approximation at "
    "the posterior mode, for every law.",
)
@families_option
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of --holdout-mixtures, the fit starts and NUTS.",
)
@click.option("--n-starts", type=int, default=8, show_default=True, help="L-BFGS starts (MAP).")
@click.option(
    "--chains",
    type=int,
    default=None,
    help="NUTS chains [default: 2; 4 with --lfo or --shipped, as `fit`].",
)
@click.option(
    "--warmup", type=int, default=500, show_default=True, help="NUTS warm-up iterations per chain."
)
@click.option(
    "--samples",
    type=int,
    default=None,
    help="NUTS draws kept, total over chains [default: 1000; 4000 with --lfo or --shipped, "
    "as `fit`].",
)
@click.option(
    "--target-accept",
    type=float,
    default=None,
    help="NUTS target acceptance of every law; raise it when a fit reports divergences "
    "[default: 0.95; with --lfo or --shipped each law's own, as `fit`: CLIMB and DML 0.98, "
    "Isolated and MSL 0.9].",
)
@click.option(
    "--priors",
    "priors_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Priors TOML (CLIMB priors; the noise model applies to every law).",
)
@runs_table_options("Comma-separated subset of groups.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option(
    "-o",
    "--out",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the JSON result to this file.",
)
def evaluate(
    runs_file: Path,
    holdout_expr: str | None,
    holdout_runs: Path | None,
    holdout_mixtures: int | None,
    exclude_expr: str | None,
    lfo: bool,
    shipped: bool,
    lfo_folds: int,
    inner_lfo: str,
    lfo_cuts: tuple[float, ...] | None,
    laws_spec: str,
    method: str,
    families_file: str,
    seed: int,
    n_starts: int,
    chains: int | None,
    warmup: int,
    samples: int | None,
    target_accept: float | None,
    priors_file: Path | None,
    where: dict[str, str] | None,
    tail_start: float | None,
    tail_average: int | None,
    renormalize: bool,
    languages: str | None,
    as_json: bool,
    out: Path | None,
) -> None:
    """Score laws on held-out runs of RUNS_FILE: R² (pooled and per group), Huber loss on
    log-loss and on loss, mean relative error, RMSLE, interval coverage, calibration error,
    CRPS and log predictive density.

    Every law is fitted on the runs that are not held out. Give exactly one of --holdout,
    --holdout-runs, --holdout-mixtures and --lfo; --exclude drops runs from both sides first.
    With --shipped (and always with --lfo) the scored predictive is the one `fit` ships: each
    law with its extrapolation discrepancy, and the stacked laws. Groups may be languages or
    domains.
    """
    import numpy as np

    from climb_bayes.data.holdout import holdout_mask, random_mixtures_mask, runs_file_mask
    from climb_bayes.data.observations import Observations
    from climb_bayes.errors import ClimbError
    from climb_bayes.evaluation.holdout_scores import evaluate_laws as run_evaluation
    from climb_bayes.evaluation.holdout_scores import format_table, rows_to_json
    from climb_bayes.inference.nuts import FIT_SAMPLER, NutsConfig
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.families import describe_families, resolve_families
    from climb_bayes.laws.registry import parse_laws
    from climb_bayes.model.priors import load_priors

    chosen = [x is not None for x in (holdout_expr, holdout_runs, holdout_mixtures)] + [lfo]
    if sum(chosen) != 1:
        raise ClimbError(
            "give exactly one of --holdout EXPR, --holdout-runs FILE, --holdout-mixtures K "
            "or --lfo (e.g. --holdout 'tokens>=5e10')."
        )
    if n_starts < 1:
        raise ClimbError(f"--n-starts must be >= 1, got {n_starts}.")
    if lfo and lfo_folds < 1:
        raise ClimbError(f"--lfo-folds must be >= 1, got {lfo_folds}.")
    if lfo_cuts is not None and not shipped:
        raise ClimbError(
            "--lfo-cuts sets the inner folds of --shipped (the outer folds of --lfo are "
            "--lfo-folds); add --shipped."
        )
    if shipped and lfo:
        raise ClimbError(
            "--lfo already scores what `fit` ships; --shipped goes with --holdout, "
            "--holdout-runs or --holdout-mixtures."
        )
    # the sampler of `fit` for the pipeline unless given; a lighter one for bare fits
    bare = NutsConfig(chains=2, warmup=500, samples=1000, target_accept=0.95)
    sampler = FIT_SAMPLER if lfo or shipped else bare
    chains = sampler.chains if chains is None else chains
    samples = sampler.samples if samples is None else samples
    if target_accept is None and sampler is bare:  # else each law's own, as `fit`
        target_accept = bare.target_accept
    if method == "nuts" and (chains < 1 or samples < chains or warmup < 1):
        raise ClimbError("NUTS needs --chains >= 1, --warmup >= 1 and --samples >= --chains.")
    parse_laws(laws_spec)  # validates names before reading the data
    priors = load_priors(priors_file)

    def held_out(table):
        """The held-out runs of ``table`` and how they were chosen (none with --lfo)."""
        if lfo:
            return np.zeros(table.n_runs, dtype=bool), "--lfo"
        if holdout_expr is not None:
            return holdout_mask(table, holdout_expr), f"--holdout {holdout_expr!r}"
        if holdout_runs is not None:
            return runs_file_mask(table, holdout_runs), f"--holdout-runs {holdout_runs}"
        mask = random_mixtures_mask(table, int(holdout_mixtures or 0), seed)
        return mask, f"--holdout-mixtures {holdout_mixtures} --seed {seed}"

    def fitted(table):
        kept = exclude_runs(table, exclude_expr, lambda _msg: None)[0]
        return kept.subset_runs(~held_out(kept)[0])

    runs = read_fit_runs(
        runs_file,
        tail_start=tail_start,
        tail_average=tail_average,
        renormalize=renormalize,
        languages=languages,
        where=where,
        fitted=fitted,
        echo=_echo,
    )
    family_choice = resolve_families(families_file, runs.languages)
    laws = parse_laws(laws_spec, families=family_choice.mapping)
    if any(law.name == "msl" for law in laws):
        _echo(describe_families(family_choice, runs.languages))
    runs, excluded = exclude_runs(runs, exclude_expr, _echo)
    options = FitOptions(
        seed=seed,
        n_starts=n_starts,
        chains=chains,
        warmup=warmup,
        samples=samples,
        target_accept=target_accept,
        priors=priors,
    )
    if lfo:
        _evaluate_lfo(runs, laws, options, method, lfo_folds, inner_lfo, as_json, out)
        return
    mask, how = held_out(runs)
    obs = Observations.from_runs(runs)
    fit_obs, test_obs = obs.select_runs(~mask), obs.select_runs(mask)
    test_runs = runs.subset_runs(mask)
    _echo(
        f"{runs.source}: {runs.n_languages} groups ({', '.join(runs.languages)}), "
        f"{runs.n_runs} runs"
    )
    _echo(
        f"held out ({how}): {int(mask.sum())} runs, {test_obs.n} observations; "
        f"fit on {int((~mask).sum())} runs, {fit_obs.n} observations"
    )
    continued = np.isin(runs.series[mask], runs.series[~mask])
    if continued.any():
        _echo(
            f"{int(continued.sum())} of the held-out runs are checkpoints of fitted training runs "
            "(run_series): predicted as those runs continued (their fitted deviation carried "
            "forward, as `predict --continue-run`), the others as new runs"
        )
    if runs.n_excluded_zero_share:
        _echo(
            f"zero-share losses left out of the table: {runs.n_excluded_zero_share} "
            f"({test_runs.n_excluded_zero_share} in held-out runs); CLIMB-family laws "
            "predict an unbounded loss there"
        )
    if shipped:
        _evaluate_shipped(
            obs, mask, runs, how, laws, options, method, inner_lfo, lfo_cuts, as_json, out
        )
        return
    rows, _fits = run_evaluation(
        fit_obs, test_obs, laws, method=method, options=options, dataset=str(runs_file), log=_echo
    )
    result = {
        "runs_file": str(runs_file),
        "holdout": how,
        "groups": list(runs.languages),
        "n_fit_runs": int((~mask).sum()),
        "n_test_runs": int(mask.sum()),
        "n_test_runs_continued": int(continued.sum()),
        "held_out_runs": [r for r, m in zip(runs.run_ids, mask, strict=True) if m],
        "excluded_runs": excluded,
        "n_zero_share_excluded": int(runs.n_excluded_zero_share),
        "method": method,
        "rows": rows_to_json(rows),
    }
    text = json.dumps(result, indent=1)
    if out is not None:
        from climb_bayes.atomic import atomic_write_text

        atomic_write_text(out, text + "\n")
        _echo(f"wrote {out}")
    if as_json:
        click.echo(text)
    else:
        click.echo(format_table(rows, markdown=False))
        if method == "map":
            click.echo(
                "coverage/cal.err/CRPS/LPD of MAP fits use a plug-in predictive "
                "(noise only, no parameter uncertainty)."
            )
        click.echo(
            "each law's bare fit: no extrapolation discrepancy, no stacking; the intervals "
            "`predict` shows are scored by --shipped."
        )
    sys.stdout.flush()


def _evaluate_lfo(
    runs: object,
    laws: list,
    options: object,
    method: str,
    lfo_folds: int,
    inner_lfo: str,
    as_json: bool,
    out: Path | None,
) -> None:
    """``evaluate --lfo``: nested leave-future-out over the budgets of ``runs``."""
    from climb_bayes.data.observations import Observations
    from climb_bayes.evaluation.lfo_evaluate import evaluate_lfo
    from climb_bayes.inference.ensemble import shipped_options

    obs = Observations.from_runs(runs)
    _echo(
        f"{runs.source}: {runs.n_languages} groups ({', '.join(runs.languages)}), "
        f"{runs.n_runs} runs; nested leave-future-out, outer fits by {method}, inner "
        f"discrepancy folds by {inner_lfo}"
    )
    result = evaluate_lfo(
        obs, laws, options, shipped_options(method, inner_lfo), max_folds=lfo_folds, log=_echo
    )
    head = {"runs_file": str(runs.source), "method": method, "inner_lfo": inner_lfo}
    _print_pipeline_result(result, head, as_json, out)


def _evaluate_shipped(
    obs: object,
    mask: object,
    runs: object,
    how: str,
    laws: list,
    options: object,
    method: str,
    inner_lfo: str,
    lfo_cuts: tuple[float, ...] | None,
    as_json: bool,
    out: Path | None,
) -> None:
    """``evaluate --holdout ... --shipped``: the ``fit`` pipeline on the runs that are not held
    out, scored on the held-out ones."""
    from climb_bayes.evaluation.lfo_evaluate import evaluate_extrapolation
    from climb_bayes.inference.ensemble import shipped_options

    _echo(
        f"scoring what `fit` ships: every law by {method} with its discrepancy (inner folds by "
        f"{inner_lfo}) and the stacked predictive"
    )
    result = evaluate_extrapolation(
        obs.select_runs(~mask),
        obs.select_runs(mask),
        laws,
        options,
        shipped_options(method, inner_lfo, lfo_cuts=lfo_cuts),
        log=_echo,
    )
    head = {
        "runs_file": str(runs.source),
        "holdout": how,
        "held_out_runs": [r for r, m in zip(runs.run_ids, mask, strict=True) if m],
        "method": method,
        "inner_lfo": inner_lfo,
        "inner_lfo_cuts": None if lfo_cuts is None else list(lfo_cuts),
    }
    _print_pipeline_result(result, head, as_json, out)


def _print_pipeline_result(result: object, head: dict, as_json: bool, out: Path | None) -> None:
    """The table (or JSON) of a pipeline evaluation, the stacking weights of each outer fit and
    a warning for every outer fit that did not pass its checks."""
    from climb_bayes.evaluation.lfo_evaluate import (
        calibration_lines,
        fold_warnings,
        format_lfo_table,
        row_records,
    )

    warnings = fold_warnings(result)
    payload = head | {
        "folds": result.folds,
        "rows": row_records(result),
        "calibration": calibration_lines(result),
        "warnings": warnings,
    }
    text = json.dumps(payload, indent=1, default=float)
    if out is not None:
        from climb_bayes.atomic import atomic_write_text

        atomic_write_text(out, text + "\n")
        _echo(f"wrote {out}")
    if as_json:
        click.echo(text)
        for line in warnings:  # the JSON has them too; a reader of the terminal sees them
            _echo(line)
    else:
        click.echo(format_lfo_table(result))
        for f, fold in enumerate(result.folds):
            weights = ", ".join(
                f"{k} {w:.2f}" for k, w in sorted(fold["weights"].items(), key=lambda kv: -kv[1])
            )
            label = (
                f"outer fold {f + 1} (fit <= {fold['cut']:.3g})"
                if len(result.folds) > 1
                else (f"fit <= {fold['cut']:.3g}")
            )
            click.echo(f"stacking weights, {label}: {weights}")
        for line in payload["calibration"]:
            click.echo(line)
        for line in warnings:
            click.echo(line)
    sys.stdout.flush()

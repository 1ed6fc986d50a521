"""Click options and reading shared by the commands that take a runs table (``fit``,
``evaluate``): the kept tail of each curve, tail averaging, renormalisation, a group subset,
runs left out by an expression, MSL's families file and where the inner leave-future-out
refits end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = [
    "runs_table_options",
    "families_option",
    "FAMILIES_HELP",
    "read_runs_table",
    "read_fit_runs",
    "exclude_option",
    "exclude_runs",
    "lfo_cuts_option",
]

F = TypeVar("F", bound=Callable[..., Any])


def _parse_where(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]):
    where: dict[str, str] = {}
    for item in value:
        column, sep, wanted = item.partition("=")
        if not sep or not column.strip() or not wanted.strip():
            raise click.BadParameter(
                f"{item!r} is not COLUMN=VALUE (e.g. --where model_size_label=70M)."
            )
        if column.strip() in where:
            raise click.BadParameter(f"column {column.strip()!r} is selected twice.")
        where[column.strip()] = wanted.strip()
    return where or None


def runs_table_options(languages_help: str) -> Callable[[F], F]:
    """``--where``, ``--tail-start``, ``--tail-average``, ``--renormalize``, ``--languages``
    (in this order)."""
    options = [
        click.option(
            "--where",
            multiple=True,
            metavar="COLUMN=VALUE",
            callback=_parse_where,
            help="Keep only the table's rows whose COLUMN holds VALUE (text, or an equal "
            "number); repeat to combine. E.g. one model of a table that holds several: "
            "--where model_size_label=70M.",
        ),
        click.option(
            "--tail-start",
            type=float,
            default=None,
            help="Keep curve points with tokens_seen >= this fraction of the budget. Default "
            "0.85, except for a fit over two budget levels whose runs' tails fall unlike the "
            "runs across budgets (a learning-rate decay): each run's final point only (0.99; "
            "docs/model.md).",
        ),
        click.option(
            "--tail-average",
            type=int,
            default=None,
            metavar="K",
            help="Average each run's last K evaluation points into one observation (the CLIMB "
            "paper averages the final 3 training steps).",
        ),
        click.option(
            "--renormalize", is_flag=True, help="Rescale mixture proportions to sum to 1."
        ),
        click.option("--languages", default=None, help=languages_help),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


FAMILIES_HELP = (
    "Language families for MSL's per-family form: 'auto' (the shipped table of common "
    "languages; unknown groups on their own), 'none' (per language), or a file (CSV "
    "group,family or JSON)."
)

families_option = click.option(
    "--families",
    "families_file",
    default="auto",
    show_default=True,
    metavar="auto|none|FILE",
    help=FAMILIES_HELP,
)
"""``--families auto|none|FILE`` (MSL's families; :mod:`climb_bayes.laws.families`)."""


def read_runs_table(
    runs_file: Path,
    *,
    tail_start: float,
    tail_average: int | None,
    renormalize: bool,
    languages: str | None,
    where: dict[str, str] | None = None,
) -> Any:
    """:func:`climb_bayes.data.runs.read_runs` with the options of :func:`runs_table_options`."""
    from climb_bayes.data.runs import read_runs

    langs = [s.strip() for s in languages.split(",")] if languages else None
    return read_runs(
        runs_file,
        tail_start=tail_start,
        renormalize=renormalize,
        languages=langs,
        tail_average=tail_average,
        where=where,
    )


def read_fit_runs(
    runs_file: Path,
    *,
    tail_start: float | None,
    tail_average: int | None,
    renormalize: bool,
    languages: str | None,
    where: dict[str, str] | None,
    fitted: Callable[[Any], Any],
    echo: Callable[[str], None],
) -> Any:
    """:func:`read_runs_table` with ``--tail-start`` left to the data (``tail_start=None``).

    The runs are read with the default tail (0.85); where the runs a law will be fitted on,
    ``fitted(runs)`` (after ``--exclude`` and any held-out runs), span two budget levels and
    their tails fall unlike the runs across budgets
    (:func:`climb_bayes.data.tail_slopes.misleading_tails`), the table is read again keeping
    each run's final point only, and ``echo`` says why. A given ``tail_start`` or
    ``tail_average`` is used as it is.
    """
    from climb_bayes.data.runs import DEFAULT_TAIL_START
    from climb_bayes.data.tail_slopes import FINAL_POINT_TAIL, misleading_tails
    from climb_bayes.inference.lfo import MIN_FIT_LEVELS, budget_levels

    def read(tail: float) -> Any:
        return read_runs_table(
            runs_file,
            tail_start=tail,
            tail_average=tail_average,
            renormalize=renormalize,
            languages=languages,
            where=where,
        )

    if tail_start is not None:
        return read(tail_start)
    runs = read(DEFAULT_TAIL_START)
    if tail_average is not None:
        return runs
    chosen = fitted(runs)
    if budget_levels(chosen.run_budgets).size != MIN_FIT_LEVELS:
        return runs
    slopes = misleading_tails(chosen)
    if slopes is None:
        return runs
    echo(
        f"tail: two budget levels whose runs' tails fall at {slopes.median_ratio:.2f}x the "
        "slope across budgets (median over groups; the learning-rate schedule, not the law): "
        f"fitting each run's final point only (tail_start {FINAL_POINT_TAIL}), which "
        "extrapolated 1.3-3x better on our own two-budget runs (docs/model.md); "
        f"--tail-start {DEFAULT_TAIL_START} keeps the tails"
    )
    return read(FINAL_POINT_TAIL)


def exclude_option(help_text: str) -> Callable[[F], F]:
    """``--exclude EXPR``: runs left out by an expression of :mod:`climb_bayes.data.holdout`."""
    return click.option("--exclude", "exclude_expr", default=None, metavar="EXPR", help=help_text)


def exclude_runs(runs: Any, expr: str | None, echo: Callable[[str], None]) -> tuple[Any, list[str]]:
    """Drop the runs ``expr`` selects (``--exclude``); returns the kept runs and the dropped ids.

    Raises :class:`climb_bayes.errors.ClimbError` (exit 2) naming the expression when it cannot
    be parsed or selects every run.
    """
    if expr is None:
        return runs, []
    from climb_bayes.data.holdout import exclude_mask

    drop = exclude_mask(runs, expr)
    excluded = [r for r, d in zip(runs.run_ids, drop, strict=True) if d]
    echo(f"excluded (--exclude {expr!r}): {len(excluded)} runs")
    return runs.subset_runs(~drop), excluded


def _parse_cuts(ctx: click.Context, param: click.Parameter, value: str | None):
    if value is None:
        return None
    try:
        cuts = tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a comma-separated list of token counts (e.g. 2.5e5,5e5)."
        ) from None
    if not cuts or any(not c > 0 for c in cuts):
        raise click.BadParameter(f"{value!r}: give one or more positive token counts.")
    return cuts


def lfo_cuts_option(help_text: str) -> Callable[[F], F]:
    """``--lfo-cuts D1,D2,...``: where the inner leave-future-out refits end (tokens), parsed
    into a tuple of floats (a usage error, exit 2, for anything else); a cut that is not a
    budget level of the data is refused later naming the levels."""
    return click.option(
        "--lfo-cuts", "lfo_cuts", default=None, metavar="D1,D2,...", callback=_parse_cuts,
        help=help_text,
    )  # fmt: skip

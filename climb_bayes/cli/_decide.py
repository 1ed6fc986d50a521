"""Shared helpers of the decision commands (``predict``, ``optimize``, ``plan``, ``suggest``):
parsing budgets and levels, loading a fit, printing tables and writing outputs atomically."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import click
import numpy as np
import pandas as pd

from climb_bayes.errors import ClimbError
from climb_bayes.viz.fit_text import DISCREPANCY_SOURCE_WORDS, TEXT_WIDTH

__all__ = [
    "echo_err",
    "predictive_line",
    "unchecked_extrapolation_warning",
    "parse_budget",
    "parse_budgets",
    "parse_levels",
    "load_fit_checked",
    "strict_option",
    "fit_header",
    "fmt_tokens",
    "fmt_interval",
    "render_table",
    "render_matrix",
    "TABLE_WIDTH",
    "write_frame",
    "write_json",
]

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def echo_err(msg: str) -> None:
    """A progress or note line on stderr."""
    click.echo(msg, err=True)


def parse_budget(text: str, option: str = "--budget") -> float:
    """A token budget: ``1e12``, ``1000000000000``, ``100B``, ``1T``, ``300M`` (> 0)."""
    t = str(text).strip().replace("_", "")
    scale = 1.0
    if t and t[-1].lower() in _SUFFIX:
        scale, t = _SUFFIX[t[-1].lower()], t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        several = "," in t and option == "--budget"
        raise ClimbError(
            f"{option}: {text!r} is not a number of tokens (write e.g. 1e12 or 1T"
            + ("; for several budgets use --budgets " + t.replace(" ", "") if several else "")
            + ")."
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise ClimbError(f"{option}: budgets must be positive numbers of tokens, got {text!r}.")
    return value


def parse_budgets(text: str, option: str = "--budgets") -> list[float]:
    """Comma-separated budgets (see :func:`parse_budget`)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ClimbError(f"{option}: give at least one budget, e.g. 1e10,1e11,1e12.")
    return [parse_budget(p, option) for p in parts]


def parse_levels(text: str) -> tuple[float, ...]:
    """Comma-separated interval levels in (0, 1) (``90%`` is read as 0.9)."""
    out = []
    for p in [x.strip() for x in str(text).split(",") if x.strip()]:
        pct = p.endswith("%")
        try:
            v = float(p.rstrip("%")) / (100.0 if pct else 1.0)
        except ValueError:
            raise ClimbError(f"--levels: {p!r} is not a number.") from None
        if not 0.0 < v < 1.0:
            raise ClimbError(f"--levels: levels must be in (0, 1) (or percentages), got {p}.")
        out.append(v)
    if not out:
        raise ClimbError("--levels: give at least one level, e.g. 0.5,0.9.")
    return tuple(sorted(set(out)))


strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Refuse (exit 2) when the fit failed its checks (convergence; a Laplace fit's Pareto k), "
    "instead of warning.",
)
"""The ``--strict`` flag of every command that reads a fit file."""


def load_fit_checked(path: Path, strict: bool = False) -> object:
    """Load a fit file and pass it through the convergence gate.

    :func:`climb_bayes.inference.fitresult.load_fit` (its errors are already user-facing), then
    :func:`climb_bayes.inference.convergence.fit_gate`: one warning line on stderr when any stacked
    law or CLIMB's posterior failed its checks, or a :class:`ClimbError` (exit 2) under ``strict``.
    """
    from climb_bayes.inference.convergence import fit_gate
    from climb_bayes.inference.fitresult import load_fit

    fit = load_fit(path)
    gate = fit_gate(fit)
    if not gate.ok:
        if strict:
            fix = f" Fix: {gate.fix[0].lower()}{gate.fix[1:]}." if gate.fix else ""
            raise ClimbError(
                f"--strict: fit {path} {gate.verdict} ({'; '.join(gate.problems)}).{fix}"
            )
        echo_err(gate.warning(path))
    return fit


def fmt_tokens(tokens: float) -> str:
    """``1e12 -> '1T'``, ``2.5e10 -> '25B'``."""
    from climb_bayes.data.design import format_budget

    return format_budget(float(tokens))


def fit_header(fit: object, path: Path) -> str:
    """One line describing a fit: method, draws, likelihood, fitted budgets."""
    runs = fit.runs
    budgets = np.unique(np.asarray(runs.run_budgets))
    pri = fit.priors
    lik = "Normal"
    if pri.learned_df:
        lik = "Student-t(df learned per language)"
    elif pri.likelihood == "student_t":
        lik = f"Student-t(df={pri.fixed_df:g})"
    kind = fit.method_label + (" (no parameter uncertainty)" if fit.method == "map" else "")
    return (
        f"fit {path}: {kind}, {fit.n_draws} draw(s), {len(fit.languages)} languages "
        f"({', '.join(fit.languages)}); noise {lik} on log-loss; fitted budgets "
        f"{', '.join(fmt_tokens(b) for b in budgets)}"
    )


def fmt_interval(lo: float, hi: float, digits: int = 4) -> str:
    """``[lo, hi]`` with ``digits`` decimals (``inf`` kept)."""

    def f(x: float) -> str:
        return "inf" if np.isinf(x) else ("nan" if np.isnan(x) else f"{x:.{digits}f}")

    return f"[{f(lo)}, {f(hi)}]"


def _column_blocks(widths: Sequence[int], used: int, width: int, first: int) -> list[list[int]]:
    """Split columns (``widths``, each printed after two spaces, numbered from ``first``) into
    consecutive blocks that fit ``width`` after ``used`` columns of labels; at least one column
    per block, and one (empty) block when there are no columns."""
    blocks, start = [], 0
    while start < len(widths) or not blocks:
        stop, total = start, used
        while stop < len(widths) and (stop == start or total + widths[stop] + 2 <= width):
            total += widths[stop] + 2
            stop += 1
        blocks.append([first + j for j in range(start, stop)])
        start = stop
    return blocks


def render_table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str],
    indent: str = "  ",
    width: int | None = None,
) -> str:
    """Plain-text table with left-aligned first column and right-aligned others.

    Columns are sized to their content. When the table is wider than ``width`` (default
    :data:`TABLE_WIDTH`), the columns after the first are split into blocks that each fit,
    every block repeating the first column.
    """
    width = TABLE_WIDTH if width is None else width
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[j]) for row in cells) for j in range(len(header))]
    blocks = [[0, *cols] for cols in _column_blocks(widths[1:], len(indent) + widths[0], width, 1)]
    lines = []
    for b, cols in enumerate(blocks):
        if b:
            lines.append("")
        for k, row in enumerate(cells):
            parts = [row[j].ljust(widths[j]) if j == 0 else row[j].rjust(widths[j]) for j in cols]
            lines.append(indent + "  ".join(parts).rstrip())
            if k == 0:
                lines.append(indent + "  ".join("-" * widths[j] for j in cols))
    return "\n".join(lines)


TABLE_WIDTH = TEXT_WIDTH
"""Terminal columns the wide tables (transfer matrices) are laid out for (the wrapped text's
width, :data:`climb_bayes.viz.fit_text.TEXT_WIDTH`)."""


def render_matrix(
    names: Sequence[str],
    values: np.ndarray,
    *,
    corner: str = "",
    fmt: str = "{:.3f}",
    width: int = TABLE_WIDTH,
    indent: str = "",
) -> str:
    """A square matrix (rows and columns named by ``names``; diagonal shown as ``-``).

    Columns are headed by the full names when the table fits in ``width`` columns; otherwise
    by numbers ``[1]..[m]`` that the row labels repeat (the legend), and split into blocks of
    columns that each fit ``width``.
    """
    m = len(names)
    cells = [["-" if i == j else fmt.format(values[i, j]) for j in range(m)] for i in range(m)]
    cell_w = max(len(c) for row in cells for c in row)
    full_w = len(indent) + max(len(corner), *(len(n) for n in names))
    full_w += sum(max(cell_w, len(n)) + 2 for n in names)
    if full_w <= width:
        heads, labels = list(names), list(names)
    else:
        heads = [f"[{j + 1}]" for j in range(m)]
        labels = [f"[{i + 1}] {n}" for i, n in enumerate(names)]
    label_w = max(len(corner), *(len(x) for x in labels))
    col_w = [max(cell_w, len(h)) for h in heads]
    blocks = _column_blocks(col_w, len(indent) + label_w, width, 0)
    lines = []
    for k, cols in enumerate(blocks):
        if k:
            lines.append("")
        lines.append(
            indent + corner.ljust(label_w) + "".join(f"  {heads[j]:>{col_w[j]}}" for j in cols)
        )
        for i in range(m):
            lines.append(
                indent + labels[i].ljust(label_w)
                + "".join(f"  {cells[i][j]:>{col_w[j]}}" for j in cols)
            )  # fmt: skip
    return "\n".join(lines)


def _atomic_text(path: Path, text: str) -> None:
    from climb_bayes.atomic import atomic_write_text

    atomic_write_text(path, text)


def write_frame(df: pd.DataFrame, path: Path) -> None:
    """Write a table atomically as CSV (``.csv``) or JSON records (``.json``)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        _atomic_text(path, df.to_csv(index=False))
    elif suffix == ".json":
        _atomic_text(path, df.to_json(orient="records", indent=1))
    else:
        raise ClimbError(f"--out {path}: use a .csv or .json file name.")


def write_json(obj: object, path: Path) -> None:
    """Write a JSON document atomically (non-finite numbers become null)."""

    def clean(x: object) -> object:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        if isinstance(x, np.generic):
            return clean(x.item())
        return x

    _atomic_text(path, json.dumps(clean(obj), indent=1))


def _combine_text(ens: object, combine: str) -> str:
    """How the stacked laws' intervals are combined: the mixture, the quantile average, or the
    quantiles joined at the laws' measured error correlation (``LawEnsemble._combined``)."""
    if combine != "quantile":
        return "intervals of the mixture of the laws"
    names = [k for k in sorted(ens.weights, key=lambda k: -ens.weights[k]) if ens.weights[k] > 0]
    corr = ens.error_correlation(names)
    pairs = [
        f"{a}~{b} {corr[i, j]:.2f}"
        for i, a in enumerate(names)
        for j, b in enumerate(names)
        if j > i and corr[i, j] < 1.0
    ]
    if not pairs:
        return "intervals average the laws' quantiles"
    return (
        "intervals join the laws' quantiles at the correlation of their leave-future-out "
        "errors (" + ", ".join(pairs) + ")"
    )


WEIGHT_METHOD_WORDS = {
    "lfo-bootstrap-stacking": "weights by leave-future-out stacking",
    "lfo-stacking": "weights by leave-future-out stacking, points independent",
    "loo-stacking": "weights by PSIS-LOO stacking: extrapolation not checked",
}
"""How the weights were found (:data:`climb_bayes.inference.ensemble.WEIGHT_METHODS`), in words."""


def unchecked_extrapolation_warning(
    ens: object, budgets: Sequence[float], fitted_max: float
) -> str:
    """A ``WARNING:`` line when a budget lies beyond the largest fitted one and the fit had no
    leave-future-out folds (fewer than three budget levels, or ``--lfo none``), else ``""``.

    Without folds each law's extrapolation discrepancy is its prior's and the stacking weights
    come from PSIS-LOO, which scores the fitted budgets: nothing on the user's runs has checked
    the extrapolation. Measured on published checkpoints fitted at two budget levels and scored
    beyond them (docs/model.md, "K-fold over runs"): 5Mix-70M fitted at 6k and 12k steps and
    scored at 20k-100k (NUTS, the four laws stacked by PSIS-LOO), the stacked 50% / 90% intervals
    covered 0.24 / 0.36 of the losses (MRE 3.1%); RedPajama-70M, fitted at 10k and 16k and scored
    at 24k-30k, 0.53 / 1.00 (Laplace). Nothing in a fit without folds tells these apart.
    """
    lfo = getattr(ens, "lfo", None) or {}
    folds = [v["folds"] for v in lfo.values() if isinstance(v, dict) and "folds" in v]
    top = max(budgets) / fitted_max if len(budgets) else 0.0
    if not folds or max(folds) > 0 or top <= 1.0:
        return ""
    return (
        f"WARNING: D up to {top:.3g}x the largest fitted budget, and the fit had no "
        "leave-future-out folds (fewer than three budget levels, or --lfo none), so nothing on "
        "these runs has checked how the laws extrapolate: the intervals may be far too narrow "
        "(published runs fitted at two budget levels and scored at up to 8x: 90% intervals "
        "covered 0.36; docs/model.md). Add runs at a third budget."
    )


def predictive_line(ens: object, combine: str | None = None) -> str:
    """One line naming the predictive: the stacked laws and weights, or the single law; with
    ``combine`` (``predict``), how the laws' intervals are combined."""
    note = ens.lfo.get("note") if isinstance(ens.lfo, dict) else None
    if len(ens.weights) == 1:
        name = next(iter(ens.weights))
        line = f"predictive: {name} alone"
        if ens.fits[name].method == "laplace":
            line += (
                " (its Laplace approximation: `fit` samples no law of stacking weight < 0.01; "
                "`fit --nuts-all-laws` does)"
            )
    else:
        order = sorted(ens.weights, key=lambda k: -ens.weights[k])
        line = (
            "predictive: stacked laws ("
            + ", ".join(f"{k} {ens.weights[k]:.2f}" for k in order)
            + f"; {WEIGHT_METHOD_WORDS.get(ens.weight_method, ens.weight_method)}); --law NAME "
            "for one law"
        )
        if combine is not None and sum(w > 0 for w in ens.weights.values()) > 1:
            line += "; " + _combine_text(ens, combine)
    disc = [k for k, f in ens.fits.items() if f.discrepancy is not None]
    if disc:
        src = {ens.fits[k].discrepancy.source for k in disc}
        words = (DISCREPANCY_SOURCE_WORDS.get(x, x) for x in sorted(src))
        line += "; extrapolation discrepancy " + " / ".join(words)
    return line + (f"\nnote: {note}" if note else "")

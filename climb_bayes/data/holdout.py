"""Choosing held-out runs: expressions (``tokens>=5e10``), run-id lists and random mixtures.

Expression grammar (case-insensitive keywords)::

    expr       := term ("or" term)*
    term       := factor ("and" factor)*
    factor     := "not" factor | "(" expr ")" | comparison
    comparison := FIELD OP VALUE

Fields: ``tokens`` (alias ``budget``: the run's total budget in tokens), ``run_id`` and
``r_<group>`` (the run's share of a group, e.g. ``r_en``). Operators: ``>= <= > < == = !=`` and,
for ``run_id``, ``~`` / ``!~`` (regular-expression search). Numbers may use exponents (``5e10``)
or the suffixes K, M, B, T (``50B`` = ``5e10``); ``run_id`` values may be quoted.

Examples: ``tokens>=5e10``, ``tokens>1e10 and r_en<0.5``, ``run_id~holdout``,
``not run_id~mono``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from climb_bayes.data.runs import RunsData
from climb_bayes.errors import ClimbError

__all__ = [
    "parse_holdout",
    "holdout_mask",
    "exclude_mask",
    "runs_file_mask",
    "random_mixtures_mask",
    "split_runs",
]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<lpar>\() | (?P<rpar>\)) |
        (?P<op>>=|<=|==|!=|!~|>|<|=|~) |
        (?P<str>"[^"]*"|'[^']*') |
        (?P<word>[^\s()<>=!~"']+)
    )""",
    re.VERBOSE,
)
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_EXAMPLES = "e.g. 'tokens>=5e10', 'tokens>1e10 and r_en<0.5', 'run_id~holdout'"

Predicate = Callable[[RunsData], np.ndarray]


def _fail(expr: str, problem: str, pos: int | None = None) -> ClimbError:
    where = f" at position {pos + 1}" if pos is not None else ""
    return ClimbError(f"--holdout {expr!r}: {problem}{where}. Write {_EXAMPLES}.")


def _tokenize(expr: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        mt = _TOKEN.match(expr, pos)
        if mt is None or mt.end() == pos:
            raise _fail(expr, f"unexpected character {expr[pos:].lstrip()[:1]!r}", pos)
        kind = mt.lastgroup or ""
        start = mt.start(kind)
        out.append((kind, mt.group(kind), start))
        pos = mt.end()
    return out


def _number(expr: str, text: str, pos: int) -> float:
    t = text.strip().lower()
    scale = 1.0
    if t and t[-1] in _SUFFIX and not t.endswith("e"):
        scale, t = _SUFFIX[t[-1]], t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise _fail(expr, f"{text!r} is not a number", pos) from None
    if not np.isfinite(value):
        raise _fail(expr, f"{text!r} is not a finite number", pos)
    return value


_NUM_OPS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    ">=": np.greater_equal,
    "<=": np.less_equal,
    ">": np.greater,
    "<": np.less,
    "==": np.equal,
    "=": np.equal,
    "!=": np.not_equal,
}


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = _tokenize(expr)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise _fail(self.expr, "the expression ends too early")
        self.i += 1
        return tok

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "word" and tok[1].lower() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> Predicate:
        if not self.toks:
            raise _fail(self.expr, "the expression is empty")
        pred = self.parse_or()
        tok = self.peek()
        if tok is not None:
            raise _fail(
                self.expr, f"unexpected {tok[1]!r} (expected 'and', 'or' or the end)", tok[2]
            )
        return pred

    def parse_or(self) -> Predicate:
        parts = [self.parse_and()]
        while self.keyword("or"):
            parts.append(self.parse_and())
        if len(parts) == 1:
            return parts[0]
        return lambda runs: np.logical_or.reduce([p(runs) for p in parts])

    def parse_and(self) -> Predicate:
        parts = [self.parse_factor()]
        while self.keyword("and"):
            parts.append(self.parse_factor())
        if len(parts) == 1:
            return parts[0]
        return lambda runs: np.logical_and.reduce([p(runs) for p in parts])

    def parse_factor(self) -> Predicate:
        if self.keyword("not"):
            inner = self.parse_factor()
            return lambda runs: ~inner(runs)
        tok = self.peek()
        if tok is not None and tok[0] == "lpar":
            self.take()
            inner = self.parse_or()
            close = self.peek()
            if close is None or close[0] != "rpar":
                raise _fail(self.expr, "missing ')'", tok[2])
            self.take()
            return inner
        return self.parse_comparison()

    def parse_comparison(self) -> Predicate:
        kind, field, pos = self.take()
        if kind != "word" or field.lower() in ("and", "or", "not"):
            raise _fail(
                self.expr, f"expected a field (tokens, run_id, r_<group>), got {field!r}", pos
            )
        okind, op, opos = self.take()
        if okind != "op":
            raise _fail(
                self.expr,
                f"expected an operator (>=, <=, >, <, ==, !=, ~) after {field!r}, got {op!r}",
                opos,
            )
        vkind, value, vpos = self.take()
        if vkind not in ("word", "str"):
            raise _fail(self.expr, f"expected a value after {op!r}, got {value!r}", vpos)
        name = field.lower()
        expr = self.expr
        if name == "run_id":
            text = value[1:-1] if vkind == "str" else value
            if op in ("~", "!~"):
                try:
                    rx = re.compile(text)
                except re.error as exc:
                    raise _fail(expr, f"bad regular expression {text!r} ({exc})", vpos) from None
                neg = op == "!~"
                return lambda runs: np.array(
                    [bool(rx.search(r)) != neg for r in runs.run_ids], dtype=bool
                )
            if op in ("==", "="):
                return lambda runs: np.array([r == text for r in runs.run_ids], dtype=bool)
            if op == "!=":
                return lambda runs: np.array([r != text for r in runs.run_ids], dtype=bool)
            raise _fail(expr, f"run_id takes ==, !=, ~ or !~, not {op!r}", opos)
        if op in ("~", "!~"):
            raise _fail(expr, f"'~' applies to run_id only, not {field!r}", opos)
        if vkind == "str":
            raise _fail(expr, f"{field!r} compares with a number, got {value}", vpos)
        num = _number(expr, value, vpos)
        fn = _NUM_OPS[op]
        if name in ("tokens", "budget", "budget_tokens"):
            return lambda runs: fn(np.asarray(runs.run_budgets), num)
        if name.startswith("r_") and len(field) > 2:
            group = field[2:]

            def share(runs: RunsData) -> np.ndarray:
                if group not in runs.languages:
                    raise ClimbError(
                        f"--holdout {expr!r}: no group {group!r} in the runs table (it has "
                        f"{', '.join(runs.languages)})."
                    )
                return fn(np.asarray(runs.run_proportions[:, runs.languages.index(group)]), num)

            return share
        raise _fail(
            expr, f"unknown field {field!r} (known: tokens, budget, run_id, r_<group>)", pos
        )


def parse_holdout(expr: str) -> Predicate:
    """Compile a holdout expression into ``runs -> (n_runs,) bool`` (True = held out).

    Raises
    ------
    ClimbError
        With the position and an example, for anything the grammar does not accept.
    """
    return _Parser(str(expr)).parse()


def _check_split(mask: np.ndarray, what: str) -> np.ndarray:
    if not mask.any():
        raise ClimbError(f"{what} holds out no runs; loosen it.")
    if mask.all():
        raise ClimbError(f"{what} holds out every run, leaving none to fit; tighten it.")
    return mask


def holdout_mask(runs: RunsData, expr: str) -> np.ndarray:
    """``(n_runs,)`` mask of the runs an expression holds out (errors if none or all)."""
    mask = np.asarray(parse_holdout(expr)(runs), dtype=bool)
    return _check_split(mask, f"--holdout {expr!r}")


def exclude_mask(runs: RunsData, expr: str) -> np.ndarray:
    """``(n_runs,)`` mask of the runs ``--exclude EXPR`` drops from fitting *and* scoring.

    Same expression language as :func:`holdout_mask`; excluding nothing is allowed (a
    no-op), excluding every run is an error.
    """
    mask = np.asarray(parse_holdout(expr)(runs), dtype=bool)
    if mask.all():
        raise ClimbError(f"--exclude {expr!r} excludes every run, leaving nothing; tighten it.")
    return mask


def runs_file_mask(runs: RunsData, path: str | Path) -> np.ndarray:
    """Runs listed in a file: one run id per line, or a CSV with a ``run_id`` column.

    Blank lines and lines starting with ``#`` are ignored. Unknown ids are an error.
    """
    path = Path(path)
    if not path.is_file():
        raise ClimbError(f"{path}: holdout runs file not found.")
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if lines and lines[0].split(",")[0].strip() == "run_id":
        import pandas as pd

        ids = pd.read_csv(path, dtype=str, comment="#")["run_id"].dropna().str.strip().tolist()
    else:
        ids = lines
    unknown = sorted(set(ids) - set(runs.run_ids))
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ClimbError(f"{path}: run id(s) not in the runs table: {shown}.")
    wanted = set(ids)
    mask = np.array([r in wanted for r in runs.run_ids], dtype=bool)
    return _check_split(mask, f"--holdout-runs {path}")


def random_mixtures_mask(runs: RunsData, k: int, seed: int = 0) -> np.ndarray:
    """Hold out every run of ``k`` mixtures drawn at random (all budgets of each mixture).

    Mixtures are compared after rounding the shares to 9 decimals.
    """
    inverse = runs.run_mixture
    n_mixes = int(inverse.max()) + 1 if inverse.size else 0
    if k < 1:
        raise ClimbError(f"--holdout-mixtures must be >= 1, got {k}.")
    if k >= n_mixes:
        raise ClimbError(
            f"--holdout-mixtures {k}: the table has only {n_mixes} distinct mixtures; "
            "hold out fewer so some remain to fit."
        )
    chosen = np.random.default_rng(seed).choice(n_mixes, size=k, replace=False)
    return _check_split(np.isin(inverse, chosen), f"--holdout-mixtures {k}")


def split_runs(runs: RunsData, mask: np.ndarray) -> tuple[RunsData, RunsData]:
    """``(fit, test)`` runs tables from a held-out mask."""
    mask = np.asarray(mask, dtype=bool)
    return runs.subset_runs(~mask), runs.subset_runs(mask)

"""Parsing mixtures, weights and per-language values given on the command line.

A **mixture spec** (``--mixture``) is one of

* shares inline: ``en=0.3,de=0.2,zh=0.5`` (every language of the fit, shares summing to 1;
  ``30%`` is read as 0.3; write ``zh=0`` to leave a language out);
* a file: JSON ``{"en": 0.3, ...}``; CSV with columns ``language,share`` (one row per language);
  or a plan/runs CSV with ``r_<lang>`` columns, either with one row or picking a row with
  ``FILE#run_id``;
* a name: ``uniform``, ``natural``, ``temperature`` (or ``temperature:0.5`` for ``tau``),
  ``unimax`` (or ``unimax:4`` for the epoch cap), ``isolated`` (the optimum of the
  no-transfer law at the budget, using the fit's posterior medians of ``B`` and ``beta``); see
  :mod:`climb_bayes.decisions.baselines`. ``natural``, ``temperature`` and ``unimax`` need token
  counts (an availability file).

Shares within 1e-3 of summing to 1 are renormalised (rounding); larger deviations, negative or
missing shares and languages the fit does not know are errors.

References
----------
.. [1] See :mod:`climb_bayes.decisions.baselines` for the named mixtures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from climb_bayes.decisions.baselines import (
    DEFAULT_TAU,
    isolated_optimum,
    natural_mixture,
    temperature_mixture,
    uniform_mixture,
    unimax_mixture,
)
from climb_bayes.decisions.constraints import Availability
from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams

__all__ = [
    "MIXTURE_NAMES",
    "SUM_TOL",
    "Mixture",
    "parse_number",
    "parse_language_map",
    "parse_weights",
    "validate_shares",
    "read_mixture_file",
    "read_mixtures_file",
    "resolve_mixture",
    "format_mixture",
]

MIXTURE_NAMES = ("uniform", "natural", "temperature", "unimax", "isolated")
"""Named mixtures accepted by :func:`resolve_mixture`."""

SUM_TOL = 1e-3
"""Shares whose sum is within this of 1 are renormalised; further off is an error."""


@dataclass(frozen=True)
class Mixture:
    """A resolved mixture.

    Attributes
    ----------
    name : str
        Label shown in tables (the spec or the baseline name).
    shares : ndarray (m,)
        Shares in the fit's language order; sum to 1.
    languages : tuple of str
        Language order.
    """

    name: str
    shares: np.ndarray
    languages: tuple[str, ...]

    def as_dict(self) -> dict[str, float]:
        """``{language: share}``."""
        return {lang: float(x) for lang, x in zip(self.languages, self.shares, strict=True)}


def parse_number(text: str, what: str) -> float:
    """A float from ``text`` (``30%`` -> 0.3), with an error naming ``what``."""
    t = text.strip()
    scale = 1.0
    if t.endswith("%"):
        t, scale = t[:-1], 0.01
    try:
        value = float(t) * scale
    except ValueError:
        raise ClimbError(f"{what}: {text.strip()!r} is not a number.") from None
    if not math.isfinite(value):
        raise ClimbError(f"{what}: {text.strip()!r} is not a finite number.")
    return value


def parse_language_map(
    text: str, languages: Sequence[str] | None, *, option: str
) -> dict[str, float]:
    """Parse ``lang=value,lang=value`` (checked against ``languages`` when given)."""
    out: dict[str, float] = {}
    for item in [x for x in text.split(",") if x.strip()]:
        if "=" not in item:
            raise ClimbError(
                f"{option}: expected LANG=VALUE pairs separated by commas, got {item!r}."
            )
        lang, value = (s.strip() for s in item.split("=", 1))
        if languages is not None and lang not in languages:
            raise ClimbError(
                f"{option}: language {lang!r} is not in the fit "
                f"(languages: {', '.join(languages)})."
            )
        if lang in out:
            raise ClimbError(f"{option}: language {lang!r} given twice.")
        out[lang] = parse_number(value, f"{option} {lang}")
    if not out:
        raise ClimbError(f"{option}: empty; expected LANG=VALUE pairs separated by commas.")
    return out


def parse_weights(text: str | None, languages: Sequence[str]) -> np.ndarray:
    """Importance weights from ``--weights``, normalised to sum to 1.

    ``None`` gives equal weights. Accepted forms: ``en=2,de=1`` (languages not named get weight
    1) or ``2,1,1`` (one value per language, in the fit's order). Weights must be ``>= 0`` with a
    positive sum. Normalising does not change the optimum; it makes the weighted loss a weighted
    average (nats/token).
    """
    m = len(languages)
    if text is None or not text.strip():
        return np.full(m, 1.0 / m)
    if "=" in text:
        given = parse_language_map(text, languages, option="--weights")
        w = np.array([given.get(lang, 1.0) for lang in languages])
    else:
        parts = [x for x in text.split(",") if x.strip()]
        if len(parts) != m:
            raise ClimbError(
                f"--weights: got {len(parts)} value(s) for {m} languages ({', '.join(languages)}); "
                f"give one per language in this order, or use LANG=VALUE pairs."
            )
        w = np.array([parse_number(x, "--weights") for x in parts])
    if np.any(w < 0):
        bad = [lang for lang, x in zip(languages, w, strict=True) if x < 0]
        raise ClimbError(f"--weights: weights must be >= 0; negative for {', '.join(bad)}.")
    if w.sum() <= 0:
        raise ClimbError("--weights: at least one weight must be positive.")
    return w / w.sum()


def validate_shares(shares: dict[str, float], languages: Sequence[str], source: str) -> np.ndarray:
    """Shares in the fit's language order, checked (all languages, >= 0, sum to 1)."""
    unknown = [lang for lang in shares if lang not in languages]
    if unknown:
        raise ClimbError(
            f"{source}: language(s) {', '.join(unknown)} not in the fit "
            f"(languages: {', '.join(languages)})."
        )
    missing = [lang for lang in languages if lang not in shares]
    if missing:
        raise ClimbError(
            f"{source}: no share for {', '.join(missing)}; give every language of the fit "
            f"(write {missing[0]}=0 to leave one out)."
        )
    r = np.array([float(shares[lang]) for lang in languages])
    if np.any(~np.isfinite(r)) or np.any(r < 0):
        bad = [lang for lang, x in zip(languages, r, strict=True) if not x >= 0]
        raise ClimbError(f"{source}: shares must be finite and >= 0; bad for {', '.join(bad)}.")
    total = r.sum()
    if abs(total - 1.0) > SUM_TOL:
        raise ClimbError(f"{source}: shares sum to {total:.6g}, not 1.")
    return r / total


def _load_json(p: Path, path: object) -> object:
    """The parsed JSON of a mixture file (a clear error when it is not JSON)."""
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ClimbError(f"{path}: not valid JSON ({exc}).") from None


def read_mixture_file(path: str, languages: Sequence[str]) -> np.ndarray:
    """Read a mixture from a JSON or CSV file (``FILE#run_id`` picks a plan row)."""
    row_id = None
    if "#" in path and not Path(path).is_file():
        path, row_id = path.rsplit("#", 1)
    p = Path(path)
    if not p.is_file():
        raise ClimbError(f"{path}: mixture file not found.")
    if p.suffix.lower() == ".json":
        data = _load_json(p, path)
        if isinstance(data, dict) and isinstance(data.get("shares"), dict):
            data = data["shares"]
        if not isinstance(data, dict):
            raise ClimbError(f'{path}: expected a JSON object {{"en": 0.3, ...}}.')
        try:
            shares = {str(k): float(v) for k, v in data.items()}
        except (TypeError, ValueError):
            raise ClimbError(f"{path}: every share must be a number.") from None
        return validate_shares(shares, languages, path)
    try:
        df = pd.read_csv(p, dtype={"run_id": str, "language": str})
    except Exception as exc:  # noqa: BLE001 - any parser failure means the same to the user
        raise ClimbError(f"{path}: cannot read the mixture CSV ({exc}).") from None
    cols = [str(c).strip() for c in df.columns]
    df.columns = cols
    if "language" in cols and "share" in cols:
        shares = {
            str(a).strip(): float(b) for a, b in zip(df["language"], df["share"], strict=True)
        }
        return validate_shares(shares, languages, path)
    rcols = [c for c in cols if c.startswith("r_")]
    if not rcols:
        raise ClimbError(
            f"{path}: expected columns 'language,share' or one 'r_<lang>' column per language."
        )
    if row_id is not None:
        if "run_id" not in cols:
            raise ClimbError(f"{path}: '#{row_id}' needs a run_id column.")
        df = df[df["run_id"].astype(str) == row_id]
        if df.empty:
            raise ClimbError(f"{path}: no row with run_id {row_id!r}.")
    if len(df) != 1:
        raise ClimbError(
            f"{path}: {len(df)} rows; pick one with {path}#<run_id> (the run_id column)."
        )
    shares = {c[2:]: float(df[c].iloc[0]) for c in rcols}
    where = f"{path}#{row_id}" if row_id else path
    return validate_shares(shares, languages, where)


NAME_COLUMNS = ("name", "mixture", "run_id")
"""Columns that name the rows of a mixtures file (the first present is used)."""


def read_mixtures_file(path: str | Path, languages: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Read many named mixtures (``predict --mixtures``).

    Parameters
    ----------
    path : str or Path
        CSV with a name column (``name``, ``mixture`` or ``run_id``) and one share column per
        language (``en`` or ``r_en``; a plan CSV works as is), or JSON: an object
        ``{"name": {"en": 0.3, ...}, ...}`` or a list of ``{"name": ..., "shares": {...}}``.
    languages : sequence of str
        The fit's languages (every one needs a share; shares sum to 1).

    Returns
    -------
    names : list of str
        Row names (unique).
    shares : ndarray (K, m)
        Mixtures in the fit's language order.
    """
    p = Path(path)
    if not p.is_file():
        raise ClimbError(f"{path}: mixtures file not found.")
    rows: list[tuple[str, dict[str, float], str]] = []  # name, shares, where (for errors)
    if p.suffix.lower() == ".json":
        data = _load_json(p, path)
        items = list(data.items()) if isinstance(data, dict) else None
        if isinstance(data, list):
            items = [
                (d.get("name", f"#{i + 1}"), d.get("shares")) if isinstance(d, dict) else (i, None)
                for i, d in enumerate(data)
            ]
        if items is None:
            raise ClimbError(
                f'{path}: expected {{"name": {{"en": 0.3, ...}}, ...}} or a list of '
                '{"name": ..., "shares": {...}}.'
            )
        for i, (name, shares) in enumerate(items):
            where = f"{path}, mixture {i + 1} ({name})"
            if not isinstance(shares, dict):
                raise ClimbError(f'{where}: expected an object of shares {{"en": 0.3, ...}}.')
            try:
                rows.append((str(name), {str(k): float(v) for k, v in shares.items()}, where))
            except (TypeError, ValueError):
                raise ClimbError(f"{where}: every share must be a number.") from None
    else:
        try:
            df = pd.read_csv(p, dtype=str, skipinitialspace=True)
        except Exception as exc:  # noqa: BLE001 - any parser failure means the same to the user
            raise ClimbError(
                f"{path}: cannot read the mixtures CSV ({exc}). Fix: write a header line "
                "(a name column and one share column per language, e.g. name,en,de) and one "
                "row per mixture."
            ) from None
        df.columns = [str(c).strip() for c in df.columns]
        name_col = next((c for c in NAME_COLUMNS if c in df.columns), None)
        share_cols = {
            c: c[2:] if c.startswith("r_") else c
            for c in df.columns
            if (c[2:] if c.startswith("r_") else c) in languages
        }
        if not share_cols:
            raise ClimbError(
                f"{path}: no share column for the fit's languages ({', '.join(languages)}). "
                f"Fix: a header like name,{','.join(languages)} (or r_<lang>)."
            )
        for i, rec in enumerate(df.to_dict("records")):
            line = i + 2  # header is line 1
            name = str(rec[name_col]).strip() if name_col else f"row{line}"
            shares = {}
            for col, lang in share_cols.items():
                try:
                    shares[lang] = float(str(rec[col]).strip())
                except ValueError:
                    raise ClimbError(
                        f"{path}, line {line}, column {col}: {rec[col]!r} is not a share. "
                        "Fix: write a number in [0, 1]."
                    ) from None
            rows.append((name, shares, f"{path}, line {line} ({name})"))
    if not rows:
        raise ClimbError(f"{path}: no mixtures in the file.")
    names = [n for n, _, _ in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ClimbError(f"{path}: mixture names repeat ({', '.join(dup[:5])}); make them unique.")
    shares = np.stack([validate_shares(s, languages, where) for _, s, where in rows])
    return names, shares


def _needs_tokens(name: str, availability: Availability | None) -> Availability:
    if availability is None:
        raise ClimbError(
            f"mixture {name!r} needs the tokens available per language: pass --available FILE "
            f"(CSV: language,tokens[,max_epochs])."
        )
    return availability


def resolve_mixture(
    spec: str,
    languages: Sequence[str],
    *,
    budget: float | None = None,
    availability: Availability | None = None,
    law: LawParams | None = None,
    weights: np.ndarray | None = None,
) -> Mixture:
    """Turn a ``--mixture`` spec into shares (see module docstring).

    Parameters
    ----------
    spec : str
        Inline shares, a file or a name.
    languages : sequence of str
        The fit's languages (order of the result).
    budget : float, optional
        Budget in tokens (needed by ``unimax`` and ``isolated``).
    availability : Availability, optional
        Tokens per language (``natural``, ``temperature``, ``unimax``).
    law : LawParams, optional
        Posterior draws (``isolated`` uses the medians of ``log_B`` and ``beta``).
    weights : ndarray (m,), optional
        Importance weights for ``isolated``.
    """
    languages = tuple(languages)
    text = spec.strip()
    if not text:
        raise ClimbError("--mixture is empty.")
    if "=" in text:
        shares = parse_language_map(text, None, option="--mixture")
        return Mixture(text, validate_shares(shares, languages, "--mixture"), languages)
    name, _, arg = text.partition(":")
    key = name.strip().lower()
    if key in MIXTURE_NAMES and not Path(text).is_file():
        avail = availability.select(languages) if availability is not None else None
        if key == "uniform":
            return Mixture("uniform", uniform_mixture(len(languages)), languages)
        if key == "natural":
            return Mixture("natural", natural_mixture(_needs_tokens(key, avail).tokens), languages)
        if key == "temperature":
            tau = parse_number(arg, "temperature tau") if arg else DEFAULT_TAU
            r = temperature_mixture(_needs_tokens(key, avail).tokens, tau)
            return Mixture(f"temperature(tau={tau:g})", r, languages)
        if key == "unimax":
            a = _needs_tokens(key, avail)
            epochs = parse_number(arg, "unimax epochs") if arg else a.max_epochs
            if budget is None:
                raise ClimbError("mixture 'unimax' needs a budget.")
            label = f"unimax(epochs={arg})" if arg else "unimax"
            return Mixture(label, unimax_mixture(a.tokens, budget, epochs), languages)
        if key == "isolated":
            if law is None or budget is None:
                raise ClimbError("mixture 'isolated' needs a fit and a budget.")
            log_b = np.median(np.asarray(law.log_B), axis=0)
            beta = np.median(np.asarray(law.beta), axis=0)
            return Mixture("isolated", isolated_optimum(log_b, beta, budget, weights), languages)
    if Path(text).is_file() or Path(text.rsplit("#", 1)[0]).is_file():
        return Mixture(Path(text).name, read_mixture_file(text, languages), languages)
    raise ClimbError(
        f"--mixture {text!r}: not a name ({', '.join(MIXTURE_NAMES)}), an existing file or "
        f"shares like {languages[0]}=0.5,{languages[-1]}=0.5."
    )


def format_mixture(shares: np.ndarray, languages: Sequence[str], digits: int = 3) -> str:
    """``en=0.300,de=0.200,...`` (a spec that :func:`resolve_mixture` reads back)."""
    return ",".join(f"{lang}={x:.{digits}f}" for lang, x in zip(languages, shares, strict=True))

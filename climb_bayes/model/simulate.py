"""Synthetic runs tables from known CLIMB parameters (for tests, docs and robustness studies).

Loss curves are generated along each run: every evaluation point ``t`` (a fraction of the
budget) is an observation of the law at ``D = t``, with independent log-normal noise, which is
exactly the likelihood the model assumes.

Units
-----
Budgets in tokens; ``B`` in tokens**beta; ``k`` in tokens; losses in nats/token; ``sigma`` on
the log-loss scale.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd

from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams, log_loss

__all__ = [
    "TrueParams",
    "DEFAULT_CURVE_FRACTIONS",
    "example_params",
    "example_draws",
    "prior_params",
    "simulate_runs",
]

DEFAULT_CURVE_FRACTIONS = (0.25, 0.5, 0.75, 0.85, 0.9, 0.95, 1.0)


@dataclass(frozen=True)
class TrueParams:
    """Parameters of a simulated world, in tokens units (see module docstring)."""

    languages: tuple[str, ...]
    B: np.ndarray
    beta: np.ndarray
    E: np.ndarray
    b: np.ndarray  # [source, target], zero diagonal
    k: np.ndarray  # [source, target], zero diagonal, tokens
    eta: np.ndarray
    sigma: np.ndarray  # per-language noise on log-loss

    def law(self) -> LawParams:
        """As :class:`~climb_bayes.model.law.LawParams` (float64 NumPy arrays)."""
        return LawParams(np.log(self.B), self.beta, np.log(self.E), self.b, self.k, self.eta)

    def to_json(self) -> str:
        """JSON document (read back by :meth:`from_json`)."""
        d = {"languages": list(self.languages)}
        for name in ("B", "beta", "E", "b", "k", "eta", "sigma"):
            d[name] = np.asarray(getattr(self, name)).tolist()
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> TrueParams:
        """Parse :meth:`to_json` output, with clear errors for missing or mis-shaped fields."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClimbError(f"{source}: not valid JSON ({exc}).") from None
        missing = [k for k in ("languages", "B", "beta", "E", "b", "k", "eta") if k not in d]
        if missing:
            raise ClimbError(f"{source}: missing field(s) {', '.join(missing)}.")
        m = len(d["languages"])
        arrays = {}
        for name, shape in (
            ("B", (m,)),
            ("beta", (m,)),
            ("E", (m,)),
            ("eta", (m,)),
            ("b", (m, m)),
            ("k", (m, m)),
        ):
            a = np.asarray(d[name], dtype=float)
            if a.shape != shape:
                raise ClimbError(f"{source}: '{name}' must have shape {shape}, got {a.shape}.")
            arrays[name] = a
        sigma = np.broadcast_to(np.asarray(d.get("sigma", 0.01), dtype=float), (m,)).copy()
        off = 1.0 - np.eye(m)
        return cls(
            tuple(d["languages"]),
            arrays["B"],
            arrays["beta"],
            arrays["E"],
            arrays["b"] * off,
            arrays["k"] * off,
            arrays["eta"],
            sigma,
        )

    @classmethod
    def read(cls, path: str | Path) -> TrueParams:
        """Read a parameters JSON file."""
        path = Path(path)
        if not path.is_file():
            raise ClimbError(f"{path}: parameters file not found.")
        return cls.from_json(path.read_text(encoding="utf-8"), source=str(path))


def example_params(
    languages: Sequence[str] = ("en", "de", "ru", "zh", "ja"), seed: int = 0, sigma: float = 0.01
) -> TrueParams:
    """A plausible synthetic world for ``m`` languages (the shipped default dataset uses it).

    Reducible loss of about 0.5-1.0 nats at 1e10 tokens, ``beta`` in [0.25, 0.4], ``E`` in
    [1.6, 2.4]; positive transfer between languages with ``b`` in [0, 0.3] (stronger inside a
    script family), ``k / D`` of about 0.1 at 5e9 tokens, ``eta`` in [3, 10].
    """
    languages = tuple(languages)
    m = len(languages)
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.25, 0.4, m)
    B = rng.uniform(0.5, 1.0, m) * 1e10**beta
    E = rng.uniform(1.6, 2.4, m)
    b = rng.uniform(0.0, 0.3, (m, m))
    k = rng.uniform(-0.2, 0.8, (m, m)) * 1e9
    eta = rng.uniform(3.0, 10.0, m)
    off = 1.0 - np.eye(m)
    return TrueParams(languages, B, beta, E, b * off, k * off, eta, np.full(m, sigma))


def example_draws(m: int, n: int, seed: int = 0) -> LawParams:
    """``n`` posterior-like draws around the :func:`example_params` world of ``m`` languages.

    Each parameter of ``example_params(["l0", ..., f"l{m-1}"], seed=seed)`` gets independent
    Gaussian jitter (sd 0.1 on ``log_B``, 0.02 on ``beta`` and ``log_E``, 0.05 on ``b``, 1e8
    tokens on ``k``, 1.0 on ``eta``; ``beta`` and ``eta`` folded to be positive, no self-transfer).
    A stand-in for a fit's posterior in solver tests and benchmarks; tokens units, like
    :meth:`Fit.law_draws <climb_bayes.inference.fitresult.Fit.law_draws>`.
    """
    law = example_params([f"l{i}" for i in range(m)], seed=seed).law()
    rng = np.random.default_rng(seed)

    def jitter(a: np.ndarray, sd: float) -> np.ndarray:
        a = np.asarray(a, dtype=float)
        return a[None] + sd * rng.normal(size=(n,) + a.shape)

    off = 1.0 - np.eye(m)
    return LawParams(
        jitter(law.log_B, 0.1),
        np.abs(jitter(law.beta, 0.02)),
        jitter(law.log_E, 0.02),
        jitter(law.b, 0.05) * off,
        jitter(law.k, 1e8) * off,
        np.abs(jitter(law.eta, 1.0)),
    )


def prior_params(
    key: jax.Array,
    languages: Sequence[str],
    d_ref: float,
    *,
    loss_scale: float = 3.0,
    priors=None,
    sigma: float | None = None,
) -> TrueParams:
    """Draw a world from the prior (``"auto"`` locations use ``loss_scale`` nats).

    Parameters
    ----------
    key : jax.Array
        PRNG key.
    languages : sequence of str
        Names.
    d_ref : float
        Reference budget (tokens) the priors are expressed in.
    loss_scale : float
        Typical loss (nats) used where the priors' locations are ``"auto"``.
    priors : Priors, optional
        Defaults when omitted.
    sigma : float, optional
        Override of the drawn noise scale.
    """
    from climb_bayes.model.climb_model import ModelData, draw_prior
    from climb_bayes.model.priors import Priors

    priors = priors or Priors()
    m = len(languages)
    loc = np.full(m, np.log(loss_scale / 2.0))
    red = loc if priors.reducible_loc == "auto" else np.full(m, float(priors.reducible_loc))
    irr = loc if priors.irreducible_loc == "auto" else np.full(m, float(priors.irreducible_loc))
    data = ModelData(
        np.full((1, m), 1.0 / m),
        np.ones(1),
        np.zeros(1, np.int32),
        np.zeros(1, np.int32),
        np.zeros(1),
        red,
        irr,
        float(d_ref),
    )
    g = {k: np.asarray(v, dtype=float) for k, v in draw_prior(key, data, priors).items()}
    s = np.full(m, sigma) if sigma is not None else g["sigma"]
    return TrueParams(tuple(languages), g["B"], g["beta"], g["E"], g["b"], g["k"], g["eta"], s)


def simulate_runs(
    params: TrueParams,
    design: pd.DataFrame,
    *,
    seed: int = 0,
    curve_fractions: Sequence[float] = DEFAULT_CURVE_FRACTIONS,
    noise: bool = True,
) -> pd.DataFrame:
    """Simulate loss curves for every run of a plan table.

    Parameters
    ----------
    params : TrueParams
        The true world.
    design : pandas.DataFrame
        Plan table ``run_id, tokens, r_<lang>...`` (e.g. from
        :func:`climb_bayes.data.design.algorithm1_design`).
    seed : int
        Noise seed.
    curve_fractions : sequence of float
        Evaluation points as fractions of each run's budget.
    noise : bool
        Add log-normal noise with per-language ``sigma``.

    Returns
    -------
    pandas.DataFrame
        Long-form runs table ``run_id, budget_tokens, tokens_seen, language, proportion, loss``.
        Languages with ``r = 0`` in a run get an empty loss.
    """
    langs = list(params.languages)
    missing = [f"r_{lang}" for lang in langs if f"r_{lang}" not in design.columns]
    if missing:
        raise ClimbError(f"design lacks column(s) {', '.join(missing)} for the simulated world.")
    fr = np.asarray(curve_fractions, dtype=float)
    if fr.size == 0 or np.any(fr <= 0) or np.any(fr > 1):
        raise ClimbError(f"curve fractions must lie in (0, 1], got {list(curve_fractions)}.")
    r = design[[f"r_{lang}" for lang in langs]].to_numpy(float)
    budgets = design["tokens"].to_numpy(float)
    n, m, c = len(design), len(langs), fr.size
    tokens = budgets[:, None] * fr[None, :]  # (n, c)
    with jax.default_device(jax.devices("cpu")[0]):
        logl = np.asarray(
            log_loss(
                np.repeat(r[:, None, :], c, axis=1), tokens, *[np.asarray(x) for x in params.law()]
            )
        )  # (n, c, m)
    if noise:
        rng = np.random.default_rng(seed)
        logl = logl + rng.normal(size=logl.shape) * params.sigma
    lossv = np.where(r[:, None, :] > 0, np.exp(logl), np.nan)
    return pd.DataFrame(
        {
            "run_id": np.repeat(design["run_id"].to_numpy(), c * m),
            "budget_tokens": np.repeat(budgets, c * m),
            "tokens_seen": np.repeat(tokens.ravel(), m),
            "language": np.tile(langs, n * c),
            "proportion": np.repeat(r, c, axis=0).ravel(),
            "loss": lossv.ravel(),
        }
    )

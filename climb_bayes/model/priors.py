"""Prior settings for the Bayesian CLIMB model, their defaults and TOML I/O.

All parameters are sampled in *reference units*: budgets are divided by a reference budget
``d_ref`` (a power of ten near the geometric mean of the fitted budgets) so that every sampled
quantity is O(1). The defaults below are weakly informative; the reasoning for each is in
``docs/model.md`` and in :data:`PRIOR_NOTES`.

Units
-----
``log_A`` and ``log_E`` are logs of losses in nats/token; ``beta`` and ``eta`` and ``b`` are
unit-free; ``kappa = k / d_ref`` is unit-free; ``sigma`` is on the log-loss scale (a relative
error: 0.01 means about 1% of the loss).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from climb_bayes.errors import PriorsError

__all__ = [
    "Priors",
    "PRIOR_NOTES",
    "load_priors",
    "priors_to_toml",
    "LIKELIHOODS",
    "LEARNED",
    "TRANSFER_PRIORS",
    "REFERENCE_SHARES",
]

LIKELIHOODS = ("student_t", "normal")
LEARNED = "learned"
"""``student_df`` value that makes the degrees of freedom a parameter (one per language)."""
TRANSFER_PRIORS = ("saturated", "natural")
REFERENCE_SHARES = ("uniform", "median")

PRIOR_NOTES: dict[str, str] = {
    "reducible_loc": (
        "log A_i = log of the reducible loss B_i/d_ref^beta_i a monolingual run of d_ref tokens "
        "would have. 'auto' centres it on log(median observed loss of language i / 2): before "
        "seeing curvature we expect reducible and irreducible parts of similar size "
        "(location-only data scaling, as rstanarm's autoscale)."
    ),
    "reducible_scale": (
        "sd of log A_i: 1.0 lets A_i range over a factor ~5.2 either way (90%: e^1.645)."
    ),
    "irreducible_loc": "log E_i; 'auto' = log(median observed loss of language i / 2).",
    "irreducible_scale": "sd of log E_i: E_i can be ~5x smaller or larger than the guess (90%).",
    "beta_median": (
        "median of the LogNormal prior on beta_i. Data-scaling exponents reported for LLMs lie "
        "in 0.1-0.6 (Kaplan 0.095, Chinchilla 0.28, Besiroglu et al. 0.37); 0.3 is central."
    ),
    "beta_log_sd": "0.5 puts 90% of the prior mass on beta in [0.13, 0.68].",
    "transfer_scale": (
        "sd of b_ji ~ Normal(0, s). Transfer can help (b > 0) or hurt (b < 0); |b| above ~1 "
        "would mean a token of language j is worth more to i than a token of i itself."
    ),
    "decay_scale": (
        "sd of kappa_ji = k_ji / d_ref ~ Normal(0, s): the transfer change between a budget of "
        "d_ref and an infinite one is kappa, so 0.5 allows changes of the size of b itself."
    ),
    "eta_median": (
        "median of the LogNormal prior on eta_i. 1 - exp(-eta r) reaches 63% at r = 1/eta: "
        "with 5, transfer saturates once a language has ~20% of the mix."
    ),
    "eta_log_sd": "1.0: eta in [1, 26] with 90% prior mass.",
    "noise_scale": (
        "HalfNormal scale of sigma_i, the per-language noise of single evaluation points on "
        "log-loss (within a run, around the run's own level). Evaluation noise of a fixed "
        "validation set is ~0.1-1%; 0.05 (5%) is deliberately wide."
    ),
    "run_effect": (
        "if true (default), the points of one run's tail (and the checkpoints of one training "
        "run) share a run-level deviation from the law, marginalised in closed form: a "
        "multivariate Student-t (or Normal) per (run, language) with scale matrix "
        "noise^2 I + run_effect^2 11^T. Three tail points of one run then count about as one "
        "run, not three independent measurements (docs/model.md). Switched off by the fit where "
        "no (run, language) holds two points (a table of final losses): the data cannot tell "
        "the two noise scales apart there."
    ),
    "run_effect_scale": (
        "HalfNormal scale of the run-level deviation sd per language (log-loss). Seed-to-seed "
        "and mixture-to-mixture deviations from a fitted law are ~1-3%; 0.05 is wide."
    ),
    "likelihood": (
        "'student_t' (default, robust to an odd run or eval point) or 'normal'; applied to "
        "log-loss, i.e. to relative errors."
    ),
    "student_df": (
        'degrees of freedom of the Student-t likelihood: "learned" (the default) gives each '
        "language its own df ~ Gamma(2, rate 0.1) truncated to df >= 1 (Juarez & Steel 2010, "
        "brms: median 16.9, 90% in [3.7, 47.5]), so the data decide how heavy the "
        "run-outlier tail is; a number fixes it (4 was the default until 2026-11-26). "
        "Measured (docs/model.md): on the 5Mix training curves some domains want df ~2, "
        "RedPajama's ~20; a fixed 4 let two monolingual runs of a 16-language design be "
        "outliers at little cost, a tail NUTS crossed slowly (R-hat 1.57). A learned df costs "
        "sampling time (the default fit 61 -> 89 s)."
    ),
    "student_df_min": (
        "lower bound of a learned df (>= 1; below 1 the t has no mean). The fit raises it to 2 "
        "where every (run, language) group is one point (a table of final losses): nothing "
        "bounds the noise scale there, and on tiny-2024's final losses a learned df went to "
        "1.007 with sigma 0 and NUTS froze (docs/model.md)."
    ),
    "transfer_prior": (
        "'saturated' (default): b_ji and kappa_ji get their Normal(0, transfer_scale / "
        "decay_scale) prior as the transfer that reaches language i at the reference share c, "
        "b_ji (1 - exp(-eta_i c)), the quantity the data measure. 'natural': the prior is on "
        "b_ji itself. Measured (docs/model.md): with the natural prior the volume of b values "
        "that fit the data grows as 1 / (1 - exp(-eta_i c)) per pair when eta_i is small, which "
        "pulled eta down and inflated b (90% intervals covered 30 of 60 true parameters of the "
        "synthetic world)."
    ),
    "reference_share": (
        "share c at which the saturated transfer prior holds (b_ji (1 - exp(-eta_i c))): "
        '"median" (the default) is the median share strictly between 0 and 1 in the runs '
        'table; "uniform" is 1/m, the share of every language in the uniform mixture; or a '
        "number in (0, 1]. With the full-share factor the prior bounds the transfer at c and "
        "at 1, a funnel between eta and the transfers the deeper the smaller c: on sparse "
        'mixtures (RegMix: median 0.040, 1/m 0.077) "uniform" samples far faster (ubuntu_irc '
        "block 184 leapfrog steps per draw against 1,137), but on 5Mix-70M its extrapolations "
        "were worse (CRPS 0.0178 against 0.0145; docs/model.md, 'Reference share')."
    ),
    "full_share_scale": (
        "sd s of a second Normal(0, s) prior factor on the transfer at full share, "
        "b_ji (1 - exp(-eta_i)) and kappa_ji (1 - exp(-eta_i)): the most a token of j is worth "
        "to i (at r_i = 1); 0 switches it off. The saturated prior alone lets eta_i -> 0 with "
        "every transfer free: on a 16-language Algorithm-1 design half the posterior mass sat "
        "there, with transfers of ~6 tokens of i per token of j, and the chains split "
        "(docs/model.md). 2 (the default; with the learned df it makes the 16-language fit "
        "converge) removes that region; it "
        "also lowers the prior of small eta (median 5 -> ~9 at 5 languages). On one budget it "
        "is one factor per pair, on (b_ji + kappa_ji / d*) (1 - exp(-eta_i)), the transfer the "
        "data measure (bounding b and kappa apart there made a funnel: RegMix R-hat 1.40). Not "
        "applied to b under hierarchical transfer."
    ),
    "hierarchical_transfer": (
        "if true, b_ji ~ Normal(mu_b, tau_b) with mu_b ~ Normal(0, transfer_scale) and "
        "tau_b ~ HalfNormal(transfer_scale), non-centred; partial pooling across pairs."
    ),
}


@dataclass(frozen=True)
class Priors:
    """Hyper-parameters of every prior in the model (see :data:`PRIOR_NOTES`).

    ``reducible_loc`` / ``irreducible_loc`` may be ``"auto"`` (data-located, per language),
    a single float or a mapping ``{language: float}``.
    """

    reducible_loc: Any = "auto"
    reducible_scale: float = 1.0
    irreducible_loc: Any = "auto"
    irreducible_scale: float = 1.0
    beta_median: float = 0.3
    beta_log_sd: float = 0.5
    transfer_scale: float = 0.5
    decay_scale: float = 0.5
    eta_median: float = 5.0
    eta_log_sd: float = 1.0
    noise_scale: float = 0.05
    run_effect: bool = True
    run_effect_scale: float = 0.05
    likelihood: str = "student_t"
    student_df: float | str = LEARNED
    student_df_min: float = 1.0
    transfer_prior: str = "saturated"
    reference_share: float | str = "median"
    full_share_scale: float = 2.0
    hierarchical_transfer: bool = False
    source: str = field(default="defaults", compare=False)

    def __post_init__(self) -> None:
        where = f"priors ({self.source})"
        positive = (
            "reducible_scale irreducible_scale beta_median beta_log_sd transfer_scale "
            "decay_scale eta_median eta_log_sd noise_scale run_effect_scale"
        ).split()
        if isinstance(self.student_df, str) and self.student_df != LEARNED:
            raise PriorsError(
                f"{where}: 'student_df' must be \"{LEARNED}\" or a positive number, "
                f"got {self.student_df!r}."
            )
        if self.student_df != LEARNED:
            positive.append("student_df")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise PriorsError(f"{where}: '{name}' must be a positive number, got {value!r}.")
        value = self.full_share_scale
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise PriorsError(
                f"{where}: 'full_share_scale' must be a number >= 0 (0 switches the full-share "
                f"transfer prior off), got {value!r}."
            )
        if self.transfer_prior not in TRANSFER_PRIORS:
            raise PriorsError(
                f"{where}: 'transfer_prior' must be one of {', '.join(TRANSFER_PRIORS)}, "
                f"got {self.transfer_prior!r}."
            )
        share = self.reference_share
        if isinstance(share, str):
            ok = share in REFERENCE_SHARES
        else:  # a TOML true is an int to Python: refused, not read as 1
            number = isinstance(share, int | float) and not isinstance(share, bool)
            ok = number and math.isfinite(share) and 0 < share <= 1
        if not ok:
            raise PriorsError(
                f"{where}: 'reference_share' must be one of {', '.join(REFERENCE_SHARES)} or a "
                f"number in (0, 1], got {share!r}."
            )
        value = self.student_df_min
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
            raise PriorsError(
                f"{where}: 'student_df_min' must be a number >= 1 (below 1 the t has no mean), "
                f"got {value!r}."
            )
        if self.likelihood not in LIKELIHOODS:
            raise PriorsError(
                f"{where}: 'likelihood' must be one of {', '.join(LIKELIHOODS)}, "
                f"got {self.likelihood!r}."
            )
        for name in ("reducible_loc", "irreducible_loc"):
            value = getattr(self, name)
            ok = value == "auto" or isinstance(value, int | float)
            if isinstance(value, dict):
                ok = all(isinstance(v, int | float) for v in value.values())
            if not ok:
                raise PriorsError(
                    f"{where}: '{name}' must be \"auto\", a number (log nats) or a table "
                    f"{{language = number}}, got {value!r}."
                )

    @property
    def learned_df(self) -> bool:
        """Whether the Student-t degrees of freedom are sampled (one per language)."""
        return self.likelihood == "student_t" and self.student_df == LEARNED

    @property
    def fixed_df(self) -> float | None:
        """The fixed degrees of freedom; ``None`` for the Normal likelihood or a learned df."""
        if self.likelihood == "normal" or self.learned_df:
            return None
        return float(self.student_df)

    def replace(self, **changes: Any) -> Priors:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the settings (without ``source``)."""
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


_FIELDS = {f.name for f in dataclasses.fields(Priors)} - {"source"}


def load_priors(path: str | Path | None = None, **overrides: Any) -> Priors:
    """Read priors from a TOML file (any subset of fields under ``[priors]`` or top level).

    Parameters
    ----------
    path : str or Path, optional
        TOML file. Unknown keys raise :class:`~climb_bayes.errors.PriorsError` naming them.
    **overrides
        Fields that take precedence over the file (e.g. ``likelihood="normal"``).
    """
    settings: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise PriorsError(
                f"{path}: priors file not found. Write one with `climb-bayes priors > {path.name}`"
                " and edit it."
            )
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PriorsError(f"{path}: not valid TOML ({exc}).") from None
        raw = raw.get("priors", raw)
        unknown = sorted(set(raw) - _FIELDS)
        if unknown:
            raise PriorsError(
                f"{path}: unknown prior setting(s) {', '.join(unknown)}. "
                f"Known: {', '.join(sorted(_FIELDS))}."
            )
        settings.update(raw)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return Priors(**settings, source=source)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + " }"
    return repr(float(value)) if isinstance(value, float) else str(value)


def priors_to_toml(priors: Priors | None = None, *, comments: bool = True) -> str:
    """Render priors as a TOML document that :func:`load_priors` reads back."""
    priors = priors or Priors()
    lines = ["# climb-bayes priors (reference units: budgets divided by d_ref)", "[priors]"]
    for name, value in priors.to_dict().items():
        if comments:
            lines.append(f"# {PRIOR_NOTES[name]}")
        lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"

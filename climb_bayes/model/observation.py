"""The observation model: log-loss points that share a training run are not independent.

The points of one run's tail, and the checkpoints of one mixture, come from one training
trajectory: they share its seed, its data order and whatever else makes a run sit above or below
the law. Measured on the 2024 default data, the 3 tail points of a (run, language) had residual
correlation 0.96 (sd of run means 0.0199, within-run sd 0.0035): three points carried about one
point's worth of information, and treating them as independent made every interval ~1.7x too
narrow (docs/model.md).

For the ``n`` observed log-losses ``y`` of one *group* -- one language in one series (a run, or
every checkpoint of a mixture) -- with law predictions ``mu``::

    y = mu + u 1 + e,    u ~ (0, t^2) shared by the group,    e ~ (0, s^2 I) per point

i.e. a compound-symmetric scale matrix ``Sigma = s^2 I + t^2 1 1^T``. With the Student-t
likelihood the group is one multivariate Student-t vector (degrees of freedom ``df``): a run that
is off as a whole is down-weighted as a whole. ``u`` is marginalised in closed form, so the
sampler sees no extra parameters:

    Sigma^-1 = (I - lam 1 1^T) / s^2,  lam = t^2 / (s^2 + n t^2)
    log |Sigma| = 2 (n - 1) log s + log(s^2 + n t^2)
    delta = (e^T e - lam (1^T e)^2) / s^2       (Mahalanobis distance of e = y - mu)

Where every group holds a single observation (a table of final losses, one per run, as RegMix
publishes) only ``s^2 + t^2`` enters the likelihood: the two scales are not identified and their
posterior is a curved ridge that NUTS crosses slowly. :func:`identifiable_noise` then switches
the run effect off (one scale, ``s``, is the whole per-point noise). Measured on RegMix
(6,656 one-point groups, Isolated law, 2 x (500 + 500)): 153 s, min bulk/tail ESS 431/274 with
the run effect; 88 s, 699/487 without (docs/model.md). It also bounds a learned Student-t
``df`` below by :data:`ONE_POINT_DF_MIN`: with one point per group the t likelihood is unbounded
as ``s -> 0`` for a small ``df`` [4]_, and a learned ``df`` went there (the function's
docstring).

A *new* run's point has the marginal ``t_df(mu, sqrt(s^2 + t^2))`` (or Normal); a further point
of a group already seen has the conditional law of :func:`conditional_moments`.

Units
-----
Everything on log(loss) (nats/token before the log): ``s`` and ``t`` are relative errors.

References
----------
.. [1] Kotz & Nadarajah (2004), "Multivariate t Distributions and Their Applications", Ch. 1
   (density) and Section 1.11 (conditional distributions).
.. [2] Searle, Casella & McCulloch (1992), "Variance Components", Section 3.5 (inverse and
   determinant of a compound-symmetric matrix).
.. [3] Guo et al. (2025), "CLIMB", Section 5 ("the average of the last three steps" as one
   observation per run, the simpler remedy this model generalises).
.. [4] Fernandez & Steel (1999), "Multivariate Student-t regression models: pitfalls and
   inference", Biometrika 86(1), 153-167 (the likelihood is unbounded when the model fits some
   observations exactly and ``df`` is small).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints

from climb_bayes.model.priors import Priors

__all__ = [
    "GroupedNoise",
    "GroupStats",
    "group_stats",
    "group_count",
    "group_log_density",
    "conditional_moments",
    "draw_noise",
    "run_effect_identified",
    "identifiable_noise",
    "df_prior",
    "draw_df_prior",
    "group_df",
    "SegmentLayout",
    "segment_layout",
    "pad_segment_layout",
    "student_log_norm",
    "KeyedStudentT",
    "DF_PRIOR",
    "DF_MIN",
    "LEARNED_DF_START",
    "ONE_POINT_DF_MIN",
]


DF_PRIOR = (2.0, 0.1)
"""Shape and rate of the Gamma prior on a learned ``df`` (Juarez & Steel 2010)."""

DF_MIN = 1.0
"""Lower bound of a learned ``df`` (as brms's ``nu``): below 1 the t has no mean."""

LEARNED_DF_START = (DF_PRIOR[0] - 1.0) / DF_PRIOR[1]
"""Where a learned ``df`` starts (chain starts, point fits): its prior's mode, 10."""

ONE_POINT_DF_MIN = 2.0
"""Lower bound of a learned ``df`` where every group is a single point
(:func:`identifiable_noise`): the t then has a finite variance, and the likelihood's spike at
``s -> 0`` needs a law that fits more than 2/3 of a language's points exactly."""


def df_prior(low: float = DF_MIN) -> dist.TruncatedGamma:
    """Prior of a learned Student-t ``df``: Gamma(2, rate 0.1) truncated to ``df >= low``
    (``Priors.student_df_min``, 1 by default: median 16.9, 90% in [3.7, 47.5]).

    It keeps the Normal (``df -> inf``) and heavy tails (``df`` ~ 2) both plausible and lets
    the data choose; with a few dozen run groups the posterior of ``df`` is still wide, so the
    prior matters where the data are few (docs/model.md). The bound keeps the noise's mean
    defined (a posterior draw below 1 made a predictive noise draw infinite).

    References
    ----------
    .. [1] Juarez & Steel (2010), "Model-based clustering of non-Gaussian panel data based on
       skew-t distributions", JBES 28(1) (the Gamma(2, 0.1) prior on degrees of freedom).
    .. [2] Buerkner (2017), "brms: An R package for Bayesian multilevel models using Stan", JSS
       80(1) (the same prior, bounded below by 1, for the Student-t family).
    """
    return dist.TruncatedGamma(*DF_PRIOR, low=low)


def draw_df_prior(key: jax.Array, shape: tuple[int, ...], low: float = DF_MIN) -> np.ndarray:
    """Draws of :func:`df_prior` by its inverse CDF (SciPy), outside any JAX trace.

    ``df_prior().sample`` called eagerly compiles new XLA programs on every call (90 ms and
    ~200 memory mappings each, measured 2026-11-26): 800 prior draws in one process crashed
    the test suite at the kernel's mapping limit
    (:func:`climb_bayes.runtime.release_compiled_programs`).
    """
    import scipy.stats

    shape_a, rate = DF_PRIOR
    gamma = scipy.stats.gamma(shape_a, scale=1.0 / rate)
    below = gamma.cdf(low)
    u = np.asarray(jax.random.uniform(key, shape, dtype=jnp.float64))
    return np.maximum(gamma.ppf(below + u * (1.0 - below)), low)


def group_count(group: object) -> int | None:
    """Number of group segments ``max(group) + 1`` when the ids are concrete; ``None`` under a
    JAX trace (the callers then use one segment per observation, a bound known statically).

    Fewer segments make the grouped density cheaper: its Student-t normaliser evaluates
    ``gammaln`` twice per segment (and ``digamma`` in the gradient). Measured on the default
    data (645 observations in 215 run groups, learned ``df``; one ``value_and_grad`` of the
    CLIMB potential in a compiled loop, 2-core Intel Xeon): 83 us with 645 segments, the
    ``gammaln`` terms a third of it.
    """
    if isinstance(group, jax.core.Tracer):
        return None
    ids = np.asarray(group)
    return int(ids.max()) + 1 if ids.size else 0


def segment_means(
    values: tuple[jax.Array, ...],
    group: jax.Array,
    weight: jax.Array | None,
    fill: float,
    n_segments: int | None = None,
) -> tuple[jax.Array, ...]:
    """Per-group means of per-observation arrays, ``fill`` for empty segments (their density is
    0; the value only keeps gradients finite). ``n_segments`` defaults to one per observation
    (every id is below ``N``)."""
    n_obs = values[0].shape[-1]
    n_seg = n_obs if n_segments is None else n_segments
    dtype = values[0].dtype
    w = jnp.ones(n_obs, dtype) if weight is None else weight.astype(dtype)
    count = jax.ops.segment_sum(w, group, num_segments=n_seg)
    safe = jnp.maximum(count, 1.0)
    return tuple(
        jnp.where(count > 0, jax.ops.segment_sum(w * x, group, num_segments=n_seg) / safe, fill)
        for x in values
    )


def group_df(
    df: jax.Array,
    group: jax.Array,
    weight: jax.Array | None = None,
    n_segments: int | None = None,
) -> jax.Array:
    """Degrees of freedom of each group segment from per-observation values.

    ``df`` is constant within a group (one language); empty segments get 4.
    """
    return segment_means((df,), group, weight, 4.0, n_segments)[0]


class GroupStats(NamedTuple):
    """Sufficient statistics of the residuals of each group (arrays of length ``n_segments``)."""

    n: jax.Array  # observations in the group
    s1: jax.Array  # sum of residuals
    s2: jax.Array  # sum of squared residuals


def group_stats(
    resid: jax.Array,
    group: jax.Array,
    weight: jax.Array | None = None,
    n_segments: int | None = None,
) -> GroupStats:
    """Per-group count, sum and sum of squares of ``resid`` (``(N,)``; ``vmap`` for batches).

    ``weight`` (0/1, ``(N,)``) drops padded observations. The number of segments is
    ``n_segments`` (:func:`group_count` of concrete ids), else ``N`` (a static bound: every
    group id is below the number of observations, so this jit-compiles without knowing how
    many groups there are).
    """
    n_obs = resid.shape[-1]
    n_seg = n_obs if n_segments is None else n_segments
    w = jnp.ones(n_obs, resid.dtype) if weight is None else weight.astype(resid.dtype)
    return GroupStats(
        jax.ops.segment_sum(w, group, num_segments=n_seg),
        jax.ops.segment_sum(w * resid, group, num_segments=n_seg),
        jax.ops.segment_sum(w * resid**2, group, num_segments=n_seg),
    )


def group_log_density(
    stats: GroupStats,
    s: jax.Array,
    t: jax.Array,
    df: float | None,
    log_norm: jax.Array | None = None,
) -> jax.Array:
    """Log density of each group's residual vector (0 for empty groups).

    Parameters
    ----------
    stats : GroupStats
        From :func:`group_stats`.
    s, t : array (..., n_segments)
        Within-group and shared (between-run) scales of each group (log-loss units, > 0).
    df : float, array (..., n_segments) or None
        Degrees of freedom of the multivariate Student-t (per group when learned, see
        :func:`group_df`); ``None`` for the Normal.
    log_norm : array (..., n_segments), optional
        :func:`student_log_norm` of each group when computed already (:class:`SegmentLayout`).

    Returns
    -------
    array (..., n_segments)
        ``log p(e_g)`` of every group.

    References
    ----------
    .. [1] Kotz & Nadarajah (2004), Eq. (1.1).
    """
    n = stats.n
    s2, t2 = s**2, t**2
    big = s2 + n * t2
    lam = t2 / big
    delta = (stats.s2 - lam * stats.s1**2) / s2
    logdet = 2.0 * (n - 1.0) * jnp.log(s) + jnp.log(big)
    if df is None:
        out = -0.5 * (delta + logdet + n * jnp.log(2.0 * jnp.pi))
    else:
        norm = student_log_norm(df, n) if log_norm is None else log_norm
        out = norm - 0.5 * logdet - 0.5 * (df + n) * jnp.log1p(delta / df)
    return jnp.where(n > 0, out, 0.0)


def student_log_norm(df: jax.Array, n: jax.Array) -> jax.Array:
    """``log Gamma((df + n) / 2) - log Gamma(df / 2) - n/2 log(df pi)``: the part of an
    ``n``-variate Student-t log density that depends on neither the point nor the scale matrix.

    References
    ----------
    .. [1] Kotz & Nadarajah (2004), Eq. (1.1).
    """
    return gammaln(0.5 * (df + n)) - gammaln(0.5 * df) - 0.5 * n * jnp.log(df * jnp.pi)


class SegmentLayout(NamedTuple):
    """Where the group segments of concrete ids sit (NumPy, fixed when the model is traced).

    Scales and degrees of freedom are constant within a group, so a segment's value is any
    member's (a gather) instead of a mean over it (three segment sums), and the Student-t
    normaliser :func:`student_log_norm` depends on a segment only through its size and its
    degrees of freedom: it is evaluated once per distinct (``df_key``, size) pair and gathered.
    Measured on the default data (645 observations in 215 run groups of 5 languages, learned
    ``df``; one ``value_and_grad`` of the CLIMB potential in a compiled loop, 2-core AMD EPYC,
    2026-11-29): the ``gammaln`` terms were about 30 of 105-123 us per gradient, 70 us with the
    layout (the default fit 108 -> 83 s with the compilation cache; docs/performance.md).
    """

    member: np.ndarray  # (n_segments,) one observation of each segment (0 for an empty one)
    size: np.ndarray  # (n_segments,) observations in the segment (float)
    pair_member: np.ndarray | None  # (U,) one observation of each distinct (df_key, size)
    pair_size: np.ndarray | None  # (U,) its size
    pair_index: np.ndarray | None  # (n_segments,) each segment's pair


def segment_layout(
    group: object, weight: object, n_segments: int, df_key: object = None
) -> SegmentLayout | None:
    """:class:`SegmentLayout` of ``group`` (and ``weight``, 0/1) when both are concrete; ``None``
    under a JAX trace. ``df_key`` (``(N,)`` ints, e.g. the language of each observation) names
    the observations that share a degrees-of-freedom value; without it no pairs are formed."""
    if any(isinstance(a, jax.core.Tracer) for a in (group, weight, df_key)):
        return None
    ids = np.asarray(group, dtype=np.int64)
    keep = np.ones(ids.shape, bool) if weight is None else np.asarray(weight).astype(bool)
    if ids.ndim != 1 or keep.shape != ids.shape:
        return None
    size = np.bincount(ids[keep], minlength=n_segments)[:n_segments].astype(float)
    member = np.zeros(n_segments, dtype=np.int64)
    rows = np.flatnonzero(keep)
    member[ids[rows[::-1]]] = rows[::-1]  # the first kept observation of each segment
    if df_key is None:
        return SegmentLayout(member, size, None, None, None)
    key = np.asarray(df_key, dtype=np.int64)[member]
    pairs, first, index = np.unique(
        np.stack([key, size.astype(np.int64)], axis=1),
        axis=0,
        return_index=True,
        return_inverse=True,
    )
    return SegmentLayout(member, size, member[first], pairs[:, 1].astype(float), index.ravel())


def pad_segment_layout(layout: SegmentLayout, n_pairs: int) -> SegmentLayout:
    """``layout`` with its distinct (key, size) pairs padded to ``n_pairs`` (a size-1 pair of
    observation 0 that no segment refers to), so layouts of data sets with different group
    structure have equal shapes and can be passed to one compiled program as arguments
    (:class:`GroupedNoise`'s ``layout``). The density is unchanged."""
    if layout.pair_member is None:
        return layout
    pad = n_pairs - layout.pair_member.size
    if pad < 0:
        raise ValueError(f"layout has {layout.pair_member.size} pairs, more than {n_pairs}")
    return layout._replace(
        pair_member=np.concatenate([layout.pair_member, np.zeros(pad, np.int64)]),
        pair_size=np.concatenate([layout.pair_size, np.ones(pad)]),
    )


def conditional_moments(
    stats: GroupStats, s: jax.Array, t: jax.Array, df: float | None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Law of one more point of each group, given the group's observed residuals.

    Returns ``(shift, scale, df')``: the new point's residual is ``shift + scale * T`` with ``T``
    Student-t with ``df'`` degrees of freedom (standard Normal when ``df`` is ``None``; ``df'``
    is then returned as ``inf``). For an empty group this is the marginal ``(0, sqrt(s^2 + t^2),
    df)`` of a new run.

    References
    ----------
    .. [1] Kotz & Nadarajah (2004), Section 1.11 (conditional of a multivariate t).
    """
    n = stats.n
    s2, t2 = s**2, t**2
    big = s2 + n * t2
    lam = t2 / big
    shift = lam * stats.s1
    var = s2 + t2 * s2 / big
    if df is None:
        return shift, jnp.sqrt(var), jnp.full_like(shift, jnp.inf)
    delta = (stats.s2 - lam * stats.s1**2) / s2
    factor = (df + delta) / (df + n)
    return shift, jnp.sqrt(var * factor), df + n


class GroupedNoise(dist.Distribution):
    """Observed log-losses around the law with a marginalised shared effect per group.

    Event shape ``(N,)``: one distribution for all observations, whose :meth:`log_prob` is the
    sum of :func:`group_log_density` over the groups.

    Parameters
    ----------
    loc : array (N,)
        Law prediction of log-loss per observation.
    scale : array (N,)
        Within-group noise sd ``s`` (constant within a group).
    run_scale : array (N,)
        Shared-effect sd ``t`` (constant within a group).
    group : array of int (N,)
        Group id of each observation, ``0 <= group < N``.
    df : float or array (N,), optional
        Degrees of freedom (multivariate Student-t; per observation when learned, constant
        within a group); ``None`` for Normal.
    mask : array of bool (N,), optional
        ``False`` for padding that is not observed.
    n_groups : int, optional
        Number of group segments (every id below it); by default :func:`group_count` of
        ``group``, or ``N`` when the ids are traced. Stored as :attr:`n_groups`, always an int.
    df_key : array of int (N,), optional
        Which observations share a degrees-of-freedom value (the language of each); with
        concrete ``group`` and ``mask`` the Student-t normaliser is then evaluated once per
        distinct (key, group size) (:class:`SegmentLayout`). The density is the same.
    layout : SegmentLayout, optional
        The layout of ``group``, ``mask`` and ``df_key`` computed beforehand, for ids and mask
        that are traced (data passed to a compiled program as arguments): its arrays may be
        traced too, and the density is the same as with concrete ids. Without it, traced ids
        fall back to segment means and a normaliser per segment; measured on a 16-language
        block (264 observations, 66 groups, learned ``df``, float32, 2-core AMD EPYC without
        AVX-512, best of 10 interleaved repeats): 70 us per ``value_and_grad`` of the block
        potential against 47 us with the layout, the ``gammaln`` pair per segment being most
        of the difference (docs/performance.md).
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "scale": constraints.positive,
        "run_scale": constraints.positive,
    }
    support = constraints.real_vector
    reparametrized_params = ["loc", "scale", "run_scale"]

    def __init__(
        self,
        loc: jax.Array,
        scale: jax.Array,
        run_scale: jax.Array,
        group: jax.Array,
        df: float | None = 4.0,
        mask: jax.Array | None = None,
        n_groups: int | None = None,
        *,
        df_key: np.ndarray | None = None,
        layout: SegmentLayout | None = None,
        validate_args: bool | None = None,
    ) -> None:
        self.loc = jnp.asarray(loc)
        n = self.loc.shape[-1]
        if n_groups is None:
            n_groups = group_count(group)
        self.n_groups = n if n_groups is None else n_groups
        self.scale = jnp.broadcast_to(jnp.asarray(scale), self.loc.shape)
        self.run_scale = jnp.broadcast_to(jnp.asarray(run_scale), self.loc.shape)
        self.group = jnp.asarray(group)
        self.df = df
        self.weight = None if mask is None else jnp.asarray(mask)
        learned = df is not None and jnp.ndim(df) > 0
        if layout is None:
            layout = segment_layout(group, mask, self.n_groups, df_key if learned else None)
        self.layout = layout
        super().__init__(
            batch_shape=self.loc.shape[:-1], event_shape=(n,), validate_args=validate_args
        )

    def group_log_prob(self, value: jax.Array) -> jax.Array:
        """Log density per group id (``(n_groups,)``; 0 where a group id is unused)."""
        layout = self.layout
        learned = self.df is not None and jnp.ndim(self.df) > 0
        df = jnp.broadcast_to(self.df, self.loc.shape) if learned else self.df
        stats = group_stats(value - self.loc, self.group, self.weight, self.n_groups)
        if layout is None:  # traced ids or mask: segment means
            s, t = segment_means(
                (self.scale, self.run_scale), self.group, self.weight, 1.0, self.n_groups
            )
            if learned:
                df = group_df(df, self.group, self.weight, self.n_groups)
            return group_log_density(stats, s, t, df)
        # concrete ids: sizes are constants (the traced count is dead code) and every
        # per-group value is a member's (constant within a group)
        stats = stats._replace(n=jnp.asarray(layout.size, jnp.result_type(value)))
        s, t = self.scale[..., layout.member], self.run_scale[..., layout.member]
        log_norm = None
        if learned and layout.pair_member is not None:
            df_pair = df[..., layout.pair_member]
            size = jnp.asarray(layout.pair_size, df_pair.dtype)  # keep float32 blocks float32
            log_norm = student_log_norm(df_pair, size)[..., layout.pair_index]
            df = df_pair[..., layout.pair_index]
        elif learned:
            df = df[..., layout.member]
        return group_log_density(stats, s, t, df, log_norm)

    def log_prob(self, value: jax.Array) -> jax.Array:
        return jnp.sum(self.group_log_prob(value), axis=-1)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        shape = sample_shape + self.batch_shape + self.event_shape
        k_e, k_u, k_w = jax.random.split(key, 3)
        e = jax.random.normal(k_e, shape)
        u = jax.random.normal(k_u, shape)[..., self.group]
        z = self.scale * e + self.run_scale * u
        if self.df is not None:
            df = self.df
            if jnp.ndim(df) > 0:  # per observation -> per group segment
                df = group_df(
                    jnp.broadcast_to(jnp.asarray(df, z.dtype), self.loc.shape), self.group
                )
            w = jax.random.gamma(k_w, 0.5 * df, shape) / (0.5 * df)
            z = z / jnp.sqrt(w[..., self.group])
        return self.loc + z


class KeyedStudentT(dist.StudentT):
    """Independent Student-t points whose degrees of freedom take a few values, one per key.

    The same density as ``StudentT(df_values[key], loc, scale)``, with the normaliser
    :func:`student_log_norm` evaluated once per key instead of once per point (``StudentT``'s
    ``gammaln`` pair per observation dominated the gradient of one-point-per-run tables, where
    the run effect is off: RegMix's 3,947 final losses against 13 domains).

    Parameters
    ----------
    df_values : array (K,)
        Degrees of freedom of each key (> 0).
    key : array of int (N,)
        The key of each point (e.g. its language), ``0 <= key < K``.
    loc, scale : array (N,)
        Location and scale per point (log-loss units).
    """

    pytree_data_fields = ("df_values", "key")

    def __init__(
        self,
        df_values: jax.Array,
        key: np.ndarray,
        loc: jax.Array,
        scale: jax.Array,
        *,
        validate_args: bool | None = None,
    ) -> None:
        self.df_values = jnp.asarray(df_values)
        self.key = jnp.asarray(key)
        super().__init__(self._per_point(self.df_values), loc, scale, validate_args=validate_args)

    def _per_point(self, per_key: jax.Array) -> jax.Array:
        """``per_key[..., key]`` for batched values and keys alike (a ``vmap`` batches both)."""
        shape = jnp.broadcast_shapes(per_key.shape[:-1], self.key.shape[:-1])
        values = jnp.broadcast_to(per_key, shape + per_key.shape[-1:])
        keys = jnp.broadcast_to(self.key, shape + self.key.shape[-1:])
        return jnp.take_along_axis(values, keys, axis=-1)

    def log_prob(self, value: jax.Array) -> jax.Array:
        z = (value - self.loc) / self.scale
        norm = self._per_point(student_log_norm(self.df_values, 1.0))
        return norm - jnp.log(self.scale) - 0.5 * (self.df + 1.0) * jnp.log1p(z**2 / self.df)


def draw_noise(
    rng: object,
    scale: object,
    run_scale: object | None,
    group: object,
    df: float | None,
) -> object:
    """NumPy draws of the observation noise for arrays of ``(S, N)`` scales.

    ``scale * e + run_scale * u[group]`` (divided by ``sqrt(w[group])`` with
    ``w ~ Gamma(df/2, rate df/2)`` for the Student-t), with ``e``, ``u`` standard Normal; ``u``
    and ``w`` are shared by the observations of a group. ``run_scale=None`` gives independent
    points (Student-t or Normal per point). NumPy, not JAX: JAX's Student-t sampler took 10 s on
    CPU for 2000 x 4224 values, NumPy 0.6 s (measured on 2 cores).

    Parameters
    ----------
    rng : numpy.random.Generator
    scale, run_scale : array (S, N)
        Within-group and shared scales per draw and observation.
    group : array of int (N,)
        Group of each observation (any non-negative ids).
    df : float, array (S, N) or None
        Degrees of freedom (per draw and observation when learned, constant within a group);
        ``None`` for Normal.

    Returns
    -------
    array (S, N)
    """
    import numpy as np

    scale = np.asarray(scale, dtype=float)
    shape = scale.shape
    group = np.asarray(group, dtype=np.int64)
    if run_scale is None:
        if df is None:
            return scale * rng.standard_normal(shape)
        return scale * rng.standard_t(df, shape)
    n_groups = group_count(group)
    e = rng.standard_normal(shape)
    u = rng.standard_normal(shape[:-1] + (n_groups,))[..., group]
    z = scale * e + np.asarray(run_scale, dtype=float) * u
    if df is not None:
        df = np.asarray(df, dtype=float)
        if df.ndim:  # per observation (learned df) -> per group: any member's value
            first = segment_layout(group, None, n_groups).member
            df = np.broadcast_to(df, shape)[..., first]
        w = rng.gamma(0.5 * df, 2.0 / df, shape[:-1] + (n_groups,))[..., group]
        z = z / np.sqrt(w)
    return z


def run_effect_identified(group: np.ndarray) -> bool:
    """Whether some group holds two or more observations (``group``: ``(N,)`` group ids).

    Only then can the data tell a run-level deviation ``t`` from point noise ``s`` (module
    docstring); with one observation per group the likelihood depends on ``s^2 + t^2`` alone.
    """
    group = np.asarray(group, dtype=np.int64)
    return bool(group.size) and int(np.bincount(group).max()) >= 2


def identifiable_noise(
    priors: Priors, group: np.ndarray | None, log: Callable[[str], None] | None = None
) -> Priors:
    """``priors`` with the noise model the data can identify where every group is one point.

    Where no (run, language) group holds two observations (a table of final losses):

    * the run effect is switched off: the likelihood depends on ``s^2 + t^2`` alone (module
      docstring);
    * a learned Student-t ``df`` is bounded below by :data:`ONE_POINT_DF_MIN` instead of 1.
      With one point per group nothing bounds the noise scale from below: with ``k`` of a
      language's ``n`` points fitted exactly the t density grows like ``s^(df (n - k) - k)``
      as ``s -> 0``, a spike wherever ``df < k / (n - k)`` (Fernandez & Steel 1999), and a law
      with a dozen parameters per language can fit a dozen points exactly. Measured on
      tiny-2024's final losses (22 points per language at non-zero share, CLIMB's 12
      parameters per language: a spike below ``df = 1.2``; CLIMB NUTS, 2026-12-07): every
      chain froze at ``df[de] = 1.007``, ``sigma[de] = 0`` (R-hat 4.07, 4000 of 4000 draws at
      the tree-depth limit). From 2, the spike needs ``k > 2n/3``. Groups of several points
      bound ``s`` by the within-run scatter and keep the bound of 1; the ``df`` stays learned
      (a table of many final losses can tell a heavy-tailed language from a Normal one).

    Parameters
    ----------
    priors : Priors
        The requested priors (returned unchanged where some group has two observations, or
        where neither a run effect nor a learned ``df`` below the bound is asked for).
    group : array (N,) or None
        (run, language) group of every observation; ``None``: every point is its own group.
    log : callable, optional
        Receives one line per setting changed.

    Returns
    -------
    Priors
    """
    if group is not None and run_effect_identified(group):
        return priors
    changes: dict[str, object] = {}
    if priors.run_effect:
        changes["run_effect"] = False
        if log is not None:
            log(
                "run effect off: every (run, language) group has one observation, so run-level "
                "and point-level noise are not separately identified; one noise scale per "
                "language"
            )
    if priors.learned_df and priors.student_df_min < ONE_POINT_DF_MIN:
        changes["student_df_min"] = ONE_POINT_DF_MIN
        if log is not None:
            log(
                f"Student-t df bounded below by {ONE_POINT_DF_MIN:g}: with one observation per "
                "group a df near 1 lets a language's noise scale collapse to 0 (docs/model.md)"
            )
    return priors.replace(**changes) if changes else priors

"""A NumPyro model's potential energy compiled with the model's data as *arguments*.

:func:`numpyro.infer.util.get_potential_fn` returns a function that holds the model's
arguments in a closure; ``jax.jit`` of it (or of its gradient, Hessian, ``vmap``) compiles the
data into the program as constants, so every Laplace fit of other data -- each
leave-future-out fold of a fit, each law's full Laplace fit -- traces and compiles its own
programs, though the model and the array shapes are the same. Here the arrays among the
model's arguments (and its floats) are inputs of one set of compiled programs per (model,
static arguments, array shapes): fits of equal shapes (the folds padded to the full table's
shape, :mod:`climb_bayes.data.padding`) trace and compile once.

The potential is NumPyro's own (:func:`numpyro.infer.util.potential_energy`, the function
``get_potential_fn`` binds), the post-processing :func:`numpyro.infer.util.constrain_fn`:
public API, with the arguments passed at call time instead of bound. A model whose Python code
needs a concrete value of an array or float argument (an ``if`` on it) cannot be traced so;
:func:`argument_potential` then returns ``None`` and the caller keeps the closure.

Measured (2-core AMD EPYC without AVX-512, empty compilation cache, ``JAX_LOG_COMPILES=1
climb-bayes fit`` on the shipped default data, 2026-12-07): before this module the potentials
of the fit's 12 Laplace fits and mode searches were compiled 24 times (``jit(potential)``,
36.9 s) and their Hessians and batched post-processing 22 times (``jit(<lambda>)``, 47.7 s);
with the data as arguments and the folds padded, 12 times (16.1 s) and 4 + 6 times (15.2 s),
and the command took 217 s instead of 315 s (docs/performance.md has the run).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

__all__ = [
    "BoundObjective",
    "ArgumentPotential",
    "ClosurePotential",
    "argument_potential",
    "PROGRAM_CACHE_SIZE",
]

PROGRAM_CACHE_SIZE = 32
"""Sets of compiled programs kept (least recently used dropped first); one per (model, static
arguments, shapes) -- a default fit uses 5."""

_PROGRAMS: OrderedDict[Any, _Programs] = OrderedDict()


class _Programs(NamedTuple):
    """Compiled functions of ``(x, data)``: a flat unconstrained vector (or a batch of them)
    and the model's dynamic arguments (PRNG key, array leaves)."""

    value_and_grad: Callable
    hessian: Callable
    batch_potential: Callable
    batch_postprocess: Callable


class BoundObjective:
    """``x -> f(x, data)`` for compiled programs of ``(x, data)`` that every data of the same
    shapes shares: the value-and-gradient and the Hessian.

    Callable like a closure over ``data``; :attr:`derivatives` gives the compiled pair
    (:func:`climb_bayes.inference.point_fit.jitted_derivatives` uses it instead of compiling
    the closure's own).

    Parameters
    ----------
    value_and_grad, hessian : callable
        Compiled ``(x, data) -> (value, gradient)`` and ``(x, data) -> Hessian``.
    data : pytree
        The arguments bound.
    """

    __slots__ = ("_value_and_grad", "_hessian", "_data")

    def __init__(self, value_and_grad: Callable, hessian: Callable, data: Any) -> None:
        self._value_and_grad = value_and_grad
        self._hessian = hessian
        self._data = data

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._value_and_grad(x, self._data)[0]

    @property
    def derivatives(self) -> tuple[Callable, Callable]:
        """``(x -> (value, gradient), x -> Hessian)``, compiled."""
        value_and_grad, hessian, data = self._value_and_grad, self._hessian, self._data
        # positional, as every call of the programs: a keyword argument is another signature
        # to ``jax.jit``, which traces and compiles the program again for it
        return (lambda x: value_and_grad(x, data), lambda x: hessian(x, data))


class ArgumentPotential(BoundObjective):
    """The potential energy (negative log joint, nats) of a flat unconstrained vector, with
    the model's data bound as arguments of shared compiled programs
    (:class:`BoundObjective`); :meth:`batch` and :meth:`postprocess_batch` give the potential
    and the constrained sites of a batch of vectors."""

    __slots__ = ("_programs",)

    def __init__(self, programs: _Programs, data: tuple) -> None:
        super().__init__(programs.value_and_grad, programs.hessian, data)
        self._programs = programs

    def batch(self, x: jax.Array) -> jax.Array:
        """Potential of each row of ``x`` (``(n, d)`` -> ``(n,)``)."""
        return self._programs.batch_potential(x, self._data)

    def postprocess_batch(self, x: jax.Array) -> dict[str, jax.Array]:
        """Constrained latent sites (and deterministic ones, where the model has them) of each
        row of ``x``, ``(n, ...)`` per site."""
        return self._programs.batch_postprocess(x, self._data)


class ClosurePotential:
    """The potential energy of a flat unconstrained vector through NumPyro's closures over the
    model's arguments (a model :func:`argument_potential` cannot trace with its data as
    arguments): the interface of :class:`ArgumentPotential`, its batched programs compiled
    for this one data set.

    Parameters
    ----------
    potential_fn, postprocess_fn : callable
        NumPyro's ``ModelInfo.potential_fn`` and ``postprocess_fn`` (dicts of sites).
    unravel : callable
        Flat vector -> dict of unconstrained sites.
    """

    __slots__ = ("_potential_fn", "_unravel", "batch", "postprocess_batch")

    def __init__(self, potential_fn: Callable, postprocess_fn: Callable, unravel: Callable) -> None:
        self._potential_fn = potential_fn
        self._unravel = unravel
        self.batch = jax.jit(jax.vmap(self))
        """Potential of each row of ``x`` (``(n, d)`` -> ``(n,)``)."""
        self.postprocess_batch = jax.jit(jax.vmap(lambda x: postprocess_fn(unravel(x))))
        """Constrained latent sites (and deterministic ones) of each row of ``x``."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._potential_fn(self._unravel(x))


def _is_data(leaf: Any) -> bool:
    """Whether a leaf of the model's arguments enters the programs as an input: arrays and
    floats (Python ints, bools, strings and objects stay static: shapes, flags, settings)."""
    if isinstance(leaf, bool | int | str) or leaf is None:
        return False
    return isinstance(leaf, np.ndarray | np.generic | jax.Array | float)


def _build(
    model: Callable[..., None],
    treedef: Any,
    static: tuple,
    is_data: tuple[bool, ...],
    unravel: Callable,
    deterministic: bool,
) -> _Programs:
    from numpyro.handlers import seed
    from numpyro.infer.util import constrain_fn, potential_energy

    def arguments(leaves: tuple) -> tuple:
        dyn, fixed = iter(leaves), iter(static)
        return jax.tree_util.tree_unflatten(
            treedef, [next(dyn) if d else next(fixed) for d in is_data]
        )

    def potential(x: jax.Array, data: tuple) -> jax.Array:
        key, leaves = data
        return potential_energy(seed(model, key), arguments(leaves), {}, unravel(x))

    def postprocess(x: jax.Array, data: tuple) -> dict[str, jax.Array]:
        key, leaves = data
        return constrain_fn(
            seed(model, key), arguments(leaves), {}, unravel(x), return_deterministic=deterministic
        )

    value_and_grad = jax.jit(jax.value_and_grad(potential))
    return _Programs(
        value_and_grad,
        jax.jit(jax.jacfwd(lambda x, data: value_and_grad(x, data)[1])),
        jax.jit(jax.vmap(potential, in_axes=(0, None))),
        jax.jit(jax.vmap(postprocess, in_axes=(0, None))),
    )


def argument_potential(
    model: Callable[..., None],
    model_args: tuple,
    z0: dict[str, jax.Array],
    key: jax.Array,
    *,
    deterministic: bool,
) -> ArgumentPotential | None:
    """``model``'s potential of a flat vector (the :func:`jax.flatten_util.ravel_pytree` order
    of ``z0``) with ``model_args``' arrays and floats as program inputs.

    Parameters
    ----------
    model : callable
        NumPyro model.
    model_args : tuple
        Its positional arguments (a pytree: arrays, floats, NamedTuples of them and NumPyro
        distributions enter as data; other leaves must be hashable and are static).
    z0 : dict
        Unconstrained values of the latent sites (their names, shapes and dtypes fix the flat
        layout).
    key : jax.Array
        PRNG key of the model's seed handler.
    deterministic : bool
        Whether the post-processing returns the deterministic sites too.

    Returns
    -------
    ArgumentPotential or None
        ``None`` when a static leaf is not hashable or the model needs a concrete value of an
        argument (the caller then compiles the closure as before).
    """
    leaves, treedef = jax.tree_util.tree_flatten(model_args)
    is_data = tuple(_is_data(v) for v in leaves)
    static = tuple(v for v, d in zip(leaves, is_data, strict=True) if not d)
    # arrays on the device once, not at each of the searches' thousands of calls
    data = (
        key,
        tuple(
            jax.device_put(v) if isinstance(v, np.ndarray) else v
            for v, d in zip(leaves, is_data, strict=True)
            if d
        ),
    )
    layout = tuple((k, np.shape(v), np.asarray(v).dtype.str) for k, v in sorted(z0.items()))
    try:
        cache_key = (model, treedef, static, is_data, layout, deterministic)
        hash(cache_key)
    except TypeError:
        return None
    programs = _PROGRAMS.get(cache_key)
    if programs is None:
        flat, unravel = ravel_pytree(z0)
        programs = _build(model, treedef, static, is_data, unravel, deterministic)
        try:  # traces (and compiles) the gradient the searches call first
            programs.value_and_grad(flat, data)
        except (TypeError, jax.errors.ConcretizationTypeError):
            return None
        _PROGRAMS[cache_key] = programs
        while len(_PROGRAMS) > PROGRAM_CACHE_SIZE:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(cache_key)
    return ArgumentPotential(programs, data)

"""Process set-up for climb-bayes: 64-bit floats, one host device per CPU core, single-threaded
OpenBLAS.

Importing :mod:`climb_bayes` changes no JAX setting. The ``climb-bayes`` command calls
:func:`setup_jax` before it does anything else, and so do the functions of the Python API
(:mod:`climb_bayes.api`: ``fit``, ``predict``, ``optimize``, ``evaluate``). A script that uses
the lower-level modules directly runs the one-liner first::

    import climb_bayes
    climb_bayes.setup_jax()     # before the first JAX computation

Why each setting:

* **64-bit floats** (``jax_enable_x64``). Budgets of 1e12 tokens, shares of 1e-3 and losses
  that differ in the fourth decimal do not survive float32: ``(D r)^-beta`` at ``D = 1e12``
  loses ~4 digits to cancellation in the transfer term, and NUTS step-size adaptation on
  log-losses with a noise of 1e-3 stalls. The language-block sampler switches to float32 on
  purpose where it is safe (:mod:`climb_bayes.inference.nuts_blocks`).
* **Host devices** (``numpyro.set_host_device_count``). XLA sees one CPU device by default, so
  NUTS chains run one after another; with one device per core (at least 4, so that the default
  4 chains get one each) NumPyro runs them in parallel (``chain_method="parallel"``). This only
  takes effect before JAX initialises its backends; afterwards :func:`setup_jax` leaves the
  device count as it is (chains are then vectorised).
* **Persistent compilation cache** (``jax_compilation_cache_dir``). Every fit compiles the
  same NUTS, L-BFGS and Laplace programs for its data; a default ``climb-bayes fit`` took
  142-168 s on its first run and 81 s once an earlier fit of the same table had filled the
  cache (the 8 leave-future-out fold fits 38 -> 11 s; measured 2026-11-25 on the 2-core
  machine). The cache lives in ``$CLIMB_BAYES_CACHE_DIR`` or ``$XDG_CACHE_HOME/climb-bayes/jax``
  (``~/.cache/climb-bayes/jax``); a cache directory the user already gave JAX wins, and
  ``CLIMB_BAYES_COMPILE_CACHE=0`` (or an unwritable directory) turns it off (a few MB per
  dataset shape).

* **Single-threaded OpenBLAS** (:data:`BLAS_THREADS`). The CPU work outside JAX is small
  linear algebra: scipy's L-BFGS-B (every mode search and point fit) and NumPy's
  eigen-decompositions of 10-600-parameter Hessians. OpenBLAS threads that small work, and on a
  2-core machine its threads wait on cores that XLA's threads or another process hold.
  Measured (2026-11-29, 2-core AMD EPYC beside a test run): scipy L-BFGS-B on a 50-parameter
  quadratic 10.9 ms per evaluation with OpenBLAS's 2 threads, 0.34 ms with 1; the Laplace fits
  of a leave-future-out fold of the default data (budgets <= 5e5) Isolated 14.6 -> 6.9 s,
  DML 13.3 -> 3.7 s. On an idle machine it makes no difference (``climb-bayes fit`` 80-83 s
  either way, the same output). ``OPENBLAS_NUM_THREADS`` set by the user wins (and is then left
  alone).

* **Compiled programs are released when the process runs short of memory maps**
  (:func:`release_compiled_programs`, called before every fit). Each fit traces its own
  closures, so JAX compiles and keeps new XLA:CPU executables for it, ~1,000 memory mappings per
  NUTS fit of the default data (1,134 -> 6,401 after four fits; ``jax.clear_caches()`` gave
  back all but ~400; measured 2026-11-26). Linux refuses a process more than
  ``vm.max_map_count`` mappings (65,530 by default) and XLA's code loader then segfaults: the
  test suite died that way, in ``backend_compile_and_load``, at 65,379 mappings, after ~60 fits
  in one process; a long ``robustness`` or ``evaluate --lfo`` run would too. Releasing the caches
  costs the next fit its in-memory compilations (the persistent cache still serves them).

References
----------
.. [1] NumPyro documentation, ``numpyro.util.set_host_device_count`` and ``enable_x64``.
"""

from __future__ import annotations

import os

__all__ = [
    "setup_jax",
    "BLAS_THREADS",
    "limit_blas_threads",
    "DEFAULT_MIN_DEVICES",
    "CACHE_MIN_COMPILE_SECONDS",
    "MAP_SHARE",
    "compile_cache_dir",
    "memory_maps",
    "release_compiled_programs",
]

DEFAULT_MIN_DEVICES = 4
"""At least this many host devices, so that the default 4 chains run in parallel."""


CACHE_MIN_COMPILE_SECONDS = 0.0
"""Compilations faster than this are not written to the persistent cache (0: every one; the
leave-future-out fold fits are many small compilations: with 0.2 s they stayed 2.5x slower)."""


BLAS_THREADS = 1
"""OpenBLAS threads :func:`setup_jax` allows (:func:`limit_blas_threads`)."""


_blas_threads_set = False
"""Whether :func:`limit_blas_threads` wrote ``OPENBLAS_NUM_THREADS`` (a later call may change
it; a value the user set is left alone)."""


def limit_blas_threads(threads: int = BLAS_THREADS) -> None:
    """Run OpenBLAS (NumPy's and SciPy's) on ``threads`` threads, unless the user set
    ``OPENBLAS_NUM_THREADS``.

    Libraries loaded already are limited through :mod:`threadpoolctl`; the environment variable
    covers those loaded later (OpenBLAS reads it when it loads). Other thread pools (OpenMP,
    PyTorch's, XLA's) are left alone.
    """
    global _blas_threads_set
    if "OPENBLAS_NUM_THREADS" in os.environ and not _blas_threads_set:
        return  # the user's choice
    threads = int(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    _blas_threads_set = True
    from threadpoolctl import ThreadpoolController

    ThreadpoolController().select(internal_api="openblas").limit(limits=threads)


MAP_SHARE = 0.5
"""Share of ``vm.max_map_count`` above which :func:`release_compiled_programs` clears JAX's
caches (half: a NUTS fit adds ~1,000 of the default 65,530, a large one several thousand)."""


def memory_maps() -> tuple[int, int] | None:
    """``(mappings of this process, the kernel's limit)``; ``None`` where ``/proc`` has neither
    (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            limit = int(fh.read())
        with open("/proc/self/maps", "rb") as fh:
            used = sum(1 for _ in fh)
    except (OSError, ValueError):
        return None
    return used, limit


def release_compiled_programs(share: float = MAP_SHARE) -> bool:
    """Clear JAX's in-memory compilation caches when this process uses more than ``share`` of
    the kernel's memory-map limit; returns whether it did.

    Called before every fit (:func:`climb_bayes.inference.fitting.fit_runs` and the laws' fits),
    so that many fits in one process (robustness studies, leave-future-out folds, a test suite)
    do not exhaust ``vm.max_map_count``, where XLA's code loader segfaults. Functions jitted
    earlier stay valid; they compile again on their next call.
    """
    maps = memory_maps()
    if maps is None or maps[0] <= share * maps[1]:
        return False
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
    return True


def compile_cache_dir() -> str | None:
    """Where :func:`setup_jax` keeps compiled programs (``None``: the cache is off)."""
    if os.environ.get("CLIMB_BAYES_COMPILE_CACHE", "1").strip().lower() in ("0", "false", "no"):
        return None
    root = os.environ.get("CLIMB_BAYES_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "climb-bayes",
        "jax",
    )
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    return root if os.access(root, os.W_OK) else None


def _backends_initialised() -> bool:
    # JAX has no public query; this private one only reads (a missing name: assume started,
    # so the device count is left alone rather than set too late to matter).
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - JAX moved it
        return True
    ask = getattr(xla_bridge, "backends_are_initialized", None)
    return True if ask is None else bool(ask())


def setup_jax(
    host_devices: int | None = None,
    *,
    x64: bool = True,
    compile_cache: bool = True,
    blas_threads: int | None = BLAS_THREADS,
) -> None:
    """Enable 64-bit floats, one host device per CPU core, a compilation cache and
    single-threaded OpenBLAS (idempotent).

    Parameters
    ----------
    host_devices : int, optional
        Host (CPU) devices to expose; default ``max(os.cpu_count(), 4)``. Ignored when JAX has
        already initialised its backends, or when ``XLA_FLAGS`` already sets a device count
        (the user's choice wins).
    x64 : bool
        Enable 64-bit floats (what every climb-bayes computation assumes).
    compile_cache : bool
        Keep compiled programs on disk (:func:`compile_cache_dir`) unless JAX already has a
        cache directory.
    blas_threads : int, optional
        OpenBLAS threads (:func:`limit_blas_threads`; ``None`` leaves them alone).

    Examples
    --------
    >>> import climb_bayes
    >>> climb_bayes.setup_jax()
    >>> import jax.numpy as jnp
    >>> jnp.ones(1).dtype
    dtype('float64')
    """
    if blas_threads is not None:
        limit_blas_threads(blas_threads)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        if not _backends_initialised():
            import numpyro

            n = host_devices or max(os.cpu_count() or 1, DEFAULT_MIN_DEVICES)
            numpyro.set_host_device_count(int(n))
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)
    if compile_cache and not jax.config.jax_compilation_cache_dir:
        root = compile_cache_dir()
        if root is not None:
            jax.config.update("jax_compilation_cache_dir", root)
            jax.config.update(
                "jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS
            )

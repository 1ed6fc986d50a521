"""Shared fixtures: small simulated worlds and fits, built once per test session.

The synthetic designs here pin ``pool="central"`` (Algorithm-1 shares) and ``spread=False``
(raw Dirichlet holdouts), the designs their statistical tolerances were set on; the current
defaults are tested in tests/decisions/test_plan_suggest.py.

NUTS fits here are deliberately small (3 languages, 2 chains, short warm-up) so the whole
suite stays within minutes on a 2-core machine; tests that need a converged posterior build
their own.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np
import pandas as pd
import pytest

# Tests must not write into the user's ~/.cache: climb_bayes's own cache directory stays off
# (tests that check the cache settings set the variables themselves). (The SIGSEGVs of
# 2026-11-26 in this long process were the kernel's memory-map limit, not the cache:
# climb_bayes.runtime.release_compiled_programs.)
os.environ.setdefault("CLIMB_BAYES_COMPILE_CACHE", "0")

import climb_bayes  # noqa: E402
from climb_bayes.data.design import algorithm1_design, holdout_design
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.model.simulate import TrueParams, example_params, simulate_runs
from climb_bayes.runtime import CACHE_MIN_COMPILE_SECONDS


def _private_compile_cache() -> None:
    """A persistent compilation cache private to this test process, removed when it exits.

    Each fit traces its own closures, so the suite compiles the same NUTS, L-BFGS and Laplace
    programs again and again; JAX's in-memory caches miss them and the persistent cache (keyed
    by the program) serves them. One directory per process: JAX writes entries without a lock,
    so worker processes do not share one. Measured 2026-12-03 on the 2-core Intel Xeon,
    ``pytest -n 0 tests/cli/test_fitfile_cli.py tests/inference/test_fit.py``: 598 s without,
    490 s with (15 MB). ``CLIMB_BAYES_TESTS_COMPILE_CACHE=0`` in the environment turns it off.
    """
    switch = os.environ.get("CLIMB_BAYES_TESTS_COMPILE_CACHE", "1").strip().lower()
    if switch in ("0", "false", "no"):  # the values climb_bayes.runtime reads as off
        return
    import jax

    root = tempfile.mkdtemp(prefix="climb-bayes-tests-jax-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    jax.config.update("jax_compilation_cache_dir", root)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)


_private_compile_cache()
climb_bayes.setup_jax()  # x64 and host devices before JAX starts (the CLI does the same)

LANGS3 = ("en", "de", "zh")
BUDGETS = (5e9, 2.5e10)


MAX_WORKERS = 4
"""Most test processes ``-n auto`` starts (pyproject.toml's addopts): one per core up to this."""

WORKER_MEMORY = 5 * 2**30
"""Peak memory of one test process (bytes; 4.6 GB resident measured at the end of a whole
in-process run on 2026-12-02): ``-n auto`` starts no more workers than memory holds."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto``: one per core, at most :data:`MAX_WORKERS` and what memory holds.

    One process kept 1.2 of 2 cores busy on average (JAX tracing and compilation run on one
    thread between the parallel NUTS chains), so two processes on 2 cores finish sooner; more
    than a few would each hold a JAX runtime and its compiled programs.
    """
    cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = WORKER_MEMORY * MAX_WORKERS
    return max(1, min(cores, MAX_WORKERS, memory // WORKER_MEMORY))


SLOWEST_FILES = (
    "evaluation/test_robustness.py",
    "training/test_training.py",
    "cli/test_fitfile_cli.py",
    "inference/test_ensemble.py",
    "inference/test_fit.py",
    "model/test_discrepancy.py",
    "evaluation/test_lfo_evaluate.py",
    "inference/test_lfo.py",
    "cli/test_cli_gates.py",
    "laws/test_laws.py",
    "test_api.py",
    "inference/test_nuts_blocks.py",
    "evaluation/test_recovery.py",
    "data/test_datasets.py",
    "evaluation/test_sbc.py",
    "decisions/test_optimize.py",
)
"""Test files by measured time, slowest first (relative to tests/; per-file sums of
``pytest --durations=70 --durations-min=3`` at 04552fe on a 2-core AMD EPYC machine,
2026-12-04, 545 passed in 1,144 s: 274, 242, 221, 209, 136, 114, 77 (about 30 s more since the
API test of 81b33dd), 82, 63, 58, 58, 49, 44, 41, 33 and 33 s)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the slowest files first (:data:`SLOWEST_FILES`), the others after them in their
    collection order; tests keep their order within a file.

    With ``--dist loadfile`` a worker takes the next whole file when it runs short, so a long
    file handed out last keeps one worker busy while the other idles. xdist's own reordering
    (files with the most tests first) put the robustness and ensemble files (10 and 15 tests,
    ~500 s each) in the middle of the queue; ``--no-loadscope-reorder`` (pyproject.toml) leaves
    this order to the scheduler.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}

    def position(item: pytest.Item) -> int:
        rel = os.path.relpath(str(item.path), here).replace(os.sep, "/")
        return rank.get(rel, len(rank))

    items.sort(key=position)  # stable


@pytest.fixture(scope="session")
def world3() -> TrueParams:
    """A 3-language synthetic world (see :func:`climb_bayes.model.simulate.example_params`)."""
    return example_params(LANGS3, seed=3, sigma=0.01)


@pytest.fixture(scope="session")
def design3() -> pd.DataFrame:
    """Algorithm-1 plan for :func:`world3` at 5B and 25B tokens."""
    return algorithm1_design(LANGS3, BUDGETS, seed=0, pool="central")


@pytest.fixture(scope="session")
def sim_frame3(world3, design3) -> pd.DataFrame:
    """Long-form simulated runs table (curves) for :func:`world3`."""
    return simulate_runs(world3, design3, seed=0)


@pytest.fixture(scope="session")
def runs3(sim_frame3):
    """Validated :class:`~climb_bayes.data.runs.RunsData` of :func:`sim_frame3`."""
    return runs_from_frame(sim_frame3)


@pytest.fixture(scope="session")
def holdout_frame3(world3) -> pd.DataFrame:
    """Six random mixtures at 10x the largest fitted budget, simulated from :func:`world3`."""
    return simulate_runs(world3, holdout_design(LANGS3, 2.5e11, 6, seed=1, spread=False), seed=1)


@pytest.fixture(scope="session")
def map_fit3(runs3):
    """Point fit (``method="map"``) of :func:`runs3`."""
    return fit_runs(runs3, method="map", seed=0, n_starts=4)


@pytest.fixture(scope="session")
def nuts_fit3(runs3):
    """A small NUTS fit of :func:`runs3` (2 chains; not necessarily converged)."""
    return fit_runs(
        runs3,
        method="nuts",
        config=NutsConfig(chains=2, warmup=300, samples=400, progress_bar=False),
        seed=0,
    )


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture()
def backend_compiles():
    """``with backend_compiles() as compiles:`` collects the seconds of every XLA backend
    compilation while the block runs (``jax.monitoring``'s event): a test that two programs
    are shared asserts the list stays empty.

    Every fit calls :func:`climb_bayes.runtime.release_compiled_programs`, which clears JAX's
    caches once the process holds half the kernel's memory-map limit; late in a long xdist
    worker that happened between a test's two fits (115 recompiled programs, CI of 2026-12-08).
    So the caches are released here first, and the test's fits start far below the limit."""
    import contextlib

    import jax.monitoring

    from climb_bayes.runtime import release_compiled_programs

    release_compiled_programs(share=0.0)

    @contextlib.contextmanager
    def watch():
        compiles: list[float] = []

        def count(event: str, duration: float, **kwargs) -> None:
            if event == "/jax/core/compile/backend_compile_duration":
                compiles.append(duration)

        jax.monitoring.register_event_duration_secs_listener(count)
        try:
            yield compiles
        finally:
            jax.monitoring.unregister_event_duration_listener(count)

    return watch

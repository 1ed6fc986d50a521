"""The public Python API (climb_bayes.api): import without side effects, runnable examples,
clear errors; the JAX run-time guard (climb_bayes.runtime)."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import climb_bayes as cb
from climb_bayes.errors import ClimbError
from climb_bayes.runtime import memory_maps, release_compiled_programs


def _run_python(code: str, drop: str, **extra: str) -> str:
    """stdout of ``code`` in a fresh interpreter without the environment variable ``drop`` (and
    with ``extra``); fails the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k != drop} | extra
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_changes_no_jax_setting():
    code = (
        "import os, sys\n"
        "before = os.environ.get('XLA_FLAGS')\n"
        "import climb_bayes\n"
        "assert 'jax' not in sys.modules, 'importing climb_bayes imported JAX'\n"
        "assert os.environ.get('XLA_FLAGS') == before, 'XLA_FLAGS changed'\n"
        "import jax\n"
        "assert not jax.config.jax_enable_x64, 'x64 switched on by the import'\n"
        "climb_bayes.fit  # the lazy API attribute loads without changing JAX either\n"
        "assert not jax.config.jax_enable_x64\n"
        "climb_bayes.setup_jax()\n"
        "assert jax.config.jax_enable_x64 and jax.local_device_count() >= 4\n"
        "print('ok')\n"
    )
    assert _run_python(code, "XLA_FLAGS") == "ok"


def test_setup_runs_openblas_on_one_thread_unless_the_user_chose():
    code = (
        "import numpy, scipy.linalg\n"  # OpenBLAS loaded before the set-up
        "from threadpoolctl import threadpool_info\n"
        "import climb_bayes\n"
        "climb_bayes.setup_jax()\n"
        "import scipy.optimize\n"
        "def threads(): return sorted({i['num_threads'] for i in threadpool_info()"
        " if i['internal_api'] == 'openblas'})\n"
        "first = threads()\n"
        "climb_bayes.setup_jax(blas_threads=2)\n"  # a later explicit choice is honoured
        "print(first, threads())\n"
    )
    assert _run_python(code, "OPENBLAS_NUM_THREADS") == "[1] [2]"
    # the user's environment wins over both calls
    assert _run_python(code, "OPENBLAS_NUM_THREADS", OPENBLAS_NUM_THREADS="1") == "[1] [1]"


def test_public_names_resolve_and_are_documented():
    import climb_bayes.api as api

    # two literal lists on purpose: the package serves the names without importing the API
    # module (and JAX), and ruff/griffe need api.__all__ literal to see its re-exports
    assert sorted(api.__all__) == sorted(cb._API)
    for name in cb.__all__:
        obj = getattr(cb, name)
        if callable(obj) and name != "__version__":
            assert obj.__doc__, name
    with pytest.raises(AttributeError):
        cb.not_a_name  # noqa: B018


@pytest.mark.parametrize(
    "module",
    [
        "climb_bayes.api",
        "climb_bayes.runtime",
        "climb_bayes.data.runs",
        "climb_bayes.inference.fitresult",
        "climb_bayes.data.design",
    ],
)
def test_docstring_examples_run(module):
    import importlib

    mod = importlib.import_module(module)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(mod, optionflags=flags, verbose=False)
    assert result.attempted > 0 and result.failed == 0, result


def test_bad_mixtures_and_weights_are_clear_errors(map_fit3):
    fit3 = map_fit3
    with pytest.raises(ClimbError, match="unknown language"):
        cb.predict(fit3, {"xx": 1.0}, 1e10)
    with pytest.raises(ClimbError, match="sum to 1"):
        cb.predict(fit3, np.array([0.5, 0.2, 0.2]), 1e10)
    with pytest.raises(ClimbError, match="weights need"):
        cb.optimize(fit3, 1e10, weights=[1.0, 2.0])


def test_compile_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    from climb_bayes.runtime import compile_cache_dir

    monkeypatch.delenv("CLIMB_BAYES_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "1")
    assert compile_cache_dir() == str(tmp_path / "xdg" / "climb-bayes" / "jax")
    assert (tmp_path / "xdg" / "climb-bayes" / "jax").is_dir()
    monkeypatch.setenv("CLIMB_BAYES_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "0")
    assert compile_cache_dir() is None
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "1")
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("CLIMB_BAYES_CACHE_DIR", str(tmp_path / "file" / "sub"))
    assert compile_cache_dir() is None  # cannot be created: off, no error


_linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@_linux_only
def test_memory_maps_reads_this_process_and_the_kernel_limit():
    used, limit = memory_maps()
    assert 10 < used < limit  # a Python process with JAX loaded maps at least its libraries
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + x**2)  # a new executable maps new memory
    f(jnp.arange(7.0)).block_until_ready()
    assert memory_maps()[0] >= used


@_linux_only
def test_release_clears_compiled_programs_only_above_the_share():
    f = jax.jit(lambda x: jnp.cos(x) + 2.0)
    f(jnp.ones(3)).block_until_ready()
    assert f._cache_size() == 1
    assert not release_compiled_programs(share=1.0)  # below the whole limit: nothing happens
    assert f._cache_size() == 1
    assert release_compiled_programs(share=0.0)  # any use is above no share
    assert f._cache_size() == 0
    assert float(f(jnp.zeros(1))[0]) == 3.0  # still callable: compiles again


def test_fit_command_and_api_fit_share_their_sampler_defaults():
    """`climb-bayes fit` and `cb.fit` state their defaults apart (the CLI does not import the
    API, and JAX with it, until it runs); they must stay the same settings."""
    import inspect

    from climb_bayes.cli.fit_cmd import fit as fit_command

    api_defaults = {name: p.default for name, p in inspect.signature(cb.fit).parameters.items()}
    cli_defaults = {p.name: p.default for p in fit_command.params}
    shared = ("chains", "warmup", "samples", "target_accept", "max_tree_depth", "init", "seed")
    assert {n: cli_defaults[n] for n in shared} == {n: api_defaults[n] for n in shared}
    assert (api_defaults["warmup"], api_defaults["samples"]) == (500, 4000)
    from climb_bayes.inference.nuts import FIT_SAMPLER  # evaluate --shipped / --lfo use it too

    sampler = ("chains", "warmup", "samples", "max_tree_depth")
    assert {n: getattr(FIT_SAMPLER, n) for n in sampler} == {n: cli_defaults[n] for n in sampler}
    # no --target-accept: each law's own, CLIMB's that of the sampler `evaluate` reuses
    from climb_bayes.laws import get_law

    assert cli_defaults["target_accept"] is None
    assert get_law("climb").nuts_target_accept == FIT_SAMPLER.target_accept

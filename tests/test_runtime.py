"""climb_bayes.runtime: releasing compiled programs before the process runs out of memory maps."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import pytest

from climb_bayes.runtime import memory_maps, release_compiled_programs

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_memory_maps_reads_this_process_and_the_kernel_limit():
    used, limit = memory_maps()
    assert 10 < used < limit  # a Python process with JAX loaded maps at least its libraries
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + x**2)  # a new executable maps new memory
    f(jnp.arange(7.0)).block_until_ready()
    assert memory_maps()[0] >= used


@linux_only
def test_release_clears_compiled_programs_only_above_the_share():
    f = jax.jit(lambda x: jnp.cos(x) + 2.0)
    f(jnp.ones(3)).block_until_ready()
    assert f._cache_size() == 1
    assert not release_compiled_programs(share=1.0)  # below the whole limit: nothing happens
    assert f._cache_size() == 1
    assert release_compiled_programs(share=0.0)  # any use is above no share
    assert f._cache_size() == 0
    assert float(f(jnp.zeros(1))[0]) == 3.0  # still callable: compiles again

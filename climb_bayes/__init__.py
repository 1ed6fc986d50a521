"""climb-bayes: Bayesian CLIMB multilingual data-mixture scaling laws.

Importing the package enables 64-bit floats in JAX (budgets of 1e12 tokens and shares of 1e-3
need them) and, if JAX has not been initialised yet, exposes one host device per CPU core (at
least 4) so that NUTS chains run in parallel rather than one after another.
"""

from __future__ import annotations

import os

__version__ = "0.1.0"
__all__ = ["__version__"]

# Only effective while JAX has not initialised its backends (its first computation).
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _n = max(os.cpu_count() or 1, 4)
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count={_n}".strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

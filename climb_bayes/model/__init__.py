"""Layer 2, model: the CLIMB law as pure ``jax.numpy`` functions, its priors and its NumPyro model.

:mod:`~climb_bayes.model.law` (the law, no imports from the package),
:mod:`~climb_bayes.model.observation` (the grouped noise model),
:mod:`~climb_bayes.model.discrepancy` (the extrapolation-discrepancy model),
:mod:`~climb_bayes.model.priors` (prior settings), :mod:`~climb_bayes.model.climb_model` (the
NumPyro model and its data arrays) and :mod:`~climb_bayes.model.simulate` (runs drawn from the
model).
"""

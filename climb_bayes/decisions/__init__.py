"""Layer 4, decisions: predictions at new mixtures and budgets, the optimal mixture r* and the
constraints, baselines and next-run suggestions around it."""

"""Layer 3, inference: point fits, NUTS, diagnostics, the fit result and the stacked ensemble.

Shares its layer with :mod:`climb_bayes.laws` (each competing law bundles its formula with its
generic MAP/NUTS/Laplace fits; the ensemble here fits and stacks them).
"""

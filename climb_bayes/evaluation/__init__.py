"""Layer 5, evaluation: held-out and leave-future-out scores, metrics, robustness studies,
simulation-based calibration and parameter recovery."""

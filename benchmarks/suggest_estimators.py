"""How `suggest` estimates a run's value: regression against importance reweighting.

Usage::

    climb-bayes fit -o fit.nc                                  # the default data (~2 min)
    python benchmarks/suggest_estimators.py fit.nc             # target 1e8 tokens, 1000 draws
    python benchmarks/suggest_estimators.py fit.nc --budget 1e9 --draws 500

On the fit's default predictive (joint draws: law, posterior draw, discrepancy realisation;
:mod:`climb_bayes.decisions.suggest`) and for the uniform and the recommended mixture at the
largest fitted budget and 4x it, prints the spread of the target (``r*``, and the weighted loss
of the recommended mixture) now and after the run by three estimators:

* ``regression``: out-of-fold least squares of the target on the outcome (what `suggest` uses;
  an upper bound on the expected posterior spread, so a lower bound on the reduction);
* ``+ squares``: the same with the outcomes' squares added (does a curved read tell more?);
* ``reweighting``: importance weights of the draws by each of ``--outcomes`` simulated outcomes'
  likelihood, leaving the generating draw out (what `suggest` did before 2026-12-02 on CLIMB's
  posterior alone), with the median effective sample size of the weights.

It also prints ``r*``'s spread with parts of the discrepancy switched off (which part of the
spread one run can inform). The tables in docs/decisions.md ("suggest") come from this script.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.special

import climb_bayes
from climb_bayes.decisions import ensemble_decision as ed
from climb_bayes.decisions.suggest import (
    Candidate,
    noise_draws,
    outcome_draws,
    spread_after,
    tail_noise,
)
from climb_bayes.inference.fitresult import load_fit

climb_bayes.setup_jax()


def reweighting(q, mu, y, scale, n_outcomes, rng):
    """Expected spread after by importance reweighting (Normal likelihood) and median ESS."""
    s = len(q)
    t = rng.integers(0, s, n_outcomes)
    z = (y[t][:, None, :] - mu[None]) / scale[None]
    ll = (-0.5 * z * z - np.log(scale[None])).sum(-1)
    ll[np.arange(n_outcomes), t] = -np.inf
    w = np.exp(ll - scipy.special.logsumexp(ll, axis=1, keepdims=True))
    mean, second = w @ q, w @ q**2
    after = float(np.mean(np.sum(second - mean**2, axis=1)))
    return after, float(np.median(1.0 / np.sum(w**2, axis=1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fit", help="a fit file (climb-bayes fit -o fit.nc)")
    ap.add_argument("--budget", type=float, default=1e8, help="target budget (tokens)")
    ap.add_argument("--draws", type=int, default=1000, help="joint draws")
    ap.add_argument("--outcomes", type=int, default=64, help="outcomes of the reweighting")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    fit = load_fit(args.fit)
    ens = fit.ensemble()
    m = len(fit.languages)
    w, lo, hi = np.full(m, 1.0 / m), np.zeros(m), np.ones(m)
    draws = ed.decision_draws(ens, args.budget, args.draws, seed=args.seed)
    rstar = ed.optimum_draws(draws, w, lo, hi)
    rec = ed.bayes_decision(draws, w, lo, hi, start=np.median(rstar, axis=0))
    targets = {"r*": rstar, "loss": ed.draw_losses(draws, rec, w)[:, None]}
    scale, df = tail_noise(ens, draws)
    rng = np.random.default_rng([args.seed, 1])
    fitted_max = float(np.max(fit.runs.run_budgets))

    print(
        f"fit {args.fit}; target {args.budget:.3g} tokens; {args.draws} joint draws; "
        f"largest fitted budget {fitted_max:.3g}\n"
    )
    print("| candidate | budget | target | now | regression | + squares | reweighting | ESS |")
    print("|---|---|---|---|---|---|---|---|")
    for name, shares in (("uniform", w), ("recommended", rec)):
        for budget in (fitted_max, 4.0 * fitted_max):
            mu = outcome_draws(ens, Candidate(name, shares, budget), args.draws, seed=args.seed)
            y = mu + noise_draws(rng, scale, df)
            for label, q in targets.items():
                now = float(np.sum(q.var(axis=0)))
                lin = spread_after(q, y, seed=args.seed)
                quad = spread_after(q, np.column_stack([y, y**2]), seed=args.seed)
                rw, ess = reweighting(q, mu, y, scale, args.outcomes, rng)
                print(
                    f"| {name} | {budget:.3g} | {label} | {np.sqrt(now):.3f} | "
                    f"{np.sqrt(lin):.3f} | {np.sqrt(quad):.3f} | {np.sqrt(rw):.3f} | {ess:.1f} |"
                )

    print("\nspread of r* (sd summed in quadrature) with parts of the discrepancy off:\n")
    print("| draws | spread of r* |")
    print("|---|---|")
    for label, key in (
        ("full predictive", None),
        ("no mixture-specific part", "amp"),
        ("no part shared by all mixtures", "shift"),
    ):
        if key is None:
            q = rstar
        else:
            off = [ld._replace(theta={**ld.theta, key: 0.0 * ld.theta[key]}) for ld in draws]
            q = ed.optimum_draws(off, w, lo, hi)
        print(f"| {label} | {np.sqrt(np.sum(q.var(axis=0))):.3f} |")


if __name__ == "__main__":
    main()

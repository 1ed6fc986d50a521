"""Calibrate the mixture discrepancy: leave-extreme-mixtures-out splits of published runs.

Usage::

    python benchmarks/calibrate_mixture.py [--data ../shared/data]
        [--sets 5mix-70M,5mix-410M,rp-70M,rp-410M,ddo]

A split holds out the runs that give one domain its largest share (when that share is at least
0.02 above every other run's and those runs are at most a third of the trajectories), fits the
shipped predictive (the four laws, Laplace fits, leave-future-out discrepancy and stacking, as
``climb-bayes fit --method laplace``) on the other runs, and scores the held-out ones at the
fitted budgets (the later half of them: steps 6k-12k of 5Mix, 8k-16k of RedPajama), so only the
mixture is extrapolated. The sets: Data Mixing Laws 5Mix and RedPajama (Ye et al. 2024; 70M and
410M, every domain that qualifies) and AutoScale's DDO runs (Kang et al. 2025;
``../shared/data/autoscale_ddo``: 15 final losses (log perplexity) of 7 RedPajama domains, the
uniform run and one domain's data cut to a fifth or tripled; the 7 tripled runs held out: their
tripled data makes their budgets 1.3x the largest fitted, so there the budget extrapolates a
little too).

For each law, ``kappa`` (:mod:`climb_bayes.model.mixture_discrepancy`) maximises the Gaussian
likelihood of the held-out residuals (law's predictive median) given the predictive's own sd
(without the mixture term) plus ``kappa u``, each split weighted equally (pooled over all
sets: the shipped values); leave-one-family-out (5Mix / RedPajama / DDO) refits it without a
family and reports that family's Gaussian coverage, which is the out-of-sample check. Then the
shipped predictive (this code's :data:`MIXTURE_SCALES`) is scored from its samples, with and
without the mixture term, per split.

Prints markdown; exits 0 with one line when the data folder is absent.

References
----------
.. [1] Ye, J. et al. (2024), "Data Mixing Laws", arXiv 2403.16952.
.. [2] Kang, F. et al. (2025), "AutoScale", arXiv 2407.20177.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from climb_bayes.runtime import setup_jax  # noqa: E402

setup_jax()

from climb_bayes.data.observations import Observations  # noqa: E402
from climb_bayes.data.published import (  # noqa: E402
    TOKENS_PER_STEP,
    load_5mix,
    load_autoscale_ddo,
    load_redpajama,
    shared_data_dir,
)
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble  # noqa: E402
from climb_bayes.laws import FitOptions, parse_laws  # noqa: E402
from climb_bayes.model.mixture_discrepancy import (  # noqa: E402
    MIXTURE_SCALES,
    mixture_distance,
    share_range,
)

LAWS = ("climb", "msl", "dml", "isolated")
FIT_STEPS = {"5mix": 12_000, "rp": 16_000}
Z50, Z90 = 0.6745, 1.6449


def _splits(data: Path, sets: list[str]):
    """``(set, held-out domain, fit, test)`` of every qualifying split."""
    for name in sets:
        if name == "ddo":
            obs = load_autoscale_ddo(data)
            out = obs.run_budget > 1.3e9
            yield "ddo", "tripled", obs.select(~out[obs.run]), obs.select(out[obs.run])
            continue
        kind, size = name.split("-")
        obs = (load_5mix if kind == "5mix" else load_redpajama)(data, (size,))[size]
        top_tokens = FIT_STEPS[kind] * TOKENS_PER_STEP
        obs = obs.select(obs.tokens <= top_tokens)
        shares = obs.run_r
        for j, domain in enumerate(obs.groups):
            out = np.isclose(shares[:, j], shares[:, j].max())
            rest = shares[~out, j]
            if rest.size == 0 or shares[:, j].max() - rest.max() < 0.02:
                continue
            trajectories = len(np.unique(obs.obs_series))
            if 3 * len(np.unique(obs.obs_series[out[obs.run]])) > trajectories:
                continue
            test = obs.select(out[obs.run] & (obs.tokens >= top_tokens / 2))
            yield name, domain, obs.select(~out[obs.run]), test


def _score(fit: Observations, test: Observations, seed: int) -> list[dict]:
    """Per held-out observation: residual, sd and coverage of every law and of the stack, with
    and without the mixture term, and the distance ``u``."""
    laws = parse_laws(",".join(LAWS))
    opts = FitOptions(n_starts=2, seed=seed, max_iter=1000, samples=1000)
    ens = fit_ensemble(fit, laws, opts, EnsembleOptions(method="laplace"))
    common = test
    for law in laws:
        common = law.prepare(fit).usable(common)
    y = common.log_loss
    u = mixture_distance(common.r, share_range(fit.run_r, fit.run))
    rows = [{"u": float(u[n]), "y": float(y[n])} for n in range(common.n)]
    sources = {**{k: ens.only(k) for k in ens.fits}, "stack": ens}
    for key, src in sources.items():
        for on in (False, True):
            s = src.predictive_samples(common, 1000, seed=seed, mixture=on)
            q = np.quantile(s, [0.05, 0.25, 0.5, 0.75, 0.95], axis=0)
            tag = f"{key}{'+mix' if on else ''}"
            for n, row in enumerate(rows):
                row[tag] = (
                    float(y[n] - q[2, n]),
                    float(s[:, n].std()),
                    bool(q[1, n] <= y[n] <= q[3, n]),
                    bool(q[0, n] <= y[n] <= q[4, n]),
                )
    return rows


def _fit_kappa(rows: list[dict], key: str) -> float:
    """Pooled maximum-likelihood ``kappa`` of ``key``, each split weighted equally."""
    res = np.array([r[key][0] for r in rows])
    sd = np.array([r[key][1] for r in rows])
    u = np.array([r["u"] for r in rows])
    w = np.array([1.0 / r["n_split"] for r in rows])

    def nll(log_kappa: float) -> float:
        var = sd**2 + (np.exp(log_kappa) * u) ** 2
        return float(np.sum(w * 0.5 * (res**2 / var + np.log(var))))

    return float(np.exp(minimize_scalar(nll, bounds=(-12.0, 0.0), method="bounded").x))


def _gauss_cover(rows: list[dict], key: str, kappa: float) -> tuple[float, float]:
    res = np.array([r[key][0] for r in rows])
    sd = np.array([r[key][1] for r in rows])
    z = np.abs(res) / np.sqrt(sd**2 + (kappa * np.array([r["u"] for r in rows])) ** 2)
    return float(np.mean(z < Z50)), float(np.mean(z < Z90))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sets", default="5mix-70M,5mix-410M,rp-70M,rp-410M,ddo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    data = args.data if args.data is not None else shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("mixture calibration skipped: no shared data folder (../shared/data).")
        return 0
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    rows: list[dict] = []
    for name, domain, fit, test in _splits(Path(data), args.sets.split(",")):
        t1 = time.perf_counter()
        part = _score(fit, test, args.seed)
        for row in part:
            row.update(split=(name, domain), family=name.split("-")[0], n_split=len(part))
        rows += part
        print(
            f"{name} {domain}: {len(part)} held out, {time.perf_counter() - t1:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    splits = list(dict.fromkeys(r["split"] for r in rows))
    families = list(dict.fromkeys(r["family"] for r in rows))
    print("## Calibration: kappa per law (pooled) and leave-one-family-out Gaussian coverage\n")
    print(
        "| law | kappa (all sets) | shipped | "
        + " | ".join(f"{f}: kappa without it, cov50 / cov90 off -> on" for f in families)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(families))
    for key in (*LAWS, "stack"):
        cells = []
        for fam in families:
            k = _fit_kappa([r for r in rows if r["family"] != fam], key)
            held = [r for r in rows if r["family"] == fam]
            (a50, a90), (b50, b90) = _gauss_cover(held, key, 0.0), _gauss_cover(held, key, k)
            cells.append(f"{k:.4f}, {a50:.2f} / {a90:.2f} -> {b50:.2f} / {b90:.2f}")
        shipped = f"{MIXTURE_SCALES[key].kappa:.4f}" if key in MIXTURE_SCALES else "-"
        print(f"| {key} | {_fit_kappa(rows, key):.4f} | {shipped} | " + " | ".join(cells) + " |")
    print(
        "\n## The shipped predictive's samples per split: cov50 / cov90 without -> with the "
        "mixture term\n"
    )
    print("| split | held out | median u | " + " | ".join(LAWS) + " | stack | stack MRE |")
    print("|---|---|---|" + "---|" * (len(LAWS) + 2))
    for split in (*splits, ("all", "")):
        sel = rows if split[0] == "all" else [r for r in rows if r["split"] == split]
        cells = []
        for key in (*LAWS, "stack"):
            off = [np.mean([r[key][i] for r in sel]) for i in (2, 3)]
            on = [np.mean([r[f"{key}+mix"][i] for r in sel]) for i in (2, 3)]
            cells.append(f"{off[0]:.2f} / {off[1]:.2f} -> {on[0]:.2f} / {on[1]:.2f}")
        mre = np.mean([abs(np.expm1(-r["stack"][0])) for r in sel])
        u = np.median([r["u"] for r in sel])
        print(f"| {split[0]} | {split[1]} | {u:.2f} | " + " | ".join(cells), end="")
        print(f" | {100 * mre:.2f}% |")
    print(f"\n- {len(rows)} held-out losses in {len(splits)} splits")
    print(f"- total time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

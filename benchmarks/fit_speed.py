"""NUTS fit speed on the Algorithm-1 design with curves (prints a markdown table).

Usage::

    python benchmarks/fit_speed.py                      # 5 and 16 languages, 2000 draws, 4 chains
    python benchmarks/fit_speed.py --languages 5 --samples 1000 --warmup 500
    python benchmarks/fit_speed.py --languages 16 --warmup 500 --samples 4000 --target-accept 0.98
                                                        # the settings of `climb-bayes fit`

For each size: wall time of the first run (includes JAX compilation), compile time
(estimated as first minus a second run with the same shapes when ``--repeat``), minimum bulk
ESS over latent parameters, ESS per second, max R-hat, divergences, tree-depth hits and
leapfrog steps per draw (summed over the blocks when sampling per language).
Target on the 2-core machine (issue 2): 16 languages in <= 90 s wall, every R-hat <= 1.01,
min bulk ESS >= 400, no divergences.
"""

from __future__ import annotations

import argparse
import time

import jax
from numpyro.infer.util import initialize_model

import climb_bayes  # noqa: E402
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.model.climb_model import climb_model, model_data
from climb_bayes.model.priors import Priors
from climb_bayes.model.simulate import example_params, simulate_runs

climb_bayes.setup_jax()  # x64 and host devices before JAX starts

LANGS16 = "de en nl es pt fr it id ja ko zh ru ar th vi tr".split()


def gradient_ms(runs) -> float:
    """Milliseconds per gradient of the model's potential energy (jitted, after compilation)."""
    data = model_data(runs, Priors())
    info = initialize_model(jax.random.PRNGKey(0), climb_model, model_args=(data, Priors()))
    grad = jax.jit(jax.value_and_grad(info.potential_fn))
    z = info.param_info.z
    jax.block_until_ready(grad(z))
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        out = grad(z)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / n * 1e3


def bench(m: int, args: argparse.Namespace) -> dict:
    langs = LANGS16[:m] if m <= 16 else [f"l{i}" for i in range(m)]
    world = example_params(langs, seed=0, sigma=0.01)
    runs = runs_from_frame(
        simulate_runs(world, algorithm1_design(langs, [5e9, 2.5e10], pool="central"), seed=0)
    )
    config = NutsConfig(
        chains=args.chains,
        warmup=args.warmup,
        samples=args.samples,
        target_accept=args.target_accept,
        dense_mass=not args.diagonal,
        progress_bar=False,
        blocks=args.blocks,
    )
    t0 = time.perf_counter()
    fit = fit_runs(runs, method="nuts", config=config, seed=0)
    wall = time.perf_counter() - t0
    compile_s = float("nan")
    if args.repeat:
        t1 = time.perf_counter()
        fit_runs(runs, method="nuts", config=config, seed=1)
        compile_s = max(wall - (time.perf_counter() - t1), 0.0)
    d = fit.diagnostics
    stats = fit.tree["sample_stats"]
    steps = stats["n_steps_total"] if "n_steps_total" in stats else stats["n_steps"]
    return {
        "languages": m,
        "blocks": "language" if "n_steps_total" in stats else "joint",
        "params": runs.n_parameters_climb,
        "obs": runs.n_obs,
        "wall_s": wall,
        "compile_s": compile_s,
        "min_bulk_ess": d.min_ess_bulk,
        "ess_per_s": d.min_ess_bulk / wall,
        "max_rhat": d.max_rhat,
        "divergences": d.divergences,
        "treedepth_hits": d.treedepth_saturated,
        "steps_per_draw": float(steps.mean()),
        "grad_ms": gradient_ms(runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--languages", default="5,16")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--target-accept", type=float, default=0.95)
    ap.add_argument("--diagonal", action="store_true", help="diagonal mass matrix (default dense)")
    ap.add_argument(
        "--blocks",
        choices=["auto", "joint", "language"],
        default="auto",
        help="joint NUTS or one block per target language (auto: blocks from 8 languages)",
    )
    ap.add_argument("--repeat", action="store_true", help="second run to separate compile time")
    args = ap.parse_args()
    rows = [bench(int(m), args) for m in args.languages.split(",")]
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""Parameter recovery at the real design size: which priors let the posterior cover the truth?

Simulates the paper's Algorithm-1 design (``3 m`` runs per budget) from a fixed world that is
*not* drawn from the prior, fits CLIMB by NUTS under each prior variant, and prints how many of
the true parameters (and of the true optimal shares ``r*`` at 1e12 tokens) fall inside the 90%
posterior intervals (:func:`climb_bayes.evaluation.recovery.parameter_recovery`). Worlds:

* ``5``: the shipped synthetic world (``climb_bayes/data/synthetic_params.json``: en, de, ru,
  zh, ja);
* ``16``: :func:`climb_bayes.model.simulate.example_params` for 16 languages (seed 0), the size at
  which the transfer prior's volume effect grows (``2 m (m - 1) = 480`` transfer parameters);
  NUTS samples it one language block at a time (``--blocks auto``).

Prior variants are ``key=value`` overrides of :class:`climb_bayes.model.priors.Priors` separated by
``;`` (``default`` is the shipped priors). docs/model.md shows this table. Usage::

    python benchmarks/parameter_recovery.py --languages 5   # default vs transfer_prior=natural
    python benchmarks/parameter_recovery.py --languages 16 --seeds 0

A calibrated posterior covers about 90% of every family; the counts per family show *where* a
prior biases the answer (the 2026 natural-scale transfer prior: B 1/5, beta 1/5, eta 0/5 on the
5-language world).

References
----------
.. [1] Cook, Gelman & Rubin (2006), "Validation of Software for Bayesian Models Using Posterior
   Quantiles", JCGS 15(3).
.. [2] Guo et al. (2025), Algorithm 1 (the run design).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import climb_bayes  # noqa: E402
from climb_bayes.data.design import algorithm1_design  # noqa: E402
from climb_bayes.evaluation.recovery import FAMILIES, parameter_recovery  # noqa: E402
from climb_bayes.inference.nuts import NutsConfig  # noqa: E402
from climb_bayes.model.priors import Priors  # noqa: E402
from climb_bayes.model.simulate import TrueParams, example_params  # noqa: E402

climb_bayes.setup_jax()  # x64 and host devices before JAX starts

DATA = Path(__file__).resolve().parent.parent / "climb_bayes" / "data"
BUDGETS = (5e9, 2.5e10)  # the shipped synthetic table's Algorithm-1 budgets
LANGS16 = ("en", "de", "fr", "es", "it", "pt", "nl", "ru", "pl", "cs", "zh", "ja", "ko", "ar",
           "hi", "tr")  # fmt: skip


def world(m: int) -> TrueParams:
    """The fixed truth for ``m`` languages (see the module docstring)."""
    if m == 5:
        return TrueParams.read(DATA / "synthetic_params.json")
    if m == 16:
        return example_params(LANGS16, seed=0)
    raise SystemExit(f"--languages must be 5 or 16, got {m}")


def parse_variant(text: str) -> tuple[str, Priors]:
    """``"default"`` or ``"key=value;key=value"`` into a label and :class:`Priors`."""
    text = text.strip()
    if text in ("", "default"):
        return "default", Priors()
    fields = {f.name: f for f in dataclasses.fields(Priors)}
    kw = {}
    for part in text.split(";"):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in fields:
            raise SystemExit(f"unknown prior key {key!r} in variant {text!r}")
        default = getattr(Priors(), key)
        if isinstance(default, bool):
            kw[key] = value.strip().lower() in ("1", "true", "yes")
        elif isinstance(default, (int, float)):
            kw[key] = type(default)(float(value))
        else:
            kw[key] = value.strip()
    return text, Priors(**kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--languages", type=int, default=5, choices=(5, 16))
    parser.add_argument(
        "--variants",
        default="default|transfer_prior=natural",
        help="prior variants separated by '|' (see the module docstring)",
    )
    parser.add_argument("--seeds", default="0,1", help="simulation/sampler seeds")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2000, help="kept draws over all chains")
    parser.add_argument("--level", type=float, default=0.9)
    args = parser.parse_args(argv)

    truth = world(args.languages)
    design = algorithm1_design(truth.languages, BUDGETS, seed=0)
    seeds = [int(s) for s in args.seeds.split(",")]
    config = NutsConfig(
        chains=args.chains, warmup=args.warmup, samples=args.samples, progress_bar=False
    )
    print(
        f"parameter recovery: {args.languages} languages, Algorithm-1 design at "
        f"{', '.join(f'{b:.1e}' for b in BUDGETS)} tokens ({len(design)} runs), seeds {seeds}, "
        f"NUTS {args.chains} x ({args.warmup} + {args.samples // args.chains}), "
        f"{args.level:.0%} intervals",
        file=sys.stderr,
        flush=True,
    )
    header = ["priors", *FAMILIES, "parameters", "max R-hat", "min ESS", "div", "time"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for spec in args.variants.split("|"):
        label, priors = parse_variant(spec)
        t0 = time.perf_counter()
        res = parameter_recovery(
            truth,
            design,
            priors=priors,
            config=config,
            seeds=seeds,
            level=args.level,
            log=lambda msg, label=label: print(f"[{label}] {msg}", file=sys.stderr, flush=True),
        )
        seconds = time.perf_counter() - t0
        table = res.table()
        rows = res.rows
        cells = [f"`{label}`"]
        cells += [f"{int(table.loc[f, 'covered'])}/{int(table.loc[f, 'total'])}" for f in FAMILIES]
        cells += [
            f"**{res.parameter_fraction:.1%}**",
            f"{max(r['max_rhat'] for r in rows):.3f}",
            f"{min(r['min_ess'] for r in rows):.0f}",
            str(sum(r["divergences"] for r in rows[:: len(FAMILIES)])),
            f"{seconds:.0f} s",
        ]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

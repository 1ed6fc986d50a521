"""Produce climb-bayes' shipped runs tables: real CLIMB sweeps with small models on CPU.

``--dataset default`` (the table ``climb-bayes fit`` uses with no file), in the law's regime
found by ``examples/pilot_regime.py`` (docs/training.md, "Pilot"):

* the CLIMB paper's **Algorithm 1** as ``climb-bayes plan`` writes it
  (:func:`climb_bayes.data.design.algorithm1_design`, seed 0, the paper's 15-value share grid): per
  language one monolingual run and two runs with the focal share ``c`` (one ``c <= 0.5``, one
  above) and the other languages at ``(1 - c) / 4``, at **three** budgets 250k, 500k and 1M
  tokens: 3 x 5 x 3 = 45 runs;
* **ten held-out random mixtures** at 3M tokens (3x the largest fitting budget;
  :func:`climb_bayes.data.design.holdout_design`, seed 1, no two closer than 0.1 in total
  variation), capped so that no language needs more than one epoch of its training text.

``--dataset tiny-2024`` reproduces the 2024 default (34 runs of the ``tiny`` model at 100k/300k
tokens + 4 holdouts at 1M, before the law's regime): kept so that old results reproduce.

Usage (resumable: run it again after an interruption; finished runs are skipped)::

    python examples/make_default_dataset.py --work /work/sweeps/default --jobs 2   # sweep
    python examples/make_default_dataset.py --work /work/sweeps/default --publish  # copy here

``--jobs 2`` trains two single-thread runs at once (both cores of a 2-core machine).
``--publish`` writes ``climb_bayes/data/<name>_runs.csv`` (long form) and
``<name>_runs_records.json`` (plan, settings, compact per-run records with realised tokens,
epochs and wall times). The sweep is the same as ``climb-bayes train --plan plan.csv ...`` with
the settings below (``training.sweep.run_sweep``).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LANGS = ["en", "de", "ru", "zh", "ja"]
COMMON = dict(seed=0, val_tokens=6144, eval_points=(0.5, 0.88, 0.94, 1.0))

DEFAULT = dict(
    settings=dict(
        preset="mini",
        vocab_size=2048,
        seq_len=64,
        batch_size=4,
        lr=3e-3,
        tokenizer_sample_chars=2_000_000,
        **COMMON,
    ),
    budgets=[250_000, 500_000, 1_000_000],
    holdout_budget=3_000_000,
    n_holdout=10,
    max_epochs=1.0,
)
TINY2024 = dict(
    settings=dict(preset="tiny", vocab_size=4096, tokenizer_sample_chars=2_000_000, **COMMON),
)
FILES = {"default": "default", "tiny-2024": "tiny2024"}


def default_plan(available: dict[str, int]) -> list[dict]:
    """Algorithm 1 at three budgets plus availability-capped held-out mixtures."""
    from climb_bayes.data.design import algorithm1_design, holdout_design

    fit = algorithm1_design(LANGS, DEFAULT["budgets"], seed=0)
    budget = DEFAULT["holdout_budget"]
    cap = [min(1.0, 0.98 * DEFAULT["max_epochs"] * available[x] / budget) for x in LANGS]
    held = holdout_design(LANGS, budget, DEFAULT["n_holdout"], seed=1, max_shares=cap)
    rows = []
    for table in (fit, held):
        for rec in table.to_dict("records"):
            shares = {x: rec[f"r_{x}"] for x in LANGS}
            rows.append({"run_id": rec["run_id"], "tokens": int(rec["tokens"]), **shares})
    return rows


def tiny2024_plan() -> list[dict]:
    """The 2024 plan: two budgets, ``c`` from the central pools, 4 raw Dirichlet holdouts."""
    low, high = [0.05, 0.1, 0.2, 0.25, 0.4], [0.5, 0.6, 0.75, 0.8, 0.9]
    rng = np.random.default_rng(0)
    cs = {lang: (float(rng.choice(low)), float(rng.choice(high))) for lang in LANGS}
    rows = []
    for bname, budget in {"100k": 100_000, "300k": 300_000}.items():
        for lang in LANGS:
            for c in (1.0, *cs[lang]):
                shares = {x: (c if x == lang else (1 - c) / (len(LANGS) - 1)) for x in LANGS}
                tag = "mono" if c == 1.0 else f"{c:g}"
                rows.append({"run_id": f"alg1-D{bname}-{lang}-{tag}", "tokens": budget, **shares})
    rng = np.random.default_rng(1)
    for k in range(4):
        r = np.round(rng.dirichlet(np.ones(len(LANGS))), 4)
        r[np.argmax(r)] += 1.0 - r.sum()
        shares = dict(zip(LANGS, map(float, r), strict=True))
        rows.append({"run_id": f"holdout-D1M-{k + 1}", "tokens": 1_000_000, **shares})
    return rows


def available_tokens(work: Path, corpus: Path, settings: dict) -> tuple[dict[str, int], str]:
    """Training tokens per language after the validation hold-out (tokenises every document),
    and the prepared data's key."""
    from training.dataset import prepare_data
    from training.presets import PRESETS

    full = prepare_data(
        corpus,
        LANGS,
        work,
        seq_len=settings.get("seq_len", PRESETS[settings["preset"]].seq_len),
        val_tokens=settings["val_tokens"],
        seed=settings["seed"],
        need={lang: 10**12 for lang in LANGS},
        vocab_size=settings["vocab_size"],
        tokenizer_sample_chars=settings["tokenizer_sample_chars"],
        log=lambda s: print(s, file=sys.stderr),
    )
    return {lang: int(full.languages[lang].available) for lang in LANGS}, full.key


def write_plan(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["run_id", "tokens", *[f"r_{x}" for x in LANGS]])
        for row in rows:
            w.writerow([row["run_id"], row["tokens"], *[repr(round(row[x], 10)) for x in LANGS]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=sorted(FILES), default="default")
    ap.add_argument("--work", type=Path, default=Path("/work/sweeps/default"))
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (processes)")
    ap.add_argument("--max-runs", type=int, default=None)
    ap.add_argument("--publish", action="store_true", help="copy the finished table into the repo")
    args = ap.parse_args()

    from training.loop import RunOptions
    from training.sweep import run_sweep

    settings = (DEFAULT if args.dataset == "default" else TINY2024)["settings"]
    available, key = available_tokens(args.work, args.corpus, settings)
    rows = default_plan(available) if args.dataset == "default" else tiny2024_plan()
    plan = args.work / "plan.csv"
    write_plan(plan, rows)
    timing_path = args.work / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else []
    if args.publish:
        return publish(args, plan, rows, timing, available, key)
    t0 = time.time()
    res = run_sweep(
        plan,
        args.corpus,
        args.work,
        options=RunOptions(device="cpu", threads=args.threads, log_every_s=120),
        max_runs=args.max_runs,
        jobs=args.jobs,
        allow_repeat=args.dataset == "default" and DEFAULT["max_epochs"] > 1,
        **settings,
    )
    timing.append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
            "wall_s": round(time.time() - t0, 1),
            "jobs": args.jobs,
            "trained": res.trained,
            "finished": res.finished,
        }
    )
    timing_path.write_text(json.dumps(timing, indent=2) + "\n")
    print(f"{res.finished} finished, {res.pending} pending", file=sys.stderr)
    return 0 if res.pending == 0 else 1


def publish(
    args: argparse.Namespace,
    plan: Path,
    rows: list[dict],
    timing: list[dict],
    available: dict[str, int],
    key: str,
) -> int:
    records = json.loads((args.work / "records.json").read_text())
    if len(records) != len(rows):
        done = f"{len(records)}/{len(rows)}"
        print(f"only {done} runs finished; run the sweep first", file=sys.stderr)
        return 1
    if key != records[0]["data"]["key"]:
        print("prepared data differs from the sweep's; not publishing", file=sys.stderr)
        return 1
    from climb_bayes.atomic import atomic_path, atomic_write_text

    stem = FILES[args.dataset]
    data_dir = ROOT / "climb_bayes" / "data"
    compact = []
    for r in records:
        compact.append(
            {
                "run_id": r["run_id"],
                "key": r["key"],
                "budget_tokens": r["budget_tokens"],
                "shares": r["config"]["shares"],
                "realised_tokens": r["realised_tokens"],
                "epochs": {k: round(n / available[k], 6) for k, n in r["realised_tokens"].items()},
                "steps": r["steps"],
                "eval_steps": r["eval_steps"],
                "final_loss": {k: round(v, 6) for k, v in r["final_loss"].items()},
                "tokens_per_s": round(r["throughput"]["tokens_per_s"] or 0, 1),
                "train_time_s": r["train_time_s"],
                "resumes": r["resumes"],
                "finished_at": r["finished_at"],
            }
        )
    first = records[0]
    settings = (DEFAULT if args.dataset == "default" else TINY2024)["settings"]
    meta = {
        "produced_by": f"python examples/make_default_dataset.py --dataset {args.dataset}"
        " (training.sweep.run_sweep)",
        "plan_csv": plan.read_text(),
        "settings": {**settings, "eval_points": list(settings["eval_points"])},
        "run_config_example": first["config"],
        "preset": first["preset"],
        "model": first["model"],
        "data": {
            **{k: v for k, v in first["data"].items() if k != "tokenizer"},
            "training_tokens_available": available,
        },
        "hardware": {k: v for k, v in first["hardware"].items() if k != "host"},
        "git_commit": first.get("git_commit"),
        "sweep_sessions": timing,
        "runs": compact,
    }
    with atomic_path(data_dir / f"{stem}_runs.csv") as tmp:
        shutil.copyfile(args.work / "runs.csv", tmp)
    atomic_write_text(data_dir / f"{stem}_runs_records.json", json.dumps(meta, indent=1) + "\n")
    print(f"wrote {data_dir / f'{stem}_runs.csv'} and {stem}_runs_records.json", file=sys.stderr)
    print(f"python {platform.python_version()}; sessions: {timing}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

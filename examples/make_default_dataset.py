"""Produce climb-bayes' default runs table: a real CLIMB sweep with a tiny model on CPU.

Plan (Algorithm 1 of the CLIMB paper, 5 languages en, de, ru, zh, ja from ../shared/corpus):

* per language ``i``: one monolingual run (``r_i = 1``) and two runs with ``r_i = c`` and the
  other languages at ``(1 - c) / 4``; ``c`` is drawn per language (seed 0) from the paper's list
  of proportions, one from its low part {0.05, 0.1, 0.2, 0.25, 0.4} and one from its high part
  {0.5, 0.6, 0.75, 0.8, 0.9};
* each at two budgets, ``D1 = 100k`` and ``D2 = 300k`` tokens: 3 x 5 x 2 = 30 runs
  (run ids ``alg1-...``);
* four held-out random mixtures (Dirichlet(1), seed 1) at ``D3 = 1M`` tokens, 3.3x the largest
  fitting budget, to check mixture and budget extrapolation (run ids ``holdout-...``).

Usage (resumable: run it again after an interruption; finished runs are skipped)::

    python examples/make_default_dataset.py --work /work/sweeps/default           # sweep
    python examples/make_default_dataset.py --work /work/sweeps/default --publish # copy table

``--publish`` writes ``climb_bayes/data/default_runs.csv`` (long form, finished runs only),
``default_runs_records.json`` (compact per-run records) and ``DEFAULT_DATA.md``.
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
LOW = [0.05, 0.1, 0.2, 0.25, 0.4]
HIGH = [0.5, 0.6, 0.75, 0.8, 0.9]
BUDGETS = {"100k": 100_000, "300k": 300_000}
HOLDOUT_BUDGET = ("1M", 1_000_000)
N_HOLDOUT = 4
SETTINGS = dict(
    preset="tiny",
    seed=0,
    val_tokens=6144,
    eval_points=(0.5, 0.88, 0.94, 1.0),
    vocab_size=4096,
    tokenizer_sample_chars=2_000_000,
)


def make_plan() -> list[dict]:
    """Rows of the plan (run_id, tokens, r_<lang>...)."""
    rng = np.random.default_rng(0)
    cs = {lang: (float(rng.choice(LOW)), float(rng.choice(HIGH))) for lang in LANGS}
    rows = []
    for bname, budget in BUDGETS.items():
        for lang in LANGS:
            for c in (1.0, *cs[lang]):
                shares = {x: (c if x == lang else (1 - c) / (len(LANGS) - 1)) for x in LANGS}
                tag = "mono" if c == 1.0 else f"{c:g}"
                rows.append({"run_id": f"alg1-D{bname}-{lang}-{tag}", "tokens": budget, **shares})
    rng = np.random.default_rng(1)
    bname, budget = HOLDOUT_BUDGET
    for k in range(N_HOLDOUT):
        r = np.round(rng.dirichlet(np.ones(len(LANGS))), 4)
        r[np.argmax(r)] += 1.0 - r.sum()
        rows.append(
            {
                "run_id": f"holdout-D{bname}-{k + 1}",
                "tokens": budget,
                **dict(zip(LANGS, map(float, r), strict=True)),
            }
        )
    return rows


def write_plan(path: Path) -> None:
    rows = make_plan()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["run_id", "tokens", *[f"r_{x}" for x in LANGS]])
        for row in rows:
            w.writerow([row["run_id"], row["tokens"], *[repr(round(row[x], 10)) for x in LANGS]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/work/sweeps/default"))
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a busy box)")
    ap.add_argument("--max-runs", type=int, default=None)
    ap.add_argument("--publish", action="store_true", help="copy the finished table into the repo")
    args = ap.parse_args()

    from training.loop import RunOptions
    from training.sweep import run_sweep

    plan = args.work / "plan.csv"
    write_plan(plan)
    timing_path = args.work / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else []
    if not args.publish:
        t0 = time.time()
        res = run_sweep(
            plan,
            args.corpus,
            args.work,
            options=RunOptions(device="cpu", threads=args.threads, log_every_s=60),
            max_runs=args.max_runs,
            **SETTINGS,
        )
        timing.append(
            {
                "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
                "wall_s": round(time.time() - t0, 1),
                "trained": res.trained,
                "finished": res.finished,
            }
        )
        timing_path.write_text(json.dumps(timing, indent=2) + "\n")
        print(f"{res.finished} finished, {res.pending} pending", file=sys.stderr)
        return 0 if res.pending == 0 else 1
    return publish(args.work, plan, timing, args)


def publish(work: Path, plan: Path, timing: list[dict], args: argparse.Namespace) -> int:
    records = json.loads((work / "records.json").read_text())
    n_plan = len(make_plan())
    if len(records) != n_plan:
        print(f"only {len(records)}/{n_plan} runs finished; run the sweep first", file=sys.stderr)
        return 1
    from training.dataset import prepare_data

    # exact epochs: tokenise every training document (the sweep stopped at what it needed)
    full = prepare_data(
        args.corpus,
        LANGS,
        work,
        seq_len=records[0]["config"]["seq_len"],
        val_tokens=SETTINGS["val_tokens"],
        seed=SETTINGS["seed"],
        need={lang: 10**12 for lang in LANGS},
    )
    if full.key != records[0]["data"]["key"]:
        print("prepared data differs from the sweep's; not publishing", file=sys.stderr)
        return 1
    available = {lang: full.languages[lang].available for lang in LANGS}
    data_dir = ROOT / "climb_bayes" / "data"
    shutil.copyfile(work / "runs.csv", data_dir / "default_runs.csv")
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
    meta = {
        "produced_by": "python examples/make_default_dataset.py (training.sweep.run_sweep)",
        "plan_csv": plan.read_text(),
        "settings": {**SETTINGS, "eval_points": list(SETTINGS["eval_points"])},
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
    (data_dir / "default_runs_records.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {data_dir / 'default_runs.csv'} and default_runs_records.json", file=sys.stderr)
    print(f"python {platform.python_version()}; sessions: {timing}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pilot: which CPU training setting puts the default dataset in the scaling law's regime?

Per language (en, de, ru, zh, ja) one monolingual run at each of six budgets over 1.5 decades
(62.5k ... 2M tokens), for a few candidate settings (model preset, vocabulary, sequence length,
batch, learning rate). For every setting and language, ``L(D) = B / D**beta + E`` is fitted to
the final losses of the four smaller budgets and asked to predict the two larger ones (1M and
2M tokens, 2x and 4x the largest fitted budget). The setting chosen for the default dataset is
the one whose extrapolation error stays within 2% for every language.

Usage (resumable: run it again after an interruption; finished runs are skipped)::

    python examples/pilot_regime.py --work /work/sweeps/pilot --setting v2048-s64-b8
    python examples/pilot_regime.py --work /work/sweeps/pilot --setting v4096-s128-b16
    python examples/pilot_regime.py --work /work/sweeps/pilot --report \
        --plot docs/img/pilot_regime.png

``--report`` prints the markdown table that docs/training.md shows and writes the plot.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LANGS = ["en", "de", "ru", "zh", "ja"]
BUDGETS = [62_500, 125_000, 250_000, 500_000, 1_000_000, 2_000_000]
N_FIT = 4  # budgets used to fit; the rest are predicted
TARGET_ERROR = 0.02

SETTINGS: dict[str, dict] = {
    # the setting of the 2024 default (tiny-2024): 2048 tokens per step
    "v4096-s128-b16": dict(preset="tiny", vocab_size=4096, seq_len=128, batch_size=16, lr=2e-3),
    # smaller vocabulary (more tokens per language) and 512 tokens per step (4x the steps)
    "v2048-s64-b8": dict(preset="tiny", vocab_size=2048, seq_len=64, batch_size=8, lr=3e-3),
    # round 2 (both round-1 settings were still before their power-law regime below ~1M
    # tokens): the 0.2M-parameter `mini` model, 2.5x faster per token, 256 tokens per step
    "mini-v1024-s64-b4": dict(preset="mini", vocab_size=1024, seq_len=64, batch_size=4, lr=3e-3),
    "mini-v2048-s64-b4": dict(preset="mini", vocab_size=2048, seq_len=64, batch_size=4, lr=3e-3),
}
BUDGETS_BY_SETTING = {
    "mini-v1024-s64-b4": [125_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000],
    "mini-v2048-s64-b4": [125_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000],
}
COMMON = dict(
    seed=0,
    val_tokens=6144,
    eval_points=(0.5, 0.88, 0.94, 1.0),
    tokenizer_sample_chars=2_000_000,
    allow_repeat=True,
)


def budgets_of(setting: str) -> list[int]:
    """The six budgets of a setting (round 2 starts at 125k and ends at 4M)."""
    return BUDGETS_BY_SETTING.get(setting, BUDGETS)


def write_plan(path: Path, budgets: list[int]) -> None:
    """Monolingual runs: ``mono-<lang>-<budget>`` for every language and budget."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["run_id", "tokens", *[f"r_{x}" for x in LANGS]])
        for budget in budgets:
            for lang in LANGS:
                shares = [1.0 if x == lang else 0.0 for x in LANGS]
                w.writerow([f"mono-{lang}-{budget}", budget, *shares])


def train(work: Path, setting: str, corpus: Path, threads: int, jobs: int) -> int:
    from training.loop import RunOptions
    from training.sweep import run_sweep

    out = work / setting
    plan = out / "plan.csv"
    write_plan(plan, budgets_of(setting))
    res = run_sweep(
        plan,
        corpus,
        out,
        options=RunOptions(device="cpu", threads=threads, log_every_s=120),
        jobs=jobs,
        **SETTINGS[setting],
        **COMMON,
    )
    return 0 if res.pending == 0 else 1


def fit_power_law(d: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """Least-squares fit of ``log L = log(B D^-beta + E)``: returns ``(B, beta, E)``.

    A grid over ``E`` (0 to just below the smallest loss) with a linear fit of
    ``log(L - E) = log B - beta log D`` at each, then the best point refined by
    ``scipy.optimize.least_squares`` on log-loss.
    """
    from scipy.optimize import least_squares

    x, y = np.log(d), np.log(loss)
    best = None
    for e in np.linspace(0.0, 0.999 * loss.min(), 400):
        z = np.log(loss - e)
        slope, icpt = np.polyfit(x, z, 1)
        if slope >= 0:
            continue
        res = np.sum((np.log(np.exp(icpt + slope * x) + e) - y) ** 2)
        if best is None or res < best[0]:
            best = (res, icpt, -slope, e)
    if best is None:
        return float("nan"), float("nan"), float("nan")
    _, lb, beta, e = best

    def resid(p: np.ndarray) -> np.ndarray:
        return np.logaddexp(p[0] - np.exp(p[1]) * x, p[2]) - y

    p0 = np.array([lb, np.log(beta), np.log(max(e, 1e-3))])
    sol = least_squares(resid, p0)
    return float(np.exp(sol.x[0])), float(np.exp(sol.x[1])), float(np.exp(sol.x[2]))


def final_losses(out: Path) -> dict[str, dict[int, float]]:
    """``{lang: {budget: final loss}}`` of the finished monolingual runs of a sweep folder
    (from each run's ``record.json``, so an unfinished sweep can be reported)."""
    found: dict[str, dict[int, float]] = {lang: {} for lang in LANGS}
    for path in sorted((out / "runs").glob("*/record.json")):
        rec = json.loads(path.read_text())
        if rec.get("status") != "finished":
            continue
        lang = str(rec["run_id"]).split("-")[1]
        found[lang][int(rec["budget_tokens"])] = float(rec["final_loss"][lang])
    return found


def report(work: Path, plot: Path | None) -> int:
    lines = [
        "| setting | language | B | beta | E | 5th budget: pred / obs | err "
        "| 6th budget: pred / obs | err |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = {}
    curves = {}
    for setting in SETTINGS:
        if not (work / setting / "runs").is_dir():
            continue
        losses = final_losses(work / setting)
        worst, missing = 0.0, 0
        for lang in LANGS:
            pts = losses[lang]
            budgets = budgets_of(setting)
            if any(b not in pts for b in budgets[:N_FIT]):
                lines.append(f"| {setting} | {lang} | (only {len(pts)} budgets finished) |")
                worst = float("inf")
                continue
            d = np.array([b for b in budgets if b in pts], dtype=float)
            y = np.array([pts[b] for b in budgets if b in pts])
            B, beta, E = fit_power_law(d[:N_FIT], y[:N_FIT])
            pred = B * d**-beta + E
            err = np.abs(pred - y) / y
            if len(d) > N_FIT:
                worst = max(worst, float(err[N_FIT:].max()))
            missing += len(budgets) - len(d)
            curves[(setting, lang)] = (d, y, (B, beta, E))
            cells = [f"{B:.3g}", f"{beta:.3f}", f"{E:.3f}"]
            for k in range(N_FIT, len(budgets)):
                if k < len(d):
                    cells += [f"{pred[k]:.3f} / {y[k]:.3f}", f"{err[k]:.1%}"]
                else:
                    cells += ["(not trained)", ""]
            lines.append(f"| {setting} | {lang} | " + " | ".join(cells) + " |")
        verdicts[setting] = (worst, missing)
    print("\n".join(lines))
    print()
    for setting, (worst, missing) in verdicts.items():
        ok = "meets" if worst <= TARGET_ERROR else "misses"
        note = f"; {missing} larger-budget runs not trained" if missing else ""
        print(f"- {setting}: worst extrapolation error {worst:.1%} ({ok} the 2% target{note})")
    if plot is not None and curves:
        _plot(curves, plot)
        print(f"\nwrote {plot}")
    (work / "pilot_report.json").write_text(
        json.dumps({k: v[0] for k, v in verdicts.items()}, indent=1) + "\n"
    )
    return 0


def _plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({s for s, _ in curves})
    fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4), squeeze=False)
    for ax, setting in zip(axes[0], settings, strict=True):
        for lang in LANGS:
            if (setting, lang) not in curves:
                continue
            d, y, (B, beta, E) = curves[(setting, lang)]
            grid = np.geomspace(d[0], d[-1], 100)
            (line,) = ax.plot(grid, B * grid**-beta + E, lw=1)
            ax.plot(d[:N_FIT], y[:N_FIT], "o", color=line.get_color(), label=lang)
            ax.plot(d[N_FIT:], y[N_FIT:], "x", color=line.get_color(), ms=8)
        ax.set_xscale("log")
        ax.set_xlabel("tokens D (monolingual run)")
        ax.set_ylabel("final validation loss (nats/token)")
        ax.set_title(f"{setting}: fit on o, predict x")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/work/sweeps/pilot"))
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--setting", choices=sorted(SETTINGS), default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (processes)")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args()
    if args.report:
        return report(args.work, args.plot)
    if args.setting is None:
        ap.error("give --setting (or --report)")
    return train(args.work, args.setting, args.corpus, args.threads, args.jobs)


if __name__ == "__main__":
    sys.exit(main())

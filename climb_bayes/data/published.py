"""Loaders for mixture experiments published by other groups (RegMix, Data Mixing Laws).

The data are not shipped: they live in a ``shared/data`` folder next to the repository (see
each dataset's ``SOURCE.md``) or wherever ``CLIMB_SHARED_DATA`` points. Every loader returns
:class:`~climb_bayes.data.observations.Observations` *including* losses of groups with share 0 (laws
that cannot predict those leave them out and they are counted), plus a dict of notes.

RegMix (Liu et al. 2025)
    512 + 256 mixtures of 17 Pile domains trained on 1B tokens by 1M-parameter models; losses
    on 13 domains. Groups are those 13 domains; the shares of the 4 training domains without a
    validation loss (nih_exporter, philpapers, enron_emails, europarl; 2.6% of a mixture on
    average) are dropped and the rest renormalised, since every law here has one group per
    share and per loss.
Data Mixing Laws 5Mix (Ye et al. 2025)
    26 mixtures of 5 Pile domain groups (academic, prose, dialogue, symbolic, internet) per
    model size, with checkpoints every few thousand steps. Each group's loss is the
    ``valid_weight``-weighted mean of its Pile validation domains, as the authors aggregate
    (``DOMAINS_2_SUBDOMAINS`` in their ``mix_5_domains.ipynb``). Each checkpoint is one
    observation at ``D = step * 4096 * 256`` tokens. Runs with ids above 900 (the authors'
    special mixtures) are skipped, as their loader does.
Data Mixing Laws RedPajama (Ye et al. 2025)
    20-40 mixtures of the 7 RedPajama sources per model size (70M-410M; ids above 900 skipped),
    checkpoints at steps 10k-30k, losses only on the Pile validation domains. Each source is
    scored on the Pile domain(s) that track it (:data:`REDPAJAMA_GROUPS`). The order of the
    sources in the proportion strings is not labelled in the data (``SOURCE.md``); it was read
    off the data: across the 40 mixtures of 70M at step 30k, five columns' log shares correlate
    most negatively with one source's Pile domain (Github -0.92, ArXiv -0.99, PG19 -0.91,
    StackExchange -0.85, Wikipedia_en -0.60); the two web columns lower every web-like domain
    and are named by the web domain each lowers most, OpenWebText2 for the first (-0.65; it
    lowers FreeLaw and Wikipedia_en more, -0.82 and -0.77) and Pile-CC for the second (-0.65).

Units
-----
Tokens; losses in nats/token.

References
----------
.. [1] Liu, Q. et al. (2025), "RegMix: Data Mixture as Regression for Language Model
   Pre-training", ICLR 2025, arXiv 2407.01492.
.. [2] Ye, J. et al. (2025), "Data Mixing Laws", ICLR 2025, arXiv 2403.16952.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from climb_bayes.data.observations import Observations
from climb_bayes.errors import ClimbError

__all__ = [
    "shared_data_dir",
    "load_regmix",
    "load_5mix",
    "REGMIX_TOKENS",
    "TOKENS_PER_STEP",
    "FIVE_MIX_GROUPS",
    "REDPAJAMA_GROUPS",
    "load_redpajama",
    "SMALL_MIX_GROUPS",
    "load_mixinglaws",
    "load_autoscale_ddo",
]

REGMIX_TOKENS = 1e9
"""Training tokens of every RegMix 1M/60M proxy run (paper, Section 3)."""

TOKENS_PER_STEP = 4096 * 256
"""Tokens per optimiser step in the Data Mixing Laws runs (their ``pipeline/utils.py``)."""

FIVE_MIX_GROUPS: dict[str, tuple[str, ...]] = {
    "academic": (
        "ArXiv",
        "PubMed_Abstracts",
        "PhilPapers",
        "NIH_ExPorter",
        "FreeLaw",
        "USPTO_Backgrounds",
        "PubMed_Central",
    ),
    "prose": ("PG19", "Books3", "BookCorpus2"),
    "dialogue": (
        "Ubuntu_IRC",
        "OpenSubtitles",
        "EuroParl",
        "Enron_Emails",
        "HackerNews",
        "YoutubeSubtitles",
    ),
    "symbolic": ("DM_Mathematics", "Github"),
    "internet": ("Pile-CC", "OpenWebText2", "StackExchange", "Wikipedia_en"),
}
"""The 5Mix domain groups, in the order of the proportion strings."""


REDPAJAMA_GROUPS: dict[str, tuple[str, ...]] = {
    "web_owt2": ("OpenWebText2",),
    "web_cc": ("Pile-CC",),
    "github": ("Github",),
    "arxiv": ("ArXiv",),
    "books": ("PG19", "Books3", "BookCorpus2"),
    "stackexchange": ("StackExchange",),
    "wikipedia": ("Wikipedia_en",),
}
"""The 7 RedPajama sources in the order of the proportion strings, each with the Pile
validation domains it is scored on (inferred from the data: module docstring). The two web
sources (CommonCrawl and C4 by their shares in the authors' default mixture, run 999) are
named by the validation domain each one lowers most."""


def shared_data_dir() -> Path | None:
    """``$CLIMB_SHARED_DATA`` or ``<repo>/../shared/data`` if it exists, else ``None``."""
    env = os.environ.get("CLIMB_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / ".." / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


def _require(path: Path) -> Path:
    if not path.exists():
        raise ClimbError(f"{path}: not found (see the dataset's SOURCE.md).")
    return path


def load_regmix(
    root: Path, split: str = "train", size: str = "1m"
) -> tuple[Observations, dict[str, Any]]:
    """RegMix mixtures and per-domain losses as observations at 1B tokens.

    Parameters
    ----------
    root : Path
        The ``shared/data`` folder.
    split : {"train", "test"}
        512 fit mixtures or 256 held-out ones.
    size : {"1m", "60m"}
        Model size (``60m`` exists for the test mixtures only).

    Returns
    -------
    obs : Observations
        13 groups; one observation per (mixture, domain), zero shares included.
    notes : dict
        ``dropped_domains``, ``dropped_share_mean`` and ``n_zero_share``.
    """
    folder = _require(root / "regmix")
    mix = pd.read_csv(_require(folder / f"{split}_mixture_{size}.csv"))
    loss = pd.read_csv(_require(folder / f"{split}_pile_loss_{size}.csv"))
    mix = mix.set_index("index")
    loss = loss.set_index("index").loc[mix.index]
    train_names = [c.removeprefix("train_the_pile_") for c in mix.columns]
    groups = [c.removeprefix("metric/the_pile_").removesuffix("_val_loss") for c in loss.columns]
    missing = [g for g in groups if g not in train_names]
    if missing:
        raise ClimbError(f"{folder}: loss domains without a mixture column: {missing}.")
    w = mix.to_numpy(float)
    keep = [train_names.index(g) for g in groups]
    dropped = [n for n in train_names if n not in groups]
    dropped_share = w[:, [train_names.index(n) for n in dropped]].sum(axis=1)
    r = w[:, keep]
    r = r / r.sum(axis=1, keepdims=True)
    values = loss.to_numpy(float)
    n_runs, m = values.shape
    run = np.repeat(np.arange(n_runs), m)
    group = np.tile(np.arange(m), n_runs)
    obs = Observations(
        groups=tuple(groups),
        run_ids=tuple(f"{split}-{i}" for i in mix.index),
        run_r=r,
        run_budget=np.full(n_runs, REGMIX_TOKENS),
        run=run,
        tokens=np.full(run.size, REGMIX_TOKENS),
        group=group,
        loss=values.ravel(),
    )
    notes = {
        "dropped_domains": dropped,
        "dropped_share_mean": float(dropped_share.mean()),
        "n_zero_share": int(obs.zero_share.sum()),
        "n_obs": obs.n,
    }
    return obs, notes


def load_5mix(
    root: Path, sizes: Sequence[str] = ("70M", "160M", "305M", "410M"), *, special: bool = False
) -> dict[str, Observations]:
    """Data Mixing Laws 5Mix checkpoints, one :class:`Observations` per model size.

    Run ids are ``<size>/<mixture id>@<step>``; each checkpoint is its own run with budget
    ``step * TOKENS_PER_STEP`` (so a holdout on ``tokens`` splits early from late steps); the
    checkpoints of one mixture share a ``run_series`` label (one training trajectory).
    ``special`` keeps the authors' special mixtures (ids above 900), as :func:`load_mixinglaws`.
    """
    return load_mixinglaws(root, "5Mix", FIVE_MIX_GROUPS, sizes, special=special)


def load_redpajama(
    root: Path, sizes: Sequence[str] = ("70M", "160M", "305M", "410M"), *, special: bool = False
) -> dict[str, Observations]:
    """Data Mixing Laws RedPajama checkpoints, one :class:`Observations` per model size.

    Same layout as :func:`load_5mix` (each checkpoint a run, ``run_series`` the mixture);
    groups :data:`REDPAJAMA_GROUPS`; ``special`` as :func:`load_mixinglaws`.
    """
    return load_mixinglaws(root, "RedPajama", REDPAJAMA_GROUPS, sizes, special=special)


SMALL_MIX_GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "2Mix": {"Github": ("Github",), "Pile-CC": ("Pile-CC",)},
    "3Mix": {"Github": ("Github",), "Books3": ("Books3",), "Pile-CC": ("Pile-CC",)},
}
"""Training domains of the 2- and 3-domain settings, in the order of their proportion strings
(``SOURCE.md``); each is scored on its own Pile validation domain."""


def load_mixinglaws(
    root: Path,
    setting: str,
    groups_map: dict[str, tuple[str, ...]],
    sizes: Sequence[str],
    *,
    special: bool = False,
) -> dict[str, Observations]:
    """Checkpoints of one Data Mixing Laws setting (``5Mix``, ``RedPajama``, ``2Mix``, ``3Mix``) per
    model size.

    Each group's loss is the ``valid_weight``-weighted mean of its Pile validation domains;
    checkpoints with a missing domain are dropped. Runs with ids above 900 (the authors' default
    and optimised mixtures, which their own loader leaves out of fits) are skipped unless
    ``special``: at 1B they are the only runs trained past 20k steps.
    """
    folder = _require(root / "mixinglaws")
    weights = json.loads(_require(folder / "valid_weight.json").read_text())
    df = pd.read_csv(_require(folder / "mixinglaws_long.csv"), dtype={"step": str})
    df = df[(df["setting"] == setting) & df["step"].str.isdigit()]
    if not special:
        df = df[pd.to_numeric(df["run_id"], errors="coerce") <= 900]
    sub2group = {s: g for g, subs in groups_map.items() for s in subs}
    df = df[df["valid_domain"].isin(sub2group)].copy()
    df["group"] = df["valid_domain"].map(sub2group)
    df["w"] = df["valid_domain"].map(weights).astype(float)
    groups = tuple(groups_map)
    out: dict[str, Observations] = {}
    for size in sizes:
        d = df[df["model_size_label"] == size]
        if d.empty:
            raise ClimbError(f"{folder}: no {setting} runs for model size {size!r}.")
        # complete checkpoints only: every sub-domain of every group present
        n_sub = d.groupby(["run_id", "step", "group"])["valid_domain"].nunique()
        full = n_sub.unstack("group").reindex(columns=groups)
        need = pd.Series({g: len(s) for g, s in groups_map.items()})
        complete = full.eq(need).all(axis=1)
        d = d.set_index(["run_id", "step"]).loc[complete[complete].index].reset_index()
        agg = (
            d.assign(wl=d["loss"] * d["w"]).groupby(["run_id", "step", "group"])[["wl", "w"]].sum()
        )
        agg = (agg["wl"] / agg["w"]).unstack("group")[list(groups)]
        props = (
            d.drop_duplicates(["run_id", "step"])
            .set_index(["run_id", "step"])["proportions"]
            .loc[agg.index]
        )
        r = np.array([[float(x) for x in p.split("-")] for p in props])
        r = r / r.sum(axis=1, keepdims=True)
        steps = np.array([int(s) for _rid, s in agg.index], dtype=float)
        run_ids = tuple(f"{size}/{rid}@{s}" for rid, s in agg.index)
        values = agg.to_numpy(float)
        n_runs, m = values.shape
        tokens = steps * TOKENS_PER_STEP
        out[size] = Observations(
            groups=groups,
            run_ids=run_ids,
            run_r=r,
            run_budget=tokens,
            run=np.repeat(np.arange(n_runs), m),
            tokens=np.repeat(tokens, m),
            group=np.tile(np.arange(m), n_runs),
            loss=values.ravel(),
            run_series=pd.factorize(np.array([rid for rid, _s in agg.index]))[0],
            series_labels=tuple(f"{size}/{rid}" for rid, _s in agg.index),
        )
    return out


def load_autoscale_ddo(root: Path) -> Observations:
    """AutoScale's DDO perturbation runs (Kang et al. 2025): final losses of 15 GPT-2 Large runs
    on 7 RedPajama domains.

    Row 0 trains the uniform mixture on 1.2e9 tokens; rows 1-7 cut one domain's data to a fifth,
    rows 8-14 triple it (``SOURCE.md``). Each row is one run: shares from the token columns,
    budget their sum (tokens), and per domain the loss ``log(perplexity)`` (nats/token) at that
    budget. Run ids ``ddo-<row>``.

    References
    ----------
    .. [1] Kang, F. et al. (2025), "AutoScale: Scale-Aware Data Mixing for Pre-Training LLMs",
       COLM 2025, arXiv 2407.20177.
    """
    table = pd.read_csv(_require(root / "autoscale_ddo" / "ddo_gpt2large_ppl.csv"))
    groups = tuple(c[len("tokens_") : -len("_B")] for c in table if c.startswith("tokens_"))
    tokens = table[[f"tokens_{g}_B" for g in groups]].to_numpy(float) * 1e9
    budget = np.rint(tokens.sum(axis=1))
    loss = np.log(table[[f"ppl_{g}" for g in groups]].to_numpy(float))
    n_runs, m = loss.shape
    return Observations(
        groups=groups,
        run_ids=tuple(f"ddo-{int(k):02d}" for k in table["row"]),
        run_r=tokens / tokens.sum(axis=1, keepdims=True),
        run_budget=budget,
        run=np.repeat(np.arange(n_runs), m),
        tokens=np.repeat(budget, m),
        group=np.tile(np.arange(m), n_runs),
        loss=loss.ravel(),
    )

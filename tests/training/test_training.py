"""Tests of the ``training`` package (CPU, ``micro`` preset, a synthetic multilingual corpus).

The corpus is generated here (no download, no dependence on ../shared/corpus): every document
starts with a marker ``#<lang>-doc<N>#`` so the tests can tell which documents ended up in the
validation set and which in the training stream.
"""

from __future__ import annotations

import csv
import json
import lzma
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from click.testing import CliRunner  # noqa: E402

from training.atomic import atomic_dir, atomic_write_text  # noqa: E402
from training.corpus import document_order, find_language_files, read_documents  # noqa: E402
from training.dataset import load_data, prepare_data  # noqa: E402
from training.errors import RunInterrupted, TrainingError  # noqa: E402
from training.loop import RunConfig, RunOptions, eval_steps_for, lr_at, train_run  # noqa: E402
from training.mixture import batch_arrays, build_mixture, token_budgets  # noqa: E402
from training.records import is_finished  # noqa: E402
from training.sweep import run_sweep  # noqa: E402
from training.tokenizer import load_tokenizer, train_tokenizer  # noqa: E402

pytestmark = pytest.mark.train
REPO = Path(__file__).resolve().parents[2]

WORDS = {
    "en": "the house river green light small water open stone quiet bread winter city road",
    "de": "das Haus Fluss grün Licht klein Wasser öffnen Stein ruhig Brot Straße Größe für",
    "ru": "дом река зелёный свет маленький вода открыть камень тихий хлеб зима город дорога",
    "zh": "房子 河流 绿色 光 小 水 打开 石头 安静 面包 冬天 城市 道路 我们 学习 中文",
    "ja": "家 川 緑 ひかり ちいさい みず あける いし しずか パン ふゆ まち みち カタカナ",
}
LANGS = list(WORDS)
SCRIPTS = [
    "Hello, world! Ünïcödé façade naïve café — “quotes” ‘single’ … 1,234.56 %",
    "Grüße aus Köln: Straßenbahn, Übergröße, ß, ẞ",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёё",
    "我们在学习中文，今天天气很好。「引号」",
    "日本語のテキスト：ひらがな、カタカナ、漢字。ｱｲｳ（半角）",
    "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم، هذا نص عربي.",
    "नमस्ते दुनिया, यह हिन्दी है।",
    "สวัสดีชาวโลก ภาษาไทย",
    "Ελληνικά: καλημέρα κόσμε",
    "emoji 🙂🚀👩‍👩‍👧 and tabs\tand\nnewlines  double  spaces",
]


def _write_corpus(root: Path, n_docs: int = 120, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for lang, words in WORDS.items():
        vocab = words.split()
        sep = "" if lang in ("zh", "ja") else " "
        lines = []
        for i in range(n_docs):
            n_sent = int(rng.integers(3, 8))
            sents = [
                sep.join(rng.choice(vocab, size=int(rng.integers(4, 12)))) for _ in range(n_sent)
            ]
            text = f"#{lang}-doc{i}# " + "\n".join(sents)
            lines.append(
                json.dumps({"id": f"{lang}/{i}", "lang": lang, "text": text}, ensure_ascii=False)
            )
        data = ("\n".join(lines) + "\n").encode()
        if lang == "en":  # one plain .jsonl, the others compressed
            (root / f"{lang}.jsonl").write_bytes(data)
        else:
            (root / f"{lang}.jsonl.xz").write_bytes(lzma.compress(data))
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    samples = {lang: read_documents(find_language_files(corpus, lang), lang) for lang in LANGS}
    samples["mixed"] = SCRIPTS
    train_tokenizer(samples, 512, out)
    return out


def _plan(path: Path, rows: list[tuple[str, int, dict[str, float]]], langs=LANGS) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run_id", "tokens", *[f"r_{x}" for x in langs], "note"])
        for rid, tokens, shares in rows:
            w.writerow([rid, tokens, *[shares.get(x, 0.0) for x in langs], "ignored"])
    return path


def _micro_run(
    tmp_path: Path,
    corpus: Path,
    tok: Path,
    run_id: str,
    tokens: int,
    shares: dict[str, float],
    micro_batch: int = 4,
):
    """Prepared data (a sweep of no run) and the ``micro`` RunConfig of one planned run."""
    plan = _plan(tmp_path / "plan.csv", [(run_id, tokens, shares)])
    _sweep(plan, corpus, tmp_path / "out", tok, max_runs=0)  # prepare data only
    data = load_data(next((tmp_path / "out" / "data").iterdir()))
    cfg = RunConfig(run_id, tokens, shares, "micro", 32, 8, micro_batch, 3e-3, data_key=data.key)
    return data, cfg


def _sweep(plan: Path, corpus: Path, out: Path, tok: Path, **kw):
    args = dict(
        preset="micro",
        tokenizer=tok,
        val_tokens=256,
        eval_points=(0.5, 0.88, 0.94, 1.0),
        options=RunOptions(device="cpu", threads=1, log_every_s=1e9),
        log=lambda s: None,
    )
    args.update(kw)
    return run_sweep(plan, corpus, out, **args)


# ---------------------------------------------------------------- exact mixtures


@pytest.mark.parametrize(
    "shares,total",
    [
        ({"en": 1.0, "de": 0.0, "zh": 0.0}, 1000),
        ({"en": 0.0, "de": 1.0, "zh": 0.0}, 777),
        ({"en": 0.5, "de": 0.3, "zh": 0.2}, 1001),
        ({"en": 0.29, "de": 0.71, "zh": 0.0}, 100),
        ({"en": 1 / 3, "de": 1 / 3, "zh": 1 / 3}, 12_345),
        ({"en": 0.02, "de": 0.49, "zh": 0.49}, 99_999),
    ],
)
def test_budgets_and_packing_are_exact(shares, total):
    budgets = token_budgets(shares, total)
    from decimal import Decimal

    for lang, r in shares.items():
        assert budgets[lang] == math.floor(Decimal(repr(r)) * total)
    assert token_budgets({"a": 0.29}, 100)["a"] == 29  # decimal, not 28.999999999999996
    streams = [np.arange(50, dtype=np.int64) + 10 * k for k in range(3)]
    mix = build_mixture(budgets, {k: 50 for k in budgets}, seq_len=16, seed=3)
    assert mix.realised() == budgets
    ids, labels, lidx = batch_arrays(mix.blocks, streams, 16, pad_id=-1)
    realised = np.bincount(lidx, weights=(labels != -100).sum(1), minlength=3)
    assert [int(x) for x in realised] == [budgets[k] for k in shares]
    assert all(len(set(lidx[i : i + 1])) == 1 for i in range(len(lidx)))  # single-language
    # epochs: a budget over the 50 available tokens repeats the stream
    assert mix.epochs["en"] == pytest.approx(budgets["en"] / 50)


def test_blocks_are_shuffled_deterministically():
    b = {"en": 1000, "de": 1000}
    m1 = build_mixture(b, {"en": 10**6, "de": 10**6}, 32, seed=1)
    m2 = build_mixture(b, {"en": 10**6, "de": 10**6}, 32, seed=1)
    m3 = build_mixture(b, {"en": 10**6, "de": 10**6}, 32, seed=2)
    assert np.array_equal(m1.blocks, m2.blocks) and not np.array_equal(m1.blocks, m3.blocks)
    assert 0 < m1.blocks[:32, 0].mean() < 1  # languages interleaved


def test_lr_schedule_and_eval_points():
    lrs = [lr_at(s, 100, 1.0, 0.05, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.2) and max(lrs) == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1) and all(
        a >= b for a, b in zip(lrs[5:], lrs[6:], strict=False)
    )
    cum = np.cumsum(np.full(100, 10))
    steps = eval_steps_for(cum, (0.5, 0.88, 0.94, 1.0))
    assert steps == [49, 87, 93, 99]
    assert sum(cum[s] >= 0.85 * cum[-1] for s in steps) == 3


# ---------------------------------------------------------------- tokenizer, corpus


def test_tokenizer_round_trips_every_script(tokenizer_dir: Path):
    tok = load_tokenizer(tokenizer_dir)
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tok, PreTrainedTokenizerFast)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<pad>"
    for text in [*SCRIPTS, *(w for w in WORDS.values())]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
    assert len(tok) <= 512


def test_validation_and_training_are_disjoint(corpus: Path, tokenizer_dir: Path, tmp_path):
    need = {lang: 10**9 for lang in LANGS}  # tokenise every training document
    data = prepare_data(
        corpus,
        LANGS,
        tmp_path,
        seq_len=32,
        val_tokens=512,
        seed=0,
        need=need,
        tokenizer=tokenizer_dir,
    )
    tok = load_tokenizer(tokenizer_dir)
    for lang in LANGS:
        ld = data.languages[lang]
        assert ld.val_blocks.shape == (16, 32)
        val_ids = set(re.findall(rf"#{lang}-doc(\d+)#", tok.decode(ld.val_blocks.ravel())))
        train_ids = set(re.findall(rf"#{lang}-doc(\d+)#", tok.decode(ld.train.take(len(ld.train)))))
        assert val_ids and train_ids
        assert not val_ids & train_ids
        assert len(val_ids | train_ids) >= 119  # every document is used somewhere
        assert ld.available == ld.train.shape[0]
        # the held-out documents are the front of the fixed order
        order = document_order(120, 0, lang)
        assert {int(i) for i in val_ids} <= set(order[: ld.info["n_val_docs"]].tolist())
    # the same inputs give the same validation blocks (shared by every run of a sweep)
    again = load_data(data.path)
    assert all(
        np.array_equal(again.languages[x].val_blocks, data.languages[x].val_blocks) for x in LANGS
    )


def test_other_corpus_formats(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "fr").mkdir()
    pq.write_table(pa.table({"text": ["un", "deux", ""]}), tmp_path / "fr" / "000.parquet")
    pq.write_table(pa.table({"text": ["trois"]}), tmp_path / "fr" / "001.parquet")
    (tmp_path / "es.txt").write_text("uno\n\ndos\n", encoding="utf-8")
    fr = read_documents(find_language_files(tmp_path, "fr"), "fr")
    es = read_documents(find_language_files(tmp_path, "es"), "es")
    assert fr == ["un", "deux", "trois"] and es == ["uno", "dos"]
    mapped = find_language_files(tmp_path, "french", {"french": "fr"})
    assert [p.name for p in mapped] == ["000.parquet", "001.parquet"]


# ---------------------------------------------------------------- errors


def _assert_clean(out: Path):
    assert not (out / "runs.csv").exists()
    assert not list(out.glob("runs/*/record.json"))
    assert not list(out.rglob("*.tmp"))


def test_missing_language_is_a_clear_error(corpus, tokenizer_dir, tmp_path):
    plan = _plan(tmp_path / "plan.csv", [("a", 2000, {"en": 0.5, "xx": 0.5})], ["en", "xx"])
    with pytest.raises(TrainingError, match=r"'xx'.*Fix:"):
        _sweep(plan, corpus, tmp_path / "out", tokenizer_dir)
    _assert_clean(tmp_path / "out")


def test_missing_corpus_dir_and_plan(corpus, tokenizer_dir, tmp_path):
    plan = _plan(tmp_path / "plan.csv", [("a", 2000, {"en": 1.0})])
    with pytest.raises(TrainingError, match=r"does not exist.*Fix"):
        _sweep(plan, tmp_path / "nope", tmp_path / "out", tokenizer_dir)
    with pytest.raises(TrainingError, match=r"plan file .* does not exist"):
        _sweep(tmp_path / "missing.csv", corpus, tmp_path / "out", tokenizer_dir)
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,tokens,r_en,r_de\na,1000,0.5,0.6\n")
    with pytest.raises(TrainingError, match=r"row 2 .*sum to 1\.1"):
        _sweep(bad, corpus, tmp_path / "out", tokenizer_dir)


@pytest.mark.parametrize("kind", ["xz", "json"])
def test_corrupt_corpus_file_is_a_clear_error(corpus, tmp_path, kind):
    bad = tmp_path / "corpus"
    bad.mkdir()
    for f in corpus.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    if kind == "xz":
        raw = (bad / "de.jsonl.xz").read_bytes()
        (bad / "de.jsonl.xz").write_bytes(raw[: len(raw) // 2])  # truncated download
        match = r"de\.jsonl\.xz: cannot read .*corrupt or truncated.*Fix"
    else:
        with open(bad / "en.jsonl", "a") as fh:
            fh.write("{not json\n")
        match = r"en\.jsonl:121: not a JSON object.*Fix"
    plan = _plan(tmp_path / "plan.csv", [("a", 2000, {"en": 0.5, "de": 0.5})])
    out = tmp_path / "out"
    with pytest.raises(TrainingError, match=match):
        _sweep(plan, bad, out, None, vocab_size=300)
    _assert_clean(out)
    assert not (out / "tokenizer").exists()  # nothing half-written


def test_budget_beyond_data_needs_allow_repeat(corpus, tokenizer_dir, tmp_path):
    plan = _plan(tmp_path / "plan.csv", [("big", 60_000, {"en": 1.0})])
    out = tmp_path / "out"
    with pytest.raises(TrainingError, match=r"'en'.*--allow-repeat.*epochs"):
        _sweep(plan, corpus, out, tokenizer_dir)
    _assert_clean(out)
    # with --allow-repeat the run repeats en and records the epochs (tiny budget: use a short
    # stream by asking for just over the data)
    data = load_data(next((out / "data").iterdir()))
    have = data.languages["en"].available
    plan2 = _plan(tmp_path / "plan2.csv", [("rep", have + 100, {"en": 1.0})])
    msgs: list[str] = []
    res = _sweep(
        plan2,
        corpus,
        out,
        tokenizer_dir,
        allow_repeat=True,
        log=msgs.append,
        eval_points=(1.0,),
        batch_size=64,
    )
    rec = json.loads(res.records.read_text())[0]
    assert rec["repeated_languages"] == ["en"] and rec["epochs"]["en"] > 1
    assert rec["realised_tokens"]["en"] == have + 100
    assert any("repeating" in m for m in msgs)


# ---------------------------------------------------------------- sweep, resume


def test_two_run_sweep_end_to_end(corpus, tokenizer_dir, tmp_path):
    shares_a = {"en": 0.5, "de": 0.25, "ru": 0.25, "zh": 0.0, "ja": 0.0}
    shares_b = {"en": 0.1, "de": 0.1, "ru": 0.1, "zh": 0.35, "ja": 0.35}
    plan = _plan(tmp_path / "plan.csv", [("run-a", 3001, shares_a), ("run b/2", 2000, shares_b)])
    res = _sweep(plan, corpus, tmp_path / "out", tokenizer_dir, batch_size=2)
    assert (res.finished, res.trained, res.pending) == (2, 2, 0)
    rows = list(csv.DictReader(open(res.table)))
    assert list(rows[0]) == [
        "run_id",
        "budget_tokens",
        "tokens_seen",
        "language",
        "proportion",
        "loss",
        "step",
    ]
    for rid, shares, budget in [("run-a", shares_a, 3001), ("run b/2", shares_b, 2000)]:
        mine = [r for r in rows if r["run_id"] == rid]
        assert {r["language"] for r in mine} == set(LANGS)
        assert len(mine) == 4 * len(LANGS)
        for r in mine:
            assert 0 < int(r["tokens_seen"]) <= budget == int(r["budget_tokens"])
            assert float(r["proportion"]) == shares[r["language"]]
            assert 0 < float(r["loss"]) < 20
        tail = {int(r["tokens_seen"]) for r in mine if int(r["tokens_seen"]) >= 0.85 * budget}
        assert len(tail) == 3
    recs = json.loads(res.records.read_text())
    assert recs[0]["realised_tokens"] == token_budgets(shares_a, 3001)
    assert recs[1]["realised_tokens"] == token_budgets(shares_b, 2000)
    assert recs[0]["throughput"]["tokens_per_s"] > 0 and recs[0]["model"]["parameters"] > 0
    runs_mod = pytest.importorskip("climb_bayes.data.runs")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "few observations" warning of a 2-run table
        data = runs_mod.read_runs(res.table)
    assert data.form == "long" and set(data.languages) == set(LANGS)
    assert set(data.run_ids) == {"run-a", "run b/2"}
    assert data.n_excluded_zero_share > 0  # zh/ja at r=0 were evaluated too


def test_rerun_skips_finished_and_loses_none(corpus, tokenizer_dir, tmp_path):
    rows = [("a", 2000, {"en": 1.0}), ("b", 2000, {"en": 0.5, "de": 0.5})]
    plan = _plan(tmp_path / "plan.csv", rows)
    out = tmp_path / "out"
    first = _sweep(plan, corpus, out, tokenizer_dir, max_runs=1)
    assert (first.finished, first.pending) == (1, 1)
    assert {r["run_id"] for r in csv.DictReader(open(first.table))} == {"a"}  # finished only
    second = _sweep(plan, corpus, out, tokenizer_dir)
    assert (second.trained, second.skipped, second.finished) == (1, 1, 2)
    table = second.table.read_text()
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/record.json")}
    third = _sweep(plan, corpus, out, tokenizer_dir)
    assert (third.trained, third.skipped, third.finished) == (0, 2, 2)
    assert third.table.read_text() == table
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.glob("runs/*/record.json")}
    # a new run is added: only it trains, the table keeps the old ones
    plan = _plan(tmp_path / "plan.csv", [*rows, ("c", 2000, {"de": 1.0})])
    fourth = _sweep(plan, corpus, out, tokenizer_dir)
    assert (fourth.trained, fourth.skipped, fourth.finished) == (1, 2, 3)
    assert fourth.table.read_text().startswith(table)


SHARES_R = {x: 0.0 for x in LANGS} | {"en": 0.4, "ru": 0.3, "ja": 0.3}


def test_kill_and_resume_reproduces_uninterrupted_run(corpus, tokenizer_dir, tmp_path):
    plan = _plan(tmp_path / "plan.csv", [("r", 4000, {"en": 0.4, "ru": 0.3, "ja": 0.3})])
    out = tmp_path / "out"
    _sweep(plan, corpus, out, tokenizer_dir, max_runs=0)  # prepare data only
    data = load_data(next((out / "data").iterdir()))
    cfg = RunConfig(
        run_id="r",
        budget_tokens=4000,
        shares=SHARES_R,
        preset="micro",
        seq_len=32,
        batch_size=8,
        micro_batch_size=4,
        lr=3e-3,
        eval_points=(0.3, 0.6, 0.9, 1.0),
        data_key=data.key,
    )
    opts = RunOptions(device="cpu", threads=1, log_every_s=1e9)
    tb_opts = RunOptions(device="cpu", threads=1, log_every_s=1e9, tensorboard_dir=str(tmp_path))
    full = train_run(cfg, data, tmp_path / "full", tb_opts, log=lambda s: None)
    assert list((tmp_path / "r").glob("events.out.tfevents.*")), "no TensorBoard event file"

    stopped = RunOptions(device="cpu", threads=1, log_every_s=1e9, stop_after_steps=7)
    with pytest.raises(RunInterrupted):
        train_run(cfg, data, tmp_path / "killed", stopped, log=lambda s: None)
    ck = tmp_path / "killed" / "checkpoint"
    assert (ck / "train_state.json").is_file() and list(ck.glob("*.safetensors"))
    assert not list((tmp_path / "killed").glob(".checkpoint*"))  # no temporary folder left
    assert not is_finished(tmp_path / "killed") and not (tmp_path / "killed" / "rows.csv").exists()
    resumed = train_run(cfg, data, tmp_path / "killed", opts, log=lambda s: None)
    assert resumed["resumes"] == 1 and full["resumes"] == 0
    assert resumed["realised_tokens"] == full["realised_tokens"]
    for lang in LANGS:
        assert resumed["final_loss"][lang] == pytest.approx(full["final_loss"][lang], abs=1e-6)
    rows_full = (tmp_path / "full" / "rows.csv").read_text()
    rows_res = (tmp_path / "killed" / "rows.csv").read_text()
    assert rows_full == rows_res  # every evaluation point, to 8 significant digits
    assert not (tmp_path / "killed" / "checkpoint").exists()  # removed when finished

    # per-step metrics: one line per step and evaluation, the resumed run's equal the full run's
    def metrics(folder: str) -> list[dict]:
        lines = (tmp_path / folder / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]

    m_full, m_res = metrics("full"), metrics("killed")
    train_full = [m for m in m_full if m["kind"] == "train"]
    assert [m["step"] for m in train_full] == list(range(1, full["steps"] + 1))
    assert [m["step"] for m in m_res if m["kind"] == "train"] == [m["step"] for m in train_full]
    for a, b in zip(train_full, (m for m in m_res if m["kind"] == "train"), strict=True):
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["grad_norm"] > 0
        assert a["tokens_per_s"] > 0 and a["memory_gb"] > 0
    evals = [m for m in m_full if m["kind"] == "eval"]
    assert len(evals) == len(full["eval_steps"])
    assert evals[-1]["loss"] == pytest.approx(full["final_loss"], abs=1e-6)


def test_sigterm_checkpoints_and_stops(corpus, tokenizer_dir, tmp_path):
    import signal

    data, cfg = _micro_run(tmp_path, corpus, tokenizer_dir, "s", 3000, {"en": 1.0}, 8)

    def on_step(step: int) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    opts = RunOptions(device="cpu", threads=1, log_every_s=1e9, on_step=on_step)
    with pytest.raises(RunInterrupted, match="after step 3/"):
        train_run(cfg, data, tmp_path / "run", opts, log=lambda s: None)
    rec = train_run(cfg, data, tmp_path / "run", RunOptions(device="cpu", threads=1))
    assert rec["resumes"] == 1 and is_finished(tmp_path / "run")


def test_slurm_without_slurm_runs_locally_and_submitit_path(corpus, tokenizer_dir, tmp_path):
    pytest.importorskip("submitit")
    plan = _plan(tmp_path / "plan.csv", [("a", 1500, {"en": 1.0}), ("b", 1500, {"ja": 1.0})])
    msgs: list[str] = []
    env_path = os.environ.get("PATH", "")
    try:
        os.environ["PATH"] = str(tmp_path)  # no sbatch here
        res = _sweep(
            plan, corpus, tmp_path / "o1", tokenizer_dir, slurm=True, log=msgs.append, max_runs=1
        )
    finally:
        os.environ["PATH"] = env_path
    assert any("no Slurm" in m for m in msgs) and res.finished == 1
    # the submitit code path itself, with submitit's in-process "debug" cluster
    res = _sweep(plan, corpus, tmp_path / "o1", tokenizer_dir, slurm=True, slurm_cluster="debug")
    assert (res.finished, res.trained, res.skipped) == (2, 1, 1)


STRAGGLER = (
    "import sys; from training.worker import main; main([sys.argv[1]]); "
    "print('rank 1: gloo connection reset while shutting down', file=sys.stderr); sys.exit(1)"
)


def test_finished_record_wins_over_a_failed_straggler(corpus, tokenizer_dir, tmp_path, monkeypatch):
    """A launcher (torchrun, a --jobs worker, a Slurm task) that fails after the run wrote its
    record -- a rank dying while shutting down -- leaves a finished run and a warning, not a
    failed sweep. The fake launcher trains the run for real, then exits 1."""
    import training.sweep as sweep_mod
    import training.worker as worker_mod

    plan = _plan(tmp_path / "plan.csv", [("a", 1500, {"en": 1.0}), ("b", 1500, {"de": 1.0})])
    kw = dict(batch_size=8, eval_points=(1.0,))
    monkeypatch.setattr(
        sweep_mod, "_launch_cmd", lambda *a: [sys.executable, "-c", STRAGGLER, str(a[2])]
    )
    monkeypatch.setattr(
        sweep_mod, "_worker_cmd", lambda spec: [sys.executable, "-c", STRAGGLER, str(spec)]
    )
    for name, extra in [("torchrun", dict(launcher="torchrun", nproc=2, max_runs=1)),
                        ("jobs", dict(jobs=2))]:  # fmt: skip
        msgs: list[str] = []
        res = _sweep(plan, corpus, tmp_path / name, tokenizer_dir, log=msgs.append, **extra, **kw)
        n = extra.get("max_runs", 2)
        assert (res.finished, res.trained) == (n, n), msgs
        warned = [m for m in msgs if "exited with code 1 after the run's record was written" in m]
        assert len(warned) == n, msgs
    # a Slurm task that raises after the run finished (submitit's in-process debug cluster)
    real = worker_mod.run_spec

    def straggle(spec):
        real(spec)
        raise RuntimeError("rank 1: gloo connection reset while shutting down")

    monkeypatch.setattr(worker_mod, "run_spec", straggle)
    msgs = []
    res = _sweep(plan, corpus, tmp_path / "slurm", tokenizer_dir, slurm=True, slurm_cluster="debug",
                 log=msgs.append, **kw)  # fmt: skip
    assert res.finished == 2 and not any("runs failed" in m for m in msgs), msgs
    assert sum("Slurm job" in m and "kept as finished" in m for m in msgs) == 2, msgs


def _task_pids(marker: str) -> list[int]:
    """Processes of submitit tasks whose command line contains ``marker`` (Linux /proc)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "submitit.core._submit" in cmd and marker in cmd:
            pids.append(int(cmdline.parent.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds tasks in /proc")
def test_submitit_preemption_checkpoints_requeues_and_resumes(corpus, tokenizer_dir, tmp_path):
    """submitit's preemption signal (USR2) mid-run, with its local executor: the run writes a
    checkpoint after the current step, the task is requeued through submitit's handler (the
    local executor restarts it), resumes and ends with the uninterrupted run's losses."""
    pytest.importorskip("submitit")
    import signal
    import threading
    import time

    plan = _plan(tmp_path / "plan.csv", [("p", 30_000, {"en": 0.4, "de": 0.3, "ru": 0.3})])
    kw = dict(batch_size=8, eval_points=(0.5, 0.9, 1.0), allow_repeat=True)
    _sweep(plan, corpus, tmp_path / "ref", tokenizer_dir, **kw)
    out = tmp_path / "out"
    sent: list[int] = []

    def preempt() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not sent:
            logs = list(out.glob("runs/p-*/metrics.jsonl"))
            if logs and logs[0].read_text().count('"kind": "train"') >= 5:
                for pid in _task_pids(str(out)):
                    os.kill(pid, signal.SIGUSR2)
                    sent.append(pid)
            time.sleep(0.02)

    thread = threading.Thread(target=preempt, daemon=True)
    thread.start()
    res = _sweep(plan, corpus, out, tokenizer_dir, slurm=True, slurm_cluster="local",
                 slurm_params={"timeout_min": 10}, **kw)  # fmt: skip
    thread.join()
    assert len(sent) == 1
    rec = json.loads(res.records.read_text())[0]
    assert rec["resumes"] == 1 and res.finished == 1
    logs = "".join(p.read_text() for p in out.glob("slurm/*/*_log.*"))
    assert "Requeued job" in logs and "resuming from step" in logs, logs[-3000:]
    [rows] = out.glob("runs/p-*/rows.csv")
    [rows_ref] = (tmp_path / "ref").glob("runs/p-*/rows.csv")
    assert rows.read_text() == rows_ref.read_text()


def test_jobs_slots_pin_one_gpu_each_or_split_the_cores():
    from training.sweep import _slot_settings

    opts = RunOptions(device="auto")
    pinned = [_slot_settings(k, 4, opts, ["4", "5"], 16) for k in range(4)]
    assert [env["CUDA_VISIBLE_DEVICES"] for env, _ in pinned] == ["4", "5", "4", "5"]
    assert {o.threads for _, o in pinned} == {4}  # 16 cores / 4 workers
    env, o = _slot_settings(1, 3, opts, [], 2)
    assert env == {} and o.threads == 1  # never 0 threads
    _, o = _slot_settings(0, 2, RunOptions(threads=3), [], 16)
    assert o.threads == 3  # --threads wins


def test_jobs_trains_runs_side_by_side(corpus, tokenizer_dir, tmp_path):
    """--jobs 2 on CPU: two single-process runs at once, each with half of the cores, and the
    same losses as the runs trained one after another in this process."""
    from datetime import datetime

    from training.sweep import _cpu_count

    shares = {"en": 0.5, "de": 0.5}
    plan = _plan(tmp_path / "plan.csv", [("j1", 30_000, shares), ("j2", 30_000, {"ru": 1.0})])
    kw = dict(batch_size=8, eval_points=(0.5, 1.0), allow_repeat=True)
    auto = RunOptions(device="cpu", log_every_s=1e9)  # no --threads: the cores are split
    msgs: list[str] = []
    res = _sweep(plan, corpus, tmp_path / "par", tokenizer_dir, jobs=2, options=auto,
                 log=msgs.append, **kw)  # fmt: skip
    assert (res.finished, res.trained) == (2, 2)
    assert sum("in worker" in m for m in msgs) == 2
    recs = json.loads(res.records.read_text())
    assert {r["hardware"]["cpu_threads"] for r in recs} == {max(1, _cpu_count() // 2)}
    spans = []
    for r in recs:
        end = datetime.fromisoformat(r["finished_at"]).timestamp()
        spans.append((end - r["wall_time_s_last_session"], end))
    (s1, e1), (s2, e2) = spans
    assert s1 < e2 and s2 < e1, spans  # the two runs overlapped in time
    seq = _sweep(plan, corpus, tmp_path / "seq", tokenizer_dir, **kw)
    for a, b in zip(recs, json.loads(seq.records.read_text()), strict=True):
        assert a["final_loss"] == pytest.approx(b["final_loss"], abs=1e-6)


# ---------------------------------------------------------------- records, CLI


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_atomic_dir_swaps_whole_folders_and_keeps_the_old_one_on_failure(tmp_path):
    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        (tmp / "a.bin").write_text("v1")
    assert sorted(p.name for p in target.iterdir()) == ["a.bin"]
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "b.bin").write_text("half")
        raise RuntimeError("killed while writing")
    assert sorted(p.name for p in target.iterdir()) == ["a.bin"]  # untouched
    with atomic_dir(target) as tmp:
        (tmp / "b.bin").write_text("v2")
    assert sorted(p.name for p in target.iterdir()) == ["b.bin"]  # replaced, not merged
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary or old folder left


def test_cli_errors_exit_2_without_traceback(corpus, tmp_path):
    from training.cli import train

    plan = _plan(tmp_path / "plan.csv", [("a", 2000, {"en": 0.5, "xx": 0.5})], ["en", "xx"])
    res = CliRunner().invoke(
        train,
        [
            "--plan",
            str(plan),
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "o"),
            "--preset",
            "micro",
        ],
    )
    assert res.exit_code == 2
    assert "Error: language 'xx'" in res.output and "Traceback" not in res.output


def test_cli_end_to_end_and_python_m(corpus, tokenizer_dir, tmp_path):
    from training.cli import train

    plan = _plan(tmp_path / "plan.csv", [("a", 1500, {"zh": 0.5, "ja": 0.5})])
    args = [
        "--plan",
        str(plan),
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "o"),
        "--preset",
        "micro",
        "--tokenizer",
        str(tokenizer_dir),
        "--val-tokens",
        "128",
        "--eval-points",
        "0.9,1.0",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--batch-size",
        "2",
    ]
    res = CliRunner().invoke(train, args)
    assert res.exit_code == 0, res.output
    assert "1 finished, 0 pending" in res.output
    assert (tmp_path / "o" / "runs.csv").read_text().count("\na,") == 2 * len(LANGS)
    proc = subprocess.run(
        [sys.executable, "-m", "training", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--allow-repeat" in proc.stdout and "--slurm" in proc.stdout


def test_sigterm_checkpoints_and_exits_143_without_traceback(corpus, tokenizer_dir, tmp_path):
    """A local SIGTERM (a scheduler's stop) mid-run: checkpoint, one 'interrupted' line, exit 143
    (128 + SIGTERM), no traceback; the same command then resumes (covered by the resume tests)."""
    import signal
    import time

    plan = _plan(tmp_path / "plan.csv", [("long", 400_000, {"en": 0.5, "de": 0.5})])
    out = tmp_path / "o"
    args = [
        sys.executable, "-m", "training", "--plan", str(plan), "--corpus", str(corpus),
        "--out", str(out), "--preset", "micro", "--tokenizer", str(tokenizer_dir),
        "--val-tokens", "128", "--eval-points", "0.5,1.0", "--device", "cpu", "--threads", "1",
        "--batch-size", "2", "--log-every", "0.01", "--allow-repeat",
    ]  # fmt: skip
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True)
    seen, deadline = [], time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if " step " in line or line.lstrip().startswith("[long] step") or not line:
            break
    assert proc.poll() is None, "".join(seen)  # still training
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    code = proc.wait(timeout=60)
    err = "".join(seen) + rest
    assert code == 143, err
    assert "interrupted: run long stopped after step" in err and "Traceback" not in err
    assert list(out.glob("runs/long-*/checkpoint/train_state.json"))


@pytest.mark.slow
def test_two_node_sweep_on_one_machine_trains_each_run_once_across_both(
    corpus, tokenizer_dir, tmp_path
):
    """--nnodes 2: a follower started first (the CLI, node 1) waits for node 0's data if it is
    not ready, then every run is one 2-process torchrun job across the two "nodes" (static
    rendezvous on localhost, gloo); the result equals a single-node 2-process DDP sweep, and
    only node 0 writes the runs table."""
    import socket

    plan = _plan(
        tmp_path / "plan.csv",
        [("a", 2048, {"en": 0.5, "de": 0.5}), ("b", 1024, {"en": 0.25, "de": 0.75})],
    )
    kw = dict(batch_size=8, eval_points=(0.5, 1.0))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "two"
    follower = subprocess.Popen(
        [sys.executable, "-m", "training", "--plan", str(plan), "--corpus", str(corpus),
         "--out", str(out), "--preset", "micro", "--tokenizer", str(tokenizer_dir),
         "--val-tokens", "256", "--batch-size", "8", "--eval-points", "0.5,1.0",
         "--device", "cpu", "--threads", "1", "--log-every", "1e9", "--launcher", "torchrun",
         "--nproc", "1", "--nnodes", "2", "--node-rank", "1", "--master", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        lead = _sweep(
            plan, corpus, out, tokenizer_dir, launcher="torchrun", nproc=1, nnodes=2,
            node_rank=0, master=f"127.0.0.1:{port}", **kw,
        )  # fmt: skip
        f_out, f_err = follower.communicate(timeout=300)
    finally:
        follower.kill()
    assert follower.returncode == 0, f_err
    assert "2 runs trained with node 0" in f_err  # (it may find node 0's data ready at once)
    assert lead.finished == 2 and lead.trained == 2
    assert json.loads((out / "sweep.json").read_text())["multinode"] == {
        "nnodes": 2,
        "master": f"127.0.0.1:{port}",
    }
    ddp = _sweep(plan, corpus, tmp_path / "ddp", tokenizer_dir, launcher="torchrun", nproc=2, **kw)
    for a, b in zip(
        json.loads(lead.records.read_text()), json.loads(ddp.records.read_text()), strict=True
    ):
        assert a["hardware"]["n_devices"] == 2 and a["realised_tokens"] == b["realised_tokens"]
        for lang in a["final_loss"]:
            assert a["final_loss"][lang] == pytest.approx(b["final_loss"][lang], abs=1e-5)
    with pytest.raises(TrainingError, match="needs --launcher torchrun"):
        _sweep(plan, corpus, tmp_path / "x", tokenizer_dir, nnodes=2, master="h:1", **kw)
    with pytest.raises(TrainingError, match="HOST:PORT"):
        _sweep(plan, corpus, tmp_path / "x", tokenizer_dir, launcher="torchrun", nnodes=2, **kw)


def test_follower_waits_for_its_own_leaders_sweep_json_only(tmp_path):
    import time

    from training.multinode import LEADER_GRACE_S, node_group, wait_for_leader

    group = node_group(2, 1, "node0:29500", "torchrun", False, 1)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"multinode": {"nnodes": 2, "master": "node0:29500"}}))
    old = time.time() - LEADER_GRACE_S - 60
    os.utime(path, (old, old))  # an earlier sweep's file: not this one
    with pytest.raises(TrainingError, match="node 0 has not written"):
        wait_for_leader(tmp_path, group, time.time(), lambda m: None, timeout_s=0.3, poll_s=0.1)
    path.write_text(json.dumps({"multinode": {"nnodes": 2, "master": "other:1"}}))
    with pytest.raises(TrainingError, match="node 0 has not written"):  # another group's
        wait_for_leader(tmp_path, group, time.time(), lambda m: None, timeout_s=0.3, poll_s=0.1)
    path.write_text(json.dumps({"multinode": {"nnodes": 2, "master": "node0:29500"}, "k": 1}))
    assert wait_for_leader(tmp_path, group, time.time(), lambda m: None)["k"] == 1
    with pytest.raises(TrainingError, match="node-rank < nnodes"):
        node_group(2, 2, "h:1", "torchrun", False, 1)


@pytest.mark.slow
def test_ranks_launched_for_different_runs_refuse_to_train(tmp_path):
    """The guard of a late multi-node follower: processes of one job given different runs."""
    script = tmp_path / "mismatch.py"
    script.write_text(
        "import os, sys\n"
        "from training.errors import TrainingError\n"
        "from training.loop import RunConfig, RunOptions, train_run\n"
        "cfg = RunConfig(f\"r{os.environ['RANK']}\", 1024, {'en': 1.0}, 'micro', 32, 8, 4, 3e-3)\n"
        "try:\n"
        "    train_run(cfg, None, sys.argv[1], RunOptions(device='cpu', threads=1))\n"
        "except TrainingError as e:\n"
        "    os.write(1, f'REFUSED {e}\\n'.encode())  # one write: the ranks share stdout\n"
        "    sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script), str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode != 0
    assert "REFUSED the 2 processes of this job were started for different runs (['r0', 'r1'])" in (
        proc.stdout
    ), proc.stdout + proc.stderr


@pytest.mark.slow
def test_torchrun_ddp_two_processes(corpus, tokenizer_dir, tmp_path):
    """DDP across 2 CPU processes (gloo) gives the same run as one process, to fp tolerance."""
    plan = _plan(tmp_path / "plan.csv", [("d", 2048, {"en": 0.5, "de": 0.5})])
    kw = dict(batch_size=8, eval_points=(0.5, 1.0))
    local = _sweep(plan, corpus, tmp_path / "local", tokenizer_dir, **kw)
    ddp = _sweep(plan, corpus, tmp_path / "ddp", tokenizer_dir, launcher="torchrun", nproc=2, **kw)
    # the chunked loss is the module DDP wraps: same run again
    chunked = RunOptions(device="cpu", threads=1, log_every_s=1e9, loss_chunk_tokens=40)
    ddp_c = _sweep(
        plan, corpus, tmp_path / "ddpc", tokenizer_dir, launcher="torchrun", nproc=2,
        options=chunked, **kw,
    )  # fmt: skip
    # stopped after 3 steps and resumed: exactly the uninterrupted DDP run; the replicated
    # tensors were written once, split between the two ranks' files
    from safetensors import safe_open

    stop = RunOptions(device="cpu", threads=1, log_every_s=1e9, stop_after_steps=3)
    out_r = tmp_path / "ddp_r"
    with pytest.raises(TrainingError, match="failed under torchrun"):
        _sweep(plan, corpus, out_r, tokenizer_dir, launcher="torchrun", nproc=2, options=stop, **kw)
    keys = []
    for f in sorted(out_r.glob("runs/*/checkpoint/*.safetensors")):
        with safe_open(str(f), "pt") as h:
            keys.append(set(h.keys()))
    assert len(keys) == 2 and all(keys) and not keys[0] & keys[1]
    resumed = _sweep(plan, corpus, out_r, tokenizer_dir, launcher="torchrun", nproc=2, **kw)
    assert json.loads(resumed.records.read_text())[0]["resumes"] == 1
    [rows_res] = out_r.glob("runs/*/rows.csv")
    [rows_ddp] = (tmp_path / "ddp").glob("runs/*/rows.csv")
    assert rows_res.read_text() == rows_ddp.read_text()
    a = json.loads(local.records.read_text())[0]
    for res in (ddp, ddp_c):
        b = json.loads(res.records.read_text())[0]
        assert b["hardware"]["n_devices"] == 2 and b["realised_tokens"] == a["realised_tokens"]
        for lang in a["final_loss"]:
            assert b["final_loss"][lang] == pytest.approx(a["final_loss"][lang], abs=2e-3)


def test_throughput_benchmark_script_runs():
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "train_throughput.py"),
            "--preset",
            "micro",
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s" in proc.stdout and "micro" in proc.stdout


def test_throughput_benchmark_auto_micro_batch_and_oom_rows(monkeypatch, tmp_path):
    """--micro-batch auto halves the micro-batch (doubling accumulation, so the optimizer batch
    stays) until a step fits; an OOM row renders as OOM, not as a number."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "train_throughput", REPO / "benchmarks" / "train_throughput.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tried = []

    def fake(preset, args, mb, accum):
        tried.append((mb, accum))
        row = dict(_FAKE_ROW)
        row.update(micro_batch=mb, grad_accum=accum, status="OOM" if mb > 4 else "ok")
        return row

    monkeypatch.setattr(bench, "_bench_one", fake)
    args = argparse.Namespace(micro_batch="auto", grad_accum=2)
    row = bench.bench("tiny", args)  # the preset's micro-batch is 16
    assert tried == [(16, 2), (8, 4), (4, 8)] and row["status"] == "ok"
    oom = {**_FAKE_ROW, "status": "OOM", "tokens_per_s": None, "model_tflops": None}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_FAKE_ROW) + "\n" + json.dumps(oom) + "\n")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "train_throughput.py"), "--render", str(rows),
         "--markdown"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and "| 40.5% |" in lines[2]
    assert "| OOM |" in lines[3] and "(at OOM)" in lines[3]


_FAKE_ROW = {
    "preset": "paper-1.2b", "params_M": 2238.35, "device": "NVIDIA H100 80GB HBM3",
    "precision": "bf16", "compile": True, "seq_len": 4096, "micro_batch": 2, "grad_accum": 16,
    "loss_chunk_tokens": 4096, "activation_checkpointing": 0, "tokens_per_s": 31384.0,
    "model_tflops": 400.9, "mfu": 0.405, "peak_memory_gb": 58.2, "warmup_s": 81.0, "status": "ok",
}  # fmt: skip


@pytest.mark.slow
def test_torchrun_fsdp_interrupted_and_resumed(corpus, tokenizer_dir, tmp_path):
    """FSDP2 across 2 CPU processes: stopped after a checkpoint, resumed: exactly the losses of
    an uninterrupted FSDP2 run (and of one process, to fp tolerance). The checkpoint is sharded:
    each rank wrote its half of every matrix to its own safetensors file; the same checkpoint
    also resumes in one process (resharded)."""
    import shutil

    from safetensors import safe_open

    plan = _plan(tmp_path / "plan.csv", [("f", 2048, {"en": 0.5, "de": 0.5})])
    kw = dict(batch_size=8, eval_points=(0.5, 1.0), launcher="torchrun", nproc=2)
    stop = RunOptions(device="cpu", threads=1, fsdp=True, stop_after_steps=3, log_every_s=1e9)
    out = tmp_path / "fsdp"
    with pytest.raises(TrainingError, match="failed under torchrun"):
        _sweep(plan, corpus, out, tokenizer_dir, options=stop, **kw)
    [ck] = out.glob("runs/*/checkpoint")
    assert json.loads((ck / "train_state.json").read_text())["step"] == 3
    assert not (out / "runs.csv").exists()
    shards = sorted(ck.glob("*.safetensors"))
    assert len(shards) == 2  # one file per rank
    key = "model.model.layers.0.mlp.up_proj.weight"  # 88 x 32 in the micro preset
    for f in shards:
        with safe_open(str(f), "pt") as h:
            assert h.get_slice(key).get_shape() == [44, 32]  # half of the rows on each rank
    shutil.copytree(out, tmp_path / "single")  # the interrupted sweep, resumed below in 1 process
    go = RunOptions(device="cpu", threads=1, fsdp=True, log_every_s=1e9)
    save = RunOptions(device="cpu", threads=1, fsdp=True, log_every_s=1e9, save_model=True)
    res = _sweep(plan, corpus, out, tokenizer_dir, options=save, **kw)
    rec = json.loads(res.records.read_text())[0]
    assert rec["resumes"] == 1 and rec["throughput"]["fsdp"] is True
    # the full model, gathered from the shards, loads with from_pretrained
    [mdir] = out.glob("runs/*/model")
    data = load_data(next((out / "data").iterdir()))
    for lang, loss in _saved_model_losses(mdir, data, ["en", "de"]).items():
        assert loss == pytest.approx(rec["final_loss"][lang], abs=1e-5)
    assert not list(out.glob("runs/*/checkpoint")) and not list(out.glob("runs/*/.checkpoint*"))
    full = _sweep(plan, corpus, tmp_path / "full", tokenizer_dir, options=go, **kw)
    [rows_full] = (tmp_path / "full").glob("runs/*/rows.csv")
    [rows_res] = out.glob("runs/*/rows.csv")
    assert rows_res.read_text() == rows_full.read_text()  # every evaluation, 8 digits
    assert json.loads(full.records.read_text())[0]["final_loss"] == rec["final_loss"]
    local_kw = dict(batch_size=8, eval_points=(0.5, 1.0))
    local = _sweep(plan, corpus, tmp_path / "local", tokenizer_dir, **local_kw)
    ref = json.loads(local.records.read_text())[0]
    msgs: list[str] = []
    single = _sweep(plan, corpus, tmp_path / "single", tokenizer_dir, log=msgs.append, **local_kw)
    one = json.loads(single.records.read_text())[0]
    assert one["resumes"] == 1 and any("resharding it to 1" in m for m in msgs)
    for lang in ref["final_loss"]:
        assert rec["final_loss"][lang] == pytest.approx(ref["final_loss"][lang], abs=2e-3)
        assert one["final_loss"][lang] == pytest.approx(ref["final_loss"][lang], abs=2e-3)


def _rank_pid(marker: str, rank: int) -> int | None:
    """PID of the torchrun worker of ``rank`` whose command line contains ``marker`` (/proc)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            env = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "training.worker" in cmd and marker in cmd and f"RANK={rank}" in env:
            return int(proc.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds ranks in /proc")
def test_sigterm_to_one_rank_stops_every_rank_at_the_same_step(corpus, tokenizer_dir, tmp_path):
    """SIGTERM reaching only rank 1 of a 2-process DDP run: the ranks agree on the step to stop
    (an all-reduce of the stop flag), both checkpoint it and exit; the resumed run is exactly
    the uninterrupted one. Without the agreement rank 1 would wait in the checkpoint's
    collectives while rank 0 trains on."""
    import signal
    import threading
    import time

    plan = _plan(tmp_path / "plan.csv", [("t", 30_000, {"en": 0.5, "de": 0.5})])
    kw = dict(batch_size=8, eval_points=(0.5, 1.0), allow_repeat=True, launcher="torchrun", nproc=2)
    out = tmp_path / "out"
    sent: list[int] = []
    hung: list[int] = []
    returned = threading.Event()

    def stop_rank_1() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not sent:
            logs = list(out.glob("runs/t-*/metrics.jsonl"))
            if logs and logs[0].read_text().count('"kind": "train"') >= 5:
                pid = _rank_pid(str(out), 1)
                if pid is not None:
                    os.kill(pid, signal.SIGTERM)
                    sent.append(pid)
            time.sleep(0.02)
        if sent and not returned.wait(120):  # the ranks hang: end them, fail below
            for rank in (0, 1):
                pid = _rank_pid(str(out), rank)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    hung.append(pid)

    thread = threading.Thread(target=stop_rank_1, daemon=True)
    thread.start()
    try:
        with pytest.raises(TrainingError, match="failed under torchrun"):
            _sweep(plan, corpus, out, tokenizer_dir, **kw)
    finally:
        returned.set()
    thread.join()
    assert len(sent) == 1 and not hung
    [ck] = out.glob("runs/t-*/checkpoint")
    state = json.loads((ck / "train_state.json").read_text())
    assert 5 <= state["step"] < 118 and len(list(ck.glob("*.safetensors"))) == 2
    resumed = _sweep(plan, corpus, out, tokenizer_dir, **kw)
    assert json.loads(resumed.records.read_text())[0]["resumes"] == 1
    _sweep(plan, corpus, tmp_path / "full", tokenizer_dir, **kw)
    [rows] = out.glob("runs/t-*/rows.csv")
    [rows_full] = (tmp_path / "full").glob("runs/t-*/rows.csv")
    assert rows.read_text() == rows_full.read_text()


def test_checkpoint_rng_is_json_and_nothing_is_unpickled(tmp_path):
    """The RNG snapshot is plain JSON and round-trips exactly; no module of training/ unpickles
    (no torch.load, no pickle.load); an earlier version's checkpoint.pt is refused with the fix."""
    import random

    import torch

    from training.checkpoint import Checkpointer, rng_state, set_rng_state

    np.random.seed(3)  # noqa: NPY002 - the global state is what the snapshot covers
    np.random.normal()  # noqa: NPY002 - leaves a cached Gaussian in the state
    snap = json.loads(json.dumps(rng_state()))
    first = (np.random.rand(3), random.random(), torch.rand(2))  # noqa: NPY002
    set_rng_state(snap)
    again = (np.random.rand(3), random.random(), torch.rand(2))  # noqa: NPY002
    assert np.array_equal(first[0], again[0]) and first[1] == again[1]
    assert torch.equal(first[2], again[2])
    for path in (REPO / "training").glob("*.py"):
        code = path.read_text()
        assert not re.search(r"torch\.load\(|pickle\.loads?\(|import pickle", code), path
    (tmp_path / "checkpoint.pt").write_bytes(b"old")
    with pytest.raises(TrainingError, match=r"earlier climb-bayes version.*Fix: .*delete it"):
        Checkpointer(tmp_path, 0, 1).prepare()


def _adamw(model):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def test_only_rank_0_walks_a_written_checkpoint_folder(tmp_path, monkeypatch):
    """Rank 0 renames the written folder into place as soon as its own write is done; another
    rank's background thread must not walk it then (FileNotFoundError mid-walk killed a
    two-process run in CI). Only rank 0 fsyncs; the others wait for their write and touch
    nothing."""
    from concurrent.futures import Future

    import training.checkpoint as ckpt

    synced: list[int] = []
    monkeypatch.setattr(ckpt.os, "fsync", synced.append)
    monkeypatch.setattr(ckpt, "fsync_dir", lambda folder: synced.append(-1))
    done: Future = Future()
    done.set_result(None)
    folder = tmp_path / ".checkpoint-000000004.tmp"
    folder.mkdir()
    (folder / "shard.safetensors").write_bytes(b"x")
    ckpt._flush_when_written(done, folder, sync=False)  # rank 1
    assert synced == []
    ckpt._flush_when_written(done, folder, sync=True)  # rank 0: the file and the folder
    assert len(synced) == 2 and synced[-1] == -1
    failed: Future = Future()
    failed.set_exception(OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):  # every rank re-raises its failed write
        ckpt._flush_when_written(failed, folder, sync=False)


def test_async_checkpoint_is_a_snapshot_and_survives_a_crash_between_renames(tmp_path):
    """A background save holds the state of the moment it was called, although training changes
    the parameters while it writes; a crash between the two renames loses nothing."""
    import torch

    from training.checkpoint import Checkpointer, read_state

    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    model = _tiny_lm()
    opt = _adamw(model)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    want_model = {k: v.clone() for k, v in model.state_dict().items()}
    want_opt = {
        k: {n: t.clone() for n, t in d.items()} for k, d in opt.state_dict()["state"].items()
    }
    ck = Checkpointer(tmp_path, 0, 1)
    assert ck.prepare() is None
    rows = [{"step": 1, "loss": 1.5}]
    ck.save(model, opt, {"step": 1, "key": "k", "rows": rows}, wait=False)
    for _ in range(3):  # training goes on while the shards are written
        step()
    rows.append({"step": 4, "loss": 1.2})
    ck.wait()
    assert read_state(tmp_path)["rows"] == [{"step": 1, "loss": 1.5}]
    assert read_state(tmp_path)["step"] == 1 and not list(tmp_path.glob(".checkpoint*"))

    # a crash after checkpoint/ was moved aside, before the new folder took its place
    (tmp_path / "checkpoint").rename(tmp_path / ".checkpoint.old")
    (tmp_path / ".checkpoint-000000002.tmp").mkdir()  # an unfinished later save
    fresh = _tiny_lm()
    fresh_opt = _adamw(fresh)
    ck2 = Checkpointer(tmp_path, 0, 1)
    assert ck2.prepare()["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    ck2.load(fresh, fresh_opt)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, want_model[k]), k
    got = fresh_opt.state_dict()["state"]
    assert got.keys() == want_opt.keys()
    for k in want_opt:
        for n in want_opt[k]:
            assert torch.equal(got[k][n], want_opt[k][n]), (k, n)


def test_accelerate_mixed_precision_is_honoured_or_rejected(tmp_path, monkeypatch):
    from training.sweep import accelerate_precision

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    cfg = tmp_path / "default_config.yaml"
    assert accelerate_precision("auto", cfg) == ("auto", "no")  # no config file
    assert accelerate_precision("bf16", cfg) == ("bf16", "bf16")
    cfg.write_text("compute_environment: LOCAL_MACHINE\nmixed_precision: bf16\n")
    assert accelerate_precision("auto", cfg) == ("bf16", "bf16")
    with pytest.raises(TrainingError, match="must agree"):
        accelerate_precision("fp32", cfg)
    cfg.write_text("mixed_precision: fp16\n")
    with pytest.raises(TrainingError, match="does not support"):
        accelerate_precision("auto", cfg)
    cfg.write_text("mixed_precision: 'no'\n")
    assert accelerate_precision("fp32", cfg) == ("fp32", "no")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # the environment wins
    assert accelerate_precision("auto", cfg) == ("bf16", "bf16")


def test_sweep_lock_refuses_a_second_sweep_and_recovers_a_stale_one(corpus, tmp_path):
    import socket

    from training.lock import LOCK_FILE, sweep_lock
    from training.sweep import run_sweep

    out = tmp_path / "out"
    with sweep_lock(out, log=lambda s: None):
        assert (out / LOCK_FILE).is_file()
        with pytest.raises(TrainingError, match="another sweep is running"):
            with sweep_lock(out, log=lambda s: None):
                pass
        plan = _plan(tmp_path / "plan.csv", [("a", 1500, {"en": 1.0})])
        with pytest.raises(TrainingError, match=r"another sweep is running.*delete"):
            run_sweep(plan, corpus, out, preset="micro", log=lambda s: None)
    assert not (out / LOCK_FILE).exists()  # released
    # a lock left by a process of this host that no longer exists is stale: taken over
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = {"host": socket.gethostname(), "pid": dead.pid, "started": "2026-01-01T00:00:00"}
    (out / LOCK_FILE).write_text(json.dumps(lock))
    msgs: list[str] = []
    with sweep_lock(out, log=msgs.append):
        pass
    assert any("stale lock" in m for m in msgs) and not (out / LOCK_FILE).exists()


def test_slurm_jobs_in_flight_are_not_submitted_again(tmp_path):
    from training.slurm_jobs import in_flight, read_jobs, record_jobs

    record_jobs(tmp_path, {"a-1": "100_0", "b-2": "100_1"})
    record_jobs(tmp_path, {"c-3": "101_0"})  # merged, not overwritten
    assert read_jobs(tmp_path) == {"a-1": "100_0", "b-2": "100_1", "c-3": "101_0"}
    states = {"100_0": "RUNNING", "100_1": "COMPLETED", "101_0": ""}
    active = in_flight(tmp_path, ["a-1", "b-2", "c-3", "d-4"], states.get)
    assert active == {"a-1": ("100_0", "RUNNING"), "c-3": ("101_0", "UNKNOWN")}


def test_tokenizer_short_vocabulary_and_mismatched_reuse_are_errors(corpus, tmp_path):
    from training.tokenizer import check_reused_tokenizer

    samples = {lang: read_documents(find_language_files(corpus, lang), lang) for lang in LANGS}
    with pytest.raises(TrainingError, match=r"came out with \d+ tokens, not the 100000.*Fix"):
        train_tokenizer(samples, 100_000, tmp_path / "big")
    assert not (tmp_path / "big").exists()  # nothing half-written
    tok = tmp_path / "tok"
    train_tokenizer({k: samples[k] for k in ("en", "de")}, 300, tok)
    check_reused_tokenizer(tok, ["en"], 300)  # a subset of its languages: fine
    with pytest.raises(TrainingError, match=r"trained without zh.*new --out"):
        check_reused_tokenizer(tok, ["en", "zh"], 300)
    with pytest.raises(TrainingError, match="vocabulary is 300, this sweep asks for 512"):
        check_reused_tokenizer(tok, ["en"], 512)


def _tiny_lm(vocab: int = 97):
    import torch

    from training.presets import build_model, get_preset

    torch.manual_seed(0)
    return build_model(get_preset("micro"), vocab, eos_id=0, pad_id=1)


def _grads(model) -> dict:
    return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def test_chunked_loss_equals_the_plain_loss_and_gradients():
    import torch

    from training.loss import CausalLMLoss, loss_sum

    model = _tiny_lm()
    ids = torch.randint(0, 97, (3, 17), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, 5:9] = -100  # positions without a label are skipped by both
    nll, n = loss_sum(model, ids, labels)
    nll.backward()
    plain = _grads(model)
    model.zero_grad(set_to_none=True)
    nll_c, n_c = CausalLMLoss(model, chunk_tokens=7)(ids, labels)  # 48 positions, 7 chunks
    nll_c.backward()
    chunked = _grads(model)
    assert int(n) == int(n_c) == 3 * 16 - 4
    assert float(nll_c.detach()) == pytest.approx(float(nll.detach()), rel=1e-6)
    assert plain.keys() == chunked.keys() and plain
    # Float32 round-off: the chunked path sums the lm_head gradient over chunks in another
    # order, so an element may differ by an ulp (1.2e-7 at 1e-3 seen on an AMD EPYC CPU); a
    # wrong chunking (a chunk missed or counted twice) moves gradients by ~1e-2.
    for k in plain:
        torch.testing.assert_close(chunked[k], plain[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        CausalLMLoss(model, chunk_tokens=-1)


def test_fused_chunked_loss_scales_gradients_follows_autocast_and_skips_them_without_grad():
    """The chunked loss computes its gradients in the forward: the backward must scale them by
    the incoming gradient (a run divides the sum by tokens x accumulation steps), bf16 autocast
    must give what autocast gives the plain loss (bf16 matmuls, fp32 softmax), and evaluation
    under no_grad must give the same sum without storing gradients."""
    import torch

    from training.loss import CausalLMLoss, chunked_nll, loss_sum

    model = _tiny_lm()
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(5))
    chunked = CausalLMLoss(model, chunk_tokens=5)
    for amp in (False, True):
        runs = []
        for fwd in (model, chunked):
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                nll, n = loss_sum(fwd, ids, ids)
            (nll / (3.0 * n)).backward()
            runs.append((float(nll.detach()), _grads(model)))
        (loss_p, g_p), (loss_c, g_c) = runs
        tol = dict(rtol=2e-2, atol=2e-4) if amp else dict(rtol=1e-5, atol=1e-7)
        assert loss_c == pytest.approx(loss_p, rel=tol["rtol"] / 10)
        for k in g_p:  # a gradient not scaled by 1 / (3 n) would be 90x too large
            torch.testing.assert_close(g_c[k], g_p[k], **tol)
    with torch.no_grad():
        nll_eval, _ = chunked(ids, ids)
    assert float(nll_eval) == pytest.approx(runs[0][0], rel=2e-2)
    h = torch.randn(9, 8, requires_grad=True)
    w = torch.randn(11, 8, requires_grad=True)
    t = torch.tensor([1, 2, -100, 3, 4, 5, 6, 7, 10])
    out = chunked_nll(h, w, t, 4)
    out.backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h2 @ w2.t(), t, ignore_index=-100, reduction="sum")
    ref.backward()
    assert float(out.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    torch.testing.assert_close(h.grad, h2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_activation_checkpointing_changes_no_gradient():
    import torch

    from training.loss import loss_sum
    from training.presets import enable_activation_checkpointing

    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(2))
    grads = []
    for ckpt in (False, True):
        model = _tiny_lm()
        model.train()
        if ckpt:
            enable_activation_checkpointing(model, 1)
        nll, _ = loss_sum(model, ids, ids)
        nll.backward()
        grads.append(_grads(model))
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-7)


def test_checkpointing_every_second_block_marks_those_blocks_and_keeps_gradients():
    """Every-n checkpointing on any Transformers 5.x (5.17 has no every_n_layers): blocks 0, n,
    2n... recompute, the others keep activations, and the gradients do not change."""
    import torch

    from training.loss import loss_sum
    from training.presets import enable_activation_checkpointing

    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(3))
    grads = []
    for every in (0, 2):
        model = _tiny_lm()
        model.train()
        if every:
            enable_activation_checkpointing(model, every)
            assert [b.gradient_checkpointing for b in model.model.layers] == [True, False]
        nll, _ = loss_sum(model, ids, ids)
        nll.backward()
        grads.append(_grads(model))
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-6)


def test_compile_blocks_traces_one_graph_for_every_block_and_keeps_gradients():
    """Per-block compilation: the identical decoder blocks share one Dynamo trace (so compile
    time does not grow with depth; a per-block recompilation would also hit Dynamo's cache
    limit of 8 at 24 blocks and fall back to eager), and the gradients are the eager ones."""
    import dataclasses

    import torch
    from torch._dynamo.utils import counters

    from training.loss import loss_sum
    from training.presets import build_model, compile_blocks, get_preset

    preset = dataclasses.replace(get_preset("micro"), num_layers=6)
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(6))
    grads = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = build_model(preset, 97, eos_id=0, pad_id=1)
        if compiled:
            torch._dynamo.reset()
            counters.clear()
            assert compile_blocks(model, backend="eager") == 6
        nll, _ = loss_sum(model, ids, ids)
        nll.backward()
        grads.append(_grads(model))
    assert counters["stats"]["unique_graphs"] == 1
    assert all(b._compiled_call_impl is not None for b in model.model.layers)
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-6)


def test_unknown_compile_scope_is_refused_before_training(corpus, tokenizer_dir, tmp_path):
    from training.loop import RunOptions, train_run

    data, cfg = _micro_run(tmp_path, corpus, tokenizer_dir, "e", 2000, {"en": 1.0})
    opts = RunOptions(device="cpu", threads=1, compile=True, compile_scope="layers")
    with pytest.raises(TrainingError, match="compile scope 'layers': use one of model, blocks"):
        train_run(cfg, data, tmp_path / "run", opts, log=lambda s: None)


def test_loss_sum_sees_through_torch_compile_of_the_chunked_loss():
    """torch.compile(CausalLMLoss) is called as the chunked loss, not as a Hugging Face model
    (it was, and failed with "unexpected keyword argument 'input_ids'" on the first GPU run)."""
    import torch

    from training.loss import CausalLMLoss, loss_sum

    model = _tiny_lm()
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(4))
    plain, n_plain = loss_sum(model, ids, ids)
    plain.backward()
    g_plain = _grads(model)
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(CausalLMLoss(model, chunk_tokens=7), backend="eager")
    nll, n = loss_sum(compiled, ids, ids)
    assert int(n) == int(n_plain)
    assert float(nll.detach()) == pytest.approx(float(plain.detach()), rel=1e-5)
    nll.backward()  # the fused loss's autograd.Function under Dynamo
    for k, g in _grads(model).items():
        torch.testing.assert_close(g, g_plain[k], rtol=1e-5, atol=1e-6)


def _saved_model_losses(model_dir: Path, data, langs) -> dict[str, float]:
    """Validation loss per language of ``AutoModelForCausalLM.from_pretrained(model_dir)``."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.loss import loss_sum

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    out = {}
    with torch.no_grad():
        for lang in langs:
            ids = torch.from_numpy(data.languages[lang].val_blocks.astype(np.int64))
            nll, n = loss_sum(model, ids, ids)
            out[lang] = float(nll) / float(n)
    return out


def test_saved_model_is_safetensors_and_loads_with_from_pretrained(corpus, tokenizer_dir, tmp_path):
    """--save-model: RUN/model/ holds safetensors (no pickle), the config and the tokenizer;
    AutoModelForCausalLM.from_pretrained gives the run's final validation losses."""
    from transformers import AutoTokenizer

    data, cfg = _micro_run(tmp_path, corpus, tokenizer_dir, "m", 2000, {"en": 0.5, "zh": 0.5})
    opts = RunOptions(device="cpu", threads=1, log_every_s=1e9, save_model=True)
    rec = train_run(cfg, data, tmp_path / "run", opts, log=lambda s: None)
    mdir = tmp_path / "run" / "model"
    names = sorted(p.name for p in mdir.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(names)
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    assert not list((tmp_path / "run").glob(".model*"))
    got = _saved_model_losses(mdir, data, ["en", "zh"])
    for lang in ("en", "zh"):
        assert got[lang] == pytest.approx(rec["final_loss"][lang], abs=1e-5)
    tok = AutoTokenizer.from_pretrained(mdir)
    assert tok.decode(tok.encode(SCRIPTS[1], add_special_tokens=False)) == SCRIPTS[1]


def test_run_with_chunked_loss_and_checkpointing_matches_plain_run(corpus, tokenizer_dir, tmp_path):
    data, cfg = _micro_run(tmp_path, corpus, tokenizer_dir, "c", 2000, {"en": 0.5, "ja": 0.5})
    base = RunOptions(device="cpu", threads=1, log_every_s=1e9)
    lean = RunOptions(
        device="cpu",
        threads=1,
        log_every_s=1e9,
        loss_chunk_tokens=50,
        activation_checkpointing=2,  # every second block
    )
    a = train_run(cfg, data, tmp_path / "plain", base, log=lambda s: None)
    b = train_run(cfg, data, tmp_path / "lean", lean, log=lambda s: None)
    for lang in ("en", "ja"):
        assert b["final_loss"][lang] == pytest.approx(a["final_loss"][lang], abs=1e-4)


def test_compiled_run_evaluates_with_the_uncompiled_model(
    corpus, tokenizer_dir, tmp_path, monkeypatch
):
    """--compile compiles the training forward only: evaluation (no_grad) calling the compiled
    module made it recompile, a 45 s stall at the first evaluation of a paper-1.2b-shape run on
    an H100. The stand-in for torch.compile fails any call without gradients."""
    import torch

    calls = {"train": 0}

    class GradOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

        def forward(self, *args, **kwargs):
            assert torch.is_grad_enabled(), "the compiled module was called under no_grad"
            calls["train"] += 1
            return self._orig_mod(*args, **kwargs)

    monkeypatch.setattr(torch, "compile", lambda module, **kw: GradOnly(module))
    data, cfg = _micro_run(tmp_path, corpus, tokenizer_dir, "e", 2000, {"en": 0.5, "de": 0.5})
    for chunk in (0, 50):  # the plain model and the chunked loss are compiled alike
        opts = RunOptions(
            device="cpu", threads=1, log_every_s=1e9, compile=True, loss_chunk_tokens=chunk
        )
        calls["train"] = 0
        rec = train_run(cfg, data, tmp_path / f"run{chunk}", opts, log=lambda s: None)
        assert calls["train"] > 0 and set(rec["final_loss"]) == {"en", "de"}

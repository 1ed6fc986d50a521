"""Sharded memory-mapped token streams (``training.token_shards``) and the data pipeline on them.

Exactness: whatever the shard size, the stream read back through the memmaps equals the
concatenation of the training documents' tokens built in memory the old way, and a run trained on
the sharded stream gives the same losses and realised tokens as one trained on the in-RAM array.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from training.corpus import document_order, find_language_files, read_documents  # noqa: E402
from training.dataset import LanguageData, SweepData, load_data, prepare_data  # noqa: E402
from training.errors import TrainingError  # noqa: E402
from training.loop import RunConfig, RunOptions, train_run  # noqa: E402
from training.mixture import batch_arrays  # noqa: E402
from training.token_shards import INDEX_NAME, TokenShards, TokenShardWriter  # noqa: E402
from training.tokenizer import encode_documents, load_tokenizer, train_tokenizer  # noqa: E402

pytestmark = pytest.mark.train

WORDS = {
    "en": "the house river green light small water open stone quiet bread winter city road",
    "de": "das Haus Fluss grün Licht klein Wasser öffnen Stein ruhig Brot Straße Größe für",
}


def _docs(lang: str, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = WORDS[lang].split()
    return [
        f"#{lang}-doc{i}# " + " ".join(rng.choice(vocab, size=int(rng.integers(5, 40))))
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    en = "\n".join(json.dumps({"text": t}) for t in _docs("en", 150, 1)) + "\n"
    (root / "en.jsonl.xz").write_bytes(lzma.compress(en.encode()))
    (root / "de.txt").write_text("\n".join(_docs("de", 150, 2)) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    samples = {x: read_documents(find_language_files(corpus, x), x) for x in WORDS}
    train_tokenizer(samples, 300, out)
    return out


def _old_stream(corpus: Path, tok_dir: Path, lang: str, n_val_docs: int, seed: int) -> np.ndarray:
    """The training stream as the in-RAM pipeline built it: every training document in the
    fixed order, each followed by end-of-text, concatenated."""
    tok = load_tokenizer(tok_dir)
    docs = read_documents(find_language_files(corpus, lang), lang)
    order = document_order(len(docs), seed, lang)
    return encode_documents(tok, [docs[i] for i in order[n_val_docs:]], int(tok.eos_token_id))


# ---------------------------------------------------------------- writer / reader


def test_writer_reader_round_trip_across_shard_boundaries(tmp_path: Path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, size=60)
    tokens = rng.integers(0, 2**32, size=int(lengths.sum()), dtype=np.uint64)
    with TokenShardWriter(tmp_path / "s", shard_tokens=37, meta={"vocab_size": 2**32}) as w:
        pos = 0
        for cut in np.array_split(np.arange(lengths.size), 7):  # batches of documents
            n = int(lengths[cut].sum())
            w.write(tokens[pos : pos + n], lengths[cut])
            pos += n
    index = json.loads((tmp_path / "s" / INDEX_NAME).read_text())
    assert index["total_tokens"] == tokens.size and index["documents"] == lengths.size
    assert [s["tokens"] for s in index["shards"]][:-1] == [37] * (len(index["shards"]) - 1)
    assert sum(s["documents"] for s in index["shards"]) == lengths.size
    # documents are counted in the shard where they end
    ends = np.cumsum(lengths)
    expect = np.bincount((ends - 1) // 37, minlength=len(index["shards"]))
    assert [s["documents"] for s in index["shards"]] == expect.tolist()

    s = TokenShards(tmp_path / "s")
    assert len(s) == tokens.size and s.shape == (tokens.size,) and s.n_shards > 5
    assert s.dtype == np.dtype("<u4")
    for n in [0, 1, 36, 37, 38, 74, 75, 100, tokens.size - 1, tokens.size]:
        assert np.array_equal(s.take(n), tokens[:n])
    for a, b in [(30, 80), (37, 74), (36, 38), (0, tokens.size), (5, 5)]:
        assert np.array_equal(s[a:b], tokens[a:b])
    assert np.array_equal(s[::7], tokens[::7])
    idx = rng.integers(-tokens.size, tokens.size, size=500)
    assert np.array_equal(s[idx], tokens[idx])
    assert int(s[40]) == int(tokens[40]) and int(s[-1]) == int(tokens[-1])
    assert np.array_equal(np.asarray(s), tokens)
    with pytest.raises(IndexError):
        s.take(tokens.size + 1)
    with pytest.raises(IndexError):
        s[np.array([tokens.size])]
    # wrap-around blocks (repeated data) read the same from the shards as from an array
    blocks = np.array([[0, 0, 37], [0, 30, 37], [0, tokens.size - 10, 37], [0, 50, 12]])
    a = batch_arrays(blocks, [s], 37, pad_id=0)
    b = batch_arrays(blocks, [tokens.astype(np.int64)], 37, pad_id=0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_rewrite_drops_stale_shards_and_damage_is_a_clear_error(tmp_path: Path):
    folder = tmp_path / "s"
    with TokenShardWriter(folder, shard_tokens=10) as w:
        w.write(np.arange(95))
    assert len(list(folder.glob("train-*.u32"))) == 10
    with TokenShardWriter(folder, shard_tokens=10) as w:
        w.write(np.arange(25))
    assert sorted(p.name for p in folder.glob("train-*.u32")) == [
        "train-00000.u32",
        "train-00001.u32",
        "train-00002.u32",
    ]
    assert np.array_equal(TokenShards(folder).take(25), np.arange(25))
    # a writer that fails leaves no index (and no temporary file): the folder reads as missing
    with pytest.raises(RuntimeError), TokenShardWriter(folder, shard_tokens=10) as w:
        w.write(np.arange(15))
        raise RuntimeError("killed")
    assert not (folder / INDEX_NAME).exists() and not list(folder.glob(".*.tmp"))
    with pytest.raises(TrainingError, match=r"missing or damaged.*Fix: delete"):
        TokenShards(folder)
    with TokenShardWriter(folder, shard_tokens=10) as w:
        w.write(np.arange(25))
    (folder / "train-00001.u32").write_bytes(b"\0" * 8)  # truncated shard
    with pytest.raises(TrainingError, match=r"train-00001\.u32 holds 8 bytes"):
        TokenShards(folder)
    with pytest.raises(TrainingError, match="uint32"):
        TokenShardWriter(tmp_path / "neg").write(np.array([-1]))
    empty = TokenShardWriter(tmp_path / "empty")
    empty.close()
    assert len(TokenShards(tmp_path / "empty")) == 0


# ---------------------------------------------------------------- the pipeline


@pytest.mark.parametrize("shard_tokens", [64, 1000, None])
def test_prepared_stream_equals_the_in_memory_concatenation(
    corpus, tok_dir, tmp_path, shard_tokens
):
    data = prepare_data(
        corpus,
        list(WORDS),
        tmp_path,
        seq_len=16,
        val_tokens=64,
        seed=3,
        need={x: 10**9 for x in WORDS},  # every training document
        tokenizer=tok_dir,
        shard_tokens=shard_tokens,
    )
    for lang in WORDS:
        ld = data.languages[lang]
        old = _old_stream(corpus, tok_dir, lang, ld.info["n_val_docs"], 3)
        assert len(ld.train) == old.size == ld.available
        if shard_tokens == 64:
            assert ld.train.n_shards == -(-old.size // 64) > 3
        index = ld.train.index
        assert index["documents"] == 150 - ld.info["n_val_docs"]
        assert index["vocab_size"] == data.vocab_size and index["exhausted"] is True
        for n in [0, 63, 64, 65, 200, old.size // 2, old.size]:
            assert np.array_equal(ld.train.take(n), old[:n])
        assert np.array_equal(ld.train[50:300], old[50:300])
    # the stream folder: shards, then the index; no .npy training cache any more
    names = sorted(p.name for p in (data.path / "en").iterdir())
    shards = [s["name"] for s in data.languages["en"].train.index["shards"]]
    assert names == sorted([INDEX_NAME, *shards]) and all(n.endswith(".u32") for n in shards)
    assert not list(data.path.glob("*.train.npy"))


def test_stream_cut_at_the_need_and_extended_later(tok_dir, tmp_path):
    corpus = tmp_path / "corpus"  # more documents than one encoding batch (256)
    corpus.mkdir()
    lines = "".join(json.dumps({"text": t}) + "\n" for t in _docs("en", 700, 9))
    (corpus / "en.jsonl").write_text(lines)
    kw = dict(seq_len=16, val_tokens=64, seed=3, tokenizer=tok_dir, shard_tokens=100)
    small = prepare_data(corpus, ["en"], tmp_path, need={"en": 300}, **kw)
    ld = small.languages["en"]
    assert ld.available is None and 300 <= len(ld.train)
    old = _old_stream(corpus, tok_dir, "en", ld.info["n_val_docs"], 3)
    assert np.array_equal(ld.train.take(300), old[:300])
    big = prepare_data(corpus, ["en"], tmp_path, need={"en": 10**9}, **kw)
    assert big.path == small.path  # the same cache, extended
    assert np.array_equal(np.asarray(big.languages["en"].train), old)
    assert big.languages["en"].available == old.size


def test_sharded_run_equals_the_in_memory_run(corpus, tok_dir, tmp_path):
    data = prepare_data(
        corpus,
        list(WORDS),
        tmp_path / "out",
        seq_len=16,
        val_tokens=64,
        seed=0,
        need={"en": 500, "de": 301},
        tokenizer=tok_dir,
        shard_tokens=50,  # many shards: most blocks of the run straddle a boundary somewhere
    )
    assert all(ld.train.n_shards > 5 for ld in data.languages.values())
    in_ram = SweepData(
        **{
            **data.__dict__,
            "languages": {
                x: LanguageData(ld.lang, ld.val_blocks, np.asarray(ld.train), ld.available, ld.info)
                for x, ld in data.languages.items()
            },
        }
    )
    cfg = RunConfig(
        run_id="r",
        budget_tokens=801,
        shares={"en": 0.625, "de": 0.375},
        preset="micro",
        seq_len=16,
        batch_size=4,
        micro_batch_size=4,
        lr=3e-3,
        eval_points=(0.5, 1.0),
        data_key=data.key,
    )
    opts = RunOptions(device="cpu", threads=1, log_every_s=1e9, save_model=False)
    a = train_run(cfg, data, tmp_path / "sharded", opts, log=lambda s: None)
    b = train_run(cfg, in_ram, tmp_path / "ram", opts, log=lambda s: None)
    assert a["realised_tokens"] == b["realised_tokens"] == {"en": 500, "de": 300}
    assert a["final_loss"] == b["final_loss"]
    assert (tmp_path / "sharded" / "rows.csv").read_text() == (
        tmp_path / "ram" / "rows.csv"
    ).read_text()
    assert (
        load_data(data.path).languages["en"].train.n_shards == data.languages["en"].train.n_shards
    )


def test_parquet_corpus_is_sharded_like_jsonl(tok_dir, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = _docs("en", 80, 5)
    (tmp_path / "pq" / "en").mkdir(parents=True)
    pq.write_table(pa.table({"text": docs[:50]}), tmp_path / "pq" / "en" / "000_00000.parquet")
    pq.write_table(pa.table({"text": docs[50:]}), tmp_path / "pq" / "en" / "000_00001.parquet")
    (tmp_path / "js").mkdir()
    (tmp_path / "js" / "en.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    kw = dict(seq_len=16, val_tokens=64, seed=1, need={"en": 10**9}, tokenizer=tok_dir)
    a = prepare_data(tmp_path / "pq", ["en"], tmp_path / "o1", shard_tokens=77, **kw)
    b = prepare_data(tmp_path / "js", ["en"], tmp_path / "o2", **kw)
    assert np.array_equal(np.asarray(a.languages["en"].train), np.asarray(b.languages["en"].train))
    assert a.languages["en"].train.n_shards > 1


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    import sys

    (tmp_path / "en.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(TrainingError, match=r"needs pyarrow.*pip install pyarrow"):
        read_documents(find_language_files(tmp_path, "en"), "en")

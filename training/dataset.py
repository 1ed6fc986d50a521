"""Sweep data: tokenizer, fixed validation blocks and training token streams per language.

:func:`prepare_data` runs once per sweep (in the launching process) and caches everything under
``OUT/data/<key>/``: validation blocks as ``<lang>.val.npy``, training streams as memory-mapped
uint32 shards ``<lang>/train-NNNNN.u32`` with ``<lang>/index.json`` (:mod:`training.token_shards`;
written batch by batch, never concatenated in memory), and ``<lang>.json`` last. Every run,
worker process and Slurm task reads the same tokens. ``key`` hashes the tokenizer, the corpus
files, the seed, ``seq_len``, the validation size and the cache format: the validation blocks
depend on nothing else, so all runs of a sweep share them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training import token_shards
from training.atomic import atomic_path, atomic_write_json
from training.corpus import (
    corpus_fingerprint,
    document_order,
    find_language_files,
    read_documents,
    split_validation,
)
from training.errors import TrainingError
from training.token_shards import INDEX_NAME, TokenShards, TokenShardWriter
from training.tokenizer import (
    balanced_sample,
    check_reused_tokenizer,
    encode_documents,
    encode_with_lengths,
    load_tokenizer,
    tokenizer_meta,
    train_tokenizer,
)

__all__ = ["LanguageData", "SweepData", "prepare_data", "load_data"]

FORMAT_VERSION = 2  # 2: training streams as uint32 token shards (was one .npy)


@dataclass
class LanguageData:
    """Tokens of one language.

    Attributes
    ----------
    val_blocks
        ``(n_blocks, seq_len)`` held-out validation tokens.
    train
        Training stream: the training documents (in the fixed document order), each followed by
        end-of-text, at least as long as the largest budget of the sweep or the whole text;
        memory-mapped uint32 shards read as one array (:class:`training.token_shards.TokenShards`).
    available
        Training tokens the corpus holds for this language, or ``None`` when the stream was cut
        at the sweep's largest need before the text ran out.
    """

    lang: str
    val_blocks: np.ndarray
    train: TokenShards
    available: int | None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepData:
    """Everything a run needs besides its config (see :func:`prepare_data`)."""

    path: Path
    key: str
    tokenizer_dir: Path
    vocab_size: int
    eos_id: int
    pad_id: int
    seq_len: int
    languages: dict[str, LanguageData]


def _atomic_save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, arr)


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def prepare_data(
    corpus_dir: str | Path,
    languages: Sequence[str],
    out_dir: str | Path,
    *,
    seq_len: int,
    val_tokens: int,
    seed: int,
    need: Mapping[str, int],
    tokenizer: str | Path | None = None,
    vocab_size: int = 4096,
    tokenizer_sample_chars: int = 2_000_000,
    corpus_map: Mapping[str, str] | None = None,
    log: Callable[[str], None] = lambda s: None,
    shard_tokens: int | None = None,
) -> SweepData:
    """Build (or reuse) the tokenizer and the per-language token caches of a sweep.

    Parameters
    ----------
    corpus_dir
        Corpus directory (see :mod:`training.corpus`).
    languages
        Languages of the plan; each must be in the corpus.
    out_dir
        Sweep output folder: the tokenizer goes to ``OUT/tokenizer`` (when ``tokenizer`` is
        ``None``; trained on first use, reused afterwards) and the caches to ``OUT/data/<key>``.
    seq_len
        Block length; validation uses ``max(1, val_tokens // seq_len)`` blocks per language.
    val_tokens
        Held-out validation tokens per language.
    seed
        Sweep seed (document order, hence the validation/training split).
    need
        ``{lang: largest budget D_i of the sweep}``: the training stream is tokenised that far.
    tokenizer
        Existing tokenizer folder, or ``None`` to train/reuse ``OUT/tokenizer``.
    vocab_size, tokenizer_sample_chars
        For a newly trained tokenizer: vocabulary size and characters sampled per language.
    corpus_map
        ``{lang: relative path}`` overrides for :func:`training.corpus.find_language_files`.
    log
        Progress callback.
    shard_tokens
        Tokens per training shard file (default
        :data:`training.token_shards.DEFAULT_SHARD_TOKENS`, 64 Mi tokens = 256 MiB); the
        stream's content does not depend on it, so it is not part of the cache key.
    """
    if shard_tokens is None:
        shard_tokens = token_shards.DEFAULT_SHARD_TOKENS
    out = Path(out_dir)
    files = {lang: find_language_files(corpus_dir, lang, corpus_map) for lang in languages}
    out.mkdir(parents=True, exist_ok=True)
    docs_cache: dict[str, list[str]] = {}
    orders: dict[str, np.ndarray] = {}

    def docs_of(lang: str) -> list[str]:
        if lang not in docs_cache:
            docs_cache[lang] = read_documents(files[lang], lang)
            orders[lang] = document_order(len(docs_cache[lang]), seed, lang)
        return docs_cache[lang]

    if tokenizer is None:
        tok_dir = out / "tokenizer"
        if not (tok_dir / "tokenizer.json").is_file():
            log(f"training a byte-level BPE tokenizer (vocab {vocab_size}) -> {tok_dir}")
            samples = {
                lang: balanced_sample(docs_of(lang), orders[lang], tokenizer_sample_chars)
                for lang in languages
            }
            train_tokenizer(samples, vocab_size, tok_dir)
        check_reused_tokenizer(tok_dir, languages, vocab_size)
    else:
        tok_dir = Path(tokenizer)
    tok = load_tokenizer(tok_dir)
    sample_docs = tokenizer_meta(tok_dir).get("sample_docs", {})  # read once, not per language
    eos_id = int(tok.eos_token_id)
    pad_id = int(tok.pad_token_id)
    tok_file = tok_dir / "tokenizer.json" if tok_dir.is_dir() else tok_dir
    tok_hash = _file_sha(tok_file)

    n_val_blocks = max(1, val_tokens // seq_len)
    key_src = {
        "v": FORMAT_VERSION,
        "tokenizer": tok_hash,
        "seed": seed,
        "seq_len": seq_len,
        "val_blocks": n_val_blocks,
        "corpus": {lang: corpus_fingerprint(files[lang]) for lang in sorted(languages)},
    }
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:12]
    data_dir = out / "data" / key
    data_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        data_dir / "data.json",
        {
            **key_src,
            "key": key,
            "tokenizer_dir": str(tok_dir.resolve()),
            "vocab_size": len(tok),
            "eos_id": eos_id,
            "pad_id": pad_id,
        },
        sort_keys=True,
    )

    def count_tokens(batch: list[str]) -> list[int]:
        return [
            len(e.ids) for e in tok.backend_tokenizer.encode_batch(batch, add_special_tokens=False)
        ]

    for lang in languages:
        meta_path = data_dir / f"{lang}.json"
        if meta_path.is_file() and (data_dir / lang / INDEX_NAME).is_file():
            meta = json.loads(meta_path.read_text())
            if meta["available"] is not None or meta["train_tokens"] >= need.get(lang, 0):
                continue
        meta_path.unlink(missing_ok=True)  # written again last, once the shards are complete
        docs = docs_of(lang)
        order = orders[lang]
        n_val_docs = split_validation(docs, order, n_val_blocks * seq_len, count_tokens, lang)
        val = encode_documents(tok, [docs[i] for i in order[:n_val_docs]], eos_id)
        val_blocks = val[: n_val_blocks * seq_len].reshape(n_val_blocks, seq_len)
        target = int(need.get(lang, 0))
        got = 0
        pos = n_val_docs
        chunk = 256
        writer = TokenShardWriter(
            data_dir / lang,
            shard_tokens=shard_tokens,
            meta={"lang": lang, "vocab_size": len(tok), "eos_id": eos_id},
        )
        with writer:  # a failure leaves no index.json: the language is rebuilt next time
            while pos < len(order) and got < target:
                arr, lengths = encode_with_lengths(
                    tok, [docs[i] for i in order[pos : pos + chunk]], eos_id
                )
                writer.write(arr, lengths)
                got += arr.shape[0]
                pos += chunk
            exhausted = pos >= len(order)
            if exhausted:
                pos = len(order)
            if got == 0 and target > 0:
                raise TrainingError(
                    f"language {lang!r}: no training text left after holding out "
                    f"{n_val_docs} validation documents. Fix: lower --val-tokens or add documents."
                )
            index = writer.close(exhausted=exhausted)
        n_sample = sample_docs.get(lang, 0)
        overlap = bool(n_sample) and n_val_docs + n_sample > len(order)
        _atomic_save_npy(data_dir / f"{lang}.val.npy", val_blocks.astype(np.int32))
        meta = {
            "lang": lang,
            "files": [str(p) for p in files[lang]],
            "n_docs": len(order),
            "n_val_docs": n_val_docs,
            "n_train_docs_tokenised": pos - n_val_docs,
            "val_tokens": int(val_blocks.size),
            "train_tokens": int(got),
            "train_shards": len(index["shards"]),
            "available": int(got) if exhausted else None,
            "validation_in_tokenizer_sample": overlap,
        }
        atomic_write_json(meta_path, meta, sort_keys=True)
        log(
            f"  {lang}: {len(order)} docs, {n_val_docs} held out ({val_blocks.size} val tokens), "
            f"{got} training tokens {'(all)' if exhausted else '(enough)'} in "
            f"{len(index['shards'])} shard(s)"
        )
    return load_data(data_dir)


def load_data(data_dir: str | Path) -> SweepData:
    """Load a prepared data folder (written by :func:`prepare_data`)."""
    data_dir = Path(data_dir)
    try:
        meta = json.loads((data_dir / "data.json").read_text())
        langs = {}
        for lang in meta["corpus"]:
            lmeta = json.loads((data_dir / f"{lang}.json").read_text())
            langs[lang] = LanguageData(
                lang=lang,
                val_blocks=np.load(data_dir / f"{lang}.val.npy"),
                train=TokenShards(data_dir / lang),
                available=lmeta["available"],
                info=lmeta,
            )
    except (OSError, KeyError, ValueError) as exc:
        raise TrainingError(
            f"{data_dir}: prepared data is missing or damaged ({type(exc).__name__}: {exc}). "
            f"Fix: delete that folder and run the sweep again to rebuild it."
        ) from None
    return SweepData(
        path=data_dir,
        key=meta["key"],
        tokenizer_dir=Path(meta["tokenizer_dir"]),
        vocab_size=int(meta["vocab_size"]),
        eos_id=int(meta["eos_id"]),
        pad_id=int(meta["pad_id"]),
        seq_len=int(meta["seq_len"]),
        languages=langs,
    )

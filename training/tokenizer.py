"""Byte-level BPE tokenizer, trained with ``tokenizers`` on a balanced multilingual sample.

Like the paper's BBPE: bytes are the base alphabet, so every string in every script round-trips.
The tokenizer is saved and loaded as a :class:`transformers.PreTrainedTokenizerFast` (a local
folder, nothing is downloaded). ``<|endoftext|>`` separates documents; ``<pad>`` fills the tail
of the last, partial block of a language (its positions carry no loss).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.atomic import atomic_dir
from training.errors import TrainingError

__all__ = [
    "EOS_TOKEN",
    "PAD_TOKEN",
    "balanced_sample",
    "train_tokenizer",
    "check_reused_tokenizer",
    "tokenizer_meta",
    "load_tokenizer",
    "encode_documents",
    "encode_with_lengths",
]

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"


def balanced_sample(docs: Sequence[str], order: np.ndarray, n_chars: int) -> list[str]:
    """Documents from the *back* of ``order`` until they hold ``n_chars`` characters.

    Validation documents come from the front of the same order, so the two rarely meet (only
    when a language has less text than the validation set plus the sample).
    """
    out: list[str] = []
    total = 0
    for i in order[::-1]:
        if total >= n_chars:
            break
        out.append(docs[i])
        total += len(docs[i])
    return out


def train_tokenizer(
    samples: Mapping[str, Sequence[str]], vocab_size: int, out_dir: str | Path
) -> Any:
    """Train a byte-level BPE on per-language samples and save it to ``out_dir``.

    Parameters
    ----------
    samples
        ``{lang: documents}``; pass about the same number of characters per language.
    vocab_size
        Target vocabulary size (including the 256 byte tokens and the 2 special tokens).
    out_dir
        Folder to write (``tokenizer.json``, ``tokenizer_config.json`` ...); it is written to a
        temporary sibling first and moved into place, so a killed run leaves nothing half-done.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 260:
        raise TrainingError(f"--vocab-size {vocab_size} is too small; use at least 260.")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def _iter() -> Iterator[str]:
        for lang in sorted(samples):
            yield from samples[lang]

    tok.train_from_iterator(_iter(), trainer=trainer)
    got = tok.get_vocab_size()
    if got < vocab_size:  # the sample ran out of pairs seen at least twice
        chars = sum(sum(map(len, v)) for v in samples.values())
        raise TrainingError(
            f"the tokenizer came out with {got} tokens, not the {vocab_size} asked for: the "
            f"sample ({chars:,} characters over {len(samples)} languages) has too few repeated "
            f"pairs. Fix: raise --tokenizer-sample-chars, or ask for --vocab-size {got} or less."
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN, pad_token=PAD_TOKEN
    )
    with atomic_dir(out_dir) as tmp:
        fast.save_pretrained(tmp)
        meta = {
            "kind": "byte-level BPE (tokenizers)",
            "vocab_size": len(fast),
            "languages": sorted(samples),
            "sample_docs": {k: len(v) for k, v in samples.items()},
            "sample_chars": {k: int(sum(map(len, v))) for k, v in samples.items()},
        }
        (tmp / "climb_tokenizer.json").write_text(json.dumps(meta, indent=2) + "\n")
    return fast


def tokenizer_meta(tok_dir: str | Path) -> dict[str, Any]:
    """The ``climb_tokenizer.json`` :func:`train_tokenizer` writes (languages, vocabulary,
    sample sizes); ``{}`` for a tokenizer trained elsewhere (or a ``tokenizer.json`` path)."""
    path = Path(tok_dir) / "climb_tokenizer.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def check_reused_tokenizer(tok_dir: str | Path, languages: Sequence[str], vocab_size: int) -> None:
    """Refuse to reuse ``OUT/tokenizer`` trained for other languages or another vocabulary.

    Reads the ``climb_tokenizer.json`` :func:`train_tokenizer` writes; a folder without it (a
    user's own tokenizer) is not checked.

    Raises
    ------
    TrainingError
        The plan has a language the tokenizer was not trained on, or ``vocab_size`` differs.
    """
    meta = tokenizer_meta(tok_dir)
    if not meta:
        return
    trained = set(meta.get("languages", []))
    missing = sorted(set(languages) - trained)
    problem = None
    if missing:
        problem = f"it was trained without {', '.join(missing)} (on {', '.join(sorted(trained))})"
    elif int(meta.get("vocab_size", vocab_size)) != int(vocab_size):
        problem = f"its vocabulary is {meta['vocab_size']}, this sweep asks for {vocab_size}"
    if problem:
        raise TrainingError(
            f"{tok_dir} cannot be reused: {problem}. Fix: use a new --out folder (or delete "
            f"{tok_dir} and the data/ cache next to it), or pass --tokenizer explicitly."
        )


def load_tokenizer(path: str | Path) -> Any:
    """Load a tokenizer folder (or a ``tokenizer.json`` file) as ``PreTrainedTokenizerFast``.

    A tokenizer without an end-of-text token gets ``<|endoftext|>`` added (and ``<pad>`` the
    same way), so any Hugging Face fast tokenizer folder can be used.

    Raises
    ------
    TrainingError
        If the path does not hold a readable fast tokenizer.
    """
    from transformers import PreTrainedTokenizerFast

    p = Path(path)
    try:
        if p.is_file():
            tok = PreTrainedTokenizerFast(tokenizer_file=str(p))
        elif (p / "tokenizer.json").is_file():
            tok = PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True)
        else:
            raise FileNotFoundError(f"{p / 'tokenizer.json'} not found")
    except Exception as exc:
        raise TrainingError(
            f"{p}: not a readable tokenizer ({type(exc).__name__}: {exc}). Fix: pass --tokenizer "
            f"with a folder holding tokenizer.json, or leave --tokenizer out to train one."
        ) from None
    if tok.eos_token is None:
        tok.add_special_tokens({"eos_token": EOS_TOKEN})
    if tok.pad_token is None:
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    return tok


def encode_documents(tok: Any, docs: Sequence[str], eos_id: int) -> np.ndarray:
    """Token ids of ``docs``, each followed by ``eos_id``, concatenated (int32)."""
    return encode_with_lengths(tok, docs, eos_id)[0]


def encode_with_lengths(
    tok: Any, docs: Sequence[str], eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`encode_documents`, plus each document's length (its tokens + end-of-text).

    The batch is encoded by the Rust tokenizer, which spreads it over the CPU cores.
    """
    if not docs:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    encs = tok.backend_tokenizer.encode_batch(list(docs), add_special_tokens=False)
    parts: list[np.ndarray] = []
    eos = np.array([eos_id], dtype=np.int32)
    for e in encs:
        parts.append(np.asarray(e.ids, dtype=np.int32))
        parts.append(eos)
    lengths = np.array([len(e.ids) + 1 for e in encs], dtype=np.int64)
    return np.concatenate(parts), lengths

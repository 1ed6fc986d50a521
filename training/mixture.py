"""Exact mixtures: per-language token budgets, single-language blocks, shuffled order.

A run with budget ``D`` and shares ``r`` trains on exactly ``D_i = floor(r_i * D)`` tokens of
language ``i`` (shares are read as the decimals written in the plan, so ``0.29 * 100`` is 29,
not 28). Language ``i``'s tokens are the first ``D_i`` tokens of its training stream (repeated
from the start when the stream is shorter: the number of epochs is recorded). They are cut into
blocks of ``seq_len`` tokens (the last block of a language may be shorter and is padded; padded
positions carry no loss), and the blocks of all languages are shuffled with the run seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

__all__ = ["token_budgets", "Mixture", "build_mixture", "batch_arrays"]


def token_budgets(shares: Mapping[str, float], total_tokens: int) -> dict[str, int]:
    """``{lang: floor(r_lang * total_tokens)}``, exact in decimal arithmetic.

    Parameters
    ----------
    shares
        Mixture proportions (``>= 0``; they should sum to 1).
    total_tokens
        Total budget ``D`` (an integer).
    """
    out = {}
    for lang, r in shares.items():
        if r < 0 or not math.isfinite(r):
            raise ValueError(f"share of {lang!r} must be a finite number >= 0, got {r}")
        out[lang] = int(math.floor(Decimal(repr(float(r))) * Decimal(int(total_tokens))))
    return out


@dataclass(frozen=True)
class Mixture:
    """The packed, shuffled training data of one run.

    Attributes
    ----------
    languages
        Language order (index ``k`` in :attr:`blocks` refers to ``languages[k]``).
    budgets
        ``{lang: D_i}``, the tokens the run must see.
    blocks
        ``(n_blocks, 3)`` int64 array of ``(language index, start, length)`` in training order;
        ``start`` is the position in the language's (possibly repeated) token stream.
    epochs
        ``{lang: D_i / available_i}`` (> 1 means the language's data is repeated); ``None``
        when the available amount is unknown (the corpus was tokenised only as far as needed,
        so the run uses less than one epoch).
    """

    languages: tuple[str, ...]
    budgets: dict[str, int]
    blocks: np.ndarray
    epochs: dict[str, float | None]

    @property
    def n_blocks(self) -> int:
        return int(self.blocks.shape[0])

    def realised(self) -> dict[str, int]:
        """Tokens per language summed over the blocks (equals :attr:`budgets`)."""
        sums = np.bincount(
            self.blocks[:, 0], weights=self.blocks[:, 2], minlength=len(self.languages)
        )
        return {lang: int(sums[k]) for k, lang in enumerate(self.languages)}


def build_mixture(
    budgets: Mapping[str, int],
    available: Mapping[str, int | None],
    seq_len: int,
    seed: int,
) -> Mixture:
    """Pack each language's budget into blocks and shuffle them with ``seed``.

    Parameters
    ----------
    budgets
        ``{lang: D_i}``.
    available
        ``{lang: training tokens available}`` for the epoch count (``None``: unknown).
    seq_len
        Block length in tokens.
    seed
        Shuffle seed (the run seed).
    """
    languages = tuple(budgets)
    rows = []
    for k, lang in enumerate(languages):
        n = int(budgets[lang])
        starts = np.arange(0, n, seq_len, dtype=np.int64)
        lengths = np.minimum(seq_len, n - starts)
        rows.append(np.stack([np.full_like(starts, k), starts, lengths], axis=1))
    blocks = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    perm = np.random.default_rng([seed, 1234567]).permutation(blocks.shape[0])
    epochs = {
        lang: (budgets[lang] / available[lang]) if available.get(lang) else None
        for lang in languages
    }
    return Mixture(languages, dict(budgets), blocks[perm], epochs)


def batch_arrays(
    blocks: np.ndarray,
    streams: Sequence[np.ndarray],
    seq_len: int,
    pad_id: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Materialise blocks as ``(input_ids, labels, language_index)`` arrays.

    Parameters
    ----------
    blocks
        ``(b, 3)`` rows of :attr:`Mixture.blocks`.
    streams
        Training token stream per language index (an array or a memory-mapped
        :class:`training.token_shards.TokenShards`); positions past its end wrap around (repeat).
    seq_len
        Block length.
    pad_id
        Token id for the padded tail of a short block (label ``-100`` there).

    Returns
    -------
    input_ids, labels : (b, seq_len) int64
    language_index : (b,) int64
    """
    b = blocks.shape[0]
    ids = np.full((b, seq_len), pad_id, dtype=np.int64)
    labels = np.full((b, seq_len), -100, dtype=np.int64)
    for j, (k, start, length) in enumerate(blocks.tolist()):
        s = streams[k]
        n = s.shape[0]
        if start + length <= n:  # a plain slice: the common case, no wrap-around
            tok = s[start : start + length]
        else:
            tok = s[np.arange(start, start + length) % n]
        ids[j, :length] = tok
        labels[j, :length] = tok
    return ids, labels, blocks[:, 0].copy()

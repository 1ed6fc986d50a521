"""Causal SDPA attention that stays on the causal kernel under ``torch.compile``.

Transformers builds the attention mask in Python before each forward. In eager mode, with no
padding mask and no cache, its ``sdpa`` mask function returns ``None`` and the attention calls
``scaled_dot_product_attention(..., is_causal=True)``, which PyTorch runs on a causal flash
kernel. Under ``torch.compile`` it materialises a ``(batch, 1, S, S)`` boolean mask instead:
it cannot read the position ids while tracing, so it cannot rule out packed sequences
(``masking_utils.find_packed_sequence_indices``; with torch < 2.14 it also mistakes compiling
for exporting), and attention then reads an ``S x S`` mask and runs on a general masked kernel
(seen with Transformers 5.17 and 5.24).

Measured on an H100 (``benchmarks/results/profile-h100-2026-11-26.txt``, ``paper-1.2b``,
sequence 4096, compiled, the materialised mask): attention took **34.1% of the GPU time** of a
training step while it is 19% of the counted FLOPs; the cuDNN masked backward alone was 24.7%.

Training here calls the model with token ids only: no padding mask (sequences are cut from
token streams; padding sits only after the last real token, which causal attention never lets
an earlier token see), no position ids (the model numbers positions ``0..S-1``, one sequence
per row, so the packed-sequence mask is all one sequence) and no cache. The mask is then exactly
SDPA's ``is_causal``. :data:`CAUSAL_SDPA` registers an attention implementation through
Transformers' public interfaces (``AttentionInterface``, ``AttentionMaskInterface``): the
attention is Transformers' own ``sdpa`` forward; the mask function returns ``None`` (no mask,
``is_causal=True``) when there is no padding mask, queries and keys have the same length, no
offset and no local window, and Transformers either allows the causal skip or is being compiled
(where its refusal comes from the unreadable position ids); otherwise it defers to
Transformers' ``sdpa_mask``. Outside ``torch.compile`` Transformers' own decision stands, so an
eager call with packed position ids still gets its packed mask.

References
----------
.. [1] Dao, T. "FlashAttention-2: Faster Attention with Better Parallelism and Work
   Partitioning". ICLR 2024.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CAUSAL_SDPA", "attention_implementation", "causal_sdpa_mask"]

CAUSAL_SDPA = "climb_causal_sdpa"
"""Name under which :func:`attention_implementation` registers the causal SDPA attention."""


def causal_sdpa_mask(*args: Any, **kwargs: Any) -> Any:
    """Transformers' ``sdpa_mask``, or ``None`` where the mask is the plain causal one.

    ``None`` makes Transformers' SDPA forward call ``scaled_dot_product_attention`` with
    ``is_causal=True``, the same attention without a materialised ``(B, 1, S, S)`` mask.
    """
    from transformers.masking_utils import sdpa_mask

    if not args and _plain_causal(kwargs):
        return None
    return sdpa_mask(*args, **kwargs)


def _plain_causal(kwargs: dict[str, Any]) -> bool:
    """Whether the mask Transformers asks for is exactly SDPA's ``is_causal`` (module docstring)."""
    import torch

    q_length = kwargs.get("q_length")
    if q_length is None and kwargs.get("cache_position") is not None:
        q_length = int(kwargs["cache_position"].shape[0])  # older Transformers pass this
    offsets = [kwargs.get("q_offset", 0), kwargs.get("kv_offset", 0)]
    skip_allowed = kwargs.get("allow_is_causal_skip", False) is True
    compiling = getattr(torch.compiler, "is_compiling", lambda: False)()  # torch >= 2.3
    return (
        (skip_allowed or compiling)
        and kwargs.get("attention_mask") is None
        and kwargs.get("local_size") is None
        and isinstance(q_length, int)
        and q_length == kwargs.get("kv_length")
        and all(isinstance(o, int) and o == 0 for o in offsets)
    )


def attention_implementation() -> str:
    """Register :data:`CAUSAL_SDPA` with Transformers and return its name (idempotent).

    Falls back to ``"sdpa"`` on a Transformers without the mask interface (< 4.53).
    """
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        return "sdpa"
    AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(CAUSAL_SDPA, causal_sdpa_mask)
    return CAUSAL_SDPA

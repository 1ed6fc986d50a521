"""Next-token loss, optionally without materialising the full fp32 logits.

The plain loss computes ``logits = lm_head(h)`` for every position, upcasts them to fp32 and
takes the cross-entropy: at ``paper-1.2b`` (vocabulary 250k, micro-batch 4 x 4096 tokens) the
fp32 logits alone are 16.4 GB, and autograd keeps them (and their bf16 copy) for the backward.
:class:`CausalLMLoss` with ``chunk_tokens > 0`` computes the projection and the cross-entropy
for ``chunk_tokens`` positions at a time inside :func:`torch.utils.checkpoint.checkpoint`, so at
most one chunk's logits exist at once and they are recomputed in the backward (one extra
``lm_head`` forward: ``2 H V`` FLOPs per token, about 14% of a training step's ``6 N`` at
``paper-1.2b``, H 2048 and V 250k). The sum equals the plain loss to float32 round-off
(tested), and so do the gradients.

:class:`CausalLMLoss` is the module that DDP wraps (its ``forward`` is what runs, so DDP's
gradient hooks stay in charge). Not combined with FSDP here: FSDP2's root hooks belong to the
Hugging Face model, which the chunked path calls below its root.

References
----------
.. [1] Chen et al. (2016), "Training Deep Nets with Sublinear Memory Cost" (recomputation).
.. [2] Wijmans et al. (2025), "Cut Your Losses in Large-Vocabulary Language Models"
   (the logits dominate memory at large vocabularies; chunked/fused cross-entropy).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

__all__ = ["loss_sum", "chunked_nll", "CausalLMLoss"]


def loss_sum(model: Any, ids: Any, labels: Any) -> tuple[Any, Any]:
    """Summed next-token NLL (float32) over positions with a label, and their number (a tensor).

    ``model`` is a Hugging Face causal LM (full logits), or a :class:`CausalLMLoss` (possibly
    wrapped by DDP and/or ``torch.compile``), which computes the same sum its own way.
    """
    if isinstance(_unwrapped(model), CausalLMLoss):
        return model(ids, labels)
    logits = model(input_ids=ids).logits
    target = labels[:, 1:]
    nll = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        target.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    return nll, (target != -100).sum()


def _unwrapped(model: Any) -> Any:
    """The module under ``torch.compile``'s (``_orig_mod``) and DDP's (``module``) wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if inner is None:
            inner = getattr(model, "module", None)  # not `or`: a module may define __len__
        if inner is None:
            return model
        model = inner


def _chunk_nll(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logits = (h @ weight.t()).float()
    return F.cross_entropy(logits, target, ignore_index=-100, reduction="sum")


def chunked_nll(
    hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """``sum CE(hidden @ weight.T, target)`` over rows, ``chunk_tokens`` rows at a time.

    Parameters
    ----------
    hidden : Tensor (N, H)
        Final hidden states (after the last norm).
    weight : Tensor (V, H)
        Output projection (``lm_head.weight``; tied or not).
    target : Tensor (N,)
        Next-token ids, ``-100`` where there is no label.
    chunk_tokens : int
        Rows per chunk (>= 1).

    Returns
    -------
    Tensor
        The summed NLL in float32 (nats).
    """
    total = hidden.new_zeros((), dtype=torch.float32)
    for s in range(0, hidden.shape[0], chunk_tokens):
        total = total + checkpoint(
            _chunk_nll,
            hidden[s : s + chunk_tokens],
            weight,
            target[s : s + chunk_tokens],
            use_reentrant=False,
        )
    return total


class CausalLMLoss(torch.nn.Module):
    """``forward(ids, labels) -> (summed NLL, label count)`` of a Hugging Face causal LM.

    Parameters
    ----------
    lm : transformers.PreTrainedModel
        A causal LM with ``.model`` (the decoder) and ``.lm_head`` without bias (LLaMA).
    chunk_tokens : int
        Positions per chunk of the loss; 0 computes the plain full-logits loss.
    """

    def __init__(self, lm: Any, chunk_tokens: int = 0) -> None:
        super().__init__()
        if chunk_tokens < 0:
            raise ValueError(f"chunk_tokens must be >= 0, got {chunk_tokens}")
        if chunk_tokens and getattr(lm.lm_head, "bias", None) is not None:
            raise ValueError("the chunked loss assumes an output projection without bias")
        self.lm = lm
        self.chunk_tokens = int(chunk_tokens)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[Any, Any]:
        if not self.chunk_tokens:
            return loss_sum(self.lm, ids, labels)
        hidden = self.lm.model(input_ids=ids).last_hidden_state[:, :-1]
        target = labels[:, 1:].reshape(-1)
        h = hidden.reshape(-1, hidden.shape[-1])
        nll = chunked_nll(h, self.lm.lm_head.weight, target, self.chunk_tokens)
        return nll, (target != -100).sum()

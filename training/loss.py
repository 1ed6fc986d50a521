"""Next-token loss, optionally without materialising the full fp32 logits.

The plain loss computes ``logits = lm_head(h)`` for every position, upcasts them to fp32 and
takes the cross-entropy: at ``paper-1.2b`` (vocabulary 250k, micro-batch 4 x 4096 tokens) the
fp32 logits alone are 16.4 GB, and autograd keeps them (and their bf16 copy) for the backward.
:class:`CausalLMLoss` with ``chunk_tokens > 0`` computes the projection and the cross-entropy
for ``chunk_tokens`` positions at a time, and computes each chunk's gradients (with respect to
the hidden states and ``lm_head.weight``) in the forward, while its logits exist: a fused linear
cross-entropy [1]_, [2]_. At most one chunk's logits exist at once, the matmul FLOPs are those
of the plain loss (no recomputed ``lm_head`` forward), and the backward only scales the stored
gradients. The stored gradients cost ``N H`` (hidden) plus ``V H`` fp32 (``lm_head``; 2.0 GB at
``paper-1.2b``) of memory. The sum equals the plain loss to float32 round-off (tested), and so
do the gradients. The previous version recomputed each chunk's logits in the backward under
:func:`torch.utils.checkpoint.checkpoint` (one extra ``lm_head`` forward, ``2 H V`` FLOPs per
token, about 8% of a ``paper-1.2b`` step); docs/performance.md has both measured.

:class:`CausalLMLoss` is the module that DDP wraps (its ``forward`` is what runs, so DDP's
gradient hooks stay in charge). Not combined with FSDP here: FSDP2's root hooks belong to the
Hugging Face model, which the chunked path calls below its root.

References
----------
.. [1] Wijmans et al. (2025), "Cut Your Losses in Large-Vocabulary Language Models"
   (the logits dominate memory at large vocabularies; chunked/fused cross-entropy).
.. [2] Hsu et al. (2024), "Liger Kernel: Efficient Triton Kernels for LLM Training"
   (FusedLinearCrossEntropy: gradients in the forward, chunk by chunk).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

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


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autocast would give a matmul of ``x`` here (``x``'s own without autocast)."""
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    """``sum CE(h @ w.T, target)``, chunk by chunk, gradients computed in the forward.

    Per chunk of rows: the logits (upcast to fp32), the summed NLL, and the gradient of that sum
    with respect to the logits, ``softmax - onehot``; from it ``dh = dlogits @ w`` and
    ``dw += dlogits.T @ h``. The backward only scales the stored gradients by the incoming
    scalar. The three matmuls are those of a plain forward and backward (``6 H V`` FLOPs per
    row): no ``lm_head`` recomputation, and one chunk's logits at a time.
    """

    @staticmethod
    def forward(ctx, h, w, target, chunk_tokens, dtype, need_grad):  # noqa: D102
        with torch.autocast(h.device.type, enabled=False):
            hc, wc = h.to(dtype), w.to(dtype)
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            dh = torch.empty_like(h) if need_grad else None
            dw = torch.zeros_like(w, dtype=torch.float32) if need_grad else None
            for s in range(0, h.shape[0], chunk_tokens):
                hs, t = hc[s : s + chunk_tokens], target[s : s + chunk_tokens]
                logits = (hs @ wc.t()).float()
                valid = t != -100
                safe = torch.where(valid, t, 0).unsqueeze(1)
                lse = torch.logsumexp(logits, dim=1)
                picked = logits.gather(1, safe).squeeze(1)
                total = total + torch.where(valid, lse - picked, 0.0).sum()
                if not need_grad:
                    continue
                g = logits.sub_(lse.unsqueeze(1)).exp_()  # softmax, in place of the logits
                g.scatter_add_(1, safe, torch.full_like(picked, -1.0).unsqueeze(1))
                g = (g * valid.unsqueeze(1)).to(dtype)
                dh[s : s + chunk_tokens] = (g @ wc).to(h.dtype)
                dw += (g.t() @ hs).float()
        if need_grad:
            ctx.save_for_backward(dh, dw.to(w.dtype))
        return total

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        dh, dw = ctx.saved_tensors
        return dh * grad_out, dw * grad_out, None, None, None, None


def chunked_nll(
    hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """``sum CE(hidden @ weight.T, target)`` over rows, ``chunk_tokens`` rows at a time.

    With gradients enabled, each chunk's gradients are computed as soon as its logits exist
    (a fused linear cross-entropy), so neither the full logits nor a recomputation is needed.
    Under autocast the matmuls run in autocast's dtype, as ``lm_head`` would.

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
    need_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(
        hidden, weight, target, int(chunk_tokens), _compute_dtype(hidden), need_grad
    )


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

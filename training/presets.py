"""Model presets: LLaMA-2-style decoder configurations, built from scratch.

``paper-1.2b`` is the CLIMB paper's model (Appendix "Training Details": hidden 2048, intermediate
5504, 16 heads, 24 layers, 4096 positions, RMSNorm eps 1e-5; ~1.2B non-embedding parameters;
250k BBPE vocabulary; sequence length 4096; batch 3072 sequences). ``7b`` is LLaMA-2-7B's shape.
Their learning rates are the paper's for its 1T-token validation runs (Section "Experiments":
peak 4.3e-5 at 1.2B, 3.6e-5 at 7B, cosine decay to 10%); the paper gives none for the shorter
scaling-law runs, so the same peak is the default there too (``--lr`` overrides it).
``tiny`` (~1.9M parameters with a 4096 vocabulary) and ``micro`` train on a CPU in seconds to
minutes; ``small`` is for a quick single-GPU check.

Memory of ``paper-1.2b`` (250k vocabulary, sequence 4096, bf16 autocast over fp32 weights, fused
AdamW, ``torch.compile``; peak allocated, docs/performance.md): micro-batch 1 with the plain
loss 50 GB; micro-batch 2 / 4 / 8 with ``--loss-chunk-tokens 4096`` 61 / 78 / 112 GB; micro-batch
4 with the plain loss 85 GB with gradient accumulation (76 GB without; out of memory on an
80 GB H100). An 80 GB H100 takes micro-batch 2 with the chunked loss, a 141 GB H200 micro-batch 8.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from training.errors import TrainingError

__all__ = [
    "CUDA_ALLOC_CONF",
    "Preset",
    "PRESETS",
    "get_preset",
    "build_model",
    "count_parameters",
    "enable_activation_checkpointing",
    "COMPILE_SCOPES",
    "check_compile_scope",
    "compile_blocks",
    "compile_model",
]


@dataclass(frozen=True)
class Preset:
    """Shape and default hyperparameters of a model.

    ``seq_len``, ``batch_size`` (global, in sequences), ``micro_batch_size`` (per device and
    forward pass), ``lr``, ``vocab_size`` (for a newly trained tokenizer) and ``val_tokens`` (per
    language) are defaults the ``train`` command can override.
    """

    name: str
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_layers: int
    max_positions: int
    seq_len: int
    batch_size: int
    micro_batch_size: int
    lr: float
    vocab_size: int
    val_tokens: int
    num_kv_heads: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("micro", 32, 88, 2, 2, 256, seq_len=32, batch_size=8, micro_batch_size=8,
               lr=3e-3, vocab_size=512, val_tokens=512),
        Preset("mini", 64, 176, 4, 2, 256, seq_len=64, batch_size=4, micro_batch_size=4,
               lr=3e-3, vocab_size=1024, val_tokens=6144),
        Preset("tiny", 128, 352, 4, 4, 512, seq_len=128, batch_size=16, micro_batch_size=16,
               lr=2e-3, vocab_size=4096, val_tokens=16384),
        Preset("small", 512, 1376, 8, 8, 1024, seq_len=1024, batch_size=64, micro_batch_size=16,
               lr=1e-3, vocab_size=32000, val_tokens=262144),
        Preset("paper-1.2b", 2048, 5504, 16, 24, 4096, seq_len=4096, batch_size=3072,
               micro_batch_size=4, lr=4.3e-5, vocab_size=250000, val_tokens=2097152),
        Preset("7b", 4096, 11008, 32, 32, 4096, seq_len=4096, batch_size=1024,
               micro_batch_size=1, lr=3.6e-5, vocab_size=250000, val_tokens=2097152),
    ]
}  # fmt: skip


def get_preset(name: str) -> Preset:
    """Look up a preset by name (raises :class:`TrainingError` listing the valid names)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise TrainingError(
            f"unknown preset {name!r}. Fix: use one of {', '.join(PRESETS)}."
        ) from None


def build_model(preset: Preset, vocab_size: int, eos_id: int, pad_id: int) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` of the preset's shape (causal SDPA attention,
    :mod:`training.attention`: no materialised mask under ``torch.compile``).

    Call ``torch.manual_seed`` first for a reproducible initialisation.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.attention import attention_implementation

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_kv_heads or preset.num_heads,
        num_hidden_layers=preset.num_layers,
        max_position_embeddings=preset.max_positions,
        rms_norm_eps=preset.rms_norm_eps,
        rope_theta=preset.rope_theta,
        tie_word_embeddings=preset.tie_embeddings,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        hidden_act="silu",
        attention_dropout=0.0,
        use_cache=False,
        attn_implementation=attention_implementation(),
    )
    return LlamaForCausalLM(config)


def enable_activation_checkpointing(model: Any, every_n_layers: int = 1) -> None:
    """Recompute every ``every_n_layers``-th decoder block in the backward (non-reentrant).

    Blocks ``0, n, 2n, ...`` are checkpointed, the others keep their activations. Turns
    Transformers' checkpointing on for every block (``activation_checkpointing_enable`` where the
    version has it, else ``gradient_checkpointing_enable``), then off again on the blocks in
    between through each block's ``gradient_checkpointing`` flag, so the choice of blocks is the
    same on every Transformers version (5.17 has no ``every_n_layers``; measured on the H100
    machine, 2026-11-25).
    """
    if every_n_layers < 1:
        raise TrainingError(f"activation checkpointing every {every_n_layers} layers: use >= 1.")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    layers = list(model.model.layers)
    if not all(hasattr(block, "gradient_checkpointing") for block in layers):
        raise TrainingError(
            "this Transformers version does not checkpoint decoder blocks one by one. Fix: "
            "upgrade transformers (>= 4.53), or use --activation-checkpointing 0."
        )
    for k, block in enumerate(layers):
        block.gradient_checkpointing = k % every_n_layers == 0


CUDA_ALLOC_CONF = "expandable_segments:True"
"""``PYTORCH_CUDA_ALLOC_CONF`` that ``train`` and the throughput benchmark set unless the user
set one: the caching allocator maps memory in growable segments instead of fixed blocks, so
fragmentation no longer fails a step that fits. Measured on an H100 80GB (2026-11-26,
docs/performance.md): ``paper-1.2b`` at micro-batch 4 ran out of memory at 76.3 GB allocated
with the default allocator and ran at 42.7% MFU (peak 76.2 GB) with this one; with the fused
loss, micro-batch 4 (78.0 GB) gave 44.1% against 42.3% at micro-batch 2."""

COMPILE_SCOPES = ("model", "blocks")
"""What ``--compile`` compiles: the whole model (with the loss), or each decoder block
(:func:`compile_blocks`)."""


def check_compile_scope(scope: str) -> None:
    """Refuse a compile scope that is not one of :data:`COMPILE_SCOPES`."""
    if scope not in COMPILE_SCOPES:
        raise TrainingError(f"compile scope {scope!r}: use one of {', '.join(COMPILE_SCOPES)}.")


def compile_model(runner: Any, model: Any, scope: str = "model") -> Any:
    """What a compiled training step calls: ``torch.compile(runner)`` for ``scope="model"``
    (``runner`` is the model, its loss module or a DDP wrapper of them); for ``"blocks"``
    ``model``'s decoder blocks are compiled in place (:func:`compile_blocks`) and ``runner`` is
    returned as it is (every wrapper sees the compiled blocks)."""
    check_compile_scope(scope)
    if scope == "blocks":
        compile_blocks(model)
        return runner
    import torch

    return torch.compile(runner)


def compile_blocks(model: Any, **compile_kwargs: Any) -> int:
    """``torch.compile`` each decoder block in place (``nn.Module.compile``); returns how many.

    The blocks share one forward, so Dynamo traces it once and reuses the code for every block
    (parameters are graph inputs), where compiling the whole model traces all ``L`` blocks: the
    compile time of a deep model stops growing with its depth. Module identity is kept, so
    FSDP2's per-block sharding, activation checkpointing and DDP's hooks see the same modules.
    Embedding, final norm, ``lm_head`` and the loss stay eager. Under ``no_grad`` (evaluation)
    each block compiles once more.
    """
    layers = list(model.model.layers)
    for block in layers:
        block.compile(**compile_kwargs)
    return len(layers)


def count_parameters(model: Any) -> dict[str, int]:
    """``total`` parameters and ``non_embedding`` ones (all but the input embedding table).

    The output projection (``lm_head``) is counted in ``non_embedding``: it is a matmul per token.
    With tied embeddings the shared table is counted once, as compute.
    """
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is emb
    non_emb = total if tied else total - emb.numel()
    return {"total": int(total), "non_embedding": int(non_emb)}

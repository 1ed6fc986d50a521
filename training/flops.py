"""Training FLOPs per token, peak FLOP/s of known accelerators, and MFU.

FLOPs per token follow PaLM (Chowdhery et al. 2022, App. B), as llm-foundry does:
``6 * N + 12 * n_layers * hidden * seq_len`` where ``N`` counts every parameter used in a matmul
(all but the input embedding table, ``lm_head`` included) and the second term is attention
(scores and weighted sum, forward + backward, without causal-mask savings). MFU is achieved model
FLOP/s over the device's dense bf16 peak.
"""

from __future__ import annotations

__all__ = ["PEAK_BF16_FLOPS", "flops_per_token", "device_peak", "mfu"]

# Dense (no sparsity) bf16 tensor-core peaks from vendor data sheets, FLOP/s per device.
# Matched in order against torch.cuda.get_device_name(): more specific names first.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("GH200", 989.4e12),
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H800", 989.4e12),
    ("B200", 2250.0e12),
    ("B100", 1750.0e12),
    ("A100", 312.0e12),
    ("A800", 312.0e12),
    ("L40S", 362.1e12),
    ("L40", 181.0e12),
    ("L4", 121.0e12),
    ("A10G", 70.0e12),
    ("A10", 125.0e12),
    ("RTX 6000 Ada", 364.2e12),
    ("RTX A6000", 154.8e12),
    ("RTX 4090", 165.2e12),
    ("RTX 3090", 71.0e12),
    ("MI300X", 1307.4e12),
    ("MI250X", 383.0e12),
]


def flops_per_token(non_embedding_params: int, n_layers: int, hidden: int, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward), PaLM convention."""
    return 6.0 * non_embedding_params + 12.0 * n_layers * hidden * seq_len


def device_peak(device: str) -> tuple[str, float | None]:
    """``(device name, dense bf16 peak FLOP/s or None)`` for a torch device string."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(torch.device(device))
        for key, peak in PEAK_BF16_FLOPS:
            if key in name:
                return name, peak
        return name, None
    if device.startswith("mps"):
        return "Apple MPS", None
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU {cpu} ({torch.get_num_threads()} threads)", None


def mfu(
    tokens_per_s: float, flops_token: float, peak: float | None, n_devices: int = 1
) -> float | None:
    """Model FLOPs utilisation in [0, 1], or ``None`` when the peak is unknown (e.g. CPU)."""
    if not peak:
        return None
    return tokens_per_s * flops_token / (peak * n_devices)

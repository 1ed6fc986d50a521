"""Training throughput (tokens/s) and MFU of a model preset on the current device.

Times full training steps (forward, loss, backward, gradient clip, AdamW) of the same code the
runs use (:class:`training.loss.CausalLMLoss`, :func:`training.presets.build_model`), on random
token ids, after some warm-up steps, and prints one table row per preset::

    python benchmarks/train_throughput.py --preset tiny --preset micro          # CPU
    python benchmarks/train_throughput.py --preset paper-1.2b --micro-batch 4 --compile \
        --grad-accum 8 --loss-chunk-tokens 4096 --activation-checkpointing 1       # H100

A step is ``--grad-accum`` micro-batches (forward and backward each) and one optimizer step, as
in a run; the step loss reaches the host once per step. Peak memory (CUDA allocator peak, or
the process's peak RSS on CPU) is printed with each row.

MFU = (6 N + 12 L H S) * tokens/s / peak dense bf16 FLOP/s of the device (N: parameters in
matmuls, lm_head included; see :mod:`training.flops`). On a CPU the peak is unknown and MFU is
"n/a"; achieved model TFLOP/s is printed instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def bench(preset_name: str, args: argparse.Namespace) -> dict:
    import contextlib

    import torch

    from training.flops import device_peak, flops_per_token, mfu
    from training.loss import CausalLMLoss, loss_sum
    from training.metrics import peak_memory_gb
    from training.presets import (
        build_model,
        count_parameters,
        enable_activation_checkpointing,
        get_preset,
    )

    preset = get_preset(preset_name)
    dev = args.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    seq = args.seq_len or preset.seq_len
    mb = args.micro_batch or preset.micro_batch_size
    vocab = args.vocab_size or preset.vocab_size
    bf16 = args.dtype == "bf16" or (args.dtype == "auto" and device.type == "cuda")
    torch.manual_seed(0)
    model = build_model(preset, vocab, eos_id=0, pad_id=1).to(device)
    if args.activation_checkpointing:
        enable_activation_checkpointing(model, args.activation_checkpointing)
    n = count_parameters(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    fwd = CausalLMLoss(model, args.loss_chunk_tokens)
    fwd = torch.compile(fwd) if args.compile else fwd
    amp = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16))
        if bf16
        else contextlib.nullcontext
    )
    ids = torch.randint(0, vocab, (mb, seq), device=device)

    def step() -> None:
        total = torch.zeros((), device=device)
        for _ in range(args.grad_accum):
            with amp():
                nll, count = loss_sum(fwd, ids, ids)
            (nll / (count * args.grad_accum)).backward()
            total += nll.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(total)  # one host sync per optimizer step, as in a run

    for _ in range(args.warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = args.steps * args.grad_accum * mb * seq / dt
    fpt = flops_per_token(n["non_embedding"], preset.num_layers, preset.hidden_size, seq)
    name, peak = device_peak(str(device))
    util = mfu(tps, fpt, peak)
    return {
        "preset": preset_name,
        "params_M": n["total"] / 1e6,
        "matmul_params_M": n["non_embedding"] / 1e6,
        "vocab": vocab,
        "device": name,
        "precision": "bf16" if bf16 else "fp32",
        "compile": args.compile,
        "seq_len": seq,
        "micro_batch": mb,
        "grad_accum": args.grad_accum,
        "loss_chunk_tokens": args.loss_chunk_tokens,
        "activation_checkpointing": args.activation_checkpointing,
        "peak_memory_gb": peak_memory_gb(device),
        "tokens_per_s": tps,
        "model_tflops": tps * fpt / 1e12,
        "mfu": util,
        "peak_tflops": peak / 1e12 if peak else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="Training tokens/s and MFU of model presets.")
    ap.add_argument("--preset", action="append", help="preset (repeatable); default: tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--micro-batch", type=int, default=None, help="sequences per step")
    ap.add_argument("--vocab-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument(
        "--loss-chunk-tokens", type=int, default=0, help="chunked loss (0: full logits)"
    )
    ap.add_argument(
        "--activation-checkpointing", type=int, default=0, metavar="N", help="every N-th block"
    )
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [bench(p, args) for p in (args.preset or ["tiny"])]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    head = ("preset", "params", "device", "prec", "seq", "batch", "tokens/s", "TFLOP/s", "MFU",
            "peak mem")  # fmt: skip
    table = [head]
    for r in rows:
        table.append(
            (
                r["preset"],
                f"{r['params_M']:.2f}M",
                f"{r['device']}" + (" +compile" if r["compile"] else ""),
                r["precision"],
                str(r["seq_len"]),
                f"{r['micro_batch']}x{r['grad_accum']}"
                + (f" chunk {r['loss_chunk_tokens']}" if r["loss_chunk_tokens"] else "")
                + (" ckpt" if r["activation_checkpointing"] else ""),
                f"{r['tokens_per_s']:,.0f}",
                f"{r['model_tflops']:.4f}",
                "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%",
                f"{r['peak_memory_gb']:.2f} GB",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for k, row in enumerate(table):
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if k == 0:
            print("-+-".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput (tokens/s) and MFU of a model preset on the current device.

Times full training steps (forward, loss, backward, gradient clip, AdamW) of the same code the
runs use (:class:`training.loss.CausalLMLoss`, :func:`training.presets.build_model`), on random
token ids, after some warm-up steps, and prints one table row per preset::

    python benchmarks/train_throughput.py --preset tiny --preset micro          # CPU
    python benchmarks/train_throughput.py --preset paper-1.2b --micro-batch 4 --compile \
        --grad-accum 8 --loss-chunk-tokens 4096                                    # H100

A step is ``--grad-accum`` micro-batches (forward and backward each) and one optimizer step, as
in a run; the step loss reaches the host once per step. Peak memory (CUDA allocator peak, or
the process's peak RSS on CPU) is printed with each row, and so is the time of the warm-up
steps (``torch.compile``'s compilation happens in the first). Unless ``PYTORCH_CUDA_ALLOC_CONF``
is set, the CUDA allocator uses expandable segments, as ``train`` does
(:data:`training.presets.CUDA_ALLOC_CONF`); each row records the setting.

A configuration that runs out of GPU memory gives a row marked ``OOM`` instead of a traceback.
``--micro-batch auto`` starts at the preset's micro-batch and halves it until a step fits, with
``--grad-accum`` scaled up to keep the optimizer batch (sequences per optimizer step) the same.
``--markdown`` prints the table as Markdown (docs/performance.md takes its GPU table from it);
``--json`` prints one JSON object per row; ``--render FILE`` prints the table of such JSON
lines, so configurations run in separate processes end in one table.

MFU = (6 N + 12 L H S) * tokens/s / peak dense bf16 FLOP/s of the device (N: parameters in
matmuls, lm_head included; see :mod:`training.flops`). On a CPU the peak is unknown and MFU is
"n/a"; achieved model TFLOP/s is printed instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training.presets import COMPILE_SCOPES, CUDA_ALLOC_CONF  # noqa: E402  (no torch at import)


def bench(preset_name: str, args: argparse.Namespace) -> dict:
    """One table row; with ``--micro-batch auto``, the largest halving of the preset's that fits."""
    import torch

    from training.presets import get_preset

    preset = get_preset(preset_name)
    if args.micro_batch != "auto":
        mb = int(args.micro_batch) if args.micro_batch else preset.micro_batch_size
        return _bench_one(preset_name, args, mb, args.grad_accum)
    mb, accum = preset.micro_batch_size, args.grad_accum
    while True:
        row = _bench_one(preset_name, args, mb, accum)
        if row["status"] != "OOM" or mb == 1:
            return row
        mb, accum = mb // 2, accum * 2
        _free_cuda(torch)


def _free_cuda(torch) -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _bench_one(preset_name: str, args: argparse.Namespace, mb: int, grad_accum: int) -> dict:
    import contextlib

    import torch

    from training.flops import device_peak, flops_per_token, mfu
    from training.loss import CausalLMLoss, loss_sum
    from training.metrics import peak_memory_gb
    from training.presets import (
        build_model,
        compile_model,
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
    vocab = args.vocab_size or preset.vocab_size
    bf16 = args.dtype == "bf16" or (args.dtype == "auto" and device.type == "cuda")
    torch.manual_seed(0)
    model = build_model(preset, vocab, eos_id=0, pad_id=1).to(device)
    if args.activation_checkpointing:
        enable_activation_checkpointing(model, args.activation_checkpointing)
    n = count_parameters(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    fwd = CausalLMLoss(model, args.loss_chunk_tokens)
    if args.compile:
        if args.coordinate_descent_tuning:
            import torch._inductor.config as inductor_config

            inductor_config.coordinate_descent_tuning = True
        fwd = compile_model(fwd, model, args.compile_scope)
    amp = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16))
        if bf16
        else contextlib.nullcontext
    )
    ids = torch.randint(0, vocab, (mb, seq), device=device)

    def step() -> None:
        total = torch.zeros((), device=device)
        for _ in range(grad_accum):
            with amp():
                nll, count = loss_sum(fwd, ids, ids)
            (nll / (count * grad_accum)).backward()
            total += nll.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(total)  # one host sync per optimizer step, as in a run

    def timed(steps: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    fpt = flops_per_token(n["non_embedding"], preset.num_layers, preset.hidden_size, seq)
    name, peak = device_peak(str(device))
    row = {
        "preset": preset_name,
        "params_M": n["total"] / 1e6,
        "matmul_params_M": n["non_embedding"] / 1e6,
        "vocab": vocab,
        "device": name,
        "precision": "bf16" if bf16 else "fp32",
        "compile": args.compile,
        "compile_scope": args.compile_scope if args.compile else None,
        "coordinate_descent_tuning": bool(args.compile and args.coordinate_descent_tuning),
        "seq_len": seq,
        "micro_batch": mb,
        "grad_accum": grad_accum,
        "loss_chunk_tokens": args.loss_chunk_tokens,
        "activation_checkpointing": args.activation_checkpointing,
        "peak_tflops": peak / 1e12 if peak else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    try:
        warm = timed(args.warmup_steps)
        dt = timed(args.steps)
    except torch.OutOfMemoryError:
        row.update(status="OOM", peak_memory_gb=peak_memory_gb(device), tokens_per_s=None,
                   model_tflops=None, mfu=None, warmup_s=None)  # fmt: skip
        del model, opt, fwd, ids
        return row
    if args.profile:
        _print_profile(torch, step, device)
    tps = args.steps * grad_accum * mb * seq / dt
    row.update(
        status="ok",
        peak_memory_gb=peak_memory_gb(device),
        tokens_per_s=tps,
        model_tflops=tps * fpt / 1e12,
        mfu=mfu(tps, fpt, peak),
        warmup_s=warm,
    )
    return row


KERNEL_KINDS = (
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "aten::mm", "aten::addmm")),
    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("copy/cast", ("copy", "memcpy", "memset", "cast", "fill")),
    ("inductor (fused elementwise, norms, loss)", ("triton",)),
)
"""Kernel-name substrings (lower case) that sort a step's GPU time into kinds; first match wins."""


def _print_profile(torch, step, device) -> None:
    """One more optimizer step under ``torch.profiler``; GPU time by kernel kind to stderr."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    if cuda:  # kernels; else (CPU) operators' self time
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        rows = [(e.key, e.self_device_time_total) for e in kernels or events]
    else:
        rows = [(e.key, e.self_cpu_time_total) for e in events]
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for name, us in rows:
        kind = next(
            (k for k, keys in KERNEL_KINDS if any(x in name.lower() for x in keys)), "other"
        )
        by_kind[kind] = by_kind.get(kind, 0.0) + us
        by_name[name[:90]] = by_name.get(name[:90], 0.0) + us
    total = sum(by_kind.values()) or 1.0
    print(
        f"profile: {total / 1e3:,.1f} ms of {'GPU kernel' if cuda else 'CPU operator'} time"
        " in one optimizer step",
        file=sys.stderr,
    )
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<45} {us / 1e3:10,.1f} ms {100 * us / total:5.1f}%", file=sys.stderr)
    print("  largest kernels:", file=sys.stderr)
    for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:15]:
        print(f"    {100 * us / total:5.1f}%  {name}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description="Training tokens/s and MFU of model presets.")
    ap.add_argument("--preset", action="append", help="preset (repeatable); default: tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument(
        "--micro-batch",
        default=None,
        help="sequences per forward pass; 'auto': halve the preset's until it fits",
    )
    ap.add_argument("--vocab-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument(
        "--compile-scope",
        choices=COMPILE_SCOPES,
        default="model",
        help="with --compile: the whole model and loss, or each decoder block",
    )
    ap.add_argument(
        "--coordinate-descent-tuning",
        action="store_true",
        help="with --compile: Inductor's coordinate-descent tuning of its generated kernels",
    )
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument(
        "--loss-chunk-tokens", type=int, default=0, help="chunked loss (0: full logits)"
    )
    ap.add_argument(
        "--activation-checkpointing", type=int, default=0, metavar="N", help="every N-th block"
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile one more step: GPU time by kernel kind, to stderr",
    )
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--render", metavar="FILE", help="print the table of --json lines in FILE")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        print_table(rows, args.markdown)
        return 0
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", CUDA_ALLOC_CONF)  # as `train` does
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [bench(p, args) for p in (args.preset or ["tiny"])]
    if args.json:
        for r in rows:
            print(json.dumps(r), flush=True)
        return 0
    print_table(rows, args.markdown)
    return 0


def _cells(r: dict) -> tuple[str, ...]:
    oom = r.get("status") == "OOM"
    tflops = r["model_tflops"]
    return (
        r["preset"],
        f"{r['params_M']:.2f}M",
        f"{r['device']}"
        + (" +compile" if r["compile"] else "")
        + (" (blocks)" if r.get("compile_scope") == "blocks" else "")
        + (" +cd-tuning" if r.get("coordinate_descent_tuning") else ""),
        r["precision"],
        str(r["seq_len"]),
        f"{r['micro_batch']}x{r['grad_accum']}"
        + (f" chunk {r['loss_chunk_tokens']}" if r["loss_chunk_tokens"] else "")
        + (f" ckpt/{r['activation_checkpointing']}" if r["activation_checkpointing"] else ""),
        "OOM" if oom else f"{r['tokens_per_s']:,.0f}",
        "-" if oom else (f"{tflops:.1f}" if tflops >= 1 else f"{tflops:.4f}"),
        "-" if oom else ("n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"),
        f"{r['peak_memory_gb']:.2f} GB" + (" (at OOM)" if oom else ""),
        "-" if r.get("warmup_s") is None else f"{r['warmup_s']:.0f} s",
    )


def print_table(rows: list[dict], markdown: bool = False) -> None:
    """Print one line per row: a padded text table, or Markdown."""
    head = ("preset", "params", "device", "prec", "seq", "batch", "tokens/s", "TFLOP/s", "MFU",
            "peak mem", "warm-up")  # fmt: skip
    table = [head] + [_cells(r) for r in rows]
    if markdown:
        for k, row in enumerate(table):
            print("| " + " | ".join(row) + " |")
            if k == 0:
                print("|" + "---|" * len(head))
        return
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for k, row in enumerate(table):
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if k == 0:
            print("-+-".join("-" * w for w in widths))


if __name__ == "__main__":
    sys.exit(main())

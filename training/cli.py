"""The ``train`` command (``climb-bayes train`` / ``python -m training``).

Heavy imports (torch, transformers) happen only when the command runs, so importing this module
is cheap. A :class:`~training.errors.TrainingError` becomes ``Error: <message>`` on stderr and
exit code 2, without a traceback. A run stopped by SIGTERM (or a scheduler's preemption) writes
its checkpoint and the command exits with 143 (128 + SIGTERM) and a one-line "interrupted"
message saying that the same command resumes it.
"""

from __future__ import annotations

import os
from typing import Any

import click

from training.presets import COMPILE_SCOPES, PRESETS

__all__ = ["train", "TrainingClickError", "TrainingInterruptedExit"]


class TrainingClickError(click.ClickException):
    """A :class:`~training.errors.TrainingError` shown to the user (exit code 2)."""

    exit_code = 2


class TrainingInterruptedExit(click.ClickException):
    """A run stopped on SIGTERM after its checkpoint: one line, exit code 143, no traceback."""

    exit_code = 143

    def show(self, file: Any = None) -> None:
        click.echo(f"interrupted: {self.message}", err=True)


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v:
            raise click.BadParameter(f"expected KEY=VALUE, got {v!r}", param_hint=option)
        k, val = v.split("=", 1)
        out[k.strip()] = val.strip()
    return out


def _fractions(ctx: Any, param: Any, value: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated fractions, got {value!r}") from None


def _slurm_value(v: str) -> Any:
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


@click.command(
    "train",
    context_settings={
        "show_default": True,
        "max_content_width": 100,
        "help_option_names": ["-h", "--help"],
    },
)
@click.option(
    "--plan",
    "plan",
    required=True,
    type=click.Path(dir_okay=False),
    help="Plan CSV: run_id, tokens, r_<lang>... (from `climb-bayes plan`).",
)
@click.option(
    "--corpus",
    required=True,
    type=click.Path(),
    help="Corpus folder: <lang>.jsonl[.xz|.gz]/.parquet/.txt or <lang>/ per language.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Output folder: runs/, runs.csv (runs table), records.json, tokenizer/.",
)
@click.option(
    "--preset",
    default="tiny",
    type=click.Choice(list(PRESETS)),
    help="Model preset (sets defaults for the options below).",
)
@click.option(
    "--tokenizer",
    type=click.Path(),
    default=None,
    help="Tokenizer folder; default: train a byte-level BPE into OUT/tokenizer once.",
)
@click.option(
    "--vocab-size",
    type=int,
    default=None,
    help="Vocabulary of a newly trained tokenizer [default: preset's].",
)
@click.option(
    "--tokenizer-sample-chars",
    type=int,
    default=2_000_000,
    help="Characters per language sampled to train the tokenizer.",
)
@click.option(
    "--val-tokens",
    type=int,
    default=None,
    help="Held-out validation tokens per language [default: preset's].",
)
@click.option("--seq-len", type=int, default=None, help="Block length [default: preset's].")
@click.option(
    "--batch-size", type=int, default=None, help="Global batch in sequences [default: preset's]."
)
@click.option(
    "--micro-batch-size",
    type=int,
    default=None,
    help="Sequences per device per forward pass (gradient accumulation).",
)
@click.option("--lr", type=float, default=None, help="Peak learning rate [default: preset's].")
@click.option("--min-lr-ratio", type=float, default=0.1, help="Final LR as a fraction of peak.")
@click.option(
    "--warmup",
    type=float,
    default=0.05,
    help="Warmup: fraction of steps (< 1) or number of steps (>= 1).",
)
@click.option("--weight-decay", type=float, default=0.1, help="AdamW weight decay.")
@click.option("--grad-clip", type=float, default=1.0, help="Gradient-norm clip (0: off).")
@click.option("--seed", type=int, default=0, help="Seed (data split, init, block order).")
@click.option(
    "--eval-points",
    default="0.25,0.5,0.75,0.87,0.9,0.93,0.96,1.0",
    callback=_fractions,
    help="Fractions of training after which every language is evaluated.",
)
@click.option(
    "--allow-repeat",
    is_flag=True,
    help="Allow repeating a language's data when its budget exceeds the corpus.",
)
@click.option(
    "--corpus-map",
    multiple=True,
    metavar="LANG=PATH",
    help="Map a language to a file/folder inside --corpus (repeatable).",
)
@click.option("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps.")
@click.option(
    "--dtype",
    default="auto",
    type=click.Choice(["auto", "bf16", "fp32"]),
    help="auto: bf16 autocast on GPUs that support it, fp32 otherwise.",
)
@click.option("--compile/--no-compile", "compile_", default=False, help="torch.compile the model.")
@click.option(
    "--compile-scope",
    type=click.Choice(COMPILE_SCOPES),
    default="model",
    show_default=True,
    help="With --compile: the whole model and loss, or each decoder block on its own (one "
    "trace shared by all blocks: compile time independent of depth).",
)
@click.option("--fsdp", is_flag=True, help="FSDP2 instead of DDP for multi-process runs.")
@click.option("--threads", type=int, default=None, help="CPU threads for torch.")
@click.option(
    "--checkpoint-every",
    type=int,
    default=0,
    help="Also checkpoint every N steps (always at evaluation points).",
)
@click.option("--log-every", type=float, default=30.0, help="Seconds between step lines.")
@click.option(
    "--loss-chunk-tokens",
    type=int,
    default=0,
    show_default=True,
    help="Compute the loss N positions at a time, recomputing their logits in the backward "
    "(no full fp32 logits; for large vocabularies). 0: the plain loss.",
)
@click.option(
    "--activation-checkpointing",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Recompute every N-th decoder block's activations in the backward (1: every block; "
    "less memory for up to one more forward pass of compute). 0: off.",
)
@click.option(
    "--tensorboard",
    "tensorboard",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write the per-step metrics (every run writes RUN/metrics.jsonl) as TensorBoard "
    "scalars under DIR/<run_id>.",
)
@click.option(
    "--save-model/--no-save-model",
    default=True,
    show_default=True,
    help="Save each finished model to RUN/model/ as safetensors (AutoModelForCausalLM loads "
    "it); --no-save-model for large sweeps (a paper-1.2b model is ~9 GB).",
)
@click.option(
    "--launcher",
    default="local",
    type=click.Choice(["local", "torchrun", "accelerate"]),
    help="Run each run in-process, or as a torchrun/accelerate job on this node.",
)
@click.option(
    "--nproc",
    type=int,
    default=None,
    help="Processes (GPUs) per run for torchrun/accelerate/Slurm [default: all GPUs].",
)
@click.option(
    "--nnodes",
    type=int,
    default=1,
    show_default=True,
    help="Nodes per run (--launcher torchrun): run the same command on every node with its "
    "--node-rank and node 0's --master; the output folder must be shared.",
)
@click.option("--node-rank", type=int, default=0, show_default=True, help="This node's rank.")
@click.option("--master", default=None, help="HOST:PORT of node 0's rendezvous (--nnodes > 1).")
@click.option(
    "--slurm",
    is_flag=True,
    help="Submit pending runs as a Slurm job array (submitit); local without Slurm.",
)
@click.option("--slurm-partition", default=None, help="Slurm partition.")
@click.option("--slurm-time", type=int, default=24 * 60, help="Slurm time limit per run (min).")
@click.option("--slurm-parallel", type=int, default=None, help="Max array tasks at once.")
@click.option(
    "--slurm-param",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra submitit parameter, e.g. slurm_account=abc (repeatable).",
)
@click.option(
    "--slurm-wait/--no-slurm-wait",
    default=True,
    help="Wait for the array and write the table (or return after submitting).",
)
@click.option("--max-runs", type=int, default=None, help="Train at most N pending runs now.")
@click.option(
    "--jobs",
    "--runs-per-node",
    "jobs",
    type=int,
    default=1,
    show_default=True,
    help="Local launcher: train up to N runs at once on this node, each in its own process "
    "(one GPU each, round-robin, when there are GPUs; cores // N threads each otherwise), e.g. "
    "--runs-per-node 8 on an 8-GPU node or --jobs 2 --threads 1 on a 2-core machine.",
)
def train(**kw: Any) -> None:
    """Train the runs of a plan and write their runs table (long form, with loss curves).

    Finished runs are skipped and a killed run resumes from its checkpoint, so the same command
    can be repeated until every run is done. Progress goes to stderr.
    """
    from training.errors import RunInterrupted, TrainingError
    from training.presets import CUDA_ALLOC_CONF

    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", CUDA_ALLOC_CONF)  # before CUDA starts
    try:
        _train(**kw)
    except TrainingError as exc:
        raise TrainingClickError(str(exc)) from None
    except RunInterrupted as exc:
        raise TrainingInterruptedExit(
            f"{exc}. Run the same command again to resume from the checkpoint."
        ) from None


def _train(**kw: Any) -> None:
    from training.loop import RunOptions
    from training.sweep import run_sweep

    slurm_params: dict[str, Any] = {"timeout_min": kw["slurm_time"]}
    if kw["slurm_partition"]:
        slurm_params["slurm_partition"] = kw["slurm_partition"]
    if kw["slurm_parallel"]:
        slurm_params["slurm_array_parallelism"] = kw["slurm_parallel"]
    slurm_params.update(
        {k: _slurm_value(v) for k, v in _pairs(kw["slurm_param"], "--slurm-param").items()}
    )
    opts = RunOptions(
        device=kw["device"],
        dtype=kw["dtype"],
        compile=kw["compile_"],
        compile_scope=kw["compile_scope"],
        fsdp=kw["fsdp"],
        threads=kw["threads"],
        checkpoint_every=kw["checkpoint_every"],
        log_every_s=kw["log_every"],
        save_model=kw["save_model"],
        tensorboard_dir=kw["tensorboard"],
        loss_chunk_tokens=kw["loss_chunk_tokens"],
        activation_checkpointing=kw["activation_checkpointing"],
    )
    res = run_sweep(
        kw["plan"],
        kw["corpus"],
        kw["out"],
        preset=kw["preset"],
        seq_len=kw["seq_len"],
        batch_size=kw["batch_size"],
        micro_batch_size=kw["micro_batch_size"],
        lr=kw["lr"],
        min_lr_ratio=kw["min_lr_ratio"],
        warmup=kw["warmup"],
        weight_decay=kw["weight_decay"],
        grad_clip=kw["grad_clip"],
        seed=kw["seed"],
        eval_points=kw["eval_points"],
        allow_repeat=kw["allow_repeat"],
        val_tokens=kw["val_tokens"],
        tokenizer=kw["tokenizer"],
        vocab_size=kw["vocab_size"],
        tokenizer_sample_chars=kw["tokenizer_sample_chars"],
        corpus_map=_pairs(kw["corpus_map"], "--corpus-map"),
        options=opts,
        launcher=kw["launcher"],
        nproc=kw["nproc"],
        slurm=kw["slurm"],
        slurm_params=slurm_params,
        slurm_wait=kw["slurm_wait"],
        max_runs=kw["max_runs"],
        jobs=kw["jobs"],
        nnodes=kw["nnodes"],
        node_rank=kw["node_rank"],
        master=kw["master"],
    )
    click.echo(
        f"{res.finished} finished, {res.pending} pending runs; table {res.table}, "
        f"records {res.records}"
    )

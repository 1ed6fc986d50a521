"""Train one run: exact mixture, AdamW with warmup + cosine, per-language eval, checkpoints.

:func:`train_run` trains a ``LlamaForCausalLM`` from scratch on one run's mixture and writes, when
it finishes, the run's runs-table rows and JSON record (see :mod:`training.records`). It resumes
from its sharded checkpoint ``run_dir/checkpoint/`` (:mod:`training.checkpoint`) when one exists,
and the resumed run ends with the same losses as an uninterrupted one (same device and world
size): the batch order, the learning rate and the data position are functions of the step, and
all states are restored. SIGTERM, or :func:`request_stop` (submitit's preemption signal, see
:mod:`training.worker`), makes it checkpoint after the current step and raise
:class:`~training.errors.RunInterrupted`; with several processes they agree on the step to stop.

Under ``torchrun``/``accelerate launch`` (``WORLD_SIZE > 1``) it trains with DDP, or FSDP2 with
``RunOptions.fsdp``; each global batch is split across ranks and only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from training.atomic import atomic_dir
from training.checkpoint import Checkpointer, rng_state, set_rng_state
from training.dataset import SweepData
from training.errors import RunInterrupted, TrainingError
from training.flops import device_peak, flops_per_token, mfu
from training.metrics import MetricsLog, peak_memory_gb
from training.mixture import Mixture, batch_arrays, build_mixture, token_budgets
from training.presets import (
    build_model,
    check_compile_scope,
    compile_model,
    count_parameters,
    enable_activation_checkpointing,
    get_preset,
)
from training.records import is_finished, read_record, write_finished_run

__all__ = [
    "DEFAULT_EVAL_POINTS",
    "RunConfig",
    "RunOptions",
    "lr_at",
    "eval_steps_for",
    "check_repeat",
    "request_stop",
    "train_run",
]

DEFAULT_EVAL_POINTS = (0.25, 0.5, 0.75, 0.87, 0.9, 0.93, 0.96, 1.0)

_STOP = {"requested": False}


def request_stop() -> None:
    """Ask the run training in this process to checkpoint after its current step and raise
    :class:`~training.errors.RunInterrupted` (what SIGTERM does). Safe to call from a signal
    handler; a request made while no run trains stops the next run after its first step."""
    _STOP["requested"] = True


@dataclass
class RunConfig:
    """Everything that determines a run's result; :meth:`key` hashes it.

    ``shares`` lists every language of the sweep (zeros included) in plan order; ``warmup`` is a
    fraction of the steps (< 1) or a number of steps (>= 1); ``data_key`` identifies the prepared
    tokens (tokenizer, corpus, seed, validation set).
    """

    run_id: str
    budget_tokens: int
    shares: dict[str, float]
    preset: str
    seq_len: int
    batch_size: int
    micro_batch_size: int
    lr: float
    min_lr_ratio: float = 0.1
    warmup: float = 0.05
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    eval_points: tuple[float, ...] = DEFAULT_EVAL_POINTS
    allow_repeat: bool = False
    data_key: str = ""

    def key(self) -> str:
        """12-hex-digit hash of the config (the run folder is ``<run_id>-<key>``)."""
        blob = json.dumps(asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        d = dict(d)
        d["eval_points"] = tuple(d.get("eval_points", DEFAULT_EVAL_POINTS))
        return cls(**d)


@dataclass
class RunOptions:
    """How to run (not part of the run key): device, precision, checkpointing, test hooks."""

    device: str = "auto"
    dtype: str = "auto"
    compile: bool = False
    compile_scope: str = "model"
    fsdp: bool = False
    threads: int | None = None
    checkpoint_every: int = 0
    log_every_s: float = 30.0
    eval_batch_size: int | None = None
    save_model: bool = True
    keep_checkpoint: bool = False
    stop_after_steps: int | None = None
    tensorboard_dir: str | None = None
    loss_chunk_tokens: int = 0
    activation_checkpointing: int = 0
    on_step: Callable[[int], None] | None = field(default=None, repr=False)


def lr_at(step: int, n_steps: int, peak: float, warmup: float, min_ratio: float) -> float:
    """Learning rate of (0-based) ``step``: linear warmup, then cosine down to ``min_ratio*peak``.

    The last step uses exactly ``min_ratio * peak``.
    """
    w = int(warmup) if warmup >= 1 else max(1, round(warmup * n_steps))
    w = min(w, max(1, n_steps - 1))
    if step < w:
        return peak * (step + 1) / w
    progress = min(1.0, (step - w) / max(1, n_steps - w - 1))
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def eval_steps_for(cum_tokens: np.ndarray, points: tuple[float, ...]) -> list[int]:
    """0-based steps after which to evaluate: the first step reaching each fraction of tokens."""
    total = cum_tokens[-1]
    steps = {int(np.searchsorted(cum_tokens, f * total - 1e-9)) for f in points}
    steps.add(len(cum_tokens) - 1)
    return sorted(s for s in steps if 0 <= s < len(cum_tokens))


def check_repeat(
    cfg: RunConfig, budgets: dict[str, int], data: SweepData
) -> tuple[dict[str, int | None], list[str]]:
    """Available training tokens per language, and the languages this run must repeat.

    The available amount is ``None`` where the corpus was tokenised only as far as the sweep
    needs (then it holds more than the budget).

    Raises
    ------
    TrainingError
        If a language's budget exceeds its data and ``cfg.allow_repeat`` is false.
    """
    available: dict[str, int | None] = {}
    repeated: list[str] = []
    for lang, need in budgets.items():
        ld = data.languages[lang]
        have = ld.available if ld.available is not None else int(ld.train.shape[0])
        available[lang] = ld.available
        if need > have:
            if ld.available is None:
                raise RuntimeError(f"prepared stream of {lang} is shorter than the run needs")
            if not cfg.allow_repeat:
                raise TrainingError(
                    f"run {cfg.run_id!r} needs {need} training tokens of {lang!r} but the "
                    f"corpus has only {have} (after holding out validation; files: "
                    f"{', '.join(ld.info.get('files', []))}). Fix: add {lang} data, lower the "
                    f"run's budget or share, or pass --allow-repeat to repeat the data "
                    f"({need / have:.2f} epochs)."
                )
            repeated.append(lang)
    return available, repeated


@dataclass
class _Dist:
    rank: int
    world: int
    local_rank: int
    device: Any

    @property
    def main(self) -> bool:
        return self.rank == 0


def _setup(opts: RunOptions) -> _Dist:
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = opts.device
    if dev == "auto":
        if torch.cuda.is_available():
            dev = "cuda"
        elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            dev = "mps"
        else:
            dev = "cpu"
    if dev == "cuda":
        dev = f"cuda:{local}"
    device = torch.device(dev)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return _Dist(rank, world, local, device)


def _check_same_run(cfg: RunConfig, env: _Dist) -> None:
    """Refuse to train when the ranks were launched for different runs (a multi-node follower
    that joined the rendezvous of another run than its own, :mod:`training.multinode`)."""
    import torch.distributed as dist

    mine = json.dumps(asdict(cfg), sort_keys=True)
    every: list[Any] = [None] * env.world
    dist.all_gather_object(every, mine)
    if any(other != mine for other in every):
        ids = sorted({json.loads(o)["run_id"] for o in every})
        raise TrainingError(
            f"the {env.world} processes of this job were started for different runs ({ids}). "
            "Fix: start every node's sweep with the same plan, --out and settings; a node that "
            "joined late retries the current run when restarted."
        )


def _git_hash() -> str | None:
    """Commit of the source tree, read from ``.git`` (no git process is started)."""
    here = Path(__file__).resolve().parent
    for d in [here, *here.parents]:
        git = d / ".git"
        if git.is_dir():
            try:
                head = (git / "HEAD").read_text().strip()
                if not head.startswith("ref:"):
                    return head
                ref = head.split(" ", 1)[1]
                if (git / ref).is_file():
                    return (git / ref).read_text().strip()
                packed = git / "packed-refs"
                if packed.is_file():
                    for line in packed.read_text().splitlines():
                        if line.endswith(" " + ref):
                            return line.split(" ")[0]
            except OSError:
                return None
            return None
    return None


def _hardware(env: _Dist) -> dict[str, Any]:
    import torch
    import transformers

    name, peak = device_peak(str(env.device))
    return {
        "device": str(env.device),
        "device_name": name,
        "n_devices": env.world,
        "peak_bf16_flops_per_device": peak,
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
    }


def _duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _evaluate(
    model: Any, data: SweepData, langs: list[str], env: _Dist, bs: int, amp: Any
) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from training.loss import loss_sum

    out: dict[str, float] = {}
    model.eval()
    with torch.no_grad():
        for lang in langs:
            blocks = data.languages[lang].val_blocks
            mine = blocks[env.rank :: env.world]
            per_rank = -(-blocks.shape[0] // env.world)
            tot = torch.zeros(2, dtype=torch.float64, device=env.device)
            for i in range(-(-per_rank // bs)):
                chunk = mine[i * bs : (i + 1) * bs]
                dummy = chunk.shape[0] == 0
                if dummy:  # keep collective calls in step under FSDP
                    chunk = blocks[:1]
                ids = torch.from_numpy(chunk.astype(np.int64)).to(env.device)
                with amp():
                    nll, n = loss_sum(model, ids, ids)
                if not dummy:
                    tot[0] += nll.double()
                    tot[1] += n
            if env.world > 1:
                dist.all_reduce(tot)
            out[lang] = float(tot[0] / tot[1])
    model.train()
    return out


def _all_reduce_counts(counts: np.ndarray, env: _Dist) -> np.ndarray:
    if env.world == 1:
        return counts.copy()
    import torch
    import torch.distributed as dist

    t = torch.from_numpy(counts.astype(np.int64)).to(env.device)
    dist.all_reduce(t)
    return t.cpu().numpy()


def _save_model(
    model: Any, state_dict: dict[str, Any], tokenizer_dir: Path, run_dir: Path, log: Any
) -> None:
    """Write ``run_dir/model/``: ``config.json``, ``model.safetensors`` (``save_pretrained`` of
    transformers 5 writes safetensors only), ``generation_config.json`` and the tokenizer, so that
    ``AutoModelForCausalLM``/``AutoTokenizer.from_pretrained(run_dir / "model")`` load it. Built
    in a temporary sibling folder and moved into place."""
    from training.tokenizer import load_tokenizer

    with atomic_dir(run_dir / "model") as tmp:
        model.save_pretrained(tmp, state_dict=state_dict)
        try:
            load_tokenizer(tokenizer_dir).save_pretrained(tmp)
        except TrainingError as exc:  # moved since the data were prepared: the model still counts
            log(f"warning: {run_dir.name}: model saved without its tokenizer ({exc})")


def train_run(
    cfg: RunConfig,
    data: SweepData,
    run_dir: str | Path,
    opts: RunOptions | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train (or resume, or skip when finished) one run and write its rows and record.

    Parameters
    ----------
    cfg
        The run's configuration (its :meth:`RunConfig.key` names the folder in a sweep).
    data
        Prepared sweep data (:func:`training.dataset.prepare_data`).
    run_dir
        Folder of this run: ``checkpoint/`` while it trains, then ``rows.csv`` and
        ``record.json``.
    opts
        Runtime options; ``stop_after_steps`` is a test hook that checkpoints after that many
        steps and raises :class:`RunInterrupted` (as SIGTERM does).
    log
        Progress callback (default: print to stderr on rank 0).

    Returns
    -------
    dict
        The run's JSON record (``final_loss``, ``realised_tokens``, ``throughput``, ...).
    """
    import torch

    from training.loss import CausalLMLoss, loss_sum  # torch at import: only when training

    opts = opts or RunOptions()
    check_compile_scope(opts.compile_scope)  # before the process group starts
    run_dir = Path(run_dir)
    if is_finished(run_dir):
        return read_record(run_dir) or {}
    env = _setup(opts)
    if env.world > 1:
        _check_same_run(cfg, env)
    if log is None:

        def log(msg: str) -> None:
            if env.main:
                print(msg, file=sys.stderr, flush=True)

    t_start = time.time()
    preset = get_preset(cfg.preset)
    langs = list(cfg.shares)
    missing = [lang for lang in langs if lang not in data.languages]
    if missing:
        raise TrainingError(
            f"prepared data {data.path} lacks language(s) {missing}. Fix: prepare the data with "
            f"every language of the plan (run the sweep command again)."
        )
    if cfg.seq_len != data.seq_len:
        raise TrainingError(f"run seq_len {cfg.seq_len} != prepared data seq_len {data.seq_len}")
    budgets = token_budgets(cfg.shares, cfg.budget_tokens)
    available, repeated = check_repeat(cfg, budgets, data)
    for lang in repeated:
        log(
            f"warning: run {cfg.run_id}: {lang} needs {budgets[lang]} tokens, has "
            f"{available[lang]}: repeating its data {budgets[lang] / available[lang]:.2f} epochs"
        )
    mix: Mixture = build_mixture(budgets, available, cfg.seq_len, cfg.seed)
    if mix.n_blocks == 0:
        raise TrainingError(
            f"run {cfg.run_id!r}: budget {cfg.budget_tokens} gives no training token. Fix: raise "
            f"the run's tokens in the plan."
        )
    streams = [data.languages[lang].train for lang in langs]
    bsz = cfg.batch_size
    n_steps = -(-mix.n_blocks // bsz)
    step_tokens = np.add.reduceat(mix.blocks[:, 2], np.arange(0, mix.n_blocks, bsz))
    cum = np.cumsum(step_tokens)
    eval_steps = eval_steps_for(cum, cfg.eval_points)
    eval_set = set(eval_steps)
    micro = max(1, min(cfg.micro_batch_size, -(-bsz // env.world)))

    # ---- model, optimizer, resume -------------------------------------------------------
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)  # noqa: NPY002 - seeds libraries that use the global state
    torch.manual_seed(cfg.seed)
    model = build_model(preset, data.vocab_size, data.eos_id, data.pad_id)
    n_params = count_parameters(model)
    ckpt = Checkpointer(run_dir, env.rank, env.world)
    saved = ckpt.prepare()
    if saved is not None and saved.get("key") != cfg.key():
        log(f"run {cfg.run_id}: ignoring checkpoint of another config ({saved.get('key')})")
        saved = None
    model.to(env.device)
    if opts.activation_checkpointing:  # recompute every n-th decoder block in the backward
        enable_activation_checkpointing(model, opts.activation_checkpointing)
    use_bf16 = opts.dtype == "bf16" or (
        opts.dtype == "auto" and env.device.type == "cuda" and torch.cuda.is_bf16_supported()
    )
    fsdp = opts.fsdp and env.world > 1
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if use_bf16 else None, reduce_dtype=torch.float32
        )
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=1e-8,
        fused=env.device.type == "cuda",
    )
    state: dict[str, Any] = {
        "step": 0,
        "rows": [],
        "resumes": 0,
        "train_time": 0.0,
        "timed_tokens": 0,
        "counts": np.zeros(len(langs), dtype=np.int64),
    }
    if saved is not None:
        if (saved["world"], saved["fsdp"]) != (env.world, fsdp):
            log(
                f"run {cfg.run_id}: the checkpoint was written by {saved['world']} process(es)"
                f"{' with FSDP' if saved['fsdp'] else ''}; resharding it to {env.world}"
                f"{' with FSDP' if fsdp else ''} (losses can differ from an uninterrupted run in "
                "the last digits)"
            )
        ckpt.load(model, optimizer)  # each rank reads its own slices
        state.update({k: saved[k] for k in ("step", "rows", "train_time", "timed_tokens")})
        state["resumes"] = saved["resumes"] + 1
        if env.main:  # the other ranks count from zero; the counts are summed over ranks
            state["counts"] = np.asarray(saved["counts"], dtype=np.int64)
        set_rng_state(saved["rng"])
        log(f"run {cfg.run_id}: resuming from step {state['step']}/{n_steps}")
    raw_model = model
    if opts.loss_chunk_tokens:
        if fsdp:
            raise TrainingError(
                "--loss-chunk-tokens is not supported with --fsdp yet. Fix: drop one of the two "
                "(DDP and single-device runs take the chunked loss)."
            )
        model = CausalLMLoss(model, opts.loss_chunk_tokens)  # what runs (and DDP wraps)
    if env.world > 1 and not fsdp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
    uncompiled = model  # evaluation: no_grad would make the compiled model recompile
    if opts.compile:
        model = compile_model(model, raw_model, opts.compile_scope)

    def amp() -> Any:
        if use_bf16 and not fsdp:
            return torch.autocast(env.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def sync_ctx(last: bool) -> Any:
        if env.world == 1 or last:
            if fsdp:
                raw_model.set_requires_gradient_sync(True)
            return contextlib.nullcontext()
        if fsdp:
            raw_model.set_requires_gradient_sync(False)
            return contextlib.nullcontext()
        return model.no_sync()

    def checkpoint(wait: bool) -> None:
        """Every rank: its shards in the background (``wait``: before returning)."""
        counts = _all_reduce_counts(state["counts"], env)
        meta = {
            "key": cfg.key(),
            "world": env.world,
            "fsdp": fsdp,
            "step": state["step"],
            "rows": state["rows"],
            "resumes": state["resumes"],
            "train_time": state["train_time"],
            "timed_tokens": state["timed_tokens"],
            "counts": [int(x) for x in counts],
            "rng": rng_state(),
        }
        ckpt.save(raw_model, optimizer, meta, wait=wait)

    def stop_requested() -> bool:
        """Whether any rank was asked to stop (all ranks must stop at the same step)."""
        local = _STOP["requested"] or (
            opts.stop_after_steps is not None and state["step"] >= opts.stop_after_steps
        )
        if env.world == 1:
            return local
        import torch.distributed as dist

        flag = torch.tensor([int(local)], dtype=torch.int32, device=env.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_sigterm(signum: int, frame: Any) -> None:
        request_stop()

    old_handler = None
    with contextlib.suppress(ValueError):  # not in the main thread
        old_handler = signal.signal(signal.SIGTERM, on_sigterm)

    # ---- training loop ------------------------------------------------------------------
    name, peak = device_peak(str(env.device))
    fpt = flops_per_token(
        n_params["non_embedding"], preset.num_layers, preset.hidden_size, cfg.seq_len
    )
    eval_bs = opts.eval_batch_size or micro
    if state["step"] == 0:
        log(
            f"run {cfg.run_id} [{cfg.key()}]: {sum(budgets.values())} tokens, {n_steps} steps, "
            f"{n_params['total'] / 1e6:.2f}M params, {env.world}x {env.device}"
        )
    last_log = time.time()
    first_step = state["step"]
    train_loss = float("nan")
    metrics = MetricsLog(
        run_dir,
        state["step"],
        enabled=env.main,
        tensorboard_dir=opts.tensorboard_dir,
        run_id=cfg.run_id,
    )
    pad_block = np.array([[0, 0, 0]], dtype=np.int64)
    try:
        while state["step"] < n_steps:
            step = state["step"]
            t0 = time.time()
            lr = lr_at(step, n_steps, cfg.lr, cfg.warmup, cfg.min_lr_ratio)
            for g in optimizer.param_groups:
                g["lr"] = lr
            gblocks = mix.blocks[step * bsz : (step + 1) * bsz]
            n_targets = int(np.maximum(gblocks[:, 2] - 1, 0).sum())
            mine = gblocks[env.rank :: env.world]
            per_rank = math.ceil(gblocks.shape[0] / env.world)
            n_micro = math.ceil(per_rank / micro)  # the same on every rank
            step_nll = torch.zeros((), device=env.device)
            for m in range(n_micro):
                part = mine[m * micro : (m + 1) * micro]
                if part.shape[0] == 0:  # this rank has no block left: zero-loss dummy
                    part = pad_block
                ids, labels, lidx = batch_arrays(part, streams, cfg.seq_len, data.pad_id)
                if part is not pad_block:
                    state["counts"] += np.bincount(
                        lidx, weights=(labels != -100).sum(1), minlength=len(langs)
                    ).astype(np.int64)
                ids_t = torch.from_numpy(ids).to(env.device, non_blocking=True)
                lab_t = torch.from_numpy(labels).to(env.device, non_blocking=True)
                with sync_ctx(m == n_micro - 1):
                    with amp():
                        nll, _ = loss_sum(model, ids_t, lab_t)
                    loss = nll * (env.world / max(1, n_targets))
                    loss.backward()
                step_nll += nll.detach()  # no host sync per micro-batch
            # the total gradient norm (clipped when grad_clip > 0; inf: measure only)
            gnorm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
            )
            if hasattr(gnorm, "full_tensor"):  # FSDP2: a DTensor
                gnorm = gnorm.full_tensor()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            # one host sync per step, for the loss and the norm together
            pair = torch.stack([step_nll.float(), gnorm.float().to(step_nll.device)]).cpu()
            step_nll_f, gnorm_f = float(pair[0]), float(pair[1])
            train_loss = step_nll_f * env.world / max(1, n_targets)
            if env.device.type == "cuda":
                torch.cuda.synchronize(env.device)
            dt = time.time() - t0
            if step > first_step:  # the first step of a process includes warm-up/compile
                state["train_time"] += dt
                state["timed_tokens"] += int(step_tokens[step])
            state["step"] = step + 1
            step_tps = int(step_tokens[step]) / dt if dt > 0 else float("nan")
            metrics.train_step(
                step + 1,
                tokens=int(cum[step]),
                loss=train_loss,
                grad_norm=gnorm_f,
                lr=lr,
                tokens_per_s=step_tps,
                mfu=mfu(step_tps, fpt, peak, env.world) if dt > 0 else None,
                memory_gb=peak_memory_gb(env.device),
                elapsed_s=time.time() - t_start,
            )
            if opts.on_step is not None:
                opts.on_step(state["step"])
            ckpt.poll()  # swap in a finished background checkpoint
            if step in eval_set:
                losses = _evaluate(
                    raw_model if fsdp else uncompiled, data, langs, env, eval_bs, amp
                )
                metrics.evaluation(step + 1, int(cum[step]), losses)
                for lang in langs:
                    state["rows"].append(
                        {
                            "run_id": cfg.run_id,
                            "budget_tokens": int(cfg.budget_tokens),
                            "tokens_seen": int(cum[step]),
                            "language": lang,
                            "proportion": float(cfg.shares[lang]),
                            "loss": losses[lang],
                            "step": step + 1,
                        }
                    )
            now = time.time()
            if now - last_log >= opts.log_every_s or step in eval_set:
                tps = state["timed_tokens"] / state["train_time"] if state["train_time"] else 0.0
                extra = ""
                if step in eval_set:
                    extra = " val " + " ".join(
                        f"{r['language']}={r['loss']:.3f}"
                        for r in state["rows"]
                        if r["step"] == step + 1
                    )
                timed = state["step"] - first_step - 1  # steps in train_time
                eta = ""
                if timed > 0:
                    left = (n_steps - state["step"]) * state["train_time"] / timed
                    eta = f" ETA {_duration(left)}"
                log(
                    f"  [{cfg.run_id}] step {step + 1}/{n_steps} tokens {int(cum[step])} "
                    f"loss {train_loss:.4f} lr {lr:.2e} {tps:,.0f} tok/s{eta}{extra}"
                )
                last_log = now
            if state["step"] == n_steps:
                break
            stop_now = stop_requested()
            every = opts.checkpoint_every
            if stop_now or step in eval_set or (every and state["step"] % every == 0):
                checkpoint(wait=stop_now)
            if stop_now:
                _STOP["requested"] = False  # consumed
                raise RunInterrupted(
                    f"run {cfg.run_id} stopped after step {state['step']}/{n_steps}; "
                    f"checkpoint {ckpt.dir}"
                )
    finally:
        metrics.close()
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)

    # ---- finish ---------------------------------------------------------------------------
    ckpt.wait()
    counts = _all_reduce_counts(state["counts"], env)
    realised = {lang: int(counts[k]) for k, lang in enumerate(langs)}
    if realised != budgets or int(cum[-1]) != sum(budgets.values()):
        raise RuntimeError(f"run {cfg.run_id}: realised tokens {realised} != budgets {budgets}")
    tps = state["timed_tokens"] / state["train_time"] if state["train_time"] else None
    util = mfu(tps, fpt, peak, env.world) if tps else None
    final = {r["language"]: r["loss"] for r in state["rows"] if r["step"] == n_steps}
    record = {
        "run_id": cfg.run_id,
        "key": cfg.key(),
        "config": asdict(cfg),
        "preset": preset.as_dict(),
        "model": {
            "class": "LlamaForCausalLM",
            "parameters": n_params["total"],
            "non_embedding_parameters": n_params["non_embedding"],
            "vocab_size": data.vocab_size,
        },
        "budget_tokens": int(cfg.budget_tokens),
        "budgets": budgets,
        "realised_tokens": realised,
        "epochs": {k: None if v is None else round(v, 6) for k, v in mix.epochs.items()},
        "repeated_languages": repeated,
        "steps": n_steps,
        "eval_steps": [s + 1 for s in eval_steps],
        "final_loss": final,
        "data": {
            "key": data.key,
            "tokenizer": str(data.tokenizer_dir),
            "val_tokens_per_language": {
                lang: int(data.languages[lang].val_blocks.size) for lang in langs
            },
        },
        "git_commit": _git_hash(),
        "hardware": _hardware(env),
        "throughput": {
            "tokens_per_s": tps,
            "tokens_per_s_per_device": tps / env.world if tps else None,
            "flops_per_token": fpt,
            "mfu": util,
            "precision": "bf16" if use_bf16 else "fp32",
            "compile": opts.compile,
            "compile_scope": opts.compile_scope if opts.compile else None,
            "fsdp": fsdp,
        },
        "train_time_s": round(state["train_time"], 3),
        "wall_time_s_last_session": round(time.time() - t_start, 3),
        "resumes": state["resumes"],
        "finished_at": _now(),
    }
    if opts.save_model:
        if fsdp:  # a collective: every rank takes part
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            msd = get_model_state_dict(
                raw_model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        else:
            msd = raw_model.state_dict()
        if env.main:
            _save_model(raw_model, msd, data.tokenizer_dir, run_dir, log)
    if env.main:
        write_finished_run(run_dir, state["rows"], record)
        if not opts.keep_checkpoint:
            ckpt.remove()
        log(
            f"run {cfg.run_id}: finished in {record['wall_time_s_last_session']:.1f}s, "
            f"{tps or 0:,.0f} tok/s, final " + " ".join(f"{k}={v:.3f}" for k, v in final.items())
        )
    return record

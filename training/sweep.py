"""A sweep: plan CSV -> finished runs -> one runs table.

Every run of the plan gets a folder ``OUT/runs/<run_id>-<key>`` where ``key`` hashes the run's
config (:meth:`training.loop.RunConfig.key`). Finished runs are skipped, a killed run resumes from
its checkpoint, and after the runs ``OUT/runs.csv`` (long-form runs table of every finished run
of the plan, in plan order) and ``OUT/records.json`` are rewritten atomically.

Runs train in this process (``launcher="local"``), one ``torchrun``/``accelerate launch`` job per
run on one node (DDP, or FSDP with ``RunOptions.fsdp``), or as a Slurm job array via submitit
(``slurm=True``; without Slurm on the machine it warns and runs locally).
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from training.atomic import atomic_write_json
from training.errors import TrainingError
from training.lock import sweep_lock
from training.loop import DEFAULT_EVAL_POINTS, RunConfig, RunOptions, check_repeat, train_run
from training.mixture import token_budgets
from training.multinode import NodeGroup, node_group, wait_for_leader
from training.presets import get_preset
from training.records import is_finished, write_table
from training.slurm_jobs import in_flight, jobs_file, record_jobs, slurm_state

__all__ = ["PlanRun", "read_plan", "SweepResult", "run_dir_name", "run_sweep"]


@dataclass(frozen=True)
class PlanRun:
    """One row of a plan: ``run_id``, total budget ``tokens`` and ``shares`` per language."""

    run_id: str
    tokens: int
    shares: dict[str, float]


def _num(text: str, what: str, path: Path, row: int) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise TrainingError(
            f"{path}: row {row}: {what} is {text!r}, not a number. Fix: write a number there."
        ) from None
    if not math.isfinite(value):
        raise TrainingError(f"{path}: row {row}: {what} is {text!r}. Fix: write a finite number.")
    return value


def read_plan(path: str | Path) -> tuple[list[str], list[PlanRun]]:
    """Read a plan CSV (``run_id, tokens, r_<lang>...``; extra columns ignored).

    Returns
    -------
    languages, runs
        Languages in column order, and the runs in row order.

    Raises
    ------
    TrainingError
        If the file is missing or malformed (message names row/column and the fix).
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
            header = list(rows[0].keys()) if rows else []
    except FileNotFoundError:
        raise TrainingError(
            f"plan file {path} does not exist. Fix: write one with `climb-bayes plan` or by "
            f"hand (columns run_id, tokens, r_<lang>...)."
        ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TrainingError(
            f"{path}: cannot read the plan ({exc}). Fix: save it as UTF-8 CSV."
        ) from None
    if not rows:
        raise TrainingError(f"{path}: the plan has no runs. Fix: add one row per run.")
    langs = [c[2:] for c in header if c.startswith("r_") and len(c) > 2]
    missing = [c for c in ("run_id", "tokens") if c not in header]
    if missing or not langs:
        raise TrainingError(
            f"{path}: the plan needs columns run_id, tokens and r_<lang> (one per language); "
            f"missing: {', '.join(missing) or 'r_<lang>'}. Fix: add them."
        )
    runs: list[PlanRun] = []
    seen: set[str] = set()
    for i, row in enumerate(rows, start=2):
        rid = (row.get("run_id") or "").strip()
        if not rid or rid in seen:
            raise TrainingError(
                f"{path}: row {i}: run_id {rid!r} is {'empty' if not rid else 'repeated'}. "
                f"Fix: give every run a unique run_id."
            )
        seen.add(rid)
        tokens = _num(row["tokens"], "tokens", path, i)
        if tokens < 1 or tokens != int(tokens):
            raise TrainingError(
                f"{path}: row {i}: tokens = {row['tokens']} must be a whole number >= 1. "
                f"Fix: write the run's total training tokens, e.g. 1000000."
            )
        shares = {lang: _num(row[f"r_{lang}"], f"r_{lang}", path, i) for lang in langs}
        bad = [lang for lang, r in shares.items() if r < 0 or r > 1]
        if bad:
            raise TrainingError(
                f"{path}: row {i}: r_{bad[0]} = {shares[bad[0]]} is outside [0, 1]. Fix: write "
                f"shares between 0 and 1 that sum to 1."
            )
        total = sum(shares.values())
        if abs(total - 1.0) > 1e-6:
            raise TrainingError(
                f"{path}: row {i} (run {rid}): shares sum to {total:.8f}, not 1. Fix: make the "
                f"r_<lang> columns of each row sum to 1."
            )
        runs.append(PlanRun(rid, int(tokens), shares))
    return langs, runs


def run_dir_name(cfg: RunConfig) -> str:
    """``<run_id>-<key>`` with unsafe characters of the run id replaced by ``_``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.run_id)[:80]
    return f"{safe}-{cfg.key()}"


@dataclass
class SweepResult:
    """Outcome of :func:`run_sweep`."""

    table: Path
    records: Path
    finished: int
    trained: int
    skipped: int
    pending: int
    wall_time_s: float
    run_dirs: list[Path] = field(default_factory=list)


def _options_dict(opts: RunOptions) -> dict[str, Any]:
    d = asdict(opts)
    d.pop("on_step", None)
    return d


def accelerate_precision(dtype: str, config_file: str | Path | None = None) -> tuple[str, str]:
    """Reconcile ``--dtype`` with the user's accelerate mixed-precision setting.

    The training loop applies precision itself (bf16 autocast, fp32 master weights), so
    accelerate's own setting is read -- ``ACCELERATE_MIXED_PRECISION``, else ``mixed_precision``
    of the accelerate config file (default: accelerate's ``default_config.yaml``) -- and:
    ``bf16`` is honoured when ``--dtype`` is ``auto`` (and must not contradict an explicit
    ``--dtype fp32``); ``no`` keeps ``--dtype``; ``fp16``/``fp8`` are rejected (no loss scaling
    here). Returns the run dtype and the ``--mixed_precision`` value passed to accelerate, so the
    two always agree.
    """
    setting = os.environ.get("ACCELERATE_MIXED_PRECISION")
    source = "ACCELERATE_MIXED_PRECISION"
    if setting is None:
        if config_file is None:
            from accelerate.commands.config import default_config_file

            config_file = default_config_file
        path = Path(config_file)
        if path.is_file():
            import yaml

            try:
                cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as exc:
                raise TrainingError(f"{path}: not a readable accelerate config ({exc}).") from None
            setting, source = cfg.get("mixed_precision"), str(path)
    setting = str(setting or "no").lower()
    if setting in ("fp16", "fp8"):
        raise TrainingError(
            f"{source} asks for mixed_precision {setting}, which climb-bayes training does not "
            "support (bf16 autocast with fp32 weights, or fp32). Fix: set it to bf16 or no, or "
            "pass --dtype bf16|fp32 with ACCELERATE_MIXED_PRECISION=no."
        )
    if setting == "bf16":
        if dtype == "fp32":
            raise TrainingError(
                f"{source} asks for mixed_precision bf16 but --dtype fp32 was given. Fix: drop "
                "one of the two (they must agree)."
            )
        return "bf16", "bf16"
    if setting != "no":
        raise TrainingError(f"{source}: unknown mixed_precision {setting!r} (want no or bf16).")
    return dtype, "bf16" if dtype == "bf16" else "no"


def _launch_cmd(
    launcher: str,
    nproc: int,
    spec: Path,
    mixed_precision: str = "no",
    group: NodeGroup = NodeGroup(),  # noqa: B008 (an immutable NamedTuple)
) -> list[str]:
    if launcher == "torchrun":
        return [
            sys.executable, "-m", "torch.distributed.run", *group.torchrun_args(),
            f"--nproc-per-node={nproc}", "-m", "training.worker", str(spec),
        ]  # fmt: skip
    if launcher == "accelerate":
        cmd = [
            sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nproc),
            "--num_machines", "1", "--mixed_precision", mixed_precision,
            "--dynamo_backend", "no",
        ]  # fmt: skip
        if nproc > 1:
            cmd.append("--multi_gpu")
        return [*cmd, "-m", "training.worker", str(spec)]
    raise TrainingError(f"unknown launcher {launcher!r}. Fix: use local, torchrun or accelerate.")


def run_sweep(
    plan: str | Path,
    corpus: str | Path,
    out: str | Path,
    *,
    preset: str = "tiny",
    seq_len: int | None = None,
    batch_size: int | None = None,
    micro_batch_size: int | None = None,
    lr: float | None = None,
    min_lr_ratio: float = 0.1,
    warmup: float = 0.05,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    seed: int = 0,
    eval_points: Sequence[float] = DEFAULT_EVAL_POINTS,
    allow_repeat: bool = False,
    val_tokens: int | None = None,
    tokenizer: str | Path | None = None,
    vocab_size: int | None = None,
    tokenizer_sample_chars: int = 2_000_000,
    corpus_map: Mapping[str, str] | None = None,
    options: RunOptions | None = None,
    launcher: str = "local",
    nproc: int | None = None,
    slurm: bool = False,
    slurm_params: Mapping[str, Any] | None = None,
    slurm_cluster: str | None = None,
    slurm_wait: bool = True,
    max_runs: int | None = None,
    jobs: int = 1,
    nnodes: int = 1,
    node_rank: int = 0,
    master: str | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepResult:
    """Train every unfinished run of a plan and write the runs table.

    Parameters
    ----------
    plan, corpus, out
        Plan CSV, corpus directory, output folder.
    preset
        Model preset (:data:`training.presets.PRESETS`); ``seq_len``, ``batch_size``,
        ``micro_batch_size``, ``lr``, ``val_tokens`` and ``vocab_size`` default to its values.
    eval_points
        Fractions of the run's tokens after which every language is evaluated; keep several
        above 0.85 (the fitter keeps the last 15%).
    allow_repeat
        Let a run repeat a language's data when its budget exceeds the corpus (warns, records
        the epochs); without it such a plan is refused before anything trains.
    options
        Runtime options for every run (device, dtype, compile, checkpoint interval ...).
    launcher
        ``local`` (in this process), ``torchrun`` or ``accelerate`` (``nproc`` processes per
        run on this node; DDP, or FSDP with ``options.fsdp``).
    slurm, slurm_params, slurm_cluster, slurm_wait
        Submit pending runs as a submitit job array (``slurm_params`` go to
        ``AutoExecutor.update_parameters``); falls back to local runs when Slurm is absent.
        ``slurm_cluster`` forces a submitit cluster (``"debug"`` runs in this process; tests).
    max_runs
        Train at most this many runs now (the others stay pending).
    jobs
        With the local launcher, train up to this many single-process runs at once on this node,
        each in its own process (``python -m training.worker``) with a GPU of its own when there
        are GPUs (one run per GPU with ``jobs`` = their number), else ``cores // jobs`` torch
        threads unless ``options.threads`` is given. 1 trains in this process, one run after
        another.
    nnodes, node_rank, master
        Several nodes per run (``launcher="torchrun"``): the same call on every node with its
        ``node_rank`` and node 0's ``"HOST:PORT"`` (:mod:`training.multinode`). Node 0 leads
        (lock, data, table); the others follow and return without writing the table.
    log
        Progress callback (default: stderr).

    Returns
    -------
    SweepResult
    """
    t0 = time.time()
    if log is None:

        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

    group = node_group(nnodes, node_rank, master, launcher, slurm, jobs)
    # never two sweeps on one output folder; the followers of a multi-node sweep are part of it
    lock = sweep_lock(out, log) if group.leader else contextlib.nullcontext()
    with lock:
        from training.dataset import prepare_data

        if not group.leader:
            wait_for_leader(Path(out), group, t0, log)
        opts = options or RunOptions()
        if jobs < 1:
            raise TrainingError(f"--jobs must be >= 1, got {jobs}. Fix: e.g. --jobs 2 --threads 1.")
        pre = get_preset(preset)
        seq_len = seq_len or pre.seq_len
        if seq_len > pre.max_positions:
            raise TrainingError(
                f"--seq-len {seq_len} exceeds preset {preset}'s {pre.max_positions} "
                f"positions. Fix: use --seq-len <= {pre.max_positions}."
            )
        eval_points = tuple(sorted(set(float(f) for f in eval_points)))
        if not eval_points or eval_points[0] <= 0 or eval_points[-1] > 1:
            raise TrainingError(
                f"--eval-points {eval_points} must be fractions in (0, 1]. Fix: e.g. "
                f"0.5,0.87,0.9,0.93,0.96,1.0."
            )
        langs, runs = read_plan(plan)
        out = Path(out)
        need: dict[str, int] = {lang: 0 for lang in langs}
        for r in runs:
            for lang, n in token_budgets(r.shares, r.tokens).items():
                need[lang] = max(need[lang], n)
        log(f"sweep: {len(runs)} runs, languages {', '.join(langs)}, preset {preset} -> {out}")
        data = prepare_data(
            corpus,
            langs,
            out,
            seq_len=seq_len,
            val_tokens=val_tokens or pre.val_tokens,
            seed=seed,
            need=need,
            tokenizer=tokenizer,
            vocab_size=vocab_size or pre.vocab_size,
            tokenizer_sample_chars=tokenizer_sample_chars,
            corpus_map=corpus_map,
            log=log,
        )
        configs = [
            RunConfig(
                run_id=r.run_id,
                budget_tokens=r.tokens,
                shares=dict(r.shares),
                preset=preset,
                seq_len=seq_len,
                batch_size=batch_size or pre.batch_size,
                micro_batch_size=micro_batch_size
                or min(pre.micro_batch_size, batch_size or 1 << 30),
                lr=lr if lr is not None else pre.lr,
                min_lr_ratio=min_lr_ratio,
                warmup=warmup,
                weight_decay=weight_decay,
                grad_clip=grad_clip,
                seed=seed,
                eval_points=eval_points,
                allow_repeat=allow_repeat,
                data_key=data.key,
            )
            for r in runs
        ]
        for cfg in configs:  # refuse impossible budgets before anything trains
            check_repeat(cfg, token_budgets(cfg.shares, cfg.budget_tokens), data)
        run_dirs = [out / "runs" / run_dir_name(cfg) for cfg in configs]
        if group.leader:
            sweep_json = {
                "plan": str(Path(plan).resolve()),
                "corpus": str(Path(corpus).resolve()),
                "preset": preset,
                "data_key": data.key,
                "runs": [
                    {"run_id": c.run_id, "dir": d.name}
                    for c, d in zip(configs, run_dirs, strict=True)
                ],
                "options": _options_dict(opts),
            }
            marker = group.marker()
            if marker is not None:  # what the other nodes wait for
                sweep_json["multinode"] = marker
            atomic_write_json(out / "sweep.json", sweep_json)
        todo = [(c, d) for c, d in zip(configs, run_dirs, strict=True) if not is_finished(d)]
        skipped = len(configs) - len(todo)
        if skipped:
            log(f"sweep: {skipped} of {len(configs)} runs already finished, skipping them")
        if max_runs is not None:
            todo = todo[: max(0, max_runs)]
        use_slurm = slurm
        if slurm and slurm_cluster is None and shutil.which("sbatch") is None:
            log("warning: --slurm given but no Slurm here (sbatch not on PATH): running locally")
            use_slurm = False

        mixed_precision = "no"
        if launcher == "accelerate" and todo:
            dtype, mixed_precision = accelerate_precision(opts.dtype)
            if dtype != opts.dtype:
                log(f"accelerate config: mixed_precision {mixed_precision} -> --dtype {dtype}")
                opts = replace(opts, dtype=dtype)
        trained = 0
        if use_slurm and todo:
            trained = _run_slurm(todo, data.path, out, opts, slurm_params or {}, slurm_cluster,
                                 slurm_wait, nproc, log)  # fmt: skip
        elif launcher == "local" and jobs > 1 and todo:
            trained = _run_parallel(todo, data.path, opts, jobs, log)
        else:
            for i, (cfg, rdir) in enumerate(todo, start=1):
                log(f"[{i}/{len(todo)}] run {cfg.run_id} ({rdir.name})")
                if launcher == "local":
                    train_run(cfg, data, rdir, opts, log)
                else:
                    if is_finished(rdir):  # a late follower: the run ended meanwhile
                        continue
                    spec = _write_spec(cfg, data.path, rdir, opts, group.node_rank)
                    n = nproc or _default_nproc()
                    env = {**os.environ, "PYTHONPATH": _pythonpath()}
                    cmd = _launch_cmd(launcher, n, spec, mixed_precision, group)
                    rc = subprocess.run(cmd, env=env).returncode
                    failure = f"{launcher} exited with code {rc}" if rc else None
                    # rank 0 (on node 0) writes the record: a follower's clean exit is enough
                    if failure is None and not group.leader:
                        trained += 1
                        continue
                    if not _finished_despite(cfg, rdir, failure, log):
                        raise TrainingError(
                            f"run {cfg.run_id} failed under {launcher} (exit code {rc}); see the "
                            f"output above. Fix the cause and run the sweep again: it resumes from "
                            f"{rdir / 'checkpoint'} when there is one."
                        )
                trained += 1

        table, records = out / "runs.csv", out / "records.json"
        if not group.leader:
            log(f"node {group.node_rank}: {trained} runs trained with node 0, which writes {table}")
            return SweepResult(table, records, 0, trained, skipped, 0, time.time() - t0, run_dirs)
        finished = write_table(run_dirs, table, records)
        pending = len(configs) - finished
        wall = time.time() - t0
        log(
            f"sweep: {finished}/{len(configs)} runs finished ({trained} trained now, {skipped} "
            f"skipped, {pending} pending) in {wall:.1f}s -> {table}"
        )
        return SweepResult(table, records, finished, trained, skipped, pending, wall, run_dirs)


def _finished_despite(
    cfg: RunConfig, rdir: Path, failure: str | None, log: Callable[[str], None]
) -> bool:
    """Whether the run is finished; a written record wins over a failed launcher.

    ``failure`` describes what went wrong with the run's process(es) (``None``: nothing). Rank 0
    writes ``record.json`` last, after the rows, so a run with its record is complete even when
    a straggling rank then fails while shutting down (a non-zero exit of torchrun, a failed
    Slurm task): it is kept as finished with a warning instead of failing the sweep.
    """
    if not is_finished(rdir):
        return False
    if failure:
        log(
            f"warning: run {cfg.run_id}: {failure} after the run's record was written (a rank "
            "failed while shutting down?); the run is kept as finished"
        )
    return True


def _worker_cmd(spec: Path) -> list[str]:
    """The command of one run in its own process (the entry point torchrun and Slurm use)."""
    return [sys.executable, "-m", "training.worker", str(spec)]


def _visible_gpus(device: str) -> list[str]:
    """GPUs the ``--jobs`` workers share: none unless ``device`` is ``auto``/``cuda`` and CUDA
    has devices; the ids of ``CUDA_VISIBLE_DEVICES`` when it is set."""
    if device not in ("auto", "cuda"):
        return []
    import torch

    n = torch.cuda.device_count()
    if n == 0:
        return []
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    listed = [d for d in listed if d]
    return listed[:n] if listed else [str(k) for k in range(n)]


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _slot_settings(
    slot: int, jobs: int, opts: RunOptions, gpus: Sequence[str], cores: int
) -> tuple[dict[str, str], RunOptions]:
    """Environment and options of the worker in ``slot`` (0 ... jobs-1) of ``--jobs``.

    With GPUs each worker sees one (``CUDA_VISIBLE_DEVICES``: slot ``i`` gets GPU ``i`` modulo
    their number, so ``--jobs`` = number of GPUs is one run per GPU); without ``--threads`` the
    cores are split between the workers (``cores // jobs`` torch threads each, at least 1)
    instead of every worker using them all.
    """
    env: dict[str, str] = {}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    if opts.threads is None:
        opts = replace(opts, threads=max(1, cores // jobs))
    return env, opts


def _run_parallel(
    todo: list[tuple[RunConfig, Path]],
    data_dir: Path,
    opts: RunOptions,
    jobs: int,
    log: Callable[[str], None],
) -> int:
    """Train runs in up to ``jobs`` worker processes at once; returns the runs that finished.

    Each run is ``python -m training.worker SPEC`` (the same entry point torchrun and Slurm
    use), its output passed through, in one of ``jobs`` slots (``_slot_settings``: a GPU of
    its own, or a share of the cores). A failed run is reported and the others go on; running
    the sweep again resumes it from its checkpoint.
    """
    base = {**os.environ, "PYTHONPATH": _pythonpath()}
    gpus, cores = _visible_gpus(opts.device), _cpu_count()
    queue = list(enumerate(todo, start=1))
    running: list[tuple[subprocess.Popen, RunConfig, Path, int]] = []
    done = failed = 0
    while queue or running:
        while queue and len(running) < jobs:
            i, (cfg, rdir) = queue.pop(0)
            slot = min(set(range(jobs)) - {r[3] for r in running})
            env, wopts = _slot_settings(slot, jobs, opts, gpus, cores)
            where = f"GPU {env['CUDA_VISIBLE_DEVICES']}" if gpus else f"{wopts.threads} threads"
            log(f"[{i}/{len(todo)}] run {cfg.run_id} ({rdir.name}) in worker {slot} ({where})")
            spec = _write_spec(cfg, data_dir, rdir, wopts)
            proc = subprocess.Popen(_worker_cmd(spec), env={**base, **env})
            running.append((proc, cfg, rdir, slot))
        time.sleep(0.5)
        still = []
        for proc, cfg, rdir, slot in running:
            rc = proc.poll()
            if rc is None:
                still.append((proc, cfg, rdir, slot))
            elif _finished_despite(
                cfg, rdir, f"its worker exited with code {rc}" if rc else None, log
            ):
                done += 1
            else:
                failed += 1
                log(f"run {cfg.run_id} failed (exit code {rc}); run the sweep again to resume it")
        running = still
    if failed:
        log(f"sweep: {failed} runs failed in worker processes")
    return done


def _default_nproc() -> int:
    import torch

    return max(1, torch.cuda.device_count())


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH")
    return root if not old else f"{root}{os.pathsep}{old}"


def _write_spec(
    cfg: RunConfig, data_dir: Path, run_dir: Path, opts: RunOptions, node_rank: int = 0
) -> Path:
    spec = run_dir / ("spec.json" if node_rank == 0 else f"spec-node{node_rank}.json")
    atomic_write_json(
        spec,
        {
            "config": asdict(cfg),
            "data_dir": str(Path(data_dir).resolve()),
            "run_dir": str(run_dir.resolve()),
            "options": _options_dict(opts),
        },
    )
    return spec


def _run_slurm(
    todo: list[tuple[RunConfig, Path]],
    data_dir: Path,
    out: Path,
    opts: RunOptions,
    params: Mapping[str, Any],
    cluster: str | None,
    wait: bool,
    nproc: int | None,
    log: Callable[[str], None],
) -> int:
    import submitit

    from training.worker import SlurmTask

    flying = in_flight(out, [d.name for _, d in todo], lambda j: slurm_state(out, j, cluster))
    for name, (job, state) in flying.items():
        log(
            f"slurm: {name} is still {state} as job {job}; not submitting it again (if that "
            f"job is gone, remove its entry from {jobs_file(out)} and run again)"
        )
    todo = [(c, d) for c, d in todo if d.name not in flying]
    if not todo:
        return 0
    executor = submitit.AutoExecutor(folder=out / "slurm" / "%j", cluster=cluster)
    defaults: dict[str, Any] = {"timeout_min": 24 * 60, "nodes": 1}
    if nproc:
        defaults.update(tasks_per_node=nproc, gpus_per_node=nproc)
    executor.update_parameters(**{**defaults, **params})
    specs = [str(_write_spec(cfg, data_dir, rdir, opts)) for cfg, rdir in todo]
    jobs = executor.map_array(SlurmTask(), specs)
    log(f"slurm: submitted {len(jobs)} runs as job array {jobs[0].job_id.split('_')[0]}")
    record_jobs(out, {d.name: j.job_id for (_, d), j in zip(todo, jobs, strict=True)})
    if not wait:
        log("slurm: not waiting; run the same command again later to collect the table")
        return 0
    failed = 0
    for (cfg, rdir), job in zip(todo, jobs, strict=True):
        try:
            job.results()  # every task of the run (one per process with --nproc)
        except Exception as exc:  # a failed task: report, keep collecting the others
            first = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            if not _finished_despite(cfg, rdir, f"Slurm job {job.job_id} failed ({first[0]})", log):
                failed += 1
                log(f"slurm: run {cfg.run_id} failed: {exc}")
    if failed:
        log(f"slurm: {failed} runs failed; run the command again to retry/resume them")
    return len(jobs) - failed

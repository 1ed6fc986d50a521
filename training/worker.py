"""Entry point of one run in its own process(es): ``python -m training.worker SPEC.json``.

``torchrun``/``accelerate launch`` start it once per GPU (they set ``RANK``/``WORLD_SIZE``); a
Slurm array task runs :class:`SlurmTask`, which exports the same variables from Slurm's and is
requeued (resuming from the run's checkpoint) on preemption or timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["run_spec", "SlurmTask", "main"]


def run_spec(spec_path: str | Path) -> dict[str, Any]:
    """Train the run described by a spec file written by :mod:`training.sweep`."""
    from training.dataset import load_data
    from training.loop import RunConfig, RunOptions, train_run

    spec = json.loads(Path(spec_path).read_text())
    cfg = RunConfig.from_dict(spec["config"])
    opts = RunOptions(**spec["options"])
    data = load_data(spec["data_dir"])
    import torch.distributed as dist

    try:
        record = train_run(cfg, data, spec["run_dir"], opts)
        if dist.is_available() and dist.is_initialized():
            # rank 0 writes the record after the others have returned; without this barrier a
            # rank could tear the process group down under it (gloo aborts, ~1 in 6 CPU launches)
            dist.barrier()
        return record
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


class SlurmTask:
    """Picklable submitit task: one run per array element, requeued on preemption."""

    def __call__(self, spec_path: str) -> dict[str, Any]:
        import submitit

        env = submitit.JobEnvironment()
        if env.num_tasks > 1:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        return run_spec(spec_path)

    def checkpoint(self, spec_path: str) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(SlurmTask(), spec_path)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m training.worker SPEC.json``; prints a clear error on failure."""
    from training.errors import RunInterrupted, TrainingError

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m training.worker SPEC.json", file=sys.stderr)
        return 2
    try:
        run_spec(args[0])
    except TrainingError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except RunInterrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

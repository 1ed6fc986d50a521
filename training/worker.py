"""Entry point of one run in its own process(es): ``python -m training.worker SPEC.json``.

``torchrun``/``accelerate launch`` start it once per GPU (they set ``RANK``/``WORLD_SIZE``); a
Slurm array task runs :class:`SlurmTask`, which exports the same variables from Slurm's, and on
preemption or timeout checkpoints the run and is requeued (resuming from that checkpoint).
"""

from __future__ import annotations

import json
import signal
import sys
import time
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
    """Picklable submitit task: one run per array element, checkpointed and requeued on
    preemption or timeout.

    submitit's preemption/timeout signal (``USR2``, or ``SUBMITIT_PREEMPT_SIGNAL``; Slurm sends
    it ``signal_delay_s`` = 90 s before the end) no longer goes straight to submitit's handler,
    which would requeue and exit mid-step and lose the steps since the last checkpoint: it asks
    the run to stop (:func:`training.loop.request_stop`). After the current step every rank
    writes its checkpoint shards and the run raises :class:`~training.errors.RunInterrupted`;
    rank 0 then calls submitit's handler, which takes :meth:`checkpoint` (a
    ``DelayedSubmission`` of the same task) and requeues the job (``scontrol requeue``; the
    local executor restarts the task); the requeued task resumes from the checkpoint. The other
    ranks wait up to :attr:`GRACE_S` seconds for the requeue to end them (their exit must not end
    the job first). SIGTERM (``scancel``) checkpoints and stops without a requeue.
    """

    GRACE_S = 60.0

    def __call__(self, spec_path: str) -> dict[str, Any]:
        import submitit

        from training.errors import RunInterrupted
        from training.loop import request_stop

        env = submitit.JobEnvironment()
        if env.num_tasks > 1:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        sig = getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG)
        requeue = signal.getsignal(sig)  # submitit's: checkpoint() and requeue (on rank 0)
        caught: list[int] = []

        def on_preempt(signum: int, frame: Any) -> None:
            caught.append(signum)
            request_stop()

        try:
            signal.signal(sig, on_preempt)
        except ValueError:  # not the main thread: submitit's handler stays as it is
            requeue = None
        try:
            return run_spec(spec_path)
        except RunInterrupted:
            if caught and callable(requeue):
                if env.global_rank == 0:
                    requeue(caught[0], None)  # exits the task: requeued
                else:
                    time.sleep(self.GRACE_S)
            raise
        finally:
            if requeue is not None:
                signal.signal(sig, requeue)

    def checkpoint(self, spec_path: str) -> Any:
        """submitit's hook on preemption/timeout: the same task again (it resumes the run)."""
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

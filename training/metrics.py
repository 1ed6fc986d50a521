"""Per-step training metrics: one JSON line per optimizer step, optionally TensorBoard too.

Each run folder gets ``metrics.jsonl``: one object per optimizer step (``kind: "train"``:
step, tokens, loss, grad_norm, lr, tokens_per_s, mfu, memory_gb, elapsed_s) and one per
evaluation (``kind: "eval"``: the validation loss of every language). On resume, lines of steps
after the checkpoint (trained, then lost with the process) are dropped first, so the file always
describes one trajectory. With ``tensorboard_dir`` the same scalars go to TensorBoard
(``torch.utils.tensorboard``; needs the ``tensorboard`` package of the ``[train]`` extra).

Only rank 0 writes. Values are host floats the loop already has (one device sync per step).
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any

from training.atomic import atomic_write_text
from training.errors import TrainingError

__all__ = ["MetricsLog", "peak_memory_gb", "METRICS_FILE"]

METRICS_FILE = "metrics.jsonl"


def peak_memory_gb(device: Any) -> float:
    """Peak memory of this process in GB: the CUDA allocator's peak on a GPU, else peak RSS."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(device) / 1e9
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (1e9 if sys.platform == "darwin" else 1e6)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsLog:
    """Append-only per-step metrics of one run (rank 0; a no-op elsewhere).

    Parameters
    ----------
    run_dir : path
        The run folder; the log is ``run_dir / "metrics.jsonl"``.
    resume_step : int
        Steps already done (from the checkpoint): lines after it are dropped.
    enabled : bool
        False on ranks other than 0.
    tensorboard_dir : path, optional
        Also write TensorBoard scalars under ``tensorboard_dir / run_id``.
    run_id : str
        Tag of the TensorBoard run.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        resume_step: int = 0,
        *,
        enabled: bool = True,
        tensorboard_dir: str | os.PathLike[str] | None = None,
        run_id: str = "",
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.enabled = enabled
        self._tb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate(resume_step)
        self._fh = self.path.open("a", encoding="utf-8")
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise TrainingError(
                    f"--tensorboard needs the 'tensorboard' package ({exc}). Fix: pip install "
                    "tensorboard (it is in the [train] extra), or drop --tensorboard."
                ) from None
            self._tb = SummaryWriter(log_dir=str(Path(tensorboard_dir) / run_id), purge_step=None)

    def _truncate(self, resume_step: int) -> None:
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            if int(rec.get("step", 0)) <= resume_step:
                kept.append(line)
        atomic_write_text(self.path, "".join(k + "\n" for k in kept))

    def _write(self, rec: dict[str, Any]) -> None:
        self._fh.write(json.dumps({k: _clean(v) for k, v in rec.items()}) + "\n")
        self._fh.flush()

    def train_step(self, step: int, **values: float) -> None:
        """One optimizer step (1-based ``step``); ``values``: loss, grad_norm, lr, ..."""
        if not self.enabled:
            return
        self._write({"kind": "train", "step": step, **values})
        if self._tb is not None:
            for name, v in values.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self._tb.add_scalar(f"train/{name}", v, step)

    def evaluation(self, step: int, tokens: int, losses: dict[str, float]) -> None:
        """Validation losses (nats/token) per language after ``step``."""
        if not self.enabled:
            return
        self._write({"kind": "eval", "step": step, "tokens": tokens, "loss": losses})
        if self._tb is not None:
            for lang, v in losses.items():
                self._tb.add_scalar(f"val_loss/{lang}", v, step)

    def close(self) -> None:
        if not self.enabled:
            return
        self._fh.close()
        if self._tb is not None:
            self._tb.close()

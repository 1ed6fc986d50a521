"""Training runs for climb-bayes: plan CSV -> LLaMA-style models -> runs table.

Modules (one concept each): :mod:`~training.corpus` (documents, validation hold-out),
:mod:`~training.tokenizer` (byte-level BPE), :mod:`~training.mixture` (exact budgets, packing),
:mod:`~training.dataset` (cached tokens of a sweep), :mod:`~training.presets` (models),
:mod:`~training.flops` (FLOPs, MFU), :mod:`~training.checkpoint`, :mod:`~training.loop` (one run),
:mod:`~training.records` (atomic outputs), :mod:`~training.sweep` (plan -> runs),
:mod:`~training.cli` (the ``train`` command), :mod:`~training.worker` (torchrun/Slurm entry).

Nothing here imports ``climb_bayes``: the two meet only at the runs-table file format. Importing
this package does not import torch.
"""

from training.errors import RunInterrupted, TrainingError

__all__ = ["TrainingError", "RunInterrupted"]

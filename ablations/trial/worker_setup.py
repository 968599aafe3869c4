"""A trial's start on a worker process that Tune reuses for trial after trial: the compile
caches and GPU memory of earlier trials released, the process held to the trial's share of
its GPU, TF32 set; and what the loop reads of the process (its GPU's compute capability, the
graphs Dynamo has compiled). Plain PyTorch, no Ray; :mod:`ablations.trial.step` re-exports
them beside the training step that runs after them.
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def cuda_capability(device: torch.device) -> Optional[tuple[int, int]]:
    """(major, minor) of the trial's GPU; None on CPU."""
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def compiled_graph_count() -> int:
    """Graphs Dynamo has compiled in this process (its ``unique_graphs`` counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def start_trial_on_worker(device: torch.device) -> None:
    """Clean slate for a trial in a reused worker process (Tune reuses actors).

    - Dynamo's compile caches are per process: every earlier trial's model counts against its
      recompile limit (8), past which later compiled trials silently run eager. Reset them.
    - The CUDA caching allocator keeps the previous trial's blocks: release them, so that this
      trial's ``max_memory_reserved`` is its own, then start new peak statistics.
    """
    torch.compiler.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def cap_gpu_memory(device: torch.device, fraction: float) -> None:
    """Hold this process to ``fraction`` of its GPU's memory when a trial gets a fraction of a
    GPU (Ray's ``gpus_per_trial`` below 1: several trials share one GPU, and Ray only counts
    GPUs, it does not enforce memory). Call it once per trial, before the trial allocates,
    with the trial's GPU share: the trial config carries no GPU share, so the caller that
    knows it (the experiment layer, with ``gpus_per_trial``) calls
    ``cap_gpu_memory(resolve_device(config), gpus_per_trial)`` before ``train(config)``
    (``ablations.trial.loop.resolve_device``). The cap holds for the process until set again.

    - ``0 < fraction < 1``: ``torch.cuda.set_per_process_memory_fraction(fraction, device)``:
      the caching allocator refuses allocations beyond ``fraction`` of the device's total
      memory with ``torch.OutOfMemoryError``, which the trial's OOM recovery handles as any
      other. (It limits this process's caching allocator only, not memory allocated outside
      it, e.g. the CUDA context.)
    - ``fraction >= 1`` (one or more whole GPUs): the limit is set back to 1.0, so that a cap
      an earlier trial set in this reused worker process does not carry over.
    - on a device other than CUDA: nothing (after the argument is checked).

    Raises:
        ValueError: ``fraction`` is not a positive finite number.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not math.isfinite(fraction) or fraction <= 0:
        raise ValueError(f"GPU memory fraction must be a positive number, got {fraction!r}")
    if device.type != "cuda":
        return
    # float: torch raises TypeError for an int fraction
    torch.cuda.set_per_process_memory_fraction(float(min(fraction, 1.0)), device)


def set_float32_precision(precision: str, device: torch.device) -> None:
    """TF32 on or off, set once before compiling (and reset: worker processes are reused)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"

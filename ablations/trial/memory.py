"""Memory-aware defaults: probe the largest batch that fits, in the trial's share of the GPU.

``probe_max_batch`` runs single training steps (forward, backward, optimizer step) at growing
batch sizes on the trial's device until one runs out of memory, then bisects. The runner calls
it in a Ray task that holds the trial's resources, so it measures the GPU the trials will get.
"""

from __future__ import annotations

import gc
from typing import Any, Optional

import torch

from ablations.config import TrialConfig
from ablations.trial.loading import load_data
from ablations.trial.loop import resolve_device
from ablations.trial.step import (
    NO_HOOKS,
    LoopHooks,
    autocast_for,
    cap_gpu_memory,
    is_out_of_memory,
    loss_fn,
    make_optimizer,
)
from ablations.trial.model_builder import build_trial_model

MAX_PROBE_BATCH = 1024
# Auto-batch never leaves an epoch fewer optimizer steps than this: on small data any GPU fits
# the whole training split, and one step per epoch would leave every ablation undertrained.
MIN_STEPS_PER_EPOCH = 16
# Of the largest micro-batch whose training step fitted, use at most this share: the probe does
# not measure evaluation (halved on OOM, but slow), allocator fragmentation over an epoch or
# compile buffers.
AUTO_BATCH_HEADROOM = 0.8


def auto_batch_limit(train_samples: int, grad_accum_steps: int, *,
                     cap: int = MAX_PROBE_BATCH) -> int:
    """The largest micro-batch auto-batch may pick: one that keeps ``MIN_STEPS_PER_EPOCH``
    optimizer steps per epoch (never more than the training split)."""
    return max(1, min(cap, train_samples // (MIN_STEPS_PER_EPOCH * grad_accum_steps)))


def choose_micro_batch(found: dict[str, Any], limit: int) -> tuple[int, str]:
    """The micro-batch to train with from a :func:`probe_max_batch` result, and what limited
    it. A power of two, so OOM recovery can halve it down to 1; 0 when nothing fitted."""
    fitted = found["batch"]
    if fitted < 1:
        return 0, "memory: even batch 1 ran out of memory"
    if found["limited"]:  # no OOM up to the limit
        usable = min(fitted, limit)
        why = (f"epoch length: at most {limit} keeps >= {MIN_STEPS_PER_EPOCH} optimizer steps "
               "per epoch")
    else:
        usable = max(1, int(fitted * AUTO_BATCH_HEADROOM))
        why = (f"memory: {fitted} fitted one step; {AUTO_BATCH_HEADROOM:.0%} of it leaves room "
               "for what the probe did not measure")
    return 1 << (usable.bit_length() - 1), why


def one_step_fits(config: TrialConfig, data: Any, batch: int, device: torch.device,
                  hooks: LoopHooks = NO_HOOKS) -> bool:
    """One eager training step at ``batch``; False if it ran out of memory. ``hooks``: the
    loop's (:class:`~ablations.trial.step.LoopHooks`), called before the step."""
    failed = False
    model = optimizer = None
    try:
        hooks.memory_peak(batch, "in the auto-batch probe")
        model = build_trial_model(config, data.image_shape, len(data.scalar_names)).to(device)
        model.train()
        optimizer, _ = make_optimizer(model, config, device)
        channels, height, width = data.image_shape
        frames = torch.randn(batch, config.data.temporal_frames, channels, height, width,
                             device=device)
        scalars = torch.randn(batch, len(data.scalar_names), device=device)
        with autocast_for(config.systems.precision, device.type):
            mean, variance = model(frames if config.data.use_images else None,
                                   scalars if config.data.use_scalars else None)
        loss = loss_fn(mean.float(), None if variance is None else variance.float(),
                       torch.zeros(batch, device=device))
        loss.backward()
        optimizer.step()
    except Exception as exc:  # noqa: BLE001 - only OOM is an answer; the rest re-raised
        if not is_out_of_memory(exc):
            raise
        failed = True
    del model, optimizer
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return not failed


def gpu_share(fraction: float) -> Optional[float]:
    """The share of one GPU a trial may use, from the GPUs it asked for (``--gpus-per-trial``):
    ``fraction`` when it is a fraction of one GPU, None (no cap) for a whole GPU or more.

    Raises:
        ValueError: a fraction that is not positive.
    """
    if fraction <= 0:
        raise ValueError(f"a GPU share must be positive; got {fraction!r}")
    return fraction if fraction < 1 else None


def probe_max_batch(config: TrialConfig, *, limit: int = MAX_PROBE_BATCH,
                    gpu_fraction: float = 1.0, hooks: LoopHooks = NO_HOOKS) -> dict[str, Any]:
    """The largest batch (micro-batch) whose training step fits on this device, in the share
    of the GPU a trial gets (``gpu_fraction``: ``--gpus-per-trial``; below 1 the allocator is
    capped at that share while probing, as each trial's is:
    :func:`ablations.trial.step.cap_gpu_memory`).

    Doubles from 1 until a step runs out of memory or ``limit`` is reached, then bisects
    between the last size that fitted and the first that did not. ``hooks`` are the loop's
    (:class:`~ablations.trial.step.LoopHooks`; the runner passes none).

    Returns:
        ``{"batch": int, "device": str, "probed": [(size, fits), ...], "limited": bool,
        "gpu_share": float | None}``; ``batch`` is 0 when even 1 does not fit.
    """
    torch.set_num_threads(config.systems.num_threads)
    device = resolve_device(config)
    share = gpu_share(gpu_fraction)
    cap_gpu_memory(device, gpu_fraction)
    try:
        found = _probe(config, device, limit, hooks)
    finally:
        cap_gpu_memory(device, 1.0)  # a Ray worker runs other tasks after this one
    return {**found, "gpu_share": share}


def _probe(config: TrialConfig, device: torch.device, limit: int,
           hooks: LoopHooks) -> dict[str, Any]:
    data = load_data(config.replace(synthetic_train=8, synthetic_val=4, synthetic_test=4)
                     if not config.data.data_dir else config)
    probed: list[tuple[int, bool]] = []

    def fits(size: int) -> bool:
        ok = one_step_fits(config, data, size, device, hooks)
        probed.append((size, ok))
        return ok

    low, high = 0, None  # low fits (0: nothing yet), high does not
    size = 1
    while size <= limit:
        if fits(size):
            low, size = size, size * 2
        else:
            high = size
            break
    if high is None:
        return {"batch": low, "device": device.type, "probed": probed, "limited": True}
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return {"batch": low, "device": device.type, "probed": probed, "limited": False}

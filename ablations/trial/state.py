"""A trial's resumable state and the out-of-memory snapshot: what ``train(resume_state=...)``
continues from, the random generators, and the way back to an epoch's start after an OOM.

Plain PyTorch, no Ray; :mod:`ablations.trial.loop` uses it, :mod:`ablations.trial.step` steps.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ablations.config import TrialConfig
from ablations.trial.step import make_scaler


def rng_state(device: torch.device) -> dict[str, Any]:
    """The random generators a trial draws from: the CPU's, and the GPUs' on CUDA (dropout
    there draws from the CUDA generator)."""
    state: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and state.get("cuda_rng") is not None:
        # per visible device; a trial resumed with fewer visible GPUs sets those it has
        for index, generator in enumerate(state["cuda_rng"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(generator, index)


def resumable_state(epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, scaler: Any, history: list[dict[str, Any]], *,
                    device: torch.device, micro_batch: int, accum_steps: int, oom_retries: int,
                    compile_mode: str, eval_batch: int, wall_s: float) -> dict[str, Any]:
    """What ``train(resume_state=...)`` needs to continue after ``epoch``. Its tensors are the
    live ones (``state_dict`` does not copy): serialise or copy it before training goes on."""
    return {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        **rng_state(device),
        "history": list(history),
        "micro_batch": micro_batch,
        "accum_steps": accum_steps,
        "oom_retries": oom_retries,
        "compile_mode": compile_mode,  # what ran: OOM recovery may have left CUDA graphs
        "eval_batch": eval_batch,  # evaluation's OOM recovery may have halved it
        "wall_s": wall_s,  # the trial's time so far, across resumes
    }


def cpu_copy(value: Any) -> Any:
    """A deep copy with every tensor copied to the CPU: the OOM snapshot lives in host memory,
    not on the GPU that just ran out (parameters plus both Adam moments)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: cpu_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(item) for item in value)
    return copy.deepcopy(value)


def restore_state(state: dict[str, Any], model, optimizer, scheduler, scaler,
                  device: torch.device) -> None:
    """Weights back in place (``load_state_dict`` copies into the existing parameters).

    ``Optimizer.load_state_dict`` keeps the given tensors when they already have the
    parameter's device and dtype: restore from a copy, so that the optimizer never aliases
    ``state`` (a second restore of the same snapshot would see the moments the first
    retry updated)."""
    state = copy.deepcopy(state)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    set_rng_state(state, device)


def restart_epoch(snapshot: dict[str, Any], model, optimizer, scheduler, config: TrialConfig,
                  device: torch.device) -> torch.amp.GradScaler:
    """Back to the epoch's start after an OOM; returns the scaler to use from now on.

    A new GradScaler: ``load_state_dict`` restores the scale and growth tracker but not the
    per-optimizer stage, so an OOM between ``unscale_`` and ``update`` would leave the old
    scaler "unscaled" for a step that never happened (the retry then raises "unscale_() has
    already been called", or steps on still-scaled gradients without clipping)."""
    scaler = make_scaler(config, device)
    restore_state(snapshot, model, optimizer, scheduler, scaler, device)
    return scaler

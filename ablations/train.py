"""The training loop: plain PyTorch, no Ray. ``train(config, report=callback)``.

The loop builds the data and model from a :class:`TrialConfig`, trains ``epochs`` epochs, and
after each epoch calls ``report(metrics, state, predictions)``: ``state`` is everything needed to
resume (pass it back as ``resume_state``); ``predictions`` is the per-sample test table, given
with the last epoch only. The Ray trainable turns each call into ``tune.report`` + checkpoint.

Units: the model trains on a standardised target; every metric here is in km (target units).
The batches come from ``ablations/batches.py``; the step (precision, compile, accumulation),
out-of-memory recovery, resumable state and memory measurement from ``ablations/stepping.py``.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
import torch

from ablations.config import TrialConfig
from ablations.provenance import cpu_model
from ablations.stepping import (  # noqa: F401 - re-exported: the loop's public parts
    CompiledModel,
    PeakMemory,
    Stepper,
    TrialOutOfMemory,
    autocast_for,
    compile_mode_for,
    resumed_compile_mode,
    compiled_graph_count,
    cpu_copy,
    cuda_capability,
    injected_oom,
    is_out_of_memory,
    loss_fn,
    make_optimizer,
    make_scaler,
    peak_memory_mb,
    release_memory,
    reset_peak_memory,
    restart_epoch,
    resumable_state,
    set_float32_precision,
    set_rng_state,
    start_trial_on_worker,
)
from ablations.systems import resolve_systems
from ablations.batches import (  # noqa: F401 - re-exported
    NORMALISATION_SAMPLES,
    Batches,
    Normaliser,
    epoch_order,
    load_data,
)
from model.data import RegressionData
from ablations.models import build_trial_model, builtin_model_config
from model.model import ModelConfig

Reporter = Callable[[dict[str, Any], dict[str, Any], Optional[pd.DataFrame]], None]

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
Z90 = 1.6448536269514722  # central 90% interval of a Gaussian: mean ± Z90·std


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``inject_failure_at_epoch``; tests the failure path."""


@dataclass
class TrialOutcome:
    status: str  # ok / diverged
    metrics: dict[str, Any]  # the last reported metrics
    history: list[dict[str, Any]] = field(default_factory=list)
    predictions: Optional[pd.DataFrame] = None


# --------------------------------------------------------------------------------------------
# Model and loss
# --------------------------------------------------------------------------------------------


def model_config_for(config: TrialConfig, data: RegressionData) -> ModelConfig:
    """The trial's model for ``data`` as :func:`load_data` returns it (the columns in
    ``drop_scalars`` already left out)."""
    return model_config_for_shape(config, data.image_shape, len(data.scalar_names))


model_config_for_shape = builtin_model_config  # the built-in model's config (ablations/models)


def resolve_device(config: TrialConfig) -> torch.device:
    wanted = config.systems.device
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device=cuda but this worker has no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@dataclass
class Predictions:
    mean_km: np.ndarray
    std_km: Optional[np.ndarray]  # None without a variance head
    loss: float  # mean loss over the samples (standardised target)
    batch_size: int  # the evaluation batch that ran (halved after an out-of-memory error)


def predict(model: torch.nn.Module, batches: Batches, idx: np.ndarray, batch_size: int,
            norm: Normaliser, config: TrialConfig) -> Predictions:
    """Predicted mean and std in km for samples ``idx`` (in order), and the mean loss.
    Runs the plain (uncompiled) model under ``no_grad`` (rule 5). An out-of-memory error
    halves the evaluation batch and goes on from the chunk that failed; the trial fails only
    when a single sample does not fit."""
    model.eval()
    means, stds, losses = [], [], []
    start = 0
    while start < len(idx):
        chunk = idx[start : start + batch_size]
        out, oom_text = None, None
        try:
            out = _predict_chunk(model, batches, chunk, config)
        except Exception as exc:  # noqa: BLE001 - only OOM is handled; the rest re-raised
            if not is_out_of_memory(exc):
                raise
            oom_text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "OOM"
        if out is None:  # recover outside the except block (its frames pin the tensors)
            release_memory(batches.device)
            if batch_size == 1:
                raise TrialOutOfMemory(f"oom: out of memory evaluating one sample ({oom_text})")
            batch_size //= 2
            continue
        mean, std, loss = out
        means.append(mean)
        if std is not None:
            stds.append(std)
        losses.append(loss * len(chunk))
        start += len(chunk)
    mean_km = np.concatenate(means).astype(np.float64) * norm.target_std + norm.target_mean
    std_km = np.concatenate(stds).astype(np.float64) * norm.target_std if stds else None
    return Predictions(mean_km, std_km, sum(losses) / max(len(idx), 1), batch_size)


@torch.no_grad()
def _predict_chunk(model: torch.nn.Module, batches: Batches, chunk: np.ndarray,
                   config: TrialConfig) -> tuple[np.ndarray, Optional[np.ndarray], float]:
    injected_oom(config, len(chunk), "in evaluation")
    frames, scalars, target = batches(chunk)
    with autocast_for(config.systems.precision, batches.device.type):
        mean, variance = model(frames, scalars)
    mean = mean.float()
    variance = None if variance is None else variance.float()
    loss = float(loss_fn(mean, variance, target))
    std = None if variance is None else variance.sqrt().cpu().numpy().copy()
    return mean.cpu().numpy().copy(), std, loss  # copies: off any graph-owned buffer


def regression_metrics(target: np.ndarray, mean: np.ndarray, std: Optional[np.ndarray],
                       prefix: str) -> dict[str, float]:
    """MAE, RMSE, R², and with a std the Gaussian NLL and 90% interval coverage (km units)."""
    err = mean - target
    ss_tot = float(((target - target.mean()) ** 2).sum())
    out = {
        f"{prefix}_mae": float(np.abs(err).mean()),
        f"{prefix}_rmse": float(np.sqrt((err**2).mean())),
        f"{prefix}_r2": float(1.0 - (err**2).sum() / ss_tot) if ss_tot > 0 else float("nan"),
        f"{prefix}_nll": float("nan"),
        f"{prefix}_coverage_90": float("nan"),
    }
    if std is not None:
        out[f"{prefix}_nll"] = float(
            (HALF_LOG_2PI + np.log(std) + 0.5 * (err / std) ** 2).mean()
        )
        out[f"{prefix}_coverage_90"] = float((np.abs(err) <= Z90 * std).mean())
    return out


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def train(
    config: TrialConfig,
    *,
    report: Optional[Reporter] = None,
    resume_state: Optional[dict[str, Any]] = None,
    data: Optional[RegressionData] = None,
) -> TrialOutcome:
    """Train one trial; see the module docstring.

    Args:
        config: the trial's configuration. Unsafe switch combinations raise ``ConfigError``
            here too (the runner resolves them before any trial starts), or are mapped when
            ``config.systems.resolve_conflicts`` is set (rules that depend on the GPU a trial gets).
        report: called after every epoch with (metrics, resumable state, predictions or None).
            The state refers to the live model and optimizer tensors: serialise or deep-copy
            it inside the call.
        resume_state: a ``state`` given to ``report`` earlier; training continues after its epoch.
        data: reuse already-loaded data instead of loading it from ``config``.

    Returns:
        The outcome: status ``ok`` or ``diverged`` (a non-finite loss), the last metrics, the
        per-epoch history and the test predictions.

    Raises:
        TrialOutOfMemory: out of memory even at the smallest micro-batch.
    """
    started, started_at = time.perf_counter(), time.time()
    torch.set_num_threads(config.systems.num_threads)
    device = resolve_device(config)
    start_trial_on_worker(device)
    graphs_before = compiled_graph_count()
    config, _ = resolve_systems(config, device=device.type,
                                resolve=config.systems.resolve_conflicts,
                                capability=cuda_capability(device))
    set_float32_precision(config.systems.precision, device)
    torch.manual_seed(config.seed + config.seed_offset)  # seeds the CUDA generators too
    memory = PeakMemory(device)

    data = data if data is not None else load_data(config)
    if config.data.temporal_frames > data.num_frames:
        raise ValueError(
            f"temporal_frames={config.data.temporal_frames} but the data has {data.num_frames} "
            "frames"
        )
    train_idx, val_idx, test_idx = (data.indices(s) for s in ("train", "val", "test"))
    if len(train_idx) < config.optim.batch_size:
        raise ValueError(
            f"batch_size={config.optim.batch_size} exceeds the {len(train_idx)} training samples"
        )
    norm = Normaliser.fit(data, train_idx, seed=config.data.data_seed)
    batches = Batches(data, norm, config, device)

    model = build_trial_model(config, data.image_shape, len(data.scalar_names)).to(device)
    if config.systems.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer, optimizer_used = make_optimizer(model, config, device)
    scaler = make_scaler(config, device)
    steps_per_epoch = len(train_idx) // config.optim.batch_size  # drop_last: fixed shapes
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.optim.effective_lr,
        total_steps=config.optim.epochs * steps_per_epoch,
        pct_start=0.15,
    )
    history: list[dict[str, Any]] = []
    start_epoch, wall_before_s = 1, 0.0
    micro_batch, accum_steps = config.optim.micro_batch, config.optim.grad_accum_steps
    oom_retries = 0
    eval_batch, compile_mode = config.optim.eval_batch_size, config.systems.compile
    if resume_state is not None:  # in place: parameters keep their storage (rule 4)
        model.load_state_dict(resume_state["model"])
        # a copy: on the CPU the optimizer would keep (and update) the caller's tensors
        optimizer.load_state_dict(copy.deepcopy(resume_state["optimizer"]))
        scheduler.load_state_dict(resume_state["scheduler"])
        if resume_state["scaler"] and scaler.is_enabled():  # empty when saved without fp16
            scaler.load_state_dict(resume_state["scaler"])  # (a GPU without native bf16 maps
        set_rng_state(resume_state, device)  # bf16 to fp16 on a retry: a fresh scale then)
        history = list(resume_state["history"])
        start_epoch = int(resume_state["epoch"]) + 1
        micro_batch, accum_steps = resume_state["micro_batch"], resume_state["accum_steps"]
        oom_retries = resume_state["oom_retries"]
        eval_batch = resume_state.get("eval_batch", eval_batch)
        wall_before_s = resume_state.get("wall_s", 0.0)
        compile_mode = resumed_compile_mode(config.systems.compile,
                                            resume_state.get("compile_mode"), accum_steps)
    compiled = CompiledModel(model, config, compile_mode)  # once, after .to(device) and weights
    stepper = Stepper(compiled, optimizer, scheduler, scaler, batches, config)

    metrics: dict[str, Any] = history[-1] if history else {}
    status = "ok"
    compile_s = 0.0
    epoch = start_epoch - 1

    def state_now() -> dict[str, Any]:
        return resumable_state(epoch, model, optimizer, scheduler, stepper.scaler, history,
                               device=device, micro_batch=micro_batch, accum_steps=accum_steps,
                               oom_retries=oom_retries, compile_mode=compiled.mode,
                               eval_batch=eval_batch,
                               wall_s=wall_before_s + time.perf_counter() - started)

    def finish(metrics: dict[str, Any], *, test: bool) -> Optional[pd.DataFrame]:
        """Add the trial's final metrics (and test metrics); return the test predictions."""
        nonlocal eval_batch
        predictions = None
        if test:
            with memory.phase("eval"):
                predictions, test_metrics, eval_batch = _test(model, batches, data, test_idx,
                                                              config, norm, eval_batch)
            metrics.update(test_metrics)
        metrics.update(_final_metrics(history, device, memory, compile_s, oom_retries,
                                      compiled.mode, optimizer_used, start_epoch - 1),
                       precision_used=config.systems.precision, eval_batch_used=eval_batch,
                       compiled_graphs=compiled_graph_count() - graphs_before,
                       wall_s=wall_before_s + time.perf_counter() - started,
                       started_at=started_at)
        return predictions

    for epoch in range(start_epoch, config.optim.epochs + 1):
        if epoch == config.faults.inject_failure_at_epoch and resume_state is None:
            raise InjectedFailure(f"injected failure at epoch {epoch} (inject_failure_at_epoch)")
        epoch_started = time.perf_counter()
        order = epoch_order(train_idx, config.seed + config.seed_offset,
                            epoch)[: steps_per_epoch * config.optim.batch_size]
        # The OOM snapshot, in host memory (the GPU is what ran out).
        snapshot = cpu_copy(state_now()) if device.type == "cuda" or \
            config.faults.inject_oom_above_batch else None
        while True:
            run, oom_text = None, None
            try:
                with memory.phase("train"):
                    run = stepper.run_epoch(order, micro_batch, accum_steps,
                                            time_first_step=epoch == start_epoch)
            except Exception as exc:  # noqa: BLE001 - only OOM is handled; the rest re-raised
                if not is_out_of_memory(exc):
                    raise
                oom_text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "OOM"
            if run is not None:
                break
            # Recover outside the except block: the exception no longer pins frames/tensors.
            release_memory(device)
            floor = config.systems.min_micro_batch
            if micro_batch % 2 or micro_batch // 2 < floor or snapshot is None:
                raise TrialOutOfMemory(
                    f"oom: out of memory at micro-batch {micro_batch} x {accum_steps} "
                    f"accumulation steps; cannot halve below min_micro_batch="
                    f"{config.systems.min_micro_batch} ({oom_text})"
                )
            micro_batch, accum_steps = micro_batch // 2, accum_steps * 2
            oom_retries += 1
            # An OOM in step() may have updated part of the weights: start the epoch over.
            stepper.scaler = restart_epoch(snapshot, model, optimizer, scheduler, config, device)
            compiled.after_oom(accum_steps)
        train_loss = run.loss
        train_s = time.perf_counter() - epoch_started
        if epoch == start_epoch:
            compile_s = run.compile_s

        with memory.phase("eval"):
            val = predict(model, batches, val_idx, eval_batch, norm, config)
        eval_batch = val.batch_size
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val.loss,
            **regression_metrics(data.target[val_idx], val.mean_km, val.std_km, "val"),
            "lr": scheduler.get_last_lr()[0],
            "epoch_s": time.perf_counter() - epoch_started,
            "train_s": train_s,
            "train_samples_per_s": run.samples_per_s,
            "micro_batch": micro_batch,
            "accum_steps": accum_steps,
            "status": "ok",
            "reported_at": time.time(),
        }
        if not (math.isfinite(train_loss) and math.isfinite(val.loss)):
            status = "diverged"
            metrics["status"] = "diverged"
            metrics["error"] = (f"non-finite loss at epoch {epoch} (train {train_loss}, "
                                f"val {val.loss})")
        history.append(metrics)
        predictions = None
        if epoch == config.optim.epochs or status != "ok":
            predictions = finish(metrics, test=status == "ok")
        if report is not None:
            report(metrics, state_now(), predictions)
        if status != "ok":
            return TrialOutcome(status=status, metrics=metrics, history=history)
    if epoch < start_epoch:  # resumed after the last epoch: evaluate once more and report
        metrics = dict(metrics)
        predictions = finish(metrics, test=True)
        if report is not None:
            report(metrics, state_now(), predictions)
    return TrialOutcome(status=status, metrics=metrics, history=history, predictions=predictions)


def _final_metrics(history: list[dict[str, Any]], device: torch.device, memory: PeakMemory,
                   compile_s: float, oom_retries: int, compile_used: str,
                   optimizer_used: str, resumed_from_epoch: int) -> dict[str, Any]:
    return {
        "epochs_run": len(history),
        "resumed_from_epoch": resumed_from_epoch,
        # epoch 1's rate already excludes its first (compiling) step
        "steady_train_samples_per_s": statistics.median(h["train_samples_per_s"] for h in history),
        "mean_epoch_s": statistics.fmean(h["epoch_s"] for h in history),
        "torch_threads": torch.get_num_threads(),
        "compile_s": compile_s,
        # this run's peaks (a resumed trial measures the epochs it ran)
        "peak_mem_mb": max(memory.peak_mb.values()),
        "peak_mem_train_mb": memory.peak_mb["train"],
        "peak_mem_eval_mb": memory.peak_mb["eval"],
        "peak_mem_reserved_mb": memory.reserved_mb,
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
        else cpu_model(),
        "compile_used": compile_used,
        "optimizer_used": optimizer_used,
        "oom_retries": oom_retries,
        "final_micro_batch": history[-1]["micro_batch"],
        "final_accum_steps": history[-1]["accum_steps"],
    }


def _test(model, batches: Batches, data: RegressionData, test_idx: np.ndarray,
          config: TrialConfig, norm: Normaliser, eval_batch: int
          ) -> tuple[pd.DataFrame, dict[str, float], int]:
    test = predict(model, batches, test_idx, eval_batch, norm, config)
    target = data.target[test_idx]
    predictions = pd.DataFrame(
        {
            "sample_index": test_idx.astype(np.int64),
            "target": target,
            "pred_mean": test.mean_km,
            "pred_std": test.std_km if test.std_km is not None
            else np.full(len(test_idx), np.nan),
        }
    )
    strata = data.strata.iloc[test_idx].reset_index(drop=True)
    for col in strata.columns:
        predictions[f"stratum_{col}"] = strata[col].to_numpy()
    return predictions, regression_metrics(target, test.mean_km, test.std_km, "test"), \
        test.batch_size


def model_for_shapes(config: TrialConfig, data: RegressionData) -> torch.nn.Module:
    """Build (without training) the model a trial would train; for checks and tests."""
    return build_trial_model(config, data.image_shape, len(data.scalar_names))

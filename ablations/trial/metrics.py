"""From a trained model to metrics in km: predictions, regression metrics, the test table.

Plain PyTorch and numpy, no Ray. :func:`ablations.trial.loop.train` calls :func:`predict` and
:func:`regression_metrics` on the validation split after every epoch, and with the last epoch
:func:`evaluate_test_split` (the per-sample test table) and :func:`final_metrics` (the trial's
throughput, memory and recovery figures). The model trains on a standardised target;
everything here is in km (target units).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from ablations.trial.batches import Batches, Normaliser
from ablations.trial.host import cpu_model
from ablations.config import TrialConfig
from ablations.trial.step import (
    NO_HOOKS,
    LoopHooks,
    PeakMemory,
    TrialOutOfMemory,
    autocast_for,
    is_out_of_memory,
    loss_fn,
    release_memory,
)
from ablations.model.data import RegressionData

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
Z90 = 1.6448536269514722  # central 90% interval of a Gaussian: mean ± Z90·std




@dataclass
class Predictions:
    mean_km: np.ndarray
    std_km: Optional[np.ndarray]  # None without a variance head
    loss: float  # mean loss over the samples (standardised target)
    batch_size: int  # the evaluation batch that ran (halved after an out-of-memory error)


def predict(model: torch.nn.Module, batches: Batches, idx: np.ndarray, batch_size: int,
            norm: Normaliser, config: TrialConfig,
            memory: Optional[PeakMemory] = None, hooks: LoopHooks = NO_HOOKS) -> Predictions:
    """Predicted mean and std in km for samples ``idx`` (in order), and the mean loss.
    Runs the plain (uncompiled) model under ``no_grad`` (rule 5). An out-of-memory error
    halves the evaluation batch and goes on from the chunk that failed; the trial fails only
    when a single sample does not fit.

    With ``memory`` (inside its ``eval`` phase), the peak counts the chunks that ran: each
    chunk's peak is recorded when it succeeds, and after an out-of-memory recovery a new
    peak window starts, so the failed attempt's peak is not the evaluation's. ``hooks``: the
    loop's (:class:`~ablations.trial.step.LoopHooks`), called as each chunk runs."""
    model.eval()
    means, stds, losses = [], [], []
    start = 0
    while start < len(idx):
        chunk = idx[start : start + batch_size]
        out, oom_text = None, None
        try:
            out = _predict_chunk(model, batches, chunk, config, hooks)
        except Exception as exc:  # noqa: BLE001 - only OOM is handled; the rest re-raised
            if not is_out_of_memory(exc):
                raise
            oom_text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "OOM"
        if out is None:  # recover outside the except block (its frames pin the tensors)
            release_memory(batches.device)
            if batch_size == 1:
                raise TrialOutOfMemory(f"oom: out of memory evaluating one sample ({oom_text})")
            batch_size //= 2
            if memory is not None:
                memory.new_window()
            continue
        if memory is not None:
            memory.record()
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
                   config: TrialConfig, hooks: LoopHooks
                   ) -> tuple[np.ndarray, Optional[np.ndarray], float]:
    hooks.memory_peak(len(chunk), "in evaluation")
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


def mean_predictor_metrics(target: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray,
                           test_idx: np.ndarray) -> dict[str, float]:
    """MAE and RMSE (km) on the validation and test splits of the trivial predictor that
    predicts the training targets' mean for every sample: the reference of the explosion
    rule and of the baseline check (results/stats/baseline_check.py). Reads the targets only."""
    mean = float(target[train_idx].mean())
    out = {}
    for split, idx in (("val", val_idx), ("test", test_idx)):
        err = target[idx] - mean
        out[f"{split}_mae_mean_predictor"] = float(np.abs(err).mean())
        out[f"{split}_rmse_mean_predictor"] = float(np.sqrt((err**2).mean()))
    return out


def evaluate_test_split(model: torch.nn.Module, batches: Batches, data: RegressionData,
                        test_idx: np.ndarray, config: TrialConfig, norm: Normaliser,
                        eval_batch: int, memory: Optional[PeakMemory] = None,
                        hooks: LoopHooks = NO_HOOKS
                        ) -> tuple[pd.DataFrame, dict[str, float], int]:
    """The test split: the per-sample predictions table (target, predicted mean and std in km,
    one ``stratum_*`` column per stratum), the ``test_*`` metrics and the evaluation batch
    that ran (halved after an out-of-memory error); ``memory`` and ``hooks`` as in
    :func:`predict`."""
    test = predict(model, batches, test_idx, eval_batch, norm, config, memory, hooks)
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


def final_metrics(history: list[dict[str, Any]], device: torch.device, memory: PeakMemory,
                  compile_s: float, oom_retries: int, compile_used: str,
                  optimizer_used: str, resumed_from_epoch: int) -> dict[str, Any]:
    """The trial's summary over the epochs this run trained (``history``): throughput, the
    first step's compile time, peak memory per phase, what ran and how often OOM recovery
    halved the micro-batch."""
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

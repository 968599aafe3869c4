"""The training loop: plain PyTorch, no Ray. ``train(config, report=callback)``.

The loop builds the data and model from a :class:`TrialConfig`, trains ``epochs`` epochs, and
after each epoch calls ``report(metrics, state, predictions)``: ``state`` is everything needed to
resume (pass it back as ``resume_state``); ``predictions`` is the per-sample test table, given
with the last epoch only. The Ray trainable turns each call into ``tune.report`` + checkpoint.

Units: the model trains on a standardised target; every metric here is in km (target units).
"""

from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ablations.config import TrialConfig
from model.data import (
    RegressionData,
    SyntheticSpec,
    cap_split,
    load_directory,
    make_synthetic,
)
from model.model import ModelConfig, MultimodalRegressionModel, build_model

Reporter = Callable[[dict[str, Any], dict[str, Any], Optional[pd.DataFrame]], None]

# Sample this many training examples to compute the image normalisation (bounded for memmaps).
NORMALISATION_SAMPLES = 512
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
# Data
# --------------------------------------------------------------------------------------------


def load_data(config: TrialConfig) -> RegressionData:
    """The trial's data with its caps applied (capped-out samples get split '')."""
    if config.data_dir:
        data = load_directory(config.data_dir, split_seed=config.data_seed)
    else:
        data = make_synthetic(
            SyntheticSpec(
                n_train=config.synthetic_train,
                n_val=config.synthetic_val,
                n_test=config.synthetic_test,
                seed=config.data_seed,
            )
        )
    split = data.split
    if config.max_train_examples:
        split = cap_split(split, "train", config.max_train_examples, seed=config.data_seed)
    if config.max_eval_examples:
        for name in ("val", "test"):
            split = cap_split(split, name, config.max_eval_examples, seed=config.data_seed + 1)
    data.split = split
    return data


@dataclass(frozen=True)
class Normaliser:
    """Standardisation fitted on the train split: images per channel, scalars, target."""

    image_mean: np.ndarray  # (C,)
    image_std: np.ndarray  # (C,)
    scalar_mean: np.ndarray  # (S,)
    scalar_std: np.ndarray  # (S,)
    target_mean: float
    target_std: float

    @classmethod
    def fit(cls, data: RegressionData, train_idx: np.ndarray) -> "Normaliser":
        sample = train_idx[:NORMALISATION_SAMPLES]
        images = data.frames(sample, data.num_frames).astype(np.float64)  # (n, T, C, H, W)
        image_mean = images.mean(axis=(0, 1, 3, 4))
        image_std = images.std(axis=(0, 1, 3, 4))
        scalars = data.scalars[train_idx].astype(np.float64)
        target = data.target[train_idx]
        return cls(
            image_mean=image_mean.astype(np.float32),
            image_std=np.maximum(image_std, 1e-6).astype(np.float32),
            scalar_mean=scalars.mean(axis=0).astype(np.float32) if scalars.size else scalars[:0],
            scalar_std=np.maximum(scalars.std(axis=0), 1e-6).astype(np.float32)
            if scalars.size
            else scalars[:0],
            target_mean=float(target.mean()),
            target_std=float(max(target.std(), 1e-6)),
        )


class Batches:
    """Turns sample indices into normalised tensors on the device."""

    def __init__(self, data: RegressionData, norm: Normaliser, config: TrialConfig,
                 device: torch.device):
        self.data, self.norm, self.config, self.device = data, norm, config, device
        shape = (1, 1, -1, 1, 1)
        self.image_mean = torch.from_numpy(norm.image_mean).view(shape).to(device)
        self.image_std = torch.from_numpy(norm.image_std).view(shape).to(device)

    def __call__(self, idx: np.ndarray) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], torch.Tensor]:
        frames = None
        if self.config.use_images:
            raw = torch.from_numpy(self.data.frames(idx, self.config.temporal_frames))
            frames = (raw.to(self.device, non_blocking=True) - self.image_mean) / self.image_std
        scalars = None
        if self.config.use_scalars:
            s = (self.data.scalars[idx] - self.norm.scalar_mean) / self.norm.scalar_std
            scalars = torch.from_numpy(s.astype(np.float32)).to(self.device)
        target = (self.data.target[idx] - self.norm.target_mean) / self.norm.target_std
        return frames, scalars, torch.from_numpy(target.astype(np.float32)).to(self.device)


def epoch_order(train_idx: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Shuffle for ``epoch``, a pure function of (seed, epoch) so resumed runs shuffle alike."""
    return np.random.default_rng([seed, epoch]).permutation(train_idx)


# --------------------------------------------------------------------------------------------
# Model and loss
# --------------------------------------------------------------------------------------------


def model_config_for(config: TrialConfig, data: RegressionData) -> ModelConfig:
    channels, height, width = data.image_shape
    return ModelConfig(
        in_channels=channels,
        image_height=height,
        image_width=width,
        num_scalars=len(data.scalar_names),
        temporal_frames=config.temporal_frames,
        cnn_widths=config.widths,
        spatial_attention=config.spatial_attention,
        temporal_attention=config.temporal_attention,
        use_images=config.use_images,
        use_scalars=config.use_scalars,
        head=config.head,  # type: ignore[arg-type]
        embed_dim=config.embed_dim,
        num_heads=config.num_heads,
        dropout=config.dropout,
        gradient_checkpointing=config.gradient_checkpointing,
    )


def loss_fn(mean: torch.Tensor, variance: Optional[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL (without the constant) with a variance head, else MSE."""
    if variance is None:
        return F.mse_loss(mean, target)
    return 0.5 * (torch.log(variance) + (target - mean) ** 2 / variance).mean()


def resolve_device(config: TrialConfig) -> torch.device:
    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device=cuda but this worker has no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def predict(model: torch.nn.Module, batches: Batches, idx: np.ndarray, batch_size: int,
            norm: Normaliser) -> tuple[np.ndarray, Optional[np.ndarray], float]:
    """Predicted mean and std in km for samples ``idx`` (in order), and the mean loss."""
    model.eval()
    means, stds, losses = [], [], []
    for start in range(0, len(idx), batch_size):
        chunk = idx[start : start + batch_size]
        frames, scalars, target = batches(chunk)
        mean, variance = model(frames, scalars)
        losses.append(float(loss_fn(mean, variance, target)) * len(chunk))
        means.append(mean.float().cpu().numpy().copy())  # copy off any graph-owned buffer
        if variance is not None:
            stds.append(variance.float().sqrt().cpu().numpy().copy())
    mean_km = np.concatenate(means).astype(np.float64) * norm.target_std + norm.target_mean
    std_km = (
        np.concatenate(stds).astype(np.float64) * norm.target_std if stds else None
    )
    return mean_km, std_km, sum(losses) / max(len(idx), 1)


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


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window for this trial (workers are reused across trials)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # Linux: writing 5 resets VmHWM, the peak RSS, of this process
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated on GPU; peak RSS of this process on CPU (MiB), since the last
    :func:`reset_peak_memory` where the OS allows it (Linux), else since the process started."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


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
        config: the trial's configuration.
        report: called after every epoch with (metrics, resumable state, predictions or None).
            The state refers to the live model and optimizer tensors: serialise or deep-copy
            it inside the call.
        resume_state: a ``state`` given to ``report`` earlier; training continues after its epoch.
        data: reuse already-loaded data instead of loading it from ``config``.

    Returns:
        The outcome: status ``ok`` or ``diverged`` (a non-finite loss), the last metrics, the
        per-epoch history and the test predictions. Other errors propagate.
    """
    started = time.perf_counter()
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    device = resolve_device(config)
    reset_peak_memory(device)

    data = data if data is not None else load_data(config)
    if config.temporal_frames > data.num_frames:
        raise ValueError(
            f"temporal_frames={config.temporal_frames} but the data has {data.num_frames} frames"
        )
    train_idx, val_idx, test_idx = (data.indices(s) for s in ("train", "val", "test"))
    if len(train_idx) < config.batch_size:
        raise ValueError(
            f"batch_size={config.batch_size} exceeds the {len(train_idx)} training samples"
        )
    norm = Normaliser.fit(data, train_idx)
    batches = Batches(data, norm, config, device)

    model = build_model(model_config_for(config, data)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = len(train_idx) // config.batch_size  # drop_last: fixed shapes
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch, pct_start=0.15
    )
    history: list[dict[str, Any]] = []
    start_epoch = 1
    if resume_state is not None:
        model.load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        scheduler.load_state_dict(resume_state["scheduler"])
        torch.set_rng_state(resume_state["torch_rng"])
        history = list(resume_state["history"])
        start_epoch = int(resume_state["epoch"]) + 1
    # Compile once, after .to(device) and after restoring weights (never rebind afterwards).
    if config.compile == "off":
        forward = model
    elif config.compile_backend == "inductor":
        forward = torch.compile(model, mode=config.compile)
    else:  # modes are inductor options; other backends take none
        forward = torch.compile(model, backend=config.compile_backend)

    metrics: dict[str, Any] = history[-1] if history else {}
    status = "ok"
    epoch = start_epoch - 1
    for epoch in range(start_epoch, config.epochs + 1):
        if epoch == config.inject_failure_at_epoch and resume_state is None:
            raise InjectedFailure(f"injected failure at epoch {epoch} (inject_failure_at_epoch)")
        epoch_started = time.perf_counter()
        model.train()
        order = epoch_order(train_idx, config.seed, epoch)
        loss_sum = torch.zeros((), device=device)
        for step in range(steps_per_epoch):
            chunk = order[step * config.batch_size : (step + 1) * config.batch_size]
            frames, scalars, target = batches(chunk)
            mean, variance = forward(frames, scalars)
            loss = loss_fn(mean, variance, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            loss_sum += loss.detach()
        train_loss = float(loss_sum) / steps_per_epoch  # one sync per epoch, not per step
        train_s = time.perf_counter() - epoch_started

        val_mean, val_std, val_loss = predict(model, batches, val_idx, config.eval_batch_size, norm)
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            **regression_metrics(data.target[val_idx], val_mean, val_std, "val"),
            "lr": scheduler.get_last_lr()[0],
            "epoch_s": time.perf_counter() - epoch_started,
            "train_samples_per_s": steps_per_epoch * config.batch_size / train_s,
            "status": "ok",
        }
        if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
            status = "diverged"
            metrics["status"] = "diverged"
            metrics["error"] = f"non-finite loss at epoch {epoch} (train {train_loss}, val {val_loss})"
        history.append(metrics)
        last = epoch == config.epochs or status != "ok"
        predictions = None
        if last:
            metrics.update(_final_metrics(history, device, started))
            if status == "ok":
                predictions, test_metrics = _test(model, batches, data, test_idx, config, norm)
                metrics.update(test_metrics)
        if report is not None:
            report(metrics, resumable_state(epoch, model, optimizer, scheduler, history),
                   predictions)
        if status != "ok":
            return TrialOutcome(status=status, metrics=metrics, history=history)
    if epoch < start_epoch:  # resumed after the last epoch: evaluate once more and report
        metrics = dict(metrics)
        metrics.update(_final_metrics(history, device, started))
        predictions, test_metrics = _test(model, batches, data, test_idx, config, norm)
        metrics.update(test_metrics)
        if report is not None:
            report(metrics, resumable_state(epoch, model, optimizer, scheduler, history),
                   predictions)
        return TrialOutcome(status="ok", metrics=metrics, history=history, predictions=predictions)
    return TrialOutcome(status=status, metrics=metrics, history=history, predictions=predictions)


def resumable_state(epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, history: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``train(resume_state=...)`` needs to continue after ``epoch``."""
    return {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "history": list(history),
    }


def _final_metrics(history: list[dict[str, Any]], device: torch.device, started: float) -> dict[str, Any]:
    rates = [h["train_samples_per_s"] for h in history]
    steady = rates[1:] or rates  # the first epoch includes warm-up
    return {
        "epochs_run": len(history),
        "steady_train_samples_per_s": statistics.median(steady),
        "peak_mem_mb": peak_memory_mb(device),
        "wall_s": time.perf_counter() - started,
        "device": device.type,
    }


def _test(model, batches: Batches, data: RegressionData, test_idx: np.ndarray,
          config: TrialConfig, norm: Normaliser) -> tuple[pd.DataFrame, dict[str, float]]:
    mean, std, _ = predict(model, batches, test_idx, config.eval_batch_size, norm)
    target = data.target[test_idx]
    predictions = pd.DataFrame(
        {
            "sample_index": test_idx.astype(np.int64),
            "target": target,
            "pred_mean": mean,
            "pred_std": std if std is not None else np.full(len(test_idx), np.nan),
        }
    )
    strata = data.strata.iloc[test_idx].reset_index(drop=True)
    for col in strata.columns:
        predictions[f"stratum_{col}"] = strata[col].to_numpy()
    return predictions, regression_metrics(target, mean, std, "test")


def model_for_shapes(config: TrialConfig, data: RegressionData) -> MultimodalRegressionModel:
    """Build (without training) the model a trial would train; for checks and tests."""
    return build_model(model_config_for(config, data))

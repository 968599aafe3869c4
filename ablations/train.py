"""The training loop: plain PyTorch, no Ray. ``train(config, report=callback)``.

The loop builds the data and model from a :class:`TrialConfig`, trains ``epochs`` epochs, and
after each epoch calls ``report(metrics, state, predictions)``: ``state`` is everything needed to
resume (pass it back as ``resume_state``); ``predictions`` is the per-sample test table, given
with the last epoch only. The Ray trainable turns each call into ``tune.report`` + checkpoint.

Units: the model trains on a standardised target; every metric here is in km (target units).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ablations.config import CUDA_GRAPH_MODES, TrialConfig
from ablations.systems import NO_CUDA_GRAPH_MODE, resolve_systems
from model.data import (
    RegressionData,
    SyntheticSpec,
    cap_split,
    load_directory,
    load_synthetic,
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
        data = load_synthetic(
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
        channels = data.image_shape[0]
        total, total_sq, count = np.zeros(channels), np.zeros(channels), 0
        for start in range(0, len(sample), 64):  # in chunks: a bounded copy of the images
            chunk = data.frames(sample[start : start + 64], data.num_frames).astype(np.float64)
            total += chunk.sum(axis=(0, 1, 3, 4))
            total_sq += np.square(chunk).sum(axis=(0, 1, 3, 4))
            count += chunk.size // channels
        image_mean = total / count
        image_std = np.sqrt(np.maximum(total_sq / count - image_mean**2, 0.0))
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


class BatchSource(torch.utils.data.Dataset):
    """A list of sample indices -> CPU tensors (raw frames, normalised scalars, normalised
    target). Indexed by whole batches, so a DataLoader with a BatchSampler reads each batch
    with one sorted read of the (memory-mapped) images."""

    def __init__(self, data: RegressionData, norm: Normaliser, config: TrialConfig):
        self.data, self.norm, self.config = data, norm, config

    def __len__(self) -> int:
        return len(self.data.target)

    def __getitem__(self, idx: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = np.asarray(idx)
        frames = torch.empty(0)
        if self.config.use_images:
            frames = torch.from_numpy(self.data.frames(idx, self.config.temporal_frames))
        scalars = torch.empty(0)
        if self.config.use_scalars:
            s = (self.data.scalars[idx] - self.norm.scalar_mean) / self.norm.scalar_std
            scalars = torch.from_numpy(s.astype(np.float32))
        target = (self.data.target[idx] - self.norm.target_mean) / self.norm.target_std
        return frames, scalars, torch.from_numpy(target.astype(np.float32))


class Batches:
    """Moves CPU batches to the device and normalises the frames there."""

    def __init__(self, data: RegressionData, norm: Normaliser, config: TrialConfig,
                 device: torch.device):
        self.source = BatchSource(data, norm, config)
        self.config, self.device = config, device
        shape = (1, 1, -1, 1, 1)
        self.image_mean = torch.from_numpy(norm.image_mean).view(shape).to(device)
        self.image_std = torch.from_numpy(norm.image_std).view(shape).to(device)

    def to_device(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
                  ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], torch.Tensor]:
        frames, scalars, target = batch
        blocking = not (self.config.pin_memory and self.device.type == "cuda")
        out_frames = None
        if self.config.use_images:
            out_frames = (frames.to(self.device, non_blocking=not blocking) - self.image_mean) \
                / self.image_std
        out_scalars = scalars.to(self.device, non_blocking=not blocking) \
            if self.config.use_scalars else None
        return out_frames, out_scalars, target.to(self.device, non_blocking=not blocking)

    def __call__(self, idx: np.ndarray):
        return self.to_device(self.source[idx])

    def loader(self, order: np.ndarray, micro_batch: int) -> Iterable:
        """Training micro-batches in ``order`` (drop_last: every batch has the same shape)."""
        sampler = torch.utils.data.BatchSampler(order.tolist(), micro_batch, drop_last=True)
        if self.config.num_workers == 0 and not self.config.pin_memory:
            return (self.source[idx] for idx in sampler)
        return torch.utils.data.DataLoader(
            self.source, sampler=sampler, batch_size=None,
            num_workers=self.config.num_workers,
            pin_memory=self.config.pin_memory and self.device.type == "cuda",
            prefetch_factor=2 if self.config.num_workers else None,
        )


def epoch_order(train_idx: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Shuffle for ``epoch``, a pure function of (seed, epoch) so resumed runs shuffle alike."""
    return np.random.default_rng([seed, epoch]).permutation(train_idx)


# --------------------------------------------------------------------------------------------
# Model and loss
# --------------------------------------------------------------------------------------------


def model_config_for(config: TrialConfig, data: RegressionData) -> ModelConfig:
    return model_config_for_shape(config, data.image_shape, len(data.scalar_names))


def model_config_for_shape(config: TrialConfig, image_shape: tuple[int, int, int],
                           num_scalars: int) -> ModelConfig:
    """The trial's model for images of ``image_shape`` (C, H, W) and ``num_scalars`` scalars."""
    channels, height, width = image_shape
    return ModelConfig(
        in_channels=channels,
        image_height=height,
        image_width=width,
        num_scalars=num_scalars,
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
        channels_last=config.channels_last,
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
            norm: Normaliser, precision: str = "fp32"
            ) -> tuple[np.ndarray, Optional[np.ndarray], float]:
    """Predicted mean and std in km for samples ``idx`` (in order), and the mean loss.
    Runs the plain (uncompiled) model under ``no_grad`` (rule 5)."""
    model.eval()
    means, stds, losses = [], [], []
    for start in range(0, len(idx), batch_size):
        chunk = idx[start : start + batch_size]
        frames, scalars, target = batches(chunk)
        with autocast_for(precision, batches.device.type):
            mean, variance = model(frames, scalars)
        mean = mean.float()
        variance = None if variance is None else variance.float()
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
        config: the trial's configuration. Unsafe switch combinations raise ``ConfigError``
            here too (the runner resolves them before any trial starts).
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
    torch.set_num_threads(config.num_threads)
    device = resolve_device(config)
    config, _ = resolve_systems(config, device=device.type, resolve=False)
    set_float32_precision(config.precision, device)
    torch.manual_seed(config.seed)
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
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer, optimizer_used = make_optimizer(model, config, device)
    scaler = torch.amp.GradScaler(device.type, enabled=config.precision == "fp16")
    steps_per_epoch = len(train_idx) // config.batch_size  # drop_last: fixed shapes
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.effective_lr, total_steps=config.epochs * steps_per_epoch,
        pct_start=0.15,
    )
    history: list[dict[str, Any]] = []
    start_epoch = 1
    micro_batch, accum_steps, oom_retries = config.micro_batch, config.grad_accum_steps, 0
    if resume_state is not None:  # in place: parameters keep their storage (rule 4)
        model.load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        scheduler.load_state_dict(resume_state["scheduler"])
        scaler.load_state_dict(resume_state["scaler"])
        torch.set_rng_state(resume_state["torch_rng"])
        history = list(resume_state["history"])
        start_epoch = int(resume_state["epoch"]) + 1
        micro_batch, accum_steps = resume_state["micro_batch"], resume_state["accum_steps"]
        oom_retries = resume_state["oom_retries"]
    compiled = CompiledModel(model, config)  # once, after .to(device) and restoring weights
    stepper = Stepper(compiled, optimizer, scheduler, scaler, batches, config)

    metrics: dict[str, Any] = history[-1] if history else {}
    status = "ok"
    compile_s = 0.0
    epoch = start_epoch - 1

    def state_now() -> dict[str, Any]:
        return resumable_state(epoch, model, optimizer, scheduler, scaler, history,
                               micro_batch=micro_batch, accum_steps=accum_steps,
                               oom_retries=oom_retries)

    def finish(metrics: dict[str, Any], *, test: bool) -> Optional[pd.DataFrame]:
        """Add the trial's final metrics (and test metrics); return the test predictions."""
        metrics.update(_final_metrics(history, device, started, compile_s, oom_retries,
                                      compiled.mode, optimizer_used, start_epoch - 1),
                       started_at=started_at)
        if not test:
            return None
        predictions, test_metrics = _test(model, batches, data, test_idx, config, norm)
        metrics.update(test_metrics)
        return predictions

    for epoch in range(start_epoch, config.epochs + 1):
        if epoch == config.inject_failure_at_epoch and resume_state is None:
            raise InjectedFailure(f"injected failure at epoch {epoch} (inject_failure_at_epoch)")
        epoch_started = time.perf_counter()
        order = epoch_order(train_idx, config.seed, epoch)[: steps_per_epoch * config.batch_size]
        snapshot = copy.deepcopy(state_now()) if device.type == "cuda" or \
            config.inject_oom_above_batch else None
        while True:
            run, oom_text = None, None
            try:
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
            if micro_batch % 2 or micro_batch // 2 < config.min_micro_batch or snapshot is None:
                raise TrialOutOfMemory(
                    f"oom: out of memory at micro-batch {micro_batch} x {accum_steps} "
                    f"accumulation steps; cannot halve below min_micro_batch="
                    f"{config.min_micro_batch} ({oom_text})"
                )
            micro_batch, accum_steps, oom_retries = micro_batch // 2, accum_steps * 2, oom_retries + 1
            restore_state(snapshot, model, optimizer, scheduler, scaler)  # an OOM in step() may
            compiled.after_oom(accum_steps)  # have updated part of the weights: start over
        train_loss = run.loss
        train_s = time.perf_counter() - epoch_started
        if epoch == start_epoch:
            compile_s = run.compile_s

        val_mean, val_std, val_loss = predict(model, batches, val_idx, config.eval_batch_size,
                                              norm, config.precision)
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            **regression_metrics(data.target[val_idx], val_mean, val_std, "val"),
            "lr": scheduler.get_last_lr()[0],
            "epoch_s": time.perf_counter() - epoch_started,
            "train_s": train_s,
            "train_samples_per_s": run.samples_per_s,
            "micro_batch": micro_batch,
            "accum_steps": accum_steps,
            "status": "ok",
            "reported_at": time.time(),
        }
        if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
            status = "diverged"
            metrics["status"] = "diverged"
            metrics["error"] = f"non-finite loss at epoch {epoch} (train {train_loss}, val {val_loss})"
        history.append(metrics)
        predictions = None
        if epoch == config.epochs or status != "ok":
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


# --------------------------------------------------------------------------------------------
# Systems: precision, compile, optimizer, the step, OOM
# --------------------------------------------------------------------------------------------


class TrialOutOfMemory(RuntimeError):
    """Out of memory even at the smallest micro-batch; the trial fails with reason ``oom``."""


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "CUDA out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text
    )


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def set_float32_precision(precision: str, device: torch.device) -> None:
    """TF32 on or off, set once before compiling (and reset: worker processes are reused)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"


def autocast_for(precision: str, device_type: str):
    """The autocast context of a precision: bf16/fp16 mixed precision, else a no-op."""
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type, dtype=dtype)
    return contextlib.nullcontext()


def make_optimizer(model: torch.nn.Module, config: TrialConfig, device: torch.device
                   ) -> tuple[torch.optim.Optimizer, str]:
    """AdamW with the kernel asked for; ``auto``: fused on CUDA, foreach elsewhere."""
    impl = config.optimizer_impl
    if impl == "auto":
        impl = "fused" if device.type == "cuda" else "foreach"
    kwargs: dict[str, Any] = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.effective_lr,
                                  weight_decay=config.weight_decay, **kwargs)
    return optimizer, impl


class CompiledModel:
    """The model's training forward, compiled once (or not); evaluation uses the plain model."""

    def __init__(self, model: torch.nn.Module, config: TrialConfig):
        self.model, self.mode, self.backend = model, config.compile, config.compile_backend
        self.forward = self._build()

    def _build(self):
        if self.mode == "off":
            return self.model
        if self.backend == "inductor":
            return torch.compile(self.model, mode=self.mode, dynamic=False)
        return torch.compile(self.model, backend=self.backend, dynamic=False)

    @property
    def uses_cuda_graphs(self) -> bool:
        return self.backend == "inductor" and self.mode in CUDA_GRAPH_MODES

    def mark_step(self) -> None:
        if self.uses_cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()

    def after_oom(self, accum_steps: int) -> None:
        """Drop compiled code (new shapes follow); no CUDA graphs with accumulation."""
        if self.mode == "off":
            return
        torch.compiler.reset()
        if self.uses_cuda_graphs and accum_steps > 1:
            self.mode = NO_CUDA_GRAPH_MODE[self.mode]
        self.forward = self._build()


@dataclass
class EpochRun:
    loss: float  # mean micro-batch loss
    samples_per_s: float  # excluding the first (compiling) step when it was timed
    compile_s: float  # first step's time above a steady step's; 0 when not timed


class Stepper:
    """Runs one epoch of micro-batches with accumulation, precision and clipping."""

    def __init__(self, compiled: CompiledModel, optimizer, scheduler, scaler, batches: Batches,
                 config: TrialConfig):
        self.compiled, self.optimizer, self.scheduler, self.scaler = (
            compiled, optimizer, scheduler, scaler)
        self.batches, self.config = batches, config

    def run_epoch(self, order: np.ndarray, micro_batch: int, accum_steps: int, *,
                  time_first_step: bool) -> EpochRun:
        config, device = self.config, self.batches.device
        model = self.compiled.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        count, first_step_s = 0, 0.0
        started = time.perf_counter()
        for count, cpu_batch in enumerate(self.batches.loader(order, micro_batch), 1):
            frames, scalars, target = self.batches.to_device(cpu_batch)
            if config.inject_oom_above_batch and len(target) > config.inject_oom_above_batch:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory (injected: micro-batch {len(target)} > "
                    f"inject_oom_above_batch={config.inject_oom_above_batch})"
                )
            self.compiled.mark_step()
            with autocast_for(config.precision, device.type):
                mean, variance = self.compiled.forward(frames, scalars)
            loss = loss_fn(mean.float(), None if variance is None else variance.float(), target)
            self.scaler.scale(loss / accum_steps).backward()
            if count % accum_steps == 0:
                if config.grad_clip > 0:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad(set_to_none=True)
                self.scheduler.step()
            loss_sum += loss.detach()
            if count == 1 and time_first_step:
                _synchronize(device)
                first_step_s = time.perf_counter() - started
        _synchronize(device)  # one sync per epoch, none per step
        total_s = time.perf_counter() - started
        mean_loss = float(loss_sum) / max(count, 1)
        if time_first_step and count > 1:
            steady_s = (total_s - first_step_s) / (count - 1)
            return EpochRun(mean_loss, (count - 1) * micro_batch / (total_s - first_step_s),
                            max(0.0, first_step_s - steady_s))
        return EpochRun(mean_loss, count * micro_batch / total_s, 0.0)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def restore_state(state: dict[str, Any], model, optimizer, scheduler, scaler) -> None:
    """Weights back in place (``load_state_dict`` copies into the existing parameters)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])


def resumable_state(epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, scaler: Any, history: list[dict[str, Any]], *,
                    micro_batch: int, accum_steps: int, oom_retries: int) -> dict[str, Any]:
    """What ``train(resume_state=...)`` needs to continue after ``epoch``."""
    return {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "history": list(history),
        "micro_batch": micro_batch,
        "accum_steps": accum_steps,
        "oom_retries": oom_retries,
    }


def _final_metrics(history: list[dict[str, Any]], device: torch.device, started: float,
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
        "peak_mem_mb": peak_memory_mb(device),
        "peak_mem_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20
        if device.type == "cuda" else math.nan,
        "wall_s": time.perf_counter() - started,
        "device": device.type,
        "compile_used": compile_used,
        "optimizer_used": optimizer_used,
        "oom_retries": oom_retries,
        "final_micro_batch": history[-1]["micro_batch"],
        "final_accum_steps": history[-1]["accum_steps"],
    }


def _test(model, batches: Batches, data: RegressionData, test_idx: np.ndarray,
          config: TrialConfig, norm: Normaliser) -> tuple[pd.DataFrame, dict[str, float]]:
    mean, std, _ = predict(model, batches, test_idx, config.eval_batch_size, norm,
                           config.precision)
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

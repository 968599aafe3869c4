"""The training loop: plain PyTorch, no Ray. ``train(config, report=callback)``.

The loop builds the data and model from a :class:`TrialConfig`, trains ``epochs`` epochs, and
after each epoch calls ``report(metrics, state, predictions)``: ``state`` is everything needed to
resume (pass it back as ``resume_state``); ``predictions`` is the per-sample test table, given
with the last epoch only. The Ray trainable turns each call into ``tune.report`` + checkpoint.

:func:`train` reads top to bottom; the trial's live state between its phases (model, optimizer,
the micro-batch that OOM recovery chose, the history, ...) is one explicit object,
:class:`TrialRun`, with one method per phase: set up, resume, compile, train an epoch,
evaluate, finish, and the resumable state.

Units: the model trains on a standardised target; every metric here is in km (target units).
The batches come from ``ablations/trial/batches.py``; the step (precision, compile, accumulation),
out-of-memory recovery, resumable state and memory measurement from ``ablations/trial/step.py``;
predictions and metrics (validation, the test table, the trial's summary) from
``ablations/trial/metrics.py``.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd
import torch

from ablations.config import TrialConfig
from ablations.config.statuses import TrialStatus
from ablations.trial.step import (
    NO_HOOKS,
    CompiledModel,
    LoopHooks,
    PeakMemory,
    Stepper,
    TrialOutOfMemory,
    resumed_compile_mode,
    compiled_graph_count,
    cuda_capability,
    is_out_of_memory,
    make_optimizer,
    make_scaler,
    release_memory,
    set_float32_precision,
    start_trial_on_worker,
)
from ablations.trial.state import cpu_copy, restart_epoch, resumable_state, set_rng_state
from ablations.config.safety import resolve_systems
from ablations.trial.batches import (
    Batches,
    Normaliser,
    epoch_order,
)
from ablations.trial.loading import load_data
from ablations.trial.divergence import explosion_error
from ablations.trial.metrics import (
    evaluate_test_split,
    final_metrics,
    mean_predictor_metrics,
    predict,
    regression_metrics,
)
from ablations.model.data import RegressionData
from ablations.trial.model_builder import build_trial_model
from ablations.trial.model_config import builtin_model_config
from ablations.model.config import ModelConfig

Reporter = Callable[[dict[str, Any], dict[str, Any], Optional[pd.DataFrame]], None]


@dataclass
class TrialOutcome:
    status: TrialStatus  # OK or DIVERGED
    metrics: dict[str, Any]  # the last reported metrics
    history: list[dict[str, Any]] = field(default_factory=list)
    predictions: Optional[pd.DataFrame] = None


# --------------------------------------------------------------------------------------------
# Model and device
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


def model_for_shapes(config: TrialConfig, data: RegressionData) -> torch.nn.Module:
    """Build (without training) the model a trial would train; for checks and tests."""
    return build_trial_model(config, data.image_shape, len(data.scalar_names))


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def train(
    config: TrialConfig,
    *,
    report: Optional[Reporter] = None,
    resume_state: Optional[dict[str, Any]] = None,
    data: Optional[RegressionData] = None,
    hooks: LoopHooks = NO_HOOKS,
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
        hooks: seams for a caller that drives the failure paths on a CPU (a failure as an
            epoch starts, an out-of-memory error above a micro-batch, the compile backend;
            :class:`~ablations.trial.step.LoopHooks`). The runner passes none.

    Returns:
        The outcome: status ``ok`` or ``diverged`` (a non-finite loss, or a final validation
        MAE above ``divergence.EXPLOSION_FACTOR`` times the mean predictor's:
        that trial keeps its test metrics and predictions), the last metrics, the per-epoch
        history and the test predictions.

    Raises:
        TrialOutOfMemory: out of memory even at the smallest micro-batch.
    """
    trial = TrialRun(config, data, hooks)  # device, seed, data, model, optimizer: in order
    if resume_state is not None:
        trial.resume(resume_state)
    trial.compile()  # once, after .to(device) and the weights
    config = trial.config  # with the systems rules applied for the device it got
    metrics: dict[str, Any] = trial.history[-1] if trial.history else {}
    predictions = None
    for epoch in range(trial.start_epoch, config.optim.epochs + 1):
        hooks.epoch_start(epoch, resume_state is not None)
        trained = trial.train_epoch(epoch)
        metrics = trial.evaluate(epoch, trained)
        ok = metrics["status"] == TrialStatus.OK
        predictions = None
        if epoch == config.optim.epochs or not ok:  # the end: summarise, test unless diverged
            predictions = trial.finish(metrics, test=ok)
        if report is not None:
            report(metrics, trial.state(), predictions)
        if not ok:
            return TrialOutcome(status=TrialStatus(metrics["status"]), metrics=metrics,
                                history=trial.history)
    if trial.start_epoch > config.optim.epochs:  # resumed after the last epoch: finish, report
        metrics = dict(metrics)  # a copy: the history keeps the metrics reported with it
        predictions = trial.finish(metrics, test=True)
        if report is not None:
            report(metrics, trial.state(), predictions)
    return TrialOutcome(status=TrialStatus(metrics["status"]), metrics=metrics,
                        history=trial.history, predictions=predictions)


@dataclass
class _TrainedEpoch:
    loss: float  # mean micro-batch loss (standardised target)
    samples_per_s: float  # excluding the first (compiling) step of the run's first epoch
    started: float  # time.perf_counter() at the epoch's start
    train_s: float  # the training part of the epoch, OOM retries included


class TrialRun:
    """One trial's live state between the phases of :func:`train`.

    Built from the config (and optionally already-loaded data); then :meth:`resume` from a
    saved state, or not; then :meth:`compile`, once, before the first epoch. What changes as
    the trial runs lives here: ``epoch`` (the last one started), ``history`` (one metrics dict
    per epoch), the ``micro_batch`` × ``accum_steps`` and ``oom_retries`` of out-of-memory
    recovery, ``eval_batch`` (halved by an OOM in evaluation) and ``compile_s``.
    """

    compiled: CompiledModel  # set by compile()
    stepper: Stepper  # set by compile(); its scaler is replaced after an OOM

    def __init__(self, config: TrialConfig, data: Optional[RegressionData],
                 hooks: LoopHooks = NO_HOOKS):
        """Set up: the device and the systems rules for it, the seed, then the data, the model
        and its optimizer. The order fixes what the seeded generator draws."""
        self.started, self.started_at = time.perf_counter(), time.time()
        torch.set_num_threads(config.systems.num_threads)
        self.device = device = resolve_device(config)
        start_trial_on_worker(device)
        self.graphs_before = compiled_graph_count()
        config, _ = resolve_systems(config, device=device.type,
                                    resolve=config.systems.resolve_conflicts,
                                    capability=cuda_capability(device))
        self.config = config
        self.hooks = hooks  # the runner's: none (LoopHooks)
        set_float32_precision(config.systems.precision, device)
        # the init source: weight initialisation and dropout draw from this one generator
        torch.manual_seed(config.seeds.init)  # seeds the CUDA generators too
        self.memory = PeakMemory(device)

        self.data = data = data if data is not None else load_data(config)
        if config.data.temporal_frames > data.num_frames:
            raise ValueError(
                f"temporal_frames={config.data.temporal_frames} but the data has "
                f"{data.num_frames} frames"
            )
        self.train_idx, self.val_idx, self.test_idx = (
            data.indices(s) for s in ("train", "val", "test"))
        if len(self.train_idx) < config.optim.batch_size:
            raise ValueError(f"batch_size={config.optim.batch_size} exceeds the "
                             f"{len(self.train_idx)} training samples")
        self.norm = Normaliser.fit(data, self.train_idx, seed=config.seeds.data)
        self.mean_predictor = mean_predictor_metrics(data.target, self.train_idx, self.val_idx,
                                                     self.test_idx)
        self.batches = Batches(data, self.norm, config, device)

        # channels_last is applied by the builder, per parameter rank (4-D NHWC, 5-D NDHWC);
        # .to(device) keeps each tensor's memory format
        model = build_trial_model(config, data.image_shape, len(data.scalar_names)).to(device)
        self.model = model
        self.optimizer, self.optimizer_used = make_optimizer(model, config, device)
        self.scaler = make_scaler(config, device)
        self.steps_per_epoch = len(self.train_idx) // config.optim.batch_size  # drop_last
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=config.optim.effective_lr,
            total_steps=config.optim.epochs * self.steps_per_epoch,
            pct_start=0.15,
        )
        self.history: list[dict[str, Any]] = []
        self.start_epoch, self.epoch, self.wall_before_s = 1, 0, 0.0
        self.micro_batch, self.accum_steps = config.optim.micro_batch, config.optim.grad_accum_steps
        self.oom_retries = 0
        self.eval_batch, self.compile_mode = config.optim.eval_batch_size, config.systems.compile
        self.compile_s = 0.0

    def resume(self, state: dict[str, Any]) -> None:
        """Continue after ``state["epoch"]``, with the micro-batch, evaluation batch and
        compile mode that OOM recovery had left. In place: parameters keep their storage."""
        self.model.load_state_dict(state["model"])
        # a copy: on the CPU the optimizer would keep (and update) the caller's tensors
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        # The scaler's state is empty when saved without fp16; a GPU without native bf16 maps
        # bf16 to fp16 on a retry, which then starts from a fresh scale.
        if state["scaler"] and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        set_rng_state(state, self.device)
        self.history = list(state["history"])
        self.start_epoch = int(state["epoch"]) + 1
        self.epoch = self.start_epoch - 1
        self.micro_batch, self.accum_steps = state["micro_batch"], state["accum_steps"]
        self.oom_retries = state["oom_retries"]
        self.eval_batch = state["eval_batch"]
        self.wall_before_s = state["wall_s"]
        self.compile_mode = resumed_compile_mode(self.config.systems.compile,
                                                 state["compile_mode"], self.accum_steps)

    def compile(self) -> None:
        """Compile the whole model once, after ``.to(device)`` and the weights."""
        self.compiled = CompiledModel(self.model, self.config, self.compile_mode,
                                      backend=self.hooks.compile_backend)
        self.stepper = Stepper(self.compiled, self.optimizer, self.scheduler, self.scaler,
                               self.batches, self.config, self.hooks)

    def train_epoch(self, epoch: int) -> _TrainedEpoch:
        """Train one epoch. An out-of-memory error halves the micro-batch (doubling the
        accumulation steps) and starts the epoch over from a snapshot of its start."""
        self.epoch, config = epoch, self.config
        started = time.perf_counter()
        order = epoch_order(self.train_idx, config.seeds.order,
                            epoch)[: self.steps_per_epoch * config.optim.batch_size]
        # The OOM snapshot, in host memory (the GPU is what ran out); on a CPU only a hook
        # raises an out-of-memory error.
        snapshot = cpu_copy(self.state()) if self.device.type == "cuda" or \
            self.hooks.on_memory_peak is not None else None
        while True:
            run, oom_text = None, None
            try:
                with self.memory.phase("train"):
                    run = self.stepper.run_epoch(order, self.micro_batch, self.accum_steps,
                                                 time_first_step=epoch == self.start_epoch)
            except Exception as exc:  # noqa: BLE001 - only OOM is handled; the rest re-raised
                if not is_out_of_memory(exc):
                    raise
                oom_text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "OOM"
            if run is not None:
                break
            # Recover outside the except block: the exception no longer pins frames/tensors.
            self._halve_micro_batch(snapshot, oom_text)
        train_s = time.perf_counter() - started
        if epoch == self.start_epoch:
            self.compile_s = run.compile_s
        return _TrainedEpoch(run.loss, run.samples_per_s, started, train_s)

    def _halve_micro_batch(self, snapshot: Optional[dict[str, Any]], oom_text: str) -> None:
        # gradients, compiled code, gc, then the CUDA cache; the retry's phase is a new peak
        # window (the failed attempt's peak was not recorded)
        release_memory(self.device, self.optimizer, self.compiled)
        floor = self.config.systems.min_micro_batch
        if self.micro_batch % 2 or self.micro_batch // 2 < floor or snapshot is None:
            raise TrialOutOfMemory(
                f"oom: out of memory at micro-batch {self.micro_batch} x {self.accum_steps} "
                f"accumulation steps; cannot halve below min_micro_batch={floor} ({oom_text})"
            )
        self.micro_batch, self.accum_steps = self.micro_batch // 2, self.accum_steps * 2
        self.oom_retries += 1
        # An OOM in step() may have updated part of the weights: start the epoch over.
        self.scaler = self.stepper.scaler = restart_epoch(
            snapshot, self.model, self.optimizer, self.scheduler, self.config, self.device)
        self.compiled.after_oom(self.accum_steps)

    def evaluate(self, epoch: int, trained: _TrainedEpoch) -> dict[str, Any]:
        """The epoch's metrics (validation in km), appended to the history; ``status`` is
        ``diverged`` after a non-finite loss."""
        with self.memory.phase("eval"):
            val = predict(self.model, self.batches, self.val_idx, self.eval_batch, self.norm,
                          self.config, memory=self.memory, hooks=self.hooks)
        self.eval_batch = val.batch_size
        metrics = {
            "epoch": epoch,
            "train_loss": trained.loss,
            "val_loss": val.loss,
            **regression_metrics(self.data.target[self.val_idx], val.mean_km, val.std_km, "val"),
            "lr": self.scheduler.get_last_lr()[0],
            "epoch_s": time.perf_counter() - trained.started,
            "train_s": trained.train_s,
            "train_samples_per_s": trained.samples_per_s,
            "micro_batch": self.micro_batch,
            "accum_steps": self.accum_steps,
            # the value, a plain str: the history is saved in a state that torch.load reads
            # back with weights_only=True, which refuses the enum
            "status": TrialStatus.OK.value,
            "reported_at": time.time(),
        }
        if not (math.isfinite(trained.loss) and math.isfinite(val.loss)):
            metrics["status"] = TrialStatus.DIVERGED.value
            metrics["failure_reason"] = "non-finite-loss"
            metrics["error"] = (f"non-finite loss at epoch {epoch} (train {trained.loss}, "
                                f"val {val.loss})")
        self.history.append(metrics)
        return metrics

    def finish(self, metrics: dict[str, Any], *, test: bool) -> Optional[pd.DataFrame]:
        """Add the trial's final metrics (and test metrics) to ``metrics``, in place; return
        the test predictions. The mean predictor's metrics come with them, and a trial whose
        validation MAE exceeds ``EXPLOSION_FACTOR`` times the mean predictor's is set
        ``diverged`` here (``failure_reason`` ``exploded``), its test metrics kept: the rule
        applies to the final epoch only, training is never stopped for it."""
        predictions = None
        if test:
            with self.memory.phase("eval"):
                predictions, test_metrics, self.eval_batch = evaluate_test_split(
                    self.model, self.batches, self.data, self.test_idx, self.config, self.norm,
                    self.eval_batch, memory=self.memory, hooks=self.hooks)
            metrics.update(test_metrics)
        metrics.update(self.mean_predictor)
        exploded = explosion_error(metrics["val_mae"], metrics["val_mae_mean_predictor"]) \
            if metrics["status"] == TrialStatus.OK else None
        if exploded is not None:
            metrics.update(status=TrialStatus.DIVERGED.value, error=exploded,
                           failure_reason="exploded")
        metrics.update(final_metrics(self.history, self.device, self.memory, self.compile_s,
                                     self.oom_retries, self.compiled.mode, self.optimizer_used,
                                     self.start_epoch - 1),
                       precision_used=self.config.systems.precision,
                       eval_batch_used=self.eval_batch,
                       compiled_graphs=compiled_graph_count() - self.graphs_before,
                       wall_s=self.wall_s(), started_at=self.started_at)
        return predictions

    def state(self) -> dict[str, Any]:
        """The resumable state after ``epoch`` (live tensors: see :func:`resumable_state`)."""
        return resumable_state(self.epoch, self.model, self.optimizer, self.scheduler,
                               self.stepper.scaler, self.history, device=self.device,
                               micro_batch=self.micro_batch, accum_steps=self.accum_steps,
                               oom_retries=self.oom_retries, compile_mode=self.compiled.mode,
                               eval_batch=self.eval_batch, wall_s=self.wall_s())

    def wall_s(self) -> float:
        """The trial's time so far, across resumes."""
        return self.wall_before_s + time.perf_counter() - self.started

"""The training step and what keeps it alive on a GPU: precision, compile, the optimizer kernel,
accumulation, out-of-memory recovery and memory measurement (a trial's resumable state and
the OOM snapshot: :mod:`ablations.trial.state`; a trial's start on a reused worker, its share
of the GPU's memory and TF32: :mod:`ablations.trial.worker_setup`).

Plain PyTorch, no Ray; :func:`ablations.trial.loop.train` drives it. The rules it follows (which
switches are safe together, how to recover from an OOM) are in ``docs/training-rules.md``.
Lines that only run on CUDA are written against the PyTorch docs of the pinned versions and
exercised on the CPU through the same code path where one exists (a CPU ``GradScaler``, an
out-of-memory error raised by a test's :class:`LoopHooks`, state tagged as CUDA at save time);
``tests/test_gpu_paths.py`` says which.
"""

from __future__ import annotations

import contextlib
import gc
import math
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F

from ablations.config import CUDA_GRAPH_MODES, TrialConfig
from ablations.config.safety import NO_CUDA_GRAPH_MODE
from ablations.trial.worker_setup import (  # noqa: F401 (re-exported)
    cap_gpu_memory,
    compiled_graph_count,
    cuda_capability,
    set_float32_precision,
    start_trial_on_worker,
)


class TrialOutOfMemory(RuntimeError):
    """Out of memory even at the smallest micro-batch; the trial fails with reason ``oom``."""


# What an out-of-memory error says when it is not a torch.OutOfMemoryError: the caching
# allocator raises OutOfMemoryError ("CUDA out of memory. Tried to allocate ..."), but an
# allocation outside it (cuBLAS/cuDNN workspaces, a kernel's own cudaMalloc, NCCL) raises a
# plain RuntimeError, or torch.AcceleratorError (a RuntimeError) in recent torch, with the CUDA
# runtime's text for cudaErrorMemoryAllocation: "CUDA error: out of memory". That error is not
# sticky (the context stays usable), so the trial can halve its micro-batch like any OOM.
OUT_OF_MEMORY_TEXTS = ("CUDA out of memory", "CUDA error: out of memory",
                       "CUBLAS_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error the trial can recover from by halving."""
    if isinstance(exc, torch.OutOfMemoryError):  # torch >= 2.5 (the floor in pyproject.toml)
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(t in text for t in OUT_OF_MEMORY_TEXTS)


@dataclass(frozen=True)
class LoopHooks:
    """Seams of the built-in loop (:func:`ablations.trial.loop.train`, its step, its evaluation
    and the auto-batch probe) for a caller that drives the loop's failure paths where they
    cannot happen by themselves: on a CPU no allocation raises ``torch.OutOfMemoryError`` and
    inductor needs a C++ compiler. The runner's trials run with :data:`NO_HOOKS` (every hook
    unset); a caller that sets one is a test: a unit test calling ``train(...)`` directly, or
    the tests' training function (``tests/faulty.py``) that runs the built-in loop with hooks
    taken from its own config keys.
    """

    # Called as each epoch starts, with the epoch (1-based) and whether this call of train()
    # continued from a saved state. What it raises ends the trial there, as a crash would.
    on_epoch_start: Optional[Callable[[int, bool], None]] = None
    # Called with a micro-batch's size and where (in the optimizer step, in evaluation, in the
    # auto-batch probe) at the moment that batch's memory peaks. What it raises is handled
    # there as the same error from the GPU would be: an out-of-memory error halves the
    # micro-batch or the evaluation batch, or marks the probed size as not fitting. While it is
    # set, the loop keeps its OOM snapshot on a CPU too.
    on_memory_peak: Optional[Callable[[int, str], None]] = None
    # torch.compile's backend under the ``compile`` switch. A seam, not a config key: the
    # switch ablates what inductor's kernels do to a trial's speed, memory and numbers, and the
    # rules that keep it safe (CUDA graphs, a C++ compiler on a CPU; docs/training-rules.md)
    # are inductor's. "eager" (Dynamo's graph capture only) and "aot_eager" (plus AOTAutograd's
    # traced backward) generate no kernels, so a trial compiled by them would record a compile
    # mode whose speed says nothing about it; they run the compile paths (capture, the
    # recompile limit, compiling again after an OOM) without a C++ compiler in a fraction of
    # inductor's time, which is what tests on a CPU need.
    compile_backend: str = "inductor"

    def epoch_start(self, epoch: int, resumed: bool) -> None:
        """:attr:`on_epoch_start`, where it is set."""
        if self.on_epoch_start is not None:
            self.on_epoch_start(epoch, resumed)

    def memory_peak(self, batch: int, where: str) -> None:
        """:attr:`on_memory_peak`, where it is set."""
        if self.on_memory_peak is not None:
            self.on_memory_peak(batch, where)


NO_HOOKS = LoopHooks()  # the runner's: no hook set, inductor


def release_memory(device: torch.device, optimizer: Optional[torch.optim.Optimizer] = None,
                   compiled: Optional["CompiledModel"] = None) -> None:
    """After an out-of-memory error (outside the ``except`` block, so that the exception no
    longer pins the failed step's frames), in this order: drop the gradients
    (``zero_grad(set_to_none=True)``), drop the compiled code and what it holds
    (``torch.compiler.reset``, with compile on), collect what those released, and only then
    return the caching allocator's free blocks to the GPU (``torch.cuda.empty_cache``): a
    block still referenced when the cache is emptied stays reserved.

    Evaluation passes neither ``optimizer`` nor ``compiled`` (it holds no gradients and runs
    the plain model)."""
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    if compiled is not None:
        compiled.drop()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def loss_fn(mean: torch.Tensor, variance: Optional[torch.Tensor],
            target: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL (without the constant) with a variance head, else MSE."""
    if variance is None:
        return F.mse_loss(mean, target)
    return 0.5 * (torch.log(variance) + (target - mean) ** 2 / variance).mean()


# --------------------------------------------------------------------------------------------
# Precision, the optimizer and compile
# --------------------------------------------------------------------------------------------


def autocast_for(precision: str, device_type: str):
    """The autocast context of a precision: bf16/fp16 mixed precision, else a no-op."""
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type, dtype=dtype)
    return contextlib.nullcontext()


def make_scaler(config: TrialConfig, device: torch.device) -> torch.amp.GradScaler:
    """A new GradScaler: enabled for fp16 only (bf16 has fp32's range)."""
    return torch.amp.GradScaler(device.type, enabled=config.systems.precision == "fp16")


def make_optimizer(model: torch.nn.Module, config: TrialConfig, device: torch.device
                   ) -> tuple[torch.optim.Optimizer, str]:
    """AdamW with the kernel asked for; ``auto``: fused on CUDA, foreach elsewhere."""
    impl = config.systems.optimizer_impl
    if impl == "auto":
        impl = "fused" if device.type == "cuda" else "foreach"
    kwargs: dict[str, Any] = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.effective_lr,
                                  weight_decay=config.optim.weight_decay, **kwargs)
    return optimizer, impl


def compile_mode_for(mode: str, accum_steps: int) -> str:
    """The compile mode that can run with ``accum_steps`` micro-batches per step: CUDA graphs
    and gradient accumulation do not mix (pytorch #169545), so a CUDA-graph mode becomes the
    nearest mode without graphs."""
    if mode in CUDA_GRAPH_MODES and accum_steps > 1:
        return NO_CUDA_GRAPH_MODE[mode]
    return mode


def resumed_compile_mode(configured: str, saved: Optional[str], accum_steps: int) -> str:
    """The compile mode a resumed trial runs: the one its state saved when OOM recovery switched
    to it from ``configured`` (what ran, not what was asked), else ``configured``, which this
    worker's rules have checked, and in either case under the rules for ``accum_steps``."""
    allowed = {configured, NO_CUDA_GRAPH_MODE.get(configured, configured)}
    return compile_mode_for(saved if saved in allowed else configured, accum_steps)


class CompiledModel:
    """The model's training forward, compiled once (or not); evaluation uses the plain model."""

    def __init__(self, model: torch.nn.Module, config: TrialConfig, mode: Optional[str] = None,
                 *, backend: str = NO_HOOKS.compile_backend):
        self.model, self.backend = model, backend  # backend: LoopHooks.compile_backend
        self.mode = mode if mode is not None else config.systems.compile
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

    def drop(self) -> None:
        """Drop the compiled code and what it holds (``torch.compiler.reset``; with CUDA graphs,
        their memory pool): part of :func:`release_memory` after an OOM. Until
        :meth:`after_oom` rebuilds it, the forward is the plain model."""
        if self.mode == "off" or self.forward is self.model:
            return
        self.forward = self.model
        torch.compiler.reset()

    def after_oom(self, accum_steps: int) -> None:
        """Compile again for the new micro-batch (compiled code was dropped: new shapes follow);
        no CUDA graphs with accumulation (pytorch #169545): a CUDA-graph mode becomes the
        nearest mode without graphs. The mode that runs from now on is ``self.mode``: it is
        saved with the trial's state and reported as ``compile_used``."""
        if self.mode == "off":
            return
        self.drop()  # when release_memory has not already
        if self.backend == "inductor":
            self.mode = compile_mode_for(self.mode, accum_steps)
        self.forward = self._build()


# --------------------------------------------------------------------------------------------
# One epoch
# --------------------------------------------------------------------------------------------


@dataclass
class EpochRun:
    loss: float  # mean micro-batch loss
    samples_per_s: float  # excluding the first (compiling) step when it was timed
    compile_s: float  # first step's time above a steady step's; 0 when not timed


class Stepper:
    """Runs one epoch of micro-batches with accumulation, precision and clipping."""

    def __init__(self, compiled: CompiledModel, optimizer, scheduler, scaler, batches: Any,
                 config: TrialConfig, hooks: LoopHooks = NO_HOOKS):
        self.compiled, self.optimizer, self.scheduler, self.scaler = (
            compiled, optimizer, scheduler, scaler)
        self.batches, self.config, self.hooks = batches, config, hooks

    def run_epoch(self, order: np.ndarray, micro_batch: int, accum_steps: int, *,
                  time_first_step: bool) -> EpochRun:
        config, device = self.config, self.batches.device
        model = self.compiled.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        count, first_step_s = 0, 0.0
        last_step = len(order) // micro_batch // accum_steps * accum_steps
        started = time.perf_counter()
        for count, cpu_batch in enumerate(self.batches.loader(order, micro_batch), 1):
            frames, scalars, target = self.batches.to_device(cpu_batch)
            self.compiled.mark_step()
            with autocast_for(config.systems.precision, device.type):
                mean, variance = self.compiled.forward(frames, scalars)
            loss = loss_fn(mean.float(), None if variance is None else variance.float(), target)
            self.scaler.scale(loss / accum_steps).backward()
            if count % accum_steps == 0:
                if config.optim.grad_clip > 0:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
                if count == last_step:  # the worst moment: every other step of the epoch
                    self.hooks.memory_peak(micro_batch, "in the optimizer step")  # has run
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


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window."""
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


class PeakMemory:
    """Peak memory of each phase (``train``, ``eval``) over a trial's epochs: evaluation runs
    ``eval_batch_size`` samples at once and can need more than any training step, which would
    hide what gradient checkpointing saves.

    Only work that succeeded counts: an attempt that ran out of memory peaked at about the
    whole GPU, which says nothing about the micro-batch that then ran. A phase that ends with
    an exception records nothing (training's OOM recovery starts the epoch over in a new
    phase); inside a phase that recovers by itself (evaluation halving its batch), the work
    done so far is recorded with :meth:`record` and, after the recovery, :meth:`new_window`
    starts a new peak window."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = {"train": 0.0, "eval": 0.0}
        self.reserved_mb = math.nan if device.type != "cuda" else 0.0
        self._phase: Optional[str] = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """The peak of the block, kept (as the maximum over the trial) if it ends normally."""
        self._phase = name
        reset_peak_memory(self.device)
        try:
            yield
            self.record()
        finally:
            self._phase = None

    def record(self) -> None:
        """Keep the current window's peak for the current phase (no-op outside a phase)."""
        if self._phase is None:
            return
        self.peak_mb[self._phase] = max(self.peak_mb[self._phase],
                                        peak_memory_mb(self.device))
        if self.device.type == "cuda":
            self.reserved_mb = max(self.reserved_mb,
                                   torch.cuda.max_memory_reserved(self.device) / 2**20)

    def new_window(self) -> None:
        """After an out-of-memory recovery inside a phase: forget the failed attempt's peak."""
        reset_peak_memory(self.device)

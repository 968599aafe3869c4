"""The sections of a trial's configuration other than the model's own: ``data`` (which data,
and which of its inputs the model sees), ``optim`` and ``systems``; each section's defaults and
validation in one place. :class:`~ablations.config.trial.TrialConfig` holds one of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ablations.config.values import ConfigError, at_least, one_of, parse_scalar_names
from ablations.model.config import DEFAULT_FRAMES

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "single")
LR_SCALINGS = ("fixed", "linear", "sqrt")
DEVICES = ("auto", "cpu", "cuda")



@dataclass(frozen=True)
class DataConfig:
    """The data, and which of its inputs the model sees (for any model)."""

    data_dir: str = ""  # "" = the embedded synthetic set; else an absolute directory path
    # The data draw's seed: synthetic generator / seeded split of a file dataset / the caps'
    # subsets / the normalisation sample; plus the trial's seed when ``seed_sources`` has data.
    data_seed: int = 0
    synthetic_train: int = 1280  # synthetic samples per split
    synthetic_val: int = 256
    synthetic_test: int = 512
    max_train_examples: int = 0  # 0 = all; else a seeded subset of the train split
    max_eval_examples: int = 0  # 0 = all; caps val and test alike
    temporal_frames: int = DEFAULT_FRAMES  # the most recent frames; 1: ablation `single_frame`
    use_images: bool = True  # False: the model gets no frames; ablation `no_images`
    use_scalars: bool = True  # False: the model gets no scalars; ablation `no_scalars`
    # Scalar columns the model does not see (comma-separated, '' = none): the
    # leave-one-covariate-out ablations of the `features` space.
    drop_scalars: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "drop_scalars", parse_scalar_names(self.drop_scalars))
        at_least(self, 1, "synthetic_train", "synthetic_val", "synthetic_test",
                  "temporal_frames")
        at_least(self, 0, "max_train_examples", "max_eval_examples")
        if not (self.use_images or self.use_scalars):
            raise ConfigError("use_images and use_scalars are both false: the model has no input")
        if self.data_dir and not Path(self.data_dir).is_absolute():
            raise ConfigError(f"data_dir must be absolute in a trial config, got {self.data_dir!r}")

    @property
    def dropped_scalars(self) -> tuple[str, ...]:
        """The scalar columns left out, as names."""
        return tuple(self.drop_scalars.split(",")) if self.drop_scalars else ()


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation: epochs, batch, learning rate, regularisation."""

    epochs: int = 4
    batch_size: int = 32  # effective batch per optimizer step (micro-batch x grad_accum_steps)
    grad_accum_steps: int = 1  # micro-batches per optimizer step
    lr: float = 2e-3  # at lr_reference_batch; see lr_scaling
    lr_scaling: str = "fixed"  # fixed / linear / sqrt in batch_size / lr_reference_batch
    lr_reference_batch: int = 32
    weight_decay: float = 1e-4
    grad_clip: float = 1.0  # max gradient norm; 0 = no clipping
    eval_batch_size: int = 256

    def __post_init__(self) -> None:
        at_least(self, 1, "epochs", "batch_size", "grad_accum_steps", "lr_reference_batch",
                  "eval_batch_size")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("weight_decay and grad_clip must be >= 0")
        one_of("lr_scaling", self.lr_scaling, LR_SCALINGS)
        if self.batch_size % self.grad_accum_steps:
            raise ConfigError(
                f"batch_size ({self.batch_size}) must be divisible by grad_accum_steps "
                f"({self.grad_accum_steps}): the micro-batch is their quotient"
            )

    @property
    def micro_batch(self) -> int:
        return self.batch_size // self.grad_accum_steps

    @property
    def effective_lr(self) -> float:
        """``lr`` scaled for ``batch_size`` relative to ``lr_reference_batch``."""
        ratio = self.batch_size / self.lr_reference_batch
        return self.lr * {"fixed": 1.0, "linear": ratio, "sqrt": ratio**0.5}[self.lr_scaling]


@dataclass(frozen=True)
class SystemsConfig:
    """How a trial runs: device, compile, precision, memory. The rules for combining them
    are in docs/training-rules.md; ``ablations/config/safety.py`` applies them."""

    device: str = "auto"  # auto = cuda when the trial has a GPU, else cpu
    num_threads: int = 1  # torch intra-op threads; the runner sets it to --cpus-per-trial
    gradient_checkpointing: bool = False  # recompute blocks in backward (built-in: CNN, attention)
    compile: str = "off"  # one of COMPILE_MODES; the mode actually used after resolution
    precision: str = "fp32"  # fp32 / tf32 (CUDA) / bf16 (autocast) / fp16 (autocast+GradScaler)
    channels_last: bool = False  # NHWC memory format for the CNN
    optimizer_impl: str = "auto"  # AdamW kernel: auto (fused on CUDA, foreach on CPU) / ...
    num_workers: int = 0  # DataLoader worker processes (0: load in the training process)
    pin_memory: bool = False  # page-locked host batches for faster copies to the GPU
    min_micro_batch: int = 1  # OOM recovery halves the micro-batch down to this floor
    # Write the trial's resumable state every k epochs (and after the last): a restarted
    # trial repeats at most k-1 epochs; larger k saves a state write per epoch.
    checkpoint_every: int = 1
    # --resolve-conflicts: map unsafe combinations instead of refusing them, also in the worker
    # for rules that depend on the GPU the trial gets (bf16/tf32 need compute capability 8.0)
    resolve_conflicts: bool = False
    compile_requested: str = ""  # set by resolve_systems: what was asked (= compile if unmapped)
    precision_requested: str = ""

    def __post_init__(self) -> None:
        at_least(self, 1, "num_threads", "min_micro_batch", "checkpoint_every")
        at_least(self, 0, "num_workers")
        one_of("device", self.device, DEVICES)
        one_of("compile", self.compile, COMPILE_MODES)
        one_of("precision", self.precision, PRECISIONS)
        one_of("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        if self.compile_requested:
            one_of("compile_requested", self.compile_requested, COMPILE_MODES)
        if self.precision_requested:
            one_of("precision_requested", self.precision_requested, PRECISIONS)


# The sections of a trial's configuration other than the model's own (``model``).
SECTIONS: dict[str, type] = {"data": DataConfig, "optim": OptimConfig, "systems": SystemsConfig}

__all__ = [
    "COMPILE_MODES", "CUDA_GRAPH_MODES", "DEVICES", "LR_SCALINGS", "OPTIMIZER_IMPLS", "PRECISIONS",
    "SECTIONS", "DataConfig", "OptimConfig", "SystemsConfig",
]

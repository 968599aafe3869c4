"""A trial's configuration: one typed, nested dataclass; strict parsing; each section's
defaults and validation in one place.

:class:`TrialConfig` has the trial's identity and five sections: ``data`` (which data, and
which of its inputs the model sees), ``model`` (the model's own switches: the built-in model's
``model.config.MultimodalSwitches`` or a plugin's config), ``optim``, ``systems`` and
``faults`` (test hooks, never in result rows). Users write flat keys (YAML, ``--set``, space
files): :func:`apply_overrides` finds each key's section, so files written before the sections
existed keep working. The driver validates every trial before any starts and sends
``to_dict()`` to Ray; the worker rebuilds the typed config with :meth:`TrialConfig.from_dict`.

Parsing one value (booleans, numbers, widths, scalar names) and reading a YAML file are in
ablations/config/values.py; where each key goes, in ablations/config/keys.py (it needs
TrialConfig, so this module's constructors import it when called). The package exports all
three: ``from ablations.config import TrialConfig, apply_overrides, parse_bool``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ablations.config.values import (
    ConfigError,
    at_least,
    one_of,
    parse_scalar_names,
    parse_seed_sources,
    seed_levels,
)
from model.config import DEFAULT_FRAMES, MultimodalSwitches

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
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
    compile_backend: str = "inductor"  # eager / aot_eager for tests without a C++ compiler
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
        one_of("compile_backend", self.compile_backend, COMPILE_BACKENDS)
        one_of("precision", self.precision, PRECISIONS)
        one_of("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        if self.compile_requested:
            one_of("compile_requested", self.compile_requested, COMPILE_MODES)
        if self.precision_requested:
            one_of("precision_requested", self.precision_requested, PRECISIONS)


@dataclass(frozen=True)
class Faults:
    """Fault injection for tests of the failure paths. Travels to the trial with its config,
    never into the result rows (:meth:`TrialConfig.flat`)."""

    # Raise at the start of this epoch (1-based, 0 = never), only in a run that did not resume
    # from a checkpoint, so a retry gets past it.
    inject_failure_at_epoch: int = 0
    # OOM on CPU: raise torch.OutOfMemoryError for micro-batches above this (0 = never).
    inject_oom_above_batch: int = 0

    def __post_init__(self) -> None:
        at_least(self, 0, "inject_failure_at_epoch", "inject_oom_above_batch")


# Which sources vary with the trial's seed by default: all three (Bouthillier et al. 2021:
# randomise every source, so that a conclusion holds beyond one draw of the data). Both arms of
# a seed pair still see the same draw. ``init,order`` holds the data draw at ``data_seed``: the
# numbers of runs made before the default changed (and seed ensembles; docs/seed-sources.md).
DEFAULT_SEED_SOURCES = "init,order,data"


@dataclass(frozen=True)
class TrialSeeds:
    """The seed of each source of a trial's randomness (:attr:`TrialConfig.seeds`); recorded
    per trial as trials.parquet's ``init_seed``, ``order_seed`` and ``data_seed``."""

    init: int  # torch's generator: weight initialisation and dropout (the same generator)
    # the order of the training samples in each epoch (ablations.trial.batches.epoch_order)
    order: int
    data: int  # the data draw: synthetic set, split of a file dataset, caps, normalisation sample

    def columns(self) -> dict[str, int]:
        return {"init_seed": self.init, "order_seed": self.order, "data_seed": self.data}


# The sections of a trial's configuration other than the model's own (``model``).
SECTIONS: dict[str, type] = {"data": DataConfig, "optim": OptimConfig,
                             "systems": SystemsConfig, "faults": Faults}


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs, in sections: ``data``, ``model`` (the model's own switches:
    the built-in model's :class:`~model.config.MultimodalSwitches`, or the plugin's config),
    ``optim``, ``systems`` and ``faults``.

    Users write flat keys (``lr``, ``cnn_widths``, ``--set depth=2``): every key names one field
    of one section (:func:`apply_overrides` finds it), or ``section.key``. :meth:`to_dict`
    (nested plain values) goes to Ray and to experiment.json as it is; :meth:`flat` is the
    row of trials.parquet (no faults).
    """

    ablation: str = "baseline"  # name of the variant in its space's table
    seed: int = 0  # the pairing key: the same seeds for every variant; the sources' seeds below
    # Added to ``seed`` for the training randomness only (init, order; ``seed`` stays the
    # pairing key): a variant equal to the reference with an offset is the reference under
    # other seeds, a null control (--null-control).
    seed_offset: int = 0
    # The sources that vary with ``seed`` (SEED_SOURCES: init, order, data); a source left out
    # is held at its value at seed 0, ``source=K`` at seed K. See DEFAULT_SEED_SOURCES.
    seed_sources: str = DEFAULT_SEED_SOURCES
    # The model: "" = the built-in multimodal model; else a plugin, "package.module:NAME"
    # (ablations/config/plugins.py, docs/plugins.md). The user's key for it is ``model``.
    plugin: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: Any = field(default_factory=MultimodalSwitches)  # an instance of the plugin's config
    optim: OptimConfig = field(default_factory=OptimConfig)
    systems: SystemsConfig = field(default_factory=SystemsConfig)
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        at_least(self, 0, "seed_offset")
        object.__setattr__(self, "seed_sources", parse_seed_sources(self.seed_sources))
        from ablations.config.plugins import load_plugin

        expected = load_plugin(self.plugin).config
        if type(self.model) is not expected:
            raise ConfigError(f"model: {type(self.model).__name__} is not the config of model "
                              f"{self.plugin or BUILTIN_NAME} ({expected.__name__})")

    @classmethod
    def of(cls, **keys: Any) -> "TrialConfig":
        """The defaults with flat ``keys`` applied (``TrialConfig.of(lr=1e-3, epochs=2)``)."""
        from ablations.config.keys import apply_overrides  # keys.py imports this module
        return apply_overrides(cls(), keys, source="config")

    @property
    def seeds(self) -> TrialSeeds:
        """The seed of each source of randomness: init and order from ``seed`` (or the held
        value) plus ``seed_offset``; the data draw from ``data_seed`` plus ``seed`` (or the held
        value), without the offset (a null control trains on the reference's data)."""
        levels = seed_levels(self.seed_sources, self.seed)
        return TrialSeeds(init=levels["init"] + self.seed_offset,
                          order=levels["order"] + self.seed_offset,
                          data=self.data.data_seed + levels["data"])

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values: what Ray and experiment.json carry."""
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """One value per user key, as trials.parquet's columns: the identity, ``model`` (the
        plugin, "" = built-in), then the data, model, optim and systems fields; no faults."""
        row: dict[str, Any] = {"ablation": self.ablation, "seed": self.seed,
                               "seed_offset": self.seed_offset,
                               "seed_sources": self.seed_sources, "model": self.plugin}
        for section in (self.data, self.model, self.optim, self.systems):
            row.update(dataclasses.asdict(section))
        return row

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrialConfig":
        """Rebuild from :meth:`to_dict` output, or from the flat dicts of folders written
        before the sections existed (their ``model_options`` JSON included)."""
        if not isinstance(values.get("optim"), Mapping):  # the flat form
            from ablations.config.plugins import decode_options

            flat = dict(values)
            options = decode_options(str(flat.pop("model_options", "") or ""))
            from ablations.config.keys import apply_overrides  # keys.py imports this module
            return apply_overrides(cls(), {**flat, **options}, source="config")
        from ablations.config.plugins import plugin_config

        plugin = str(values.get("plugin", ""))
        return cls(
            ablation=values["ablation"], seed=values["seed"],
            seed_offset=values.get("seed_offset", 0),
            seed_sources=values.get("seed_sources", DEFAULT_SEED_SOURCES), plugin=plugin,
            data=DataConfig(**values["data"]),
            model=plugin_config(plugin, values.get("model", {})),
            optim=OptimConfig(**values["optim"]), systems=SystemsConfig(**values["systems"]),
            faults=Faults(**values.get("faults", {})),
        )

    def replace(self, **changes: Any) -> "TrialConfig":
        """A copy with flat keys changed (``config.replace(lr=1e-3, compile="default")``)."""
        from ablations.config.keys import apply_overrides  # keys.py imports this module
        return apply_overrides(self, changes, source="override")

    def diff(self, other: "TrialConfig") -> dict[str, Any]:
        """Keys whose value differs from ``other``'s, with this config's values."""
        mine, theirs = self.flat(), other.flat()
        return {k: v for k, v in mine.items() if theirs.get(k, _MISSING) != v}


_MISSING = object()
BUILTIN_NAME = "multimodal"  # the built-in model's name as a ``model`` value


__all__ = [
    "BUILTIN_NAME", "COMPILE_MODES", "CUDA_GRAPH_MODES", "COMPILE_BACKENDS", "DEFAULT_SEED_SOURCES",
    "DEVICES", "LR_SCALINGS", "OPTIMIZER_IMPLS", "PRECISIONS", "SECTIONS",
    "DataConfig", "Faults", "OptimConfig", "SystemsConfig", "TrialConfig", "TrialSeeds",
]

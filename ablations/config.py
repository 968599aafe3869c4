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
ablations/values.py; this module re-exports them (``from ablations.config import parse_bool``).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ablations.values import (  # re-exported: the names others import from ablations.config
    ConfigError,
    _at_least,
    _choice,
    _parse_float,
    _parse_int,
    load_yaml_overrides,
    parse_bool,
    parse_scalar_names,
    parse_widths,
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
    data_seed: int = 0  # synthetic generator seed / seeded split of a file dataset
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
        _at_least(self, 1, "synthetic_train", "synthetic_val", "synthetic_test",
                  "temporal_frames")
        _at_least(self, 0, "max_train_examples", "max_eval_examples")
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
        _at_least(self, 1, "epochs", "batch_size", "grad_accum_steps", "lr_reference_batch",
                  "eval_batch_size")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("weight_decay and grad_clip must be >= 0")
        _choice("lr_scaling", self.lr_scaling, LR_SCALINGS)
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
    are in docs/training-rules.md; ``ablations/systems.py`` applies them."""

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
        _at_least(self, 1, "num_threads", "min_micro_batch", "checkpoint_every")
        _at_least(self, 0, "num_workers")
        _choice("device", self.device, DEVICES)
        _choice("compile", self.compile, COMPILE_MODES)
        _choice("compile_backend", self.compile_backend, COMPILE_BACKENDS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        if self.compile_requested:
            _choice("compile_requested", self.compile_requested, COMPILE_MODES)
        if self.precision_requested:
            _choice("precision_requested", self.precision_requested, PRECISIONS)


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
        _at_least(self, 0, "inject_failure_at_epoch", "inject_oom_above_batch")


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
    seed: int = 0  # model init, shuffling and dropout; the same seeds for every variant
    # Added to ``seed`` for the training randomness only (``seed`` stays the pairing key): a
    # variant equal to the reference with an offset is the reference under other seeds, a
    # null control (--null-control).
    seed_offset: int = 0
    # The model: "" = the built-in multimodal model; else a plugin, "package.module:NAME"
    # (ablations/plugins.py, docs/plugins.md). The user's key for it is ``model``.
    plugin: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: Any = field(default_factory=MultimodalSwitches)  # an instance of the plugin's config
    optim: OptimConfig = field(default_factory=OptimConfig)
    systems: SystemsConfig = field(default_factory=SystemsConfig)
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        _at_least(self, 0, "seed_offset")
        from ablations.plugins import load_plugin

        expected = load_plugin(self.plugin).config
        if type(self.model) is not expected:
            raise ConfigError(f"model: {type(self.model).__name__} is not the config of model "
                              f"{self.plugin or BUILTIN_NAME} ({expected.__name__})")

    @classmethod
    def of(cls, **keys: Any) -> "TrialConfig":
        """The defaults with flat ``keys`` applied (``TrialConfig.of(lr=1e-3, epochs=2)``)."""
        return apply_overrides(cls(), keys, source="config")

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values: what Ray and experiment.json carry."""
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """One value per user key, as trials.parquet's columns: the identity, ``model`` (the
        plugin, "" = built-in), then the data, model, optim and systems fields; no faults."""
        row: dict[str, Any] = {"ablation": self.ablation, "seed": self.seed,
                               "seed_offset": self.seed_offset, "model": self.plugin}
        for section in (self.data, self.model, self.optim, self.systems):
            row.update(dataclasses.asdict(section))
        return row

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrialConfig":
        """Rebuild from :meth:`to_dict` output, or from the flat dicts of folders written
        before the sections existed (their ``model_options`` JSON included)."""
        if not isinstance(values.get("optim"), Mapping):  # the flat form
            from ablations.plugins import decode_options

            flat = dict(values)
            options = decode_options(str(flat.pop("model_options", "") or ""))
            return apply_overrides(cls(), {**flat, **options}, source="config")
        from ablations.plugins import plugin_config

        plugin = str(values.get("plugin", ""))
        return cls(
            ablation=values["ablation"], seed=values["seed"],
            seed_offset=values.get("seed_offset", 0), plugin=plugin,
            data=DataConfig(**values["data"]),
            model=plugin_config(plugin, values.get("model", {})),
            optim=OptimConfig(**values["optim"]), systems=SystemsConfig(**values["systems"]),
            faults=Faults(**values.get("faults", {})),
        )

    def replace(self, **changes: Any) -> "TrialConfig":
        """A copy with flat keys changed (``config.replace(lr=1e-3, compile="default")``)."""
        return apply_overrides(self, changes, source="override")

    def diff(self, other: "TrialConfig") -> dict[str, Any]:
        """Keys whose value differs from ``other``'s, with this config's values."""
        mine, theirs = self.flat(), other.flat()
        return {k: v for k, v in mine.items() if theirs.get(k, _MISSING) != v}


_MISSING = object()
BUILTIN_NAME = "multimodal"  # the built-in model's name as a ``model`` value


# Every runner key users write -> its section ("" = the identity at the top level).
KEY_SECTION: dict[str, str] = {
    **{name: "" for name in ("ablation", "seed", "seed_offset")},
    **{f.name: section for section, kind in SECTIONS.items() for f in fields(kind)},
}
FIELD_TYPES: dict[str, str] = {
    **{name: "int" for name in ("seed", "seed_offset")}, "ablation": "str",
    **{f.name: str(f.type) for kind in SECTIONS.values() for f in fields(kind)},
}
MODEL_KEY = "model"  # the plugin ("" or "multimodal" = built-in); also "plugin"

# Keys users already keep in their YAML files, mapped onto the keys above.
ALIASES: dict[str, str] = {
    "learning_rate": "lr",
    "num_epochs": "epochs",
    "frames": "temporal_frames",
    "torch_compile_mode": "compile",
    "compile_mode": "compile",
    "checkpointing": "gradient_checkpointing",
}
# Keys whose meaning is a boolean that sets other keys.
BOOLEAN_PRESETS: dict[str, dict[bool, dict[str, Any]]] = {
    "memory_optimized": {True: {"cnn_widths": "32,64,128"}, False: {}},  # the built-in model's
    "torch_compile": {True: {}, False: {"compile": "off"}},  # mode comes from torch_compile_mode
}


def coerce(name: str, value: Any) -> Any:
    """Parse ``value`` (a string from YAML or the command line, or a Python value) for runner
    key ``name``, strictly."""
    kind = FIELD_TYPES[name]
    if kind == "bool":
        return parse_bool(value, name=name)
    if kind == "int":
        return _parse_int(value, name)
    if kind == "float":
        return _parse_float(value, name)
    if name == "drop_scalars":
        return parse_scalar_names(value)
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{name}: expected a single value, got {type(value).__name__}")
    return str(value).strip()


def unknown_key_error(key: str, source: str, plugin_keys: Sequence[str] = ()) -> ConfigError:
    valid = sorted({*FIELD_TYPES, *ALIASES, *BOOLEAN_PRESETS, MODEL_KEY, *plugin_keys})
    close = difflib.get_close_matches(key.rpartition(".")[2], valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
    return ConfigError(f"{source}: unknown key {key!r}{hint}")


def _user_keys(overrides: Mapping[str, Any], source: str
               ) -> list[tuple[str, Any, Optional[str]]]:
    """(key, value, section or None) for each key: flat keys, ``section.key`` and section
    mappings (``optim: {lr: ...}``, ``model: {depth: 2}``) alike."""
    items: list[tuple[str, Any, Optional[str]]] = []
    for raw, value in overrides.items():
        key = str(raw).strip()
        section, dot, leaf = key.partition(".")
        if dot:
            if section not in (*SECTIONS, "model"):
                raise unknown_key_error(key, source)
            items.append((leaf, value, section))
        elif key in (*SECTIONS, "model") and isinstance(value, Mapping):
            items.extend((str(k).strip(), v, key) for k, v in value.items())
        else:
            items.append((key, value, None))
    return items


def apply_overrides(
    base: TrialConfig, overrides: Mapping[str, Any], *, source: str
) -> TrialConfig:
    """``base`` with ``overrides`` applied. A key is a runner key (or an alias, or a boolean
    preset), ``model`` (the plugin), a key of the model's own config, or ``section.key``.

    ``torch_compile: true`` with no mode means ``compile: default``. A new ``model`` starts
    from that model's defaults.
    """
    items = _user_keys(overrides, source)
    plugin = base.plugin
    for key, value, section in items:
        if section is None and key in (MODEL_KEY, "plugin"):
            plugin = _plugin_name(value)
    model_keys = _plugin_keys(plugin, source)
    changes: dict[str, dict[str, Any]] = {name: {} for name in ("", *SECTIONS)}
    model_values: dict[str, Any] = {}
    presets: dict[str, Any] = {}
    for key, value, section in items:
        if section is None and key in (MODEL_KEY, "plugin"):
            continue
        if section is None and key in BOOLEAN_PRESETS:
            flag = parse_bool(value, name=key)
            presets.update(BOOLEAN_PRESETS[key][flag])
            if key == "torch_compile" and flag:
                presets.setdefault("compile", "default" if base.systems.compile == "off"
                                   else base.systems.compile)
            continue
        name = ALIASES.get(key, key) if section is None else key
        if name in KEY_SECTION and section in (None, KEY_SECTION[name]):
            changes[KEY_SECTION[name]][name] = coerce(name, value)
        elif name in model_keys and section in (None, "model"):
            model_values[name] = value
        else:
            raise unknown_key_error(f"{section}.{key}" if section else key, source, model_keys)
    for name, value in presets.items():  # explicit keys win over a preset's
        if name in KEY_SECTION:
            if name == "compile" and value == "off":  # torch_compile: false wins over a mode
                changes["systems"][name] = value
            else:
                changes["systems"].setdefault(name, value)
        elif name in model_keys:
            model_values.setdefault(name, value)
        else:
            raise ConfigError(f"{source}: memory_optimized sets the built-in model's {name}; "
                              f"model {plugin} has no such key")
    model = base.model
    if plugin != base.plugin or model_values:
        previous = dataclasses.asdict(base.model) if plugin == base.plugin else {}
        model = _plugin_config(plugin, {**previous, **model_values}, source)
    try:
        sections = {name: dataclasses.replace(getattr(base, name), **values)
                    for name, values in changes.items() if name and values}
        return dataclasses.replace(base, **changes[""], **sections, plugin=plugin, model=model)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _plugin_name(value: Any) -> str:
    """The ``model`` value: "" for the built-in model (also by its name), else the spec."""
    text = str(value).strip()
    return "" if text == BUILTIN_NAME else text


def _plugin_keys(plugin: str, source: str) -> list[str]:
    """The config keys of the model ``plugin`` ("" = the built-in model)."""
    from ablations.plugins import PluginError, plugin_keys

    try:
        return list(plugin_keys(plugin))
    except PluginError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _plugin_config(plugin: str, options: Mapping[str, Any], source: str) -> Any:
    from ablations.plugins import plugin_config

    return plugin_config(plugin, options, source=source)


def config_from_sources(
    *, yaml_path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
    base: TrialConfig | None = None,
) -> TrialConfig:
    """Defaults, then a YAML file, then explicit overrides (flags), in that order."""
    config = base or TrialConfig()
    if yaml_path is not None:
        config = apply_overrides(config, load_yaml_overrides(yaml_path), source=str(yaml_path))
    if overrides:
        config = apply_overrides(config, overrides, source="command line")
    return config


__all__ = [
    "ALIASES", "COMPILE_MODES", "ConfigError", "DataConfig", "Faults", "OptimConfig",
    "SystemsConfig", "TrialConfig", "apply_overrides", "coerce",
    "config_from_sources", "load_yaml_overrides", "parse_bool", "parse_scalar_names",
    "parse_widths",
]

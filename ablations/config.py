"""The trial configuration: one typed dataclass, strict parsing, validation in one place.

Flow: the driver builds :class:`TrialConfig` objects (from defaults, a YAML file, flags and the
search space), validates them, and sends ``to_dict()`` (plain scalars and strings) to Ray; the
worker rebuilds the typed config with :meth:`TrialConfig.from_dict`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
HEADS = ("gaussian", "point")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "single")
LR_SCALINGS = ("fixed", "linear", "sqrt")
DEVICES = ("auto", "cpu", "cuda")

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


class ConfigError(ValueError):
    """A bad configuration value or key; the message names it and the fix."""


def parse_bool(value: Any, *, name: str = "value") -> bool:
    """true/false/1/0/yes/no in any case (and real booleans); anything else is an error.

    ``bool("False")`` is True; this is the parser that ``type=bool`` should have been.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: {value!r} is not a boolean; use true/false, yes/no or 1/0")


def _parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an integer, got a boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None


def _parse_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a number, got a boolean {value!r}")
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name}: {value!r} is not a finite number")
    return number


def parse_widths(value: Any, *, name: str = "cnn_widths") -> str:
    """'64,128,256', '64/128/256' or a list of three ints -> canonical '64,128,256'."""
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        parts = str(value).replace("/", ",").replace(" ", "").split(",")
    try:
        widths = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not three integers like 64,128,256") from None
    if len(widths) != 3 or min(widths) < 1:
        raise ConfigError(f"{name}: {value!r} is not three positive integers like 64,128,256")
    return ",".join(str(w) for w in widths)


def parse_scalar_names(value: Any, *, name: str = "drop_scalars") -> str:
    """Scalar column names as a YAML list, 'scalar_a,scalar_b' or '' -> the canonical
    'scalar_a,scalar_b' (sorted, each once; '' = none). Whether the data has them is checked
    against the data before any trial starts (``ablations.cli.plan_trials``)."""
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        if any("," in item for item in items):
            raise ConfigError(f"{name}: {value!r}: a column name cannot contain a comma")
    elif isinstance(value, dict):
        raise ConfigError(f"{name}: expected column names, got a mapping {value!r}")
    else:
        items = [part.strip() for part in str(value).split(",")]
    names = sorted({item for item in items if item})
    bad = [n for n in names if not n.startswith("scalar_") or n == "scalar_"]
    if bad:
        raise ConfigError(f"{name}: {bad[0]!r} is not a scalar column name; scalar columns "
                          "are named scalar_* (e.g. drop_scalars=scalar_2)")
    return ",".join(names)


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs. Only scalars and strings, so it serialises to Ray as is."""

    # Identity within the experiment.
    ablation: str = "baseline"  # name of the variant in its space's table
    seed: int = 0  # model init, shuffling and dropout; the same seeds for every variant
    # Added to ``seed`` for the training randomness only (``seed`` stays the pairing key): a
    # variant equal to the reference with an offset is the reference under other seeds, a
    # null control (--null-control).
    seed_offset: int = 0

    # Data.
    data_dir: str = ""  # "" = the embedded synthetic set; else an absolute directory path
    data_seed: int = 0  # synthetic generator seed / seeded split of a file dataset
    synthetic_train: int = 1280  # synthetic samples per split
    synthetic_val: int = 256
    synthetic_test: int = 512
    max_train_examples: int = 0  # 0 = all; else a seeded subset of the train split
    max_eval_examples: int = 0  # 0 = all; caps val and test alike

    # The model: "" = the built-in multimodal model (the switches below); else a plugin,
    # "package.module:NAME" (ablations/plugins.py, docs/plugins.md), whose own switches are
    # in model_options: JSON of those that differ from the plugin's defaults.
    model: str = ""
    model_options: str = ""

    # Model switches (see model.ModelConfig for what each does).
    temporal_frames: int = 4
    cnn_widths: str = "64,128,256"
    spatial_attention: bool = True
    temporal_attention: bool = True
    use_images: bool = True
    use_scalars: bool = True
    # Scalar columns the model does not see (comma-separated, '' = none): the
    # leave-one-covariate-out ablations of the `features` space.
    drop_scalars: str = ""
    head: str = "gaussian"
    embed_dim: int = 128
    num_heads: int = 4
    dropout: float = 0.1

    # Optimisation.
    epochs: int = 4
    batch_size: int = 32  # effective batch per optimizer step (micro-batch x grad_accum_steps)
    grad_accum_steps: int = 1  # micro-batches per optimizer step
    lr: float = 2e-3  # at lr_reference_batch; see lr_scaling
    lr_scaling: str = "fixed"  # fixed / linear / sqrt in batch_size / lr_reference_batch
    lr_reference_batch: int = 32
    weight_decay: float = 1e-4
    grad_clip: float = 1.0  # max gradient norm; 0 = no clipping
    eval_batch_size: int = 256

    # Systems.
    device: str = "auto"  # auto = cuda when the trial has a GPU, else cpu
    num_threads: int = 1  # torch intra-op threads; the runner sets it to --cpus-per-trial
    gradient_checkpointing: bool = False  # recompute CNN (one call over B*T frames) + attention
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

    # Fault injection for tests of the failure path: raise at the start of this epoch (1-based,
    # 0 = never), only in a run that did not resume from a checkpoint, so a retry gets past it.
    inject_failure_at_epoch: int = 0
    # OOM injection for tests on CPU: raise torch.OutOfMemoryError for micro-batches above this.
    inject_oom_above_batch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cnn_widths", parse_widths(self.cnn_widths))  # canonical form
        object.__setattr__(self, "drop_scalars", parse_scalar_names(self.drop_scalars))
        self.validate()

    # ---------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad value and the fix."""
        positive = ("epochs", "batch_size", "eval_batch_size", "temporal_frames", "embed_dim",
                    "num_heads", "num_threads", "synthetic_train", "synthetic_val",
                    "synthetic_test", "grad_accum_steps", "lr_reference_batch",
                    "min_micro_batch", "checkpoint_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("seed_offset", "max_train_examples", "max_eval_examples",
                     "inject_failure_at_epoch",
                     "num_workers", "inject_oom_above_batch"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("weight_decay and grad_clip must be >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.embed_dim % self.num_heads:
            raise ConfigError(
                f"embed_dim ({self.embed_dim}) must be divisible by num_heads ({self.num_heads})"
            )
        _choice("head", self.head, HEADS)
        _choice("device", self.device, DEVICES)
        _choice("compile", self.compile, COMPILE_MODES)
        _choice("compile_backend", self.compile_backend, COMPILE_BACKENDS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        _choice("lr_scaling", self.lr_scaling, LR_SCALINGS)
        if self.compile_requested:
            _choice("compile_requested", self.compile_requested, COMPILE_MODES)
        if self.precision_requested:
            _choice("precision_requested", self.precision_requested, PRECISIONS)
        if self.batch_size % self.grad_accum_steps:
            raise ConfigError(
                f"batch_size ({self.batch_size}) must be divisible by grad_accum_steps "
                f"({self.grad_accum_steps}): the micro-batch is their quotient"
            )
        parse_widths(self.cnn_widths)
        if not (self.use_images or self.use_scalars):
            raise ConfigError("use_images and use_scalars are both false: the model has no input")
        if self.model:
            from ablations.plugins import decode_options, plugin_config

            plugin_config(self.model, decode_options(self.model_options))
        elif self.model_options:
            raise ConfigError("model_options without a model plugin: set model to "
                              "package.module:NAME")
        if self.data_dir and not Path(self.data_dir).is_absolute():
            raise ConfigError(f"data_dir must be absolute in a trial config, got {self.data_dir!r}")

    # ---------------------------------------------------------------- conversion
    @property
    def micro_batch(self) -> int:
        return self.batch_size // self.grad_accum_steps

    @property
    def effective_lr(self) -> float:
        """``lr`` scaled for ``batch_size`` relative to ``lr_reference_batch``."""
        ratio = self.batch_size / self.lr_reference_batch
        return self.lr * {"fixed": 1.0, "linear": ratio, "sqrt": ratio**0.5}[self.lr_scaling]

    @property
    def dropped_scalars(self) -> tuple[str, ...]:
        """The scalar columns left out, as names."""
        return tuple(self.drop_scalars.split(",")) if self.drop_scalars else ()

    @property
    def widths(self) -> tuple[int, int, int]:
        a, b, c = (int(w) for w in self.cnn_widths.split(","))
        return a, b, c

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrialConfig":
        """Rebuild from :meth:`to_dict` output (exact keys, already typed)."""
        return cls(**dict(values))

    def replace(self, **changes: Any) -> "TrialConfig":
        return apply_overrides(self, changes, source="override")

    def diff(self, other: "TrialConfig") -> dict[str, Any]:
        """Fields whose value differs from ``other``'s, with this config's values."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: v for k, v in mine.items() if theirs[k] != v}


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(allowed)}")


FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(TrialConfig)}

# Keys users already keep in their YAML files, mapped onto TrialConfig fields.
ALIASES: dict[str, str] = {
    "learning_rate": "lr",
    "num_epochs": "epochs",
    "frames": "temporal_frames",
    "torch_compile_mode": "compile",
    "compile_mode": "compile",
    "checkpointing": "gradient_checkpointing",
}
# Keys whose meaning is a boolean that sets other fields.
BOOLEAN_PRESETS: dict[str, dict[bool, dict[str, Any]]] = {
    "memory_optimized": {True: {"cnn_widths": "32,64,128"}, False: {}},
    "torch_compile": {True: {}, False: {"compile": "off"}},  # mode comes from torch_compile_mode
}


def coerce(name: str, value: Any) -> Any:
    """Parse ``value`` (a string from YAML or the command line, or a Python value) for field
    ``name``, strictly."""
    kind = FIELD_TYPES[name]
    if kind == "bool":
        return parse_bool(value, name=name)
    if kind == "int":
        return _parse_int(value, name)
    if kind == "float":
        return _parse_float(value, name)
    if name == "cnn_widths":
        return parse_widths(value)
    if name == "drop_scalars":
        return parse_scalar_names(value)
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{name}: expected a single value, got {type(value).__name__}")
    return str(value).strip()


def unknown_key_error(key: str, source: str, plugin_keys: Sequence[str] = ()) -> ConfigError:
    valid = sorted([*FIELD_TYPES, *ALIASES, *BOOLEAN_PRESETS, *plugin_keys])
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
    return ConfigError(f"{source}: unknown key {key!r}{hint}")


def apply_overrides(
    base: TrialConfig, overrides: Mapping[str, Any], *, source: str
) -> TrialConfig:
    """``base`` with ``overrides`` applied; keys may be fields, aliases or boolean presets.

    ``torch_compile: true`` with no mode means ``compile: default``.
    """
    changes: dict[str, Any] = {}
    presets: dict[str, Any] = {}
    model = str(overrides["model"]).strip() if "model" in overrides else base.model
    plugin_keys = _plugin_keys(model, source)
    plugin_values: dict[str, Any] = {}
    for key, value in overrides.items():
        key = str(key).strip()
        if key in BOOLEAN_PRESETS:
            flag = parse_bool(value, name=key)
            presets.update(BOOLEAN_PRESETS[key][flag])
            if key == "torch_compile" and flag:
                presets.setdefault("compile", "default" if base.compile == "off" else base.compile)
            continue
        name = ALIASES.get(key, key)
        if name not in FIELD_TYPES:
            if key in plugin_keys:  # a switch of the model plugin: kept in model_options
                plugin_values[key] = value
                continue
            raise unknown_key_error(key, source, plugin_keys)
        changes[name] = coerce(name, value)
    if plugin_values or model != base.model:
        changes["model_options"] = _plugin_options(
            model, {} if model != base.model else base.model_options, plugin_values, source)
    if "compile" in changes and presets.get("compile") == "off":
        changes["compile"] = "off"  # torch_compile: false wins over a mode
    merged = {**presets, **changes}
    try:
        return dataclasses.replace(base, **merged)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _plugin_keys(model: str, source: str) -> list[str]:
    """The config keys of the model plugin ``model`` ("" = the built-in model: none)."""
    if not model:
        return []
    from ablations.plugins import PluginError, plugin_keys

    try:
        return list(plugin_keys(model))
    except PluginError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _plugin_options(model: str, previous: str | dict, values: Mapping[str, Any],
                    source: str) -> str:
    """model_options after ``values`` are applied to ``previous`` (JSON, or {}), parsed and
    validated by the plugin; only the keys that differ from its defaults are kept."""
    if not model:
        return ""
    from ablations.plugins import (decode_options, encode_options, load_plugin,
                                   plugin_config)

    options = decode_options(previous) if isinstance(previous, str) else dict(previous)
    options.update(values)
    typed = plugin_config(model, options, source=source)
    defaults = load_plugin(model).config()
    return encode_options({k: getattr(typed, k) for k in options
                           if getattr(typed, k) != getattr(defaults, k)})


def load_yaml_overrides(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of config keys. Scalars stay strings (``yaml.BaseLoader``) so that
    booleans are parsed by :func:`parse_bool` alone: YAML's own ``on``/``off`` are refused."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: config file not found")
    try:
        data = yaml.load(file.read_text(), Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{file}: not valid YAML{line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of config keys at the top level")
    return data


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
    "ALIASES", "COMPILE_MODES", "ConfigError", "TrialConfig", "apply_overrides", "coerce",
    "config_from_sources", "load_yaml_overrides", "parse_bool", "parse_scalar_names",
    "parse_widths",
]

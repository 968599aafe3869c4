"""The configuration layer: a trial's typed configuration, where each user key goes, how one
value is parsed, the model plugins' registry and the rules for what is safe to combine.

It imports no Ray. ``values`` (one value, YAML files) and ``trial`` (:class:`TrialConfig` and its
sections) come first; ``keys`` routes flat keys into sections; ``plugins`` loads a model plugin
and its config class (PyTorch, loaded when a plugin is named); ``safety`` applies the
combination rules (docs/training-rules.md). What other layers use is exported here.
"""

from ablations.config.values import (
    SEED_SOURCES,
    ConfigError,
    load_yaml_overrides,
    parse_bool,
    parse_scalar_names,
    parse_seed_sources,
    parse_widths,
    seed_levels,
)
from ablations.config.trial import (
    BUILTIN_NAME,
    COMPILE_BACKENDS,
    COMPILE_MODES,
    CUDA_GRAPH_MODES,
    DEFAULT_SEED_SOURCES,
    DEVICES,
    LR_SCALINGS,
    OPTIMIZER_IMPLS,
    PRECISIONS,
    SECTIONS,
    DataConfig,
    Faults,
    OptimConfig,
    SystemsConfig,
    TrialConfig,
    TrialSeeds,
)
from ablations.config.keys import (
    ALIASES,
    BOOLEAN_PRESETS,
    FIELD_TYPES,
    KEY_SECTION,
    MODEL_KEY,
    apply_overrides,
    coerce,
    config_from_sources,
    unknown_key_error,
)

__all__ = [
    "ALIASES", "BOOLEAN_PRESETS", "BUILTIN_NAME", "COMPILE_BACKENDS", "COMPILE_MODES",
    "CUDA_GRAPH_MODES", "DEFAULT_SEED_SOURCES", "DEVICES", "FIELD_TYPES", "KEY_SECTION",
    "LR_SCALINGS", "MODEL_KEY", "OPTIMIZER_IMPLS", "PRECISIONS", "SECTIONS", "SEED_SOURCES",
    "ConfigError", "DataConfig", "Faults", "OptimConfig", "SystemsConfig", "TrialConfig",
    "TrialSeeds", "apply_overrides", "coerce", "config_from_sources", "load_yaml_overrides",
    "parse_bool", "parse_scalar_names", "parse_seed_sources", "parse_widths", "seed_levels",
    "unknown_key_error",
]

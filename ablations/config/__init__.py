"""The configuration layer: a trial's typed configuration, where each user key goes, how one
value is parsed, the model plugins' registry and the rules for what is safe to combine.

It imports no Ray, and its modules import in one direction: ``values`` (one value, YAML files),
``sections`` (the data, optim and systems sections), ``plugins`` (a model plugin and its config
class; PyTorch loaded when a plugin is named), ``keys`` (flat keys routed into sections),
``trial`` (:class:`TrialConfig`); ``safety`` applies the combination rules
(docs/training-rules.md). What other layers use is exported here.
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
from ablations.config.sections import (
    COMPILE_MODES,
    CUDA_GRAPH_MODES,
    DEVICES,
    LR_SCALINGS,
    OPTIMIZER_IMPLS,
    PRECISIONS,
    SECTIONS,
    DataConfig,
    OptimConfig,
    SystemsConfig,
)
from ablations.config.plugins import BUILTIN_NAME
from ablations.config.keys import (
    ALIASES,
    BOOLEAN_PRESETS,
    FIELD_TYPES,
    KEY_SECTION,
    MODEL_KEY,
    apply_overrides,
    coerce,
    unknown_key_error,
)
from ablations.config.trial import (
    DEFAULT_SEED_SOURCES,
    TrialConfig,
    TrialSeeds,
    config_from_sources,
)

__all__ = [
    "ALIASES", "BOOLEAN_PRESETS", "BUILTIN_NAME", "COMPILE_MODES", "CUDA_GRAPH_MODES",
    "DEFAULT_SEED_SOURCES", "DEVICES", "FIELD_TYPES", "KEY_SECTION", "LR_SCALINGS", "MODEL_KEY",
    "OPTIMIZER_IMPLS", "PRECISIONS", "SECTIONS", "SEED_SOURCES", "ConfigError", "DataConfig",
    "OptimConfig", "SystemsConfig", "TrialConfig", "TrialSeeds", "apply_overrides", "coerce",
    "config_from_sources", "load_yaml_overrides", "parse_bool", "parse_scalar_names",
    "parse_seed_sources", "parse_widths", "seed_levels", "unknown_key_error",
]

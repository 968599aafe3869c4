"""Declarative search spaces: tables of named diffs against a base configuration."""

from ablations.search_spaces.components import BASELINE, COMPONENT_ABLATIONS
from ablations.search_spaces.features import feature_variants
from ablations.search_spaces.presets import PRESETS
from ablations.search_spaces.spaces import SPACES, Space, TrialSpec, expand, get_space
from ablations.search_spaces.sweeps import BATCH_SWEEP, FRAMES_SWEEP, SYSTEMS_MATRIX

__all__ = [
    "BASELINE",
    "BATCH_SWEEP",
    "COMPONENT_ABLATIONS",
    "FRAMES_SWEEP",
    "PRESETS",
    "SYSTEMS_MATRIX",
    "SPACES",
    "Space",
    "TrialSpec",
    "expand",
    "feature_variants",
    "get_space",
]

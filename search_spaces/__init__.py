"""Declarative search spaces: tables of named diffs against a base configuration."""

from search_spaces.components import BASELINE, COMPONENT_ABLATIONS
from search_spaces.spaces import SPACES, Space, TrialSpec, expand, get_space

__all__ = [
    "BASELINE",
    "COMPONENT_ABLATIONS",
    "SPACES",
    "Space",
    "TrialSpec",
    "expand",
    "get_space",
]

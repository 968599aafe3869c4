"""The `components` space: the baseline (full model) and eight ablations, as one table.

Each row is a named diff against the base configuration (the defaults, or the user's
``--config``). Every row runs once per seed, with the same seeds for every row, so each ablation
is compared with the baseline pairwise, seed by seed.
"""

from __future__ import annotations

from typing import Any

from ablations.config.comparison import DEFAULT_REFERENCE

BASELINE = DEFAULT_REFERENCE  # the full model: the reference of every space by default

COMPONENT_ABLATIONS: dict[str, dict[str, Any]] = {
    BASELINE: {},  # the full model
    "no_temporal_attention": {"temporal_attention": False},  # same ordered read-out, no attention
    "no_spatial_attention": {"spatial_attention": False},  # CNN map mean-pooled
    "no_attention": {"temporal_attention": False, "spatial_attention": False},
    "no_scalars": {"use_scalars": False},  # images only
    "no_images": {"use_images": False},  # scalars only, no CNN
    "single_frame": {"temporal_frames": 1},  # the most recent frame only
    "reduced_width": {"cnn_widths": "32,64,128"},  # CNN widths halved (full: 64,128,256)
    "point_estimate": {"head": "point"},  # mean-only head trained with MSE, no variance
}

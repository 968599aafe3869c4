"""Data: an embedded synthetic default with planted effects, and a file format for real data.

Both give a :class:`RegressionData`: images ``(N, T, C, H, W)`` (an in-memory float32 array or
a read-only memory map of the file, any numeric dtype; batches come out float32), scalar
features ``(N, S)``, the target ``(N,)`` in km, a split label per sample (train/val/test) and a
table of strata kept for analysis.

This module gathers the public names of three modules, so ``from ablations.model.data import
X`` serves them all:

- :mod:`model.regression_data`: :class:`RegressionData`, :class:`DataError` and the split
  helpers both sources share (:func:`seeded_split`, :func:`cap_split`).
- :mod:`ablations.model.synthetic`: the synthetic set, its planted effects (:func:`make_synthetic`,
  whose
  module docstring states them) and its in-process and on-disk cache (:func:`load_synthetic`).
- :mod:`ablations.model.files`: the file dataset (``--data DIR``: ``images.npy`` and
  ``table.parquet``;
  :func:`check_directory`, :func:`load_directory`).

Patch internals (the cache's ``_RECENT``, the generator's constants) in the module that defines
them, not here.
"""

from __future__ import annotations

from ablations.model.files import (
    IMAGE_CHECK_BYTES,
    IMAGE_CHECK_SAMPLES,
    check_directory,
    load_directory,
)
from ablations.model.regression_data import (
    SPLITS,
    DataError,
    RegressionData,
    cap_split,
    seeded_split,
)
from ablations.model.synthetic import (
    CACHE_DIR_ENV,
    MAX_SYNTHETIC_FRAMES,
    REGIME_PIXEL_NOISE,
    REGIME_TARGET_NOISE_KM,
    REGIMES,
    SYNTHETIC_SCALARS,
    SyntheticSpec,
    cache_dir,
    load_synthetic,
    make_synthetic,
    synthetic_cache_key,
)

__all__ = [
    "CACHE_DIR_ENV",
    "IMAGE_CHECK_BYTES",
    "IMAGE_CHECK_SAMPLES",
    "MAX_SYNTHETIC_FRAMES",
    "REGIMES",
    "REGIME_PIXEL_NOISE",
    "REGIME_TARGET_NOISE_KM",
    "SPLITS",
    "SYNTHETIC_SCALARS",
    "DataError",
    "RegressionData",
    "SyntheticSpec",
    "cache_dir",
    "cap_split",
    "check_directory",
    "load_directory",
    "load_synthetic",
    "make_synthetic",
    "seeded_split",
    "synthetic_cache_key",
]

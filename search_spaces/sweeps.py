"""The systems matrix and the batch and frame sweeps, as tables of named diffs."""

from __future__ import annotations

import itertools
from typing import Any

from ablations.config import COMPILE_MODES, PRECISIONS

# gradient_checkpointing x compile mode x precision. Cells unsafe on the device (CUDA graphs
# with checkpointing or off CUDA, tf32 off CUDA, ...) are skipped with the reason, not run.
SYSTEMS_REFERENCE = "nockpt-off-fp32"
SYSTEMS_MATRIX: dict[str, dict[str, Any]] = {
    f"{'ckpt' if checkpointing else 'nockpt'}-{mode}-{precision}": {
        "gradient_checkpointing": checkpointing,
        "compile": mode,
        "precision": precision,
    }
    for checkpointing, mode, precision in itertools.product((False, True), COMPILE_MODES,
                                                             PRECISIONS)
}

# Batch sizes; the learning rate follows `lr_scaling` (fixed, linear or sqrt in
# batch_size / lr_reference_batch): `--set lr_scaling=linear`.
BATCH_SIZES = (4, 8, 16, 20, 32, 64)
BATCH_SWEEP: dict[str, dict[str, Any]] = {f"batch{b}": {"batch_size": b} for b in BATCH_SIZES}

# The most recent k frames; cells beyond the data's T are skipped.
FRAME_COUNTS = tuple(range(1, 9))
FRAMES_SWEEP: dict[str, dict[str, Any]] = {
    f"frames{k}": {"temporal_frames": k} for k in FRAME_COUNTS
}

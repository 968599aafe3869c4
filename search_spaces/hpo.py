"""The `hpo` space: what Optuna (TPE) searches, as data. (kind, arguments) per config field."""

from __future__ import annotations

from typing import Any

HPO_SEARCH: dict[str, tuple[str, Any]] = {
    "lr": ("loguniform", (3e-4, 1e-2)),
    "weight_decay": ("loguniform", (1e-6, 1e-2)),
    "dropout": ("uniform", (0.0, 0.3)),
    "cnn_widths": ("choice", ("32,64,128", "64,128,256")),
    "embed_dim": ("choice", (64, 128)),
    "batch_size": ("choice", (16, 32, 64)),
}
# What the search optimises (SearchRun's defaults, ablations/experiment/designs/search.py):
# reported every epoch, so ASHA can stop early; the best trial's config is written to
# best_config.yaml.
HPO_METRIC = "val_mae"
HPO_MODE = "min"

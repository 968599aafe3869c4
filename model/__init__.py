"""The multimodal spatiotemporal regression model and its data.

``ablations.model.config`` (the model's switches) imports no torch, so that a configuration can be
read without it; the names below load their module when first used."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    **dict.fromkeys(("DataError", "RegressionData", "SyntheticSpec", "check_directory",
                     "load_directory", "load_synthetic", "make_synthetic"),
                    "ablations.model.data"),
    **dict.fromkeys(("FULL_WIDTHS", "REDUCED_WIDTHS", "ModelConfig", "MultimodalSwitches"),
                    "ablations.model.config"),
    **dict.fromkeys(("MultimodalRegressionModel", "build_model",
                     "count_parameters"), "ablations.model.model"),
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'model' has no attribute {name!r}")


__all__ = sorted(_WHERE)
